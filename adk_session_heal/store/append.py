"""Any other session service: heals go through its public ``append_event``.

The only write API such a service has. The events are appended after
everything the caller's session object holds, with timestamps just after its
newest event. ``append_event`` bumps the session's revision, so the wrapper
heals through this adapter from ``get_session`` only once the session has
been quiet (``HealPolicy.quiet_after``). No transaction: right before
appending, the session is read again through the service and skipped if it
moved since the plan (or already holds the heal, or is gone), as the other
layouts re-check inside their transaction. The events read are also
classified again (the same :func:`~adk_session_heal.findings.classify`), and a
heal whose calls are no longer unanswered (a real response stored meanwhile)
is skipped: appended after that response it would be the last one, the one
ADK sends. That holds for a plan from a partial read too, which has no count
to compare. Between that read and the append only the service's own
stale-session check guards, so two processes healing the same session within
that window can both append (this layout cannot promise exactly once). A
ledger is recorded after.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from google.adk.events.event import Event
from google.adk.sessions import BaseSessionService, Session

from ..findings import HEALABLE, CallStatus, classify
from ..healing import SessionHeals
from .base import Layout, SessionStore, WriteOutcome, WriteResult, checked, discount_planned

__all__ = ["AppendStore"]

_UNANSWERED = HEALABLE | {CallStatus.IN_FLIGHT}
"""Statuses of a call that nothing answers (whatever its age)."""


def _unanswered(events: Sequence[Event]) -> set[tuple[str, str]]:
    """Returns ``(call event id, call id)`` of every call no response answers in ``events``.

    Ages do not matter here: the plan already judged its calls dead, and only
    a response stored since can change that.
    """
    findings = classify(events, now=0.0)
    return {(c.event_id, c.call_id) for c in findings.calls
            if c.status in _UNANSWERED and c.call_id is not None}


def _microsecond_after(timestamp: float) -> float:
    """Returns a whole-microsecond time that every store keeps strictly after ``timestamp``.

    ADK's SQL columns round a float time to the nearest microsecond, and a
    float near 1.7e9 s carries only about a quarter of one, so ``timestamp +
    1e-6`` can round to the same stored value: a heal appended after the
    newest event then ties with it and, its id sorting first, reads before
    it. Two whole microseconds past the floor are past any rounding.
    """
    return (math.floor(timestamp * 1_000_000) + 2) / 1_000_000


class AppendStore(SessionStore):
    """Writes heals through ``append_event`` on the caller's session object.

    Args:
        service: The session service.
        session: The caller's session (the heals are appended to it).
    """

    layout = Layout.APPEND
    transactional = False
    bumps_revision = True
    removes = False

    def __init__(self, service: BaseSessionService, session: Session) -> None:
        self._service = service
        self._session = session

    async def write(
        self, batch: Sequence[SessionHeals], *, ledger: bool, read_back: bool = False
    ) -> list[WriteResult]:
        """Re-reads and re-classifies each session, then appends each heal still needed."""
        results: list[WriteResult] = []
        events = self._session.events
        newest = events[-1].timestamp if events else 0.0
        for planned in batch:
            key = planned.key
            current = await self._service.get_session(
                app_name=key.app_name, user_id=key.user_id, session_id=key.session_id)
            if current is None:
                results.extend(WriteResult(heal, WriteOutcome.GONE) for heal in planned.heals)
                continue
            stored_by_id = {event.id: event for event in current.events}
            present = [(key.app_name, key.user_id, key.session_id, heal.event_id)
                       for heal in planned.heals if heal.event_id in stored_by_id]
            counts = {key: len(current.events)} if current.events else {}
            live, skipped = checked([planned], discount_planned([planned], counts, present))
            if not live:
                results.extend(skipped)
                continue
            unanswered = _unanswered(current.events)
            for heal in planned.heals:
                if heal.event_id in stored_by_id:
                    results.append(WriteResult(heal, WriteOutcome.PRESENT,
                                               stored_by_id[heal.event_id]))
                    continue
                call_event = heal.plan.call_event_id
                if any((call_event, call_id) not in unanswered for call_id in heal.plan.call_ids):
                    results.append(WriteResult(heal, WriteOutcome.CHANGED))
                    continue
                newest = max(_microsecond_after(newest), heal.event.timestamp)
                appended = heal.event.model_copy(update={"timestamp": newest})
                stored = await self._service.append_event(self._session, appended)
                results.append(WriteResult(heal, WriteOutcome.WRITTEN, stored))
        return results
