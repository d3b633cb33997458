"""json_decode.loads: the standard library's results, on every text, only faster; and
``clean_test_fields``: every field the clean test reads, as the whole decoding reads it."""

from __future__ import annotations

import json
import math
import types
import typing
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from adk_session_heal.core.event_access import STORED_JSON
from adk_session_heal.core.findings import all_answered
from adk_session_heal.store import json_decode
from adk_session_heal.store.json_decode import loads

# Lone surrogates included: json keeps them, msgspec refuses them.
_ANY_CHAR = st.characters(blacklist_categories=())
_SCALARS = (
    st.none() | st.booleans()
    | st.integers(min_value=-(10**60), max_value=10**60)
    | st.integers(min_value=-(2**64) - 2, max_value=2**64 + 2)
    | st.floats(allow_nan=True, allow_infinity=True)
    | st.text(_ANY_CHAR, max_size=12)
)
_VALUES = st.recursive(
    _SCALARS,
    lambda inner: st.lists(inner, max_size=4)
    | st.dictionaries(st.text(_ANY_CHAR, max_size=6), inner, max_size=4),
    max_leaves=20,
)
_DUMPS = st.fixed_dictionaries({
    "ensure_ascii": st.booleans(),
    "indent": st.none() | st.sampled_from([0, 2, "\t"]),
    "separators": st.none() | st.sampled_from([(",", ":"), (", ", ": ")]),
})
# Nearly-JSON texts: mostly invalid, some valid, some numbers at the float range's edges.
_JSONISH = st.text(st.sampled_from(list('[]{}",:0123456789.eE+-truefalsnNI \\/\n\tu\x00')),
                   max_size=40)


def _same(a: Any, b: Any) -> bool:
    """Equal values of equal types, recursively; key order, NaN and the sign of zero count."""
    if type(a) is not type(b):
        return False
    if isinstance(a, float):
        return (math.isnan(a) and math.isnan(b)) or (
            a == b and math.copysign(1.0, a) == math.copysign(1.0, b))
    if isinstance(a, list):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, dict):
        return list(a) == list(b) and all(_same(a[k], b[k]) for k in a)
    return bool(a == b)


def _outcome(decode: Any, text: str | bytes) -> tuple[str, Any]:
    """What a decoder made of a text: its value, or the kind of error it raised."""
    try:
        return "value", decode(text)
    except RecursionError:
        return "too deep", None
    except ValueError as exc:
        return type(exc).__name__, None


def _assert_like_json(text: str | bytes) -> None:
    """``loads`` returns what ``json.loads`` returns, or raises what it raises."""
    ours, theirs = _outcome(loads, text), _outcome(json.loads, text)
    assert ours[0] == theirs[0], (text, ours, theirs)
    assert _same(ours[1], theirs[1]), (text, ours, theirs)


@settings(max_examples=400)
@given(_VALUES, _DUMPS)
def test_generated_documents_decode_as_json_does(value: Any, dumps: dict[str, Any]) -> None:
    """Every document json.dumps writes (NaN, huge integers, lone surrogates too) decodes alike."""
    _assert_like_json(json.dumps(value, **dumps))


@settings(max_examples=400)
@given(_JSONISH)
def test_nearly_json_texts_fail_or_decode_as_json_does(text: str) -> None:
    """Broken and odd texts fail where json fails, with its error, and decode alike elsewhere."""
    _assert_like_json(text)


@pytest.mark.parametrize("text", [
    "NaN", "-Infinity", "1e400", "-1e400", "1.7976931348623159e+308", "4.9e-324",
    "2.4703282292062328e-324", "1e-400", "-0.0", "-0", "18446744073709551616",
    "-9223372036854775809", "123456789012345678901234567890", "0." + "1" * 400,
    '"\\ud800"', '"\\udc00\\ud800"', '"\ud800"', '"\\ud83d\\ude00"', '"a\nb"', '"\x00"',
    '{"a": 1, "a": 2}', "[1,]", "01", "\ufeff{}", "\f1", "\xa01", " 1 \r\n", "9" * 5000,
    "[" * 100_000 + "]" * 100_000, b'{"a": "\xc3\xa9"}', '{"a": "é"}'.encode("utf-16"),
    b"\xff", "",
])
def test_edge_cases_decode_as_json_does(text: str | bytes) -> None:
    """Each text at an edge where the two decoders differ is decoded or refused as json does."""
    _assert_like_json(text)


