"""Reading and editing one stored Redis session value without re-serialising it.

ADK's ``RedisSessionService`` keeps a whole session as one JSON string. A heal
must change nothing but the events array, so the value is decoded once while
noting where each event's text lies (:func:`parse_session_value`), and the
heals' JSON is spliced in right after their call events (:func:`with_heals`)
or a heal's JSON cut back out (:func:`without_events`), every other byte kept.
Pure: no I/O.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ...core.healing import Heal

_DECODER = json.JSONDecoder()
_WHITESPACE = " \t\n\r"


def _skip_space(raw: str, at: int) -> int:
    while at < len(raw) and raw[at] in _WHITESPACE:
        at += 1
    return at


def _expect(raw: str, at: int, char: str) -> int:
    if raw[at:at + 1] != char:
        raise ValueError(f"expected {char!r} at {at}")
    return at + 1


@dataclass(frozen=True, slots=True)
class ParsedSession:
    """A stored session value: its fields, and where its events lie in the text.

    Attributes:
        doc: The top-level fields other than ``events``.
        events: The events, as stored.
        spans: Each event's ``(start, end)`` in the text.
        array: The ``(start, end)`` of the events array, brackets included.
    """

    doc: dict[str, Any]
    events: list[Any]
    spans: list[tuple[int, int]]
    array: tuple[int, int]


def parse_session_value(raw: str) -> ParsedSession:
    """Decodes a session value once, noting where each event's JSON lies.

    Raises:
        ValueError: Not a JSON object with an ``events`` array.
    """
    doc: dict[str, Any] = {}
    events: list[Any] = []
    spans: list[tuple[int, int]] = []
    array: tuple[int, int] | None = None
    at = _expect(raw, _skip_space(raw, 0), "{")
    at = _skip_space(raw, at)
    if raw[at:at + 1] == "}":
        raise ValueError("no events")
    while True:
        name, at = _DECODER.raw_decode(raw, at)
        at = _skip_space(raw, _expect(raw, _skip_space(raw, at), ":"))
        if name == "events":
            start = at
            at = _skip_space(raw, _expect(raw, at, "["))
            events, spans = [], []
            if raw[at:at + 1] != "]":
                while True:
                    event, end = _DECODER.raw_decode(raw, at)
                    events.append(event)
                    spans.append((at, end))
                    at = _skip_space(raw, end)
                    if raw[at:at + 1] != ",":
                        break
                    at = _skip_space(raw, at + 1)
            at = _expect(raw, at, "]")
            array = (start, at)
        else:
            doc[name], at = _DECODER.raw_decode(raw, at)
        at = _skip_space(raw, at)
        if raw[at:at + 1] == "}":
            break
        at = _skip_space(raw, _expect(raw, at, ","))
    if array is None:
        raise ValueError("no events")
    return ParsedSession(doc, events, spans, array)


def with_heals(raw: str, parsed: ParsedSession, heals: Sequence[Heal]) -> str:
    """Returns ``raw`` with each heal's JSON right after its anchor event's (usually its call).

    Each heal is serialised as ADK's own ``Session.model_dump_json`` serialises
    an event (null fields included), so ADK's next write keeps it as it is.
    Everything outside the events array, and every stored event's text, is kept.
    """
    after: dict[int, list[str]] = {}
    ids = [event.get("id") if isinstance(event, dict) else None for event in parsed.events]
    for heal in heals:
        try:
            index = ids.index(heal.plan.anchor_event_id)
        except ValueError:
            index = len(ids) - 1
        after.setdefault(index, []).insert(0, heal.event.model_dump_json())
    parts = list(after.get(-1, []))
    for index, (start, end) in enumerate(parsed.spans):
        parts.append(raw[start:end])
        parts.extend(after.get(index, []))
    start, end = parsed.array
    return f"{raw[:start]}[{','.join(parts)}]{raw[end:]}"


def without_events(raw: str, parsed: ParsedSession, indices: set[int]) -> str:
    """Returns ``raw`` without the events at ``indices``; every other byte of the events kept."""
    parts = [raw[start:end] for index, (start, end) in enumerate(parsed.spans)
             if index not in indices]
    start, end = parsed.array
    return f"{raw[:start]}[{','.join(parts)}]{raw[end:]}"
