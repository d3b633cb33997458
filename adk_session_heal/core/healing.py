"""Building what a heal writes: the synthetic event answering a call event's dead calls.

A *heal* is one synthetic function-response event per call event, answering
all of that event's dead calls. Every healer in the package (the
``HealingSessionService`` wrapper, the repair CLI, the plugin's in-request
healing) plans with :func:`~adk_session_heal.core.heal_plan.plan_heals` (id,
placement, what is copied from the call) and builds here, so they write the
same rows:

* **content**: role ``user``, one ``function_response`` part per dead call,
  with the call's id and name and the policy's payload: by default an
  ``error`` worded for the call's own tool's effect, ``outcome`` and
  ``safe_to_retry`` (:func:`~adk_session_heal.policy.effect_payload`). Author, branch,
  invocation, isolation scope and node path are the call event's: ADK shows an
  event authored by anyone else to the model as another agent's message, and
  the call would be dropped again.
* **marker**: ``custom_metadata["adk_session_heal"]`` says it is synthetic,
  why, when, which call event and calls it answers, and each call's tool
  effect and outcome; its ``seal`` (:func:`row_seal`) is the digest of the
  rest of the row, so a remover can tell the row is still exactly what was
  written (:mod:`~adk_session_heal.core.removal_rule`).
* **error code**: ``INVOCATION_ABORTED``, as ADK's own abort seal (2.11+): ADK
  2.x then closes the crashed invocation's task scopes and never replays the
  call.

The module is pure: no I/O.
"""

from __future__ import annotations

import functools
import hashlib
import json
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import TYPE_CHECKING, Any, TypeVar

from ..policy import CallOutcome, HealPolicy
from .adk_compat import INVOCATION_ABORTED, readable_event_data
from .event_access import ADK_EVENTS, HEAL_METADATA_KEY, EventAccess
from .findings import SessionFindings
from .heal_plan import HealPlan, plan_heals
from .heal_record import HealRecord, HealTrigger
from .session_key import SessionKey

if TYPE_CHECKING:  # imported where an Event is built: planning from stored JSON needs none
    from google.adk.events.event import Event

E = TypeVar("E")

HEAL_ERROR_MESSAGE = "The tool call was interrupted before it returned (adk-session-heal)."
"""The ``error_message`` of a heal, beside ADK's abort ``error_code``."""

MARKER_VERSION = 1
"""Version of the ``custom_metadata["adk_session_heal"]`` marker layout.

Keys are only ever added within a version (``effects``, ``outcomes``,
``recovered`` and ``seal`` were), so a reader ignores the keys it does not know.
"""

SEAL_KEY = "seal"
"""The marker key holding :func:`row_seal` of the row it is in."""


