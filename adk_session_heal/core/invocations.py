"""Invocations in a stored history: which events a rewind annulled, where the newest began.

Two pure helpers of :func:`~adk_session_heal.core.findings.classify`, following
ADK's own reading of a session: :func:`live_mask` mirrors ADK's rewinds, and
:func:`supersession_boundary` finds where the newest invocation's
uninterrupted tail starts (a call before it is superseded: dead for sure).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TypeVar

from .event_access import EventAccess

E = TypeVar("E")


def live_mask(
    events: Sequence[E], access: EventAccess[E], rewinds: Sequence[int]
) -> list[bool] | None:
    """Returns which events survive ADK's rewinds, or ``None`` if none rewinds.

    Mirrors ``google/adk/events/_rewind_events.py``: walking backwards, a rewind
    event annuls itself and everything back to the first event of its target
    invocation. One deliberate difference: when the target invocation is not in
    the list (a partial read of the session), everything before the rewind is
    treated as annulled, so a call we cannot place is never healed.
    """
    if not rewinds:
        return None
    first_index: dict[str, int] = {}
    for index, event in enumerate(events):
        invocation = access.invocation_id(event)
        if invocation and invocation not in first_index:
            first_index[invocation] = index
    live = [True] * len(events)
    rewind_set = set(rewinds)
    index = len(events) - 1
    while index >= 0:
        target = access.rewind_target(events[index]) if index in rewind_set else None
        if target:
            start = first_index.get(target, 0)
            start = min(start, index)
            for annulled in range(start, index + 1):
                live[annulled] = False
            index = start
        index -= 1
    return live


def supersession_boundary(
    events: Sequence[E], access: EventAccess[E]
) -> tuple[str | None, int, int]:
    """Finds the newest invocation and where its uninterrupted tail starts.

    Events that do not speak for an invocation (partial, compaction summaries,
    events without an invocation id, and our own heals: a heal stored after
    later turns, as the ``append_event`` path stores it, carries its call's
    older invocation and proves nothing ran after the newest one) are not
    counted. Events a rewind annulled
    still count: they prove that another invocation ran after a call, and the
    rewind event itself belongs to a new invocation.

    Returns:
        ``(newest, tail_start, last)``: ``newest`` is the invocation of the last
        counted event, at index ``last``; every counted event at or after
        ``tail_start`` belongs to ``newest`` and the counted event just before
        it belongs to another invocation (``tail_start`` is 0 when there is
        none). A call at index ``i`` is superseded (a later counted event
        belongs to another invocation) exactly when ``i < tail_start``, or when
        its own invocation is not ``newest`` and ``i < last``.
    """
    newest: str | None = None
    last = -1
    for index in range(len(events) - 1, -1, -1):
        event = events[index]
        if (access.is_partial(event) or access.is_compaction(event)
                or access.heal_marker(event) is not None):
            continue
        invocation = access.invocation_id(event)
        if not invocation:
            continue
        if newest is None:
            newest, last = invocation, index
        elif invocation != newest:
            return newest, index + 1, last
    return newest, 0, last
