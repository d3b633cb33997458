"""Planning heals: which call events get one, with what id, at what time.

The pure half of healing that decides, from the classified events alone:

* **id**: derived from the call event, ``"<call event id>-heal"``, so two
  healers in two processes produce the same primary key and storage keeps one.
  The suffix makes the id sort right after its call when timestamps tie. An id
  that would not fit ADK's 128-character key column becomes a UUID5 of the
  session and the call event instead.
* **placement**: the timestamp is always strictly after the call event's
  (at least one microsecond, the resolution of ADK's SQL columns), so every
  reader that orders by time reads the call first, whatever the clocks did.
  It is also strictly before the event stored after the call (1 ms after the
  call, or half-way when they are closer) whenever there is room, that is
  when the two are at least 2 µs apart; when they tie or are 1 µs apart the
  heal goes 1 µs after the call, which may tie with or follow that next event
  (it cannot be moved without rewriting rows, which is never done).
* **author, branch, invocation, isolation scope, node path**: copied from the
  call event.

:mod:`~adk_session_heal.healing` builds what each plan writes. No I/O.
"""

from __future__ import annotations

import math
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TypeVar

from .event_access import ADK_EVENTS, EventAccess
from .findings import HEALABLE, SessionFindings
from .policy import DeadCall

__all__ = ["HEAL_ID_SUFFIX", "HealPlan", "heal_event_id", "plan_heals"]

E = TypeVar("E")

HEAL_ID_SUFFIX = "-heal"
"""Suffix of a synthetic event's id after its call event's id."""

_MAX_ID_LENGTH = 128  # ADK's DEFAULT_MAX_KEY_LENGTH for the events.id column.
_NAMESPACE = uuid.UUID("5b0f7d3e-4c1a-5e9b-9d6f-2a8c4e1b7f30")
_DEFAULT_GAP_US = 1_000


@dataclass(frozen=True, slots=True)
class HealPlan:
    """What one heal will write: the answer to one call event's dead calls.

    Attributes:
        call_event_id: Id of the event holding the dead calls.
        call_event_index: Its position in the planned list.
        insert_at: Where the synthetic event goes in that list (right after the
            call event).
        event_id: The synthetic event's deterministic id.
        timestamp: The synthetic event's time (POSIX seconds, whole
            microseconds), strictly between the call event and the next one.
        call_timestamp: The call event's own time, as read (a writer places
            the heal's stored time relative to the call row's).
        invocation_id: Copied from the call event.
        author: Copied from the call event.
        branch: Copied from the call event.
        isolation_scope: Copied from the call event.
        node_path: Copied from the call event.
        reason: ``"superseded"`` or ``"stale"``.
        calls: The dead calls answered, in part order.
    """

    call_event_id: str
    call_event_index: int
    insert_at: int
    event_id: str
    timestamp: float
    call_timestamp: float
    invocation_id: str
    author: str
    branch: str | None
    isolation_scope: str | None
    node_path: str | None
    reason: str
    calls: tuple[DeadCall, ...]

    @property
    def call_ids(self) -> tuple[str, ...]:
        """The ids of the answered calls."""
        return tuple(c.call_id for c in self.calls)

    @property
    def tool_names(self) -> tuple[str, ...]:
        """The names of the answered calls' tools."""
        return tuple(c.name for c in self.calls)


def heal_event_id(
    app_name: str, user_id: str, session_id: str, call_event_id: str, attempt: int = 1
) -> str:
    """Returns the deterministic id of the heal answering one call event.

    Args:
        app_name: The session's app.
        user_id: The session's user.
        session_id: The session id.
        call_event_id: The id of the event holding the dead calls.
        attempt: 1 for the first heal of that call event; a later number only
            if an earlier heal of it already exists and calls remain dead.

    Returns:
        ``"<call_event_id>-heal"`` (``-heal-<attempt>`` after the first), or a
        UUID5 of the session and the call event when that would exceed the
        128 characters ADK's id column holds.
    """
    suffix = HEAL_ID_SUFFIX if attempt == 1 else f"{HEAL_ID_SUFFIX}-{attempt}"
    candidate = f"{call_event_id}{suffix}"
    if len(candidate) <= _MAX_ID_LENGTH:
        return candidate
    name = "\x1f".join((app_name, user_id, session_id, call_event_id, str(attempt)))
    return str(uuid.uuid5(_NAMESPACE, name))


def _placement(call_ts: float, next_ts: float | None) -> float:
    """Returns a timestamp strictly after ``call_ts`` and, when there is room, before ``next_ts``.

    Whole microseconds: the call's microsecond (rounded down) plus a step of at
    least one, re-checked against the float so the result never equals
    ``call_ts`` even where a stored time has sub-microsecond digits.
    """
    call_us = math.floor(call_ts * 1_000_000)
    step = _DEFAULT_GAP_US
    if next_ts is not None:
        step = max(1, min(_DEFAULT_GAP_US, (math.floor(next_ts * 1_000_000) - call_us) // 2))
    placed = (call_us + step) / 1_000_000
    while placed <= call_ts:
        step += 1
        placed = (call_us + step) / 1_000_000
    return placed


def plan_heals(
    events: Sequence[E],
    findings: SessionFindings,
    *,
    app_name: str,
    user_id: str,
    session_id: str,
    access: EventAccess[E] = ADK_EVENTS,  # type: ignore[assignment]
) -> tuple[HealPlan, ...]:
    """Plans one heal per call event that holds dead calls.

    Args:
        events: The classified events, oldest first.
        findings: :func:`~adk_session_heal.findings.classify` of ``events``.
        app_name: The session's app (for the id fallback).
        user_id: The session's user (for the id fallback).
        session_id: The session id (for the id fallback).
        access: How to read ``events``.

    Returns:
        The heals, ordered by the position of their call events.
    """
    dead_by_event: dict[int, list[DeadCall]] = {}
    reasons: dict[int, str] = {}
    for finding in findings.calls:
        if finding.status not in HEALABLE or finding.call_id is None:
            continue
        dead_by_event.setdefault(finding.event_index, []).append(
            DeadCall(finding.call_id, finding.name, finding.status.value)
        )
        reasons[finding.event_index] = finding.status.value
    if not dead_by_event:
        return ()

    existing_ids = {access.event_id(event) for event in events}
    plans: list[HealPlan] = []
    for index in sorted(dead_by_event):
        event = events[index]
        call_event_id = access.event_id(event)
        attempt = 1
        event_id = heal_event_id(app_name, user_id, session_id, call_event_id, attempt)
        while event_id in existing_ids:
            attempt += 1
            event_id = heal_event_id(app_name, user_id, session_id, call_event_id, attempt)
        next_ts = access.timestamp(events[index + 1]) if index + 1 < len(events) else None
        call_ts = access.timestamp(event)
        plans.append(
            HealPlan(
                call_event_id=call_event_id,
                call_event_index=index,
                insert_at=index + 1,
                event_id=event_id,
                timestamp=_placement(call_ts, next_ts),
                call_timestamp=call_ts,
                invocation_id=access.invocation_id(event),
                author=access.author(event),
                branch=access.branch(event),
                isolation_scope=access.isolation_scope(event),
                node_path=access.node_path(event),
                reason=reasons[index],
                calls=tuple(dead_by_event[index]),
            )
        )
    return tuple(plans)