def event_digest(data: Mapping[str, Any]) -> str:
    """Returns the SHA-256 (hex) of a stored event's JSON object, whatever its key order.

    The object is dumped with sorted keys and no spaces, so a row reads back
    to the same digest from a PostgreSQL ``JSONB`` column (which reorders
    keys), a JSON text column or a Redis value; any other change (a value, a
    key added or dropped) changes it.

    Args:
        data: The event's JSON object, as stored.
    """
    text = json.dumps(data, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


_SCALARS = frozenset({str, int, float, bool})
"""JSON scalar types: neither a mapping nor a list, so the walks below stop at them at once."""


def _without_nulls(value: Any) -> Any:
    """``value`` with every ``null`` object member dropped, at any depth (list items kept)."""
    if type(value) in _SCALARS:  # most values: no ABC check
        return value
    if type(value) is dict or isinstance(value, Mapping):
        return {k: _without_nulls(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [_without_nulls(v) for v in value]
    return value


def _blank(value: Any) -> bool:
    """Whether a value holds nothing: ``null``, ``""``, ``[]``, or an object of blanks."""
    if type(value) in _SCALARS:
        return type(value) is str and not value
    if type(value) is dict or isinstance(value, Mapping):
        return all(_blank(v) for v in value.values())
    return value is None or value == "" or value == []


def row_seal(row: Mapping[str, Any]) -> str:
    """Returns the seal of a stored heal row: the digest of its content, its seal left out.

    The layouts store one heal in three forms: the builder's JSON object
    (:attr:`Heal.data`, the SQL layouts), an ``Event`` (in memory) and that
    ``Event``'s full ``model_dump_json`` (Redis, as ADK rewrites it on every
    append). They differ only in what carries nothing: ``null`` members, and
    top-level fields ADK fills with its defaults (an ``actions`` of empty
    maps, 2.x's ``node_info`` of an empty path). So the seal is the
    :func:`event_digest` of the row with ``null`` members dropped at any
    depth, blank top-level fields dropped, and the marker's own ``seal``
    left out: every form of one unchanged heal has the same seal, under every
    supported ADK, and any other change (a note appended, a value edited, a
    key added with content) changes it.

    Args:
        row: The event's JSON object, as stored (or an ``Event``'s
            ``model_dump(mode="json")``).
    """
    body = {k: v for k, v in _without_nulls(row).items() if not _blank(v)}
    metadata = body.get("custom_metadata")
    if isinstance(metadata, Mapping) and isinstance(marker := metadata.get(
            HEAL_METADATA_KEY), Mapping):
        body["custom_metadata"] = {**metadata, HEAL_METADATA_KEY: {
            k: v for k, v in marker.items() if k != SEAL_KEY}}
    return event_digest(body)


def build_marker(
    plan: HealPlan, *, healed_at: float, policy: HealPolicy | None = None
) -> dict[str, Any]:
    """Returns the ``custom_metadata["adk_session_heal"]`` value of a heal.

    Args:
        plan: The planned heal.
        healed_at: When the heal is written (POSIX seconds).
        policy: Supplies each tool's effect (every tool ``unknown`` without one).

    Returns:
        A new dict; ``effects``, ``outcomes`` and ``recovered`` (the response
        is the tool's real result, from the tool-run ledger) run parallel to
        ``call_ids``.
    """
    policy = policy or HealPolicy()
    return {
        "synthetic": True,
        "version": MARKER_VERSION,
        "reason": plan.reason,
        "healed_at": healed_at,
        "call_event_id": plan.call_event_id,
        "call_ids": list(plan.call_ids),
        "tool_names": list(plan.tool_names),
        "effects": [policy.effect_of(name).value for name in plan.tool_names],
        "outcomes": [CallOutcome(call.outcome).value for call in plan.calls],
        "recovered": [call.recovered is not None for call in plan.calls],
    }


@functools.cache
def _to_jsonable() -> Callable[[Any], Any]:
    """pydantic's ``to_jsonable_python``, imported by the first heal built: a scan builds none."""
    from pydantic_core import to_jsonable_python

    return to_jsonable_python


def heal_event_data(
    plan: HealPlan, policy: HealPolicy, *, healed_at: float, resolved_by: str | None = None
) -> dict[str, Any]:
    """Builds the synthetic response event a heal writes, as the JSON object stored.

    The one builder of a heal's content: writers store this object and
    :func:`build_heal_event` validates it into an ``Event``. Its top-level
    fields are those every supported ADK reads
    (:data:`~adk_session_heal.core.adk_compat.PORTABLE_EVENT_FIELDS`), plus the
    call's isolation scope and node path when it has them (only ADK 2.x
    writes those). Defaults are left out, as ADK's ``model_dump(exclude_none=True)``
    would keep them, so a 1.x reader that forbids unknown fields reads it.
    The marker's last key is its ``seal`` (:func:`row_seal` of the rest).

    Args:
        plan: The planned heal.
        policy: Supplies the response payload of each call.
        healed_at: When the heal is written (POSIX seconds), for the marker.
        resolved_by: For an operator's resolution (see
            :mod:`~adk_session_heal.core.review`): who; kept in the marker.

    Returns:
        A new JSON-ready dict with snake_case keys; nothing else is touched.
    """
    to_jsonable_python = _to_jsonable()
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
        "custom_metadata": {
            HEAL_METADATA_KEY: build_marker(plan, healed_at=healed_at, policy=policy)
        },
        "error_code": INVOCATION_ABORTED,
        "error_message": HEAL_ERROR_MESSAGE,
    }
    if plan.branch is not None:
        data["branch"] = plan.branch
    if plan.isolation_scope is not None:
        data["isolation_scope"] = plan.isolation_scope
    if plan.node_path:
        data["node_info"] = {"path": plan.node_path}
    marker = data["custom_metadata"][HEAL_METADATA_KEY]
    if resolved_by is not None:
        marker["resolved_by"] = resolved_by
    marker[SEAL_KEY] = row_seal(data)
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
    from google.adk.events.event import Event

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
        resolved_by: For an operator's resolution (see
            :mod:`~adk_session_heal.core.review`): who; kept in the marker.
        run_id: The ``repair`` run writing it (``None``: the wrapper); kept
            in its ledger row, not in the event.
        resolved_call: For an operator's resolution: the call resolved (its
            other calls keep the answer it supersedes gave them); kept in the
            ledger's record of the resolution.
    """

    plan: HealPlan
    key: SessionKey
    trigger: HealTrigger
    healed_at: float
    policy: HealPolicy = field(repr=False, compare=False)
    resolved_by: str | None = None
    run_id: str | None = None
    resolved_call: str | None = None

    @property
    def event_id(self) -> str:
        """The synthetic event's id."""
        return self.plan.event_id

    @cached_property
    def data(self) -> dict[str, Any]:
        """The synthetic event's JSON object, exactly as SQL writers store it (sealed)."""
        return heal_event_data(self.plan, self.policy, healed_at=self.healed_at,
                               resolved_by=self.resolved_by)

    @cached_property
    def event(self) -> Event:
        """The synthetic event as an ``Event`` of the installed ADK."""
        from google.adk.events.event import Event

        return Event.model_validate(readable_event_data(self.data))

    @cached_property
    def record(self) -> HealRecord:
        """What the log, telemetry and ledger say of the heal once written.

        The one place a :class:`~adk_session_heal.core.heal_record.HealRecord` of a
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
            effects=tuple(self.policy.effect_of(name).value for name in plan.tool_names),
            outcomes=tuple(CallOutcome(call.outcome).value for call in plan.calls),
            recovered=tuple(call.recovered is not None for call in plan.calls),
            run_id=self.run_id,
        )

    @cached_property
    def record_json(self) -> dict[str, Any]:
        """The record's one encoding (:meth:`HealRecord.to_json`), made once per heal.

        The writer's ledger row and the report of the heal written both read
        it. Read it; never change it.
        """
        return self.record.to_json()


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
    run_id: str | None = None,
) -> tuple[Heal, ...]:
    """Returns one :class:`Heal` per planned heal, in the same order.

    Args:
        plans: From :func:`plan_heals`.
        key: The session the heals belong to.
        policy: Supplies the payloads.
        trigger: Which path heals.
        healed_at: When (POSIX seconds), for the marker and the record.
        run_id: The ``repair`` run (``None``: the wrapper).
    """
    return tuple(Heal(plan, key, trigger, healed_at, policy, run_id=run_id) for plan in plans)


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
    run_id: str | None = None,
) -> SessionHeals | None:
    """Plans and builds every heal of one session: what its writer applies.

    The wrapper and repair both call this, so they write the same rows.

    Args:
        events: The classified events, oldest first.
        findings: :func:`~adk_session_heal.core.findings.classify` of ``events``.
        key: The session.
        policy: Supplies the payloads.
        trigger: Which path heals.
        healed_at: When (POSIX seconds).
        seen_events: How many stored events ``events`` holds (the writer
            re-counts them); ``None`` for a partial view.
        before: Heal only calls in events before this index (the wrapper's
            own view ends there; later events are not stored yet).
        access: How to read ``events``.
        run_id: The ``repair`` run planning (``None``: the wrapper).

    Returns:
        The session's heals, or ``None`` when there is nothing to heal.
    """
    plans = plan_heals(events, findings, app_name=key.app_name, user_id=key.user_id,
                       session_id=key.session_id, access=access)
    if before is not None:
        plans = tuple(plan for plan in plans if plan.call_event_index < before)
    if not plans:
        return None
    heals = build_heals(plans, key, policy, trigger=trigger, healed_at=healed_at, run_id=run_id)
    return SessionHeals(key, seen_events, heals)


def apply_heals(events: Sequence[E], heals: Iterable[tuple[int, E]]) -> list[E]:
    """Returns a new list with synthetic events inserted at their places.

    Args:
        events: The original events (not modified).
        heals: ``(insert_at, synthetic event)`` pairs, ``insert_at`` from
            :attr:`HealPlan.insert_at`; heals sharing a place keep their order.

    Returns:
        ``events`` with each heal inserted before the event at its index.
    """
    at: dict[int, list[E]] = {}
    for index, heal in heals:
        at.setdefault(index, []).append(heal)
    result: list[E] = []
    for index, event in enumerate(events):
        result.extend(at.get(index, ()))
        result.append(event)
    result.extend(at.get(len(events), ()))
    return result
