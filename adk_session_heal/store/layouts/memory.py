"""``InMemorySessionService``'s layout: its ``sessions`` dictionary, written in place.

A heal is inserted into the stored session's event list right after its
anchor (its call event; see ``HealPlan.anchor_event_id``); ``last_update_time``
is left alone, so no revision changes. A removal takes the heal out of that
list only if the one rule lets it go
(:func:`~adk_session_heal.store.base.decide_removal`, each event's stored form
being its ``model_dump(mode="json")``); a resolution goes in and the answer it
supersedes out together (:func:`~adk_session_heal.store.base.decide_resolution`),
with no ``await`` between the decision and the change. There is no
transaction and no ledger table: the wrapper records heals and removals in its
own ledger, if it has one, after the write.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from google.adk.events.event import Event
from google.adk.sessions import InMemorySessionService, Session

from ...core.event_access import ADK_EVENTS
from ...core.healing import Heal, SessionHeals
from ...core.session_key import SessionKey
from ..base import (
    Layout,
    Removal,
    RemoveOutcome,
    ResolveOutcome,
    ResolveResult,
    SessionStore,
    WriteOutcome,
    WriteResult,
    decide_removal,
    decide_resolution,
)


class InMemoryStore(SessionStore):
    """Writes heals into an ``InMemorySessionService``'s stored sessions."""

    layout = Layout.IN_MEMORY
    transactional = False

    def __init__(self, service: InMemorySessionService) -> None:
        self._service = service

    async def write(
        self, batch: Sequence[SessionHeals], *, ledger: bool, read_back: bool = False
    ) -> list[WriteResult]:
        """Inserts each heal after its anchor event, unless an event with its id is there."""
        results: list[WriteResult] = []
        for planned in batch:
            session = self._stored(planned.key)
            planned_ids = {heal.event_id for heal in planned.heals}
            counted = None if session is None else sum(
                1 for event in session.events if event.id not in planned_ids)
            if session is None or (
                planned.seen_events is not None and counted != planned.seen_events
            ):
                outcome = WriteOutcome.GONE if session is None else WriteOutcome.CHANGED
                results.extend(WriteResult(heal, outcome) for heal in planned.heals)
                continue
            stored = session.events
            by_id = {event.id: event for event in stored}
            for heal in planned.heals:
                existing = by_id.get(heal.event_id)
                if existing is not None:
                    results.append(WriteResult(heal, WriteOutcome.PRESENT, existing))
                    continue
                position = next(
                    (i + 1 for i, e in enumerate(stored) if e.id == heal.plan.anchor_event_id),
                    len(stored),
                )
                stored.insert(position, heal.event)
                by_id[heal.event_id] = heal.event
                results.append(WriteResult(heal, WriteOutcome.WRITTEN))
        return results

    async def remove(self, batch: Sequence[Removal], *, ledger: bool) -> list[RemoveOutcome]:
        """Takes each heal out of its stored session's events, if it still is ours."""
        results: list[RemoveOutcome] = []
        for removal in batch:
            session = self._stored(removal.key)
            events = [] if session is None else session.events
            decision = decide_removal(events, removal, access=ADK_EVENTS, stored=_dumped)
            if decision.outcome is RemoveOutcome.REMOVED and decision.position is not None:
                del events[decision.position]
            results.append(decision.outcome)
        return results

    async def resolve(
        self, resolution: Heal, removal: Removal, *, ledger: bool
    ) -> ResolveResult:
        """Puts a resolution after the answer it supersedes and takes that answer out."""
        session = self._stored(removal.key)
        events = [] if session is None else session.events
        decision = decide_resolution(events, resolution.event, removal, access=ADK_EVENTS,
                                     stored=_dumped)
        index = decision.removal.position
        if decision.result.outcome in (ResolveOutcome.WRITTEN, ResolveOutcome.PRESENT) and (
                index is not None):
            if decision.insert:
                events.insert(index + 1, resolution.event)
            del events[index]
        return decision.result

    def _stored(self, key: SessionKey) -> Session | None:
        """The service's own stored session (not a copy), if it exists."""
        return self._service.sessions.get(key.app_name, {}).get(key.user_id, {}).get(
            key.session_id)


def _dumped(event: Event) -> dict[str, Any]:
    """A stored event's JSON form (what its seal is checked against)."""
    return event.model_dump(mode="json")
