"""Planning heals and building the synthetic events that answer dead calls.

A *heal* is one synthetic function-response event per call event, answering
all of that event's dead calls. Every healer in the package (the
``HealingSessionService`` wrapper, the repair CLI, the plugin's in-request
healing) plans with :func:`plan_heals` and builds with
:func:`build_heal_event`, so they write the same rows:

* **id**: derived from the call event, ``"<call event id>-heal"``, so two
  healers in two processes produce the same primary key and storage keeps one.
  The suffix makes the id sort right after its call when timestamps tie. An id
  that would not fit ADK's 128-character key column becomes a UUID5 of the
  session and the call event instead.
* **placement**: the timestamp lies strictly between the call event and the
  event stored after it (1 ms after the call, or half-way when they are closer;
  microsecond resolution, as ADK's SQL columns store), so ordered storage reads
  call, then heal, then what came next.
* **author, branch, invocation, isolation scope, node path**: copied from the
  call event. ADK shows an event authored by anyone else to the model as
  another agent's message, and the call would be dropped again.
* **content**: role ``user``, one ``function_response`` part per dead call,
  with the call's id and name and the policy's payload.
* **marker**: ``custom_metadata["adk_session_heal"]`` says it is synthetic,
  why, when, and which call event and calls it answers.
* **error code**: ``INVOCATION_ABORTED``, as ADK's own abort seal (2.11+): ADK
  2.x then closes the crashed invocation's task scopes and never replays the
  call; UIs show the event as an error, not as a tool's result.

The module is pure: no I/O.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any, TypeVar

from google.adk.events.event import Event
from pydantic_core import to_jsonable_python

from .adk_compat import INVOCATION_ABORTED, readable_event_data
from .event_access import ADK_EVENTS, HEAL_METADATA_KEY, EventAccess
from .findings import HEALABLE, SessionFindings
from .heal_record import HealRecord, HealTrigger
from .policy import DeadCall, HealPolicy
from .session_key import SessionKey

__all__ = [
    "HEAL_ERROR_MESSAGE",
    "HEAL_ID_SUFFIX",
    "MARKER_VERSION",
    "Heal",
    "HealPlan",
    "SessionHeals",
    "apply_heals",
    "build_heal_event",
    "build_heals",
    "build_marker",
    "heal_event_data",
    "heal_event_id",
    "plan_heals",
    "plan_session",
]

E = TypeVar("E")

HEAL_ID_SUFFIX = "-heal"
"""Suffix of a synthetic event's id after its call event's id."""

HEAL_ERROR_MESSAGE = "The tool call was interrupted before it returned (adk-session-heal)."
"""The ``error_message`` of a heal, beside ADK's abort ``error_code``."""

