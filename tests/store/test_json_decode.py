"""json_decode.loads: the standard library's results, on every text, only faster."""

from __future__ import annotations

import json
import math
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

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