def test_errors_are_json_errors_with_their_position() -> None:
    """A text that is not JSON raises json's own error, whose position the damage reports use."""
    with pytest.raises(json.JSONDecodeError) as caught:
        loads('{"parts": [1, 2')
    assert caught.value.pos == 15


def test_event_data_is_decoded_by_the_fast_decoder() -> None:
    """An ordinary stored event never reaches the slow fallback."""
    calls: list[object] = []
    slow = json_decode._slow
    json_decode._slow = lambda text: calls.append(text) or slow(text)  # type: ignore[assignment]
    try:
        event = loads('{"content": {"parts": [{"function_call": {"id": "c1", "args": {}}}]},'
                      ' "timestamp": 1700000000.25, "id": "e1"}')
        loads("NaN")
    finally:
        json_decode._slow = slow
    assert event["content"]["parts"][0]["function_call"]["id"] == "c1"
    assert calls == ["NaN"]


class _Recording(dict):  # type: ignore[type-arg]
    """A dict that records every key read through ``get`` (as the accessors read), by path."""

    def __init__(self, data: dict[str, Any], path: tuple[str, ...], reads: set[Any]) -> None:
        super().__init__({k: _recorded(v, (*path, k), reads) for k, v in data.items()})
        self._path, self._reads = path, reads

    def get(self, key: str, default: Any = None) -> Any:
        """Records ``key`` under this dict's path, then reads it."""
        self._reads.add((*self._path, key))
        return super().get(key, default)


def _recorded(value: Any, path: tuple[str, ...], reads: set[Any]) -> Any:
    if isinstance(value, dict):
        return _Recording(value, path, reads)
    if isinstance(value, list):
        return [_recorded(item, (*path, "[]"), reads) for item in value]
    return value


def _declared(path: tuple[str, ...]) -> bool:
    """Whether the partial decoding keeps the field at ``path`` (or the whole value above it)."""
    kind: Any = json_decode._CleanTestEvent
    for key in path:
        if kind is Any:
            return True
        if key == "[]":
            kind = kind.__args__[0]
            continue
        fields = typing.get_type_hints(kind)
        if key not in fields:
            return False
        kind = fields[key]
        kind = next((k for k in typing.get_args(kind) if k is not type(None)), kind) \
            if typing.get_origin(kind) in (typing.Union, types.UnionType) else kind
        if typing.get_origin(kind) is typing.NotRequired:
            kind = typing.get_args(kind)[0]
    return True


_CALL = {"content": {"parts": [{"function_call": {"id": "c1", "name": "f", "args": {}}}],
                     "role": "model"}, "timestamp": 5.0, "author": "a", "id": "e1"}
_ANSWER = {"content": {"parts": [{"function_response": {"id": "c1", "name": "f",
                                                         "response": {}}}]},
           "actions": {"requested_tool_confirmations": {}, "state_delta": {"k": 1}},
           "custom_metadata": {"adk_session_heal": {"synthetic": True}}, "timestamp": 6.0}
_CAMEL_CALL = {"content": {"parts": [{"text": "x"}, {"functionCall": {"id": "c2", "name": "g"}}]},
               "timestamp": 7.0}
_CAMEL_ANSWER = {"content": {"parts": [{"functionResponse": {"id": "c2", "name": "g"}}]},
                 "actions": {"requestedAuthConfigs": {}}, "customMetadata": {}}
_QUIET = {"actions": {"rewindBeforeInvocationId": None, "compaction": {}}, "timestamp": 8.0}
_PARTIAL = {"content": {"parts": [{"text": "…"}]}, "partial": True}


