"""Any other session service: heals go through its public ``append_event``.

The only write API such a service has. Where the heal is read back depends on
how the service orders a session's events:

* By timestamp: ADK's ``DatabaseSessionService`` and ``SqliteSessionService``
  (``ORDER BY timestamp``), and their subclasses that keep ADK's
  ``get_session`` but override something else (an encrypting store such as
  ``adk-secure-sessions``' ``EncryptedSessionService``, which the direct
  writers refuse, see :func:`~adk_session_heal.store.base.stores_as_adk_does`).
  The heal keeps the time the core placed it at
  (:func:`~adk_session_heal.core.heal_plan.placement`: just after its call, before
  the next event when there is room), so it is read back right after its call
  and the stored history passes the providers' rules; the caller's session
  object shows it there too. ADK's ``append_event`` sets the session's update
  time to the event's, so that time moves back to the heal's. Its stale check
  compares a revision marker (2.x, late 1.x) or that time (1.22), and hands
  the caller's session object the new one: the caller appends on as before;
  another process holding the session fails its next append as after any
  append (marker), or appends without the heal in its copy (time).
* By insertion (ADK's in-memory service behind a subclass, Redis-like stores,
  any other service): the heals go after everything the caller's session
  object holds, with timestamps just after its newest event, which is where
  every reader finds them.

``append_event`` bumps the session's revision, so the wrapper
heals through this adapter from ``get_session`` only once the session has
been quiet (``HealPolicy.quiet_after``). No transaction: right before
appending, the session is read again through the service and skipped if it
moved since the plan (or already holds the heal, or is gone), as the other
layouts re-check inside their transaction. The events read are also
classified again (the same :func:`~adk_session_heal.core.findings.classify`), and a
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

from ...core.event_access import ADK_EVENTS
from ...core.findings import HEALABLE, CallStatus, classify
from ...core.healing import SessionHeals
from ..base import Layout, SessionStore, WriteOutcome, WriteResult
from ..batch_outcomes import checked, discount_planned

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


def _reads_in_time_order(service: BaseSessionService) -> bool:
    """Whether ``service`` reads a session's events back sorted by timestamp.

    True for ADK's ``DatabaseSessionService`` and ``SqliteSessionService`` and
    for subclasses that keep their ``get_session`` (which sorts); a subclass
    that reads another way, and every other service, is taken to keep the
    order events were appended in.
    """
    from google.adk.sessions import DatabaseSessionService
    from google.adk.sessions.sqlite_session_service import SqliteSessionService

    return any(isinstance(service, adk_class)
               and type(service).get_session is adk_class.get_session
               for adk_class in (DatabaseSessionService, SqliteSessionService))


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
        self._in_time_order = _reads_in_time_order(service)

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
                if self._in_time_order:  # read back where the core placed it
                    stored = await self._service.append_event(self._session, heal.event)
                    self._show_in_place(stored, heal.plan.anchor_event_id)
                else:  # read back in append order: after everything there is
                    newest = max(_microsecond_after(newest), heal.event.timestamp)
                    appended = heal.event.model_copy(update={"timestamp": newest})
                    stored = await self._service.append_event(self._session, appended)
                results.append(WriteResult(heal, WriteOutcome.WRITTEN, stored))
        return results

    def _show_in_place(self, stored: Event, anchor_event_id: str) -> None:
        """Moves a heal ``append_event`` put last in the caller's session to where a read puts it.

        Right after its anchor (its call, see
        :attr:`~adk_session_heal.core.heal_plan.HealPlan.anchor_event_id`) and the
        heals already there, as :func:`~adk_session_heal.core.healing.apply_heals`
        places them; left last when the anchor is not in the session object.
        """
        events = self._session.events
        if not events or events[-1].id != stored.id:
            return
        anchor = next((i for i, e in enumerate(events) if e.id == anchor_event_id), None)
        if anchor is None:
            return
        place = anchor + 1
        while (place < len(events) - 1 and events[place].timestamp == stored.timestamp
               and ADK_EVENTS.heal_marker(events[place]) is not None):
            place += 1  # an earlier heal of the same place
        events.insert(place, events.pop())
