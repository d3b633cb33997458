"""Clean prefixes: what a repeated read of a healthy session need not read again.

A session is *clean* when no event rewinds and every call is answered by
exactly one later response, with no other response
(:func:`~adk_session_heal.core.pairing.answered_once`): then
:func:`~adk_session_heal.core.findings.classify` finds nothing to heal in it, at any
time and under any policy, since no call is open. The wrapper reads every
session it returns; a session read again starts with the events it held at
the last read (ADK only appends), so only the events after them need reading.
A :class:`CleanPrefix` is what is remembered of a clean read: how many events,
the first and last ids, the last time, and the ids called. When the events no
longer start with it (a heal inserted, a row deleted, another session under
the same id), its count, those ids or that time differ and the whole session is
read again. An event changed in place, keeping its id, inside the prefix, is
not noticed; ADK never does that.

Pure: no I/O, no clock.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TypeVar

from .event_access import EventAccess
from .pairing import answered_once

E = TypeVar("E")


@dataclass(frozen=True, slots=True)
class CleanPrefix:
    """The first events of a session, found clean.

    Attributes:
        count: How many events.
        first_id: The first event's id.
        last_id: The last one's id.
        last_time: The last one's timestamp.
        called: The ids their calls used (each answered once).
    """

    count: int
    first_id: str
    last_id: str
    last_time: float
    called: frozenset[str]

    def starts(self, events: Sequence[E], access: EventAccess[E]) -> bool:
        """Whether ``events`` still start with these events (count, first and last id, time)."""
        if self.count > len(events):
            return False
        last = events[self.count - 1]
        return (access.event_id(last) == self.last_id
                and access.timestamp(last) == self.last_time
                and access.event_id(events[0]) == self.first_id)


def clean_prefix(
    events: Sequence[E], access: EventAccess[E], known: CleanPrefix | None = None
) -> CleanPrefix | None:
    """Returns all of ``events`` as one clean prefix, or ``None`` if they are not clean.

    Args:
        events: A session's events, oldest first, all of them.
        access: How to read them.
        known: A clean prefix of an earlier read of the same session: when the
            events still start with it, only the events after it are read
            (none at all when nothing was added).

    Returns:
        The clean prefix covering every event; ``None`` when the session is not
        clean, is empty, or has an event without an id (then it cannot be
        recognised again).
    """
    start, called = 0, set[str]()
    if known is not None and known.starts(events, access):
        if known.count == len(events):
            return known
        start, called = known.count, set(known.called)
    steps, rewinds = access.steps(events[start:])
    if rewinds or not events or not answered_once(steps, called):
        return None
    first, last = access.event_id(events[0]), access.event_id(events[-1])
    if not first or not last:
        return None
    return CleanPrefix(len(events), first, last, access.timestamp(events[-1]), frozenset(called))
