"""Decoding stored JSON: what :func:`json.loads` returns, about twice as fast.

Scans spend much of their time decoding ``event_data`` (100,000 events: about
0.25 s of a 0.65 s SQLite scan, measured). :func:`loads` decodes with
msgspec's C decoder and, whenever msgspec refuses a text, with :func:`json.loads`
itself, so the result is always the standard library's: msgspec refuses what
it cannot represent the way ``json`` does (``NaN``, ``Infinity``, numbers
beyond the float range, lone surrogates) and decodes everything else to equal
values of equal types, integers of any size included (``tests/store/test_json_decode.py``
checks both on generated and hand-picked texts). ADK decodes the same columns
with :func:`json.loads` (through SQLAlchemy), so what we read is what ADK reads.

The one difference left is where Python's recursion limit falls: both stop
near 1,000 nested levels, a few levels apart, and where exactly depends on the
caller's own stack depth for either decoder.

:func:`clean_test_fields` decodes less: only the fields
:func:`~adk_session_heal.core.findings.all_answered` reads through
:data:`~adk_session_heal.core.event_access.STORED_JSON`, so a scan learns that a
healthy session has nothing to report without building its text, usage
metadata, arguments, results and state deltas (see that function).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any, NotRequired, TypedDict, cast

import msgspec

_fast = msgspec.json.Decoder().decode
_slow = json.loads


def loads(text: str | bytes) -> Any:
    """Decodes one JSON text exactly as :func:`json.loads` would.

    Args:
        text: The JSON text.

    Returns:
        The decoded value.

    Raises:
        ValueError: The text is not JSON (:class:`json.JSONDecodeError`), as
            :func:`json.loads` raises it.
        RecursionError: It is nested too deeply to decode.
    """
    try:
        return _fast(text)
    except (ValueError, RecursionError):  # msgspec's errors are ValueErrors
        return _slow(text)


class _Function(TypedDict):
    """A part's ``function_call`` or ``function_response``: its id and name.

    ``name`` is required: a call or response decoded to ``{}`` would read as
    no call at all (``STORED_JSON`` tests the dict's truth), where the whole
    one, holding other keys, is a call; one without a name is decoded whole.
    """

    id: NotRequired[Any]
    name: Any


class _Part(TypedDict, total=False):
    """A part's calls and responses, as ``STORED_JSON.steps`` reads them (either case)."""

    function_call: _Function | None
    functionCall: _Function | None  # noqa: N815 - the stored camelCase key
    function_response: _Function | None
    functionResponse: _Function | None  # noqa: N815


class _Content(TypedDict, total=False):
    """An event's ``content``: its parts only.

    Decoded without its other keys, a content can come out empty where the
    whole one is not: ``STORED_JSON.steps`` then reads the event as
    content-less, the same empty step, and also asks whether it rewinds: a
    rewind makes :func:`~adk_session_heal.core.findings.all_answered` false,
    so such a session is decoded whole, never passed over.
    """

    parts: list[_Part] | None


class _Actions(TypedDict, total=False):
    """What ``STORED_JSON.rewind_target`` and ``pending_ids`` read of ``actions``.

    Both read ``None`` or nothing for an absent key, so an ``actions`` decoded
    without its other keys (empty where the whole one is not) answers alike.
    """

    rewind_before_invocation_id: Any
    rewindBeforeInvocationId: Any  # noqa: N815
    requested_tool_confirmations: Any
    requestedToolConfirmations: Any  # noqa: N815
    requested_auth_configs: Any
    requestedAuthConfigs: Any  # noqa: N815


class _CleanTestEvent(TypedDict, total=False):
    """The fields of a stored event :func:`~adk_session_heal.core.findings.all_answered`
    reads: ``steps`` (content, partial, a rewind's target), ``timestamp``,
    ``heal_marker`` (custom metadata) and ``pending_ids`` (actions)."""

    content: _Content | None
    partial: Any
    actions: _Actions | None
    timestamp: Any
    custom_metadata: Any
    customMetadata: Any  # noqa: N815


clean_test_decode = cast(Callable[[str | bytes], dict[str, Any]],
                         msgspec.json.Decoder(_CleanTestEvent).decode)
"""msgspec's decoder behind :func:`clean_test_fields`, for a loop over rows to call directly:
it raises ``ValueError`` (or ``RecursionError``) where that returns ``None``."""


def clean_test_fields(text: str | bytes) -> dict[str, Any] | None:
    """Decodes what :func:`~adk_session_heal.core.findings.all_answered` reads of one event.

    A plain dict: the whole event's dict without the keys that test never
    reads, every value it reads equal to :func:`loads`'s (msgspec checks the
    text it skips as strictly as the text it decodes). ``None`` for a text to
    decode whole instead: not JSON (or not as msgspec reads it), not an
    object, or a read field of another type than the test can read alike.

    Args:
        text: One stored ``event_data`` text.

    Returns:
        The fields, or ``None``.
    """
    try:
        return clean_test_decode(text)
    except (ValueError, RecursionError):  # msgspec's errors (and an unencodable str) too
        return None