@pytest.mark.parametrize("events", [
    [_CALL, _ANSWER, _CAMEL_CALL, _CAMEL_ANSWER, _QUIET, _PARTIAL],
    [_QUIET, {"actions": {"rewind_before_invocation_id": "inv-0"}}],
    [_CALL, _CALL],
    [_ANSWER],
    [{"content": {"parts": [{"text": "hi"}]}}],
])
def test_clean_test_fields_keep_every_field_the_clean_test_reads(
        events: list[dict[str, Any]]) -> None:
    """Every field all_answered reads through STORED_JSON is one the partial decoding keeps."""
    reads: set[Any] = set()
    all_answered([_recorded(e, (), reads) for e in events], STORED_JSON)
    assert reads
    assert sorted(path for path in reads if not _declared(path)) == []


def test_the_recording_check_can_fail() -> None:
    """A field the partial decoding drops (``text``, ``args``) is seen as not kept."""
    assert not _declared(("content", "parts", "[]", "text"))
    assert not _declared(("content", "parts", "[]", "function_call", "args"))
    assert _declared(("custom_metadata", "adk_session_heal", "call_ids"))


_EVENTISH = st.fixed_dictionaries({}, optional={
    "content": st.none() | st.fixed_dictionaries({}, optional={
        "parts": st.none() | st.lists(st.fixed_dictionaries({}, optional={
            "function_call": st.none() | st.dictionaries(
                st.sampled_from(["id", "name", "args"]), _SCALARS, max_size=3),
            "functionResponse": st.none() | st.dictionaries(
                st.sampled_from(["id", "name", "response"]), _SCALARS, max_size=3),
            "text": _SCALARS}), max_size=3),
        "role": _SCALARS}),
    "partial": _SCALARS, "timestamp": _SCALARS, "usage_metadata": _VALUES,
    "actions": st.none() | _SCALARS | st.dictionaries(st.sampled_from(
        ["state_delta", "rewind_before_invocation_id", "requested_auth_configs"]), _VALUES,
        max_size=3),
    "custom_metadata": _VALUES,
})


@settings(max_examples=400)
@given(_EVENTISH, _DUMPS)
def test_clean_test_fields_read_what_the_whole_event_holds(
        event: dict[str, Any], dumps: dict[str, Any]) -> None:
    """Where the partial decoding succeeds, every field it keeps holds the whole decoding's
    value, and the text is JSON to ``json.loads`` too (msgspec checks what it skips)."""
    text = json.dumps(event, **dumps)
    part = json_decode.clean_test_fields(text)
    if part is None:
        return
    whole = json.loads(text)
    assert type(whole) is dict

    def same_where_kept(kept: Any, full: Any) -> None:
        if isinstance(kept, dict) and isinstance(full, dict) and kept is not full:
            for key, value in kept.items():
                assert key in full
                same_where_kept(value, full[key])
        elif isinstance(kept, list):
            assert isinstance(full, list) and len(kept) == len(full)
            for a, b in zip(kept, full, strict=True):
                same_where_kept(a, b)
        else:
            assert _same(kept, full), (kept, full)

    same_where_kept(part, whole)


@pytest.mark.parametrize("text", [
    '{"content": {"parts": [{"function_call": {"id": "c"}}]}}',  # no name: decoded whole
    '{"content": {"parts": [{"function_call": {"args": {}}}]}}', '{"content": []}', "[1]",
    '{"content": 1, "content": {}}', '{"x": NaN}', '{"x": "\\ud800"}', '{"x": "\\q"}', "{",
    '{"x": "\x01"}', '{"actions": "x"}', '{"content": {"parts": {}}}',
])
def test_clean_test_fields_refuse_what_they_cannot_read_alike(text: str) -> None:
    """Texts the partial decoding cannot answer for are left to the whole decoding."""
    assert json_decode.clean_test_fields(text) is None