MARKER_VERSION = 1
"""Version of the ``custom_metadata["adk_session_heal"]`` marker layout."""

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
    """Returns a timestamp right after ``call_ts`` and strictly before ``next_ts``."""
    call_us = round(call_ts * 1_000_000)
    if next_ts is None:
        return (call_us + _DEFAULT_GAP_US) / 1_000_000
    gap = round(next_ts * 1_000_000) - call_us
    if gap >= 2:
        return (call_us + min(_DEFAULT_GAP_US, gap // 2)) / 1_000_000
    return call_us / 1_000_000


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


def build_marker(plan: HealPlan, *, healed_at: float) -> dict[str, Any]:
    """Returns the ``custom_metadata["adk_session_heal"]`` value of a heal."""
    return {
        "synthetic": True,
        "version": MARKER_VERSION,
        "reason": plan.reason,
        "healed_at": healed_at,
        "call_event_id": plan.call_event_id,
        "call_ids": list(plan.call_ids),
        "tool_names": list(plan.tool_names),
    }


def heal_event_data(plan: HealPlan, policy: HealPolicy, *, healed_at: float) -> dict[str, Any]:
    """Builds the synthetic response event a heal writes, as the JSON object stored.

    The one builder of a heal's content: writers store this object and
    :func:`build_heal_event` validates it into an ``Event``. Its top-level
    fields are those every supported ADK reads
    (:data:`~adk_session_heal.adk_compat.PORTABLE_EVENT_FIELDS`), plus the
    call's isolation scope and node path when it has them (only ADK 2.x
    writes those). Defaults are left out, as ADK's ``model_dump(exclude_none=True)``
    would keep them, so a 1.x reader that forbids unknown fields reads it.

    Args:
        plan: The planned heal.
        policy: Supplies the response payload of each call.
        healed_at: When the heal is written (POSIX seconds), for the marker.

    Returns:
        A new JSON-ready dict with snake_case keys; nothing else is touched.
    """
    data: dict[str, Any] = {
        "id": plan.event_id,
        "invocation_id": plan.invocation_id,
        "author": plan.author,
        "timestamp": plan.timestamp,
        "content": {
            "role": "user",
            "parts": [
                {"function_response": {
                    "id": call.call_id,
                    "name": call.name,
                    "response": to_jsonable_python(policy.payload_for(call)),
                }}
                for call in plan.calls
            ],
        },
        "custom_metadata": {HEAL_METADATA_KEY: build_marker(plan, healed_at=healed_at)},
        "error_code": INVOCATION_ABORTED,
        "error_message": HEAL_ERROR_MESSAGE,
    }
    if plan.branch is not None:
        data["branch"] = plan.branch
    if plan.isolation_scope is not None:
        data["isolation_scope"] = plan.isolation_scope
    if plan.node_path:
        data["node_info"] = {"path": plan.node_path}
    return data


def build_heal_event(plan: HealPlan, policy: HealPolicy, *, healed_at: float) -> Event:
    """Builds the synthetic response event a heal writes, as an ``Event``.

    Args:
        plan: The planned heal.
        policy: Supplies the response payload of each call.
        healed_at: When the heal is written (POSIX seconds), for the marker.

    Returns:
        A new ``Event`` of :func:`heal_event_data`, without the fields the
        installed ADK lacks; nothing else is touched.
    """
    data = heal_event_data(plan, policy, healed_at=healed_at)
    return Event.model_validate(readable_event_data(data))


@dataclass(frozen=True)
class Heal:
    """One synthetic event to write, and the record of writing it.

    The event and the record are built from the plan when first asked for
    (and kept): a repair plans every heal of a store before it writes, and
    thousands of objects held through the scan made the garbage collector's
    work grow with them (measured: a fifth of a PostgreSQL repair's time).

    Attributes:
        plan: What the heal answers and where it goes.
        key: The session.
        trigger: Which path heals.
        healed_at: When (POSIX seconds).
        policy: Supplies the payloads.
    """

    plan: HealPlan
    key: SessionKey
    trigger: HealTrigger
    healed_at: float
    policy: HealPolicy = field(repr=False, compare=False)

    @property
    def event_id(self) -> str:
        """The synthetic event's id."""
        return self.plan.event_id

    @cached_property
    def data(self) -> dict[str, Any]:
        """The synthetic event's JSON object, exactly as SQL writers store it."""
        return heal_event_data(self.plan, self.policy, healed_at=self.healed_at)

    @cached_property
    def event(self) -> Event:
        """The synthetic event as an ``Event`` of the installed ADK."""
        return Event.model_validate(readable_event_data(self.data))

    @cached_property
    def record(self) -> HealRecord:
        """What the log, telemetry and ledger say of the heal once written.

        The one place a :class:`~adk_session_heal.heal_record.HealRecord` of a
        new heal is made.
        """
        plan, key = self.plan, self.key
        return HealRecord(
            app_name=key.app_name,
            user_id=key.user_id,
            session_id=key.session_id,
            call_event_id=plan.call_event_id,
            synthetic_event_id=plan.event_id,
            invocation_id=plan.invocation_id,
            call_ids=plan.call_ids,
            tool_names=plan.tool_names,
            reason=plan.reason,
            trigger=self.trigger,
            healed_at=self.healed_at,
        )


@dataclass(frozen=True, slots=True)
class SessionHeals:
    """The heals planned for one session: what a writer applies in one go.

    Attributes:
        key: The session.
        seen_events: How many stored events the plan was made from. A writer
            re-counts them in its write transaction and skips the session when
            the count moved (a real response, a new turn, a deletion); ``None``
            when the planner saw only part of the session (no re-check).
        heals: The heals, in the order of their call events.
    """

    key: SessionKey
    seen_events: int | None
    heals: tuple[Heal, ...]


def build_heals(
    plans: Sequence[HealPlan],
    key: SessionKey,
    policy: HealPolicy,
    *,
    trigger: HealTrigger,
    healed_at: float,
) -> tuple[Heal, ...]:
    """Returns one :class:`Heal` per planned heal, in the same order.

    Args:
        plans: From :func:`plan_heals`.
        key: The session the heals belong to.
        policy: Supplies the payloads.
        trigger: Which path heals.
        healed_at: When (POSIX seconds), for the marker and the record.
    """
    return tuple(Heal(plan, key, trigger, healed_at, policy) for plan in plans)


def plan_session(
    events: Sequence[E],
    findings: SessionFindings,
    key: SessionKey,
    policy: HealPolicy,
    *,
    trigger: HealTrigger,
    healed_at: float,
    seen_events: int | None,
    before: int | None = None,
    access: EventAccess[E] = ADK_EVENTS,  # type: ignore[assignment]
) -> SessionHeals | None:
    """Plans and builds every heal of one session: what its writer applies.

    The wrapper and repair both call this, so they write the same rows.

    Args:
        events: The classified events, oldest first.
        findings: :func:`~adk_session_heal.findings.classify` of ``events``.
        key: The session.
        policy: Supplies the payloads.
        trigger: Which path heals.
        healed_at: When (POSIX seconds).
        seen_events: How many stored events ``events`` holds (the writer
            re-counts them); ``None`` for a partial view.
        before: Heal only calls in events before this index (the wrapper's
            own view ends there; later events are not stored yet).
        access: How to read ``events``.

    Returns:
        The session's heals, or ``None`` when there is nothing to heal.
    """
    plans = plan_heals(events, findings, app_name=key.app_name, user_id=key.user_id,
                       session_id=key.session_id, access=access)
    if before is not None:
        plans = tuple(plan for plan in plans if plan.call_event_index < before)
    if not plans:
        return None
    heals = build_heals(plans, key, policy, trigger=trigger, healed_at=healed_at)
    return SessionHeals(key, seen_events, heals)


def apply_heals(events: Sequence[E], heals: Mapping[int, E]) -> list[E]:
    """Returns a new list with synthetic events inserted at their places.

    Args:
        events: The original events (not modified).
        heals: Synthetic events keyed by :attr:`HealPlan.insert_at`.

    Returns:
        ``events`` with each heal inserted before the event at its index.
    """
    result: list[E] = []
    for index, event in enumerate(events):
        heal = heals.get(index)
        if heal is not None:
            result.append(heal)
        result.append(event)
    tail = heals.get(len(events))
    if tail is not None:
        result.append(tail)
    return result
