"""Operator review: which healed calls need a human, and writing the true outcome.

A heal tells the model a tool call "may have completed". For a call to a tool
with side effects (or an unknown one) whose run may have happened
(``may_have_run``) or is not known (``unknown``), only a person who checks the
real system (the payment provider, the deploy log) knows what happened.
:func:`review_entries` lists those calls of one session: every heal of ours
whose marker says so, and not yet resolved, plus the dead calls not healed yet
(their tool's effect is not known to a store scan, so they count as
``unknown``). :func:`plan_resolution` builds the operator's answer: one
response event per healed call event, written right after the heal it
answers for, with the true result (or failure) for the call resolved and the
heal's own responses for its other calls, marked ``"reason": "resolved"`` and
``resolved_by``. It supersedes the heal
(:mod:`~adk_session_heal.late_results`), which is then taken back out.

Pure: reads stored event JSON (:data:`~adk_session_heal.views.STORED_JSON`), no I/O.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from .errors import ResolutionError
from .event_access import STORED_JSON
from .findings import HEALABLE, SessionFindings
from .heal_plan import HealPlan, heal_event_id, placement
from .heal_record import HealTrigger
from .healing import Heal
from .late_results import RESOLVED_REASON, is_resolution, late_results
from .policy import CallOutcome, DeadCall, HealPolicy, ToolEffect
from .session_key import SessionKey
from .tool_runs import redacted

__all__ = [
    "RESOLUTION_ID_SUFFIX",
    "REVIEWED_EFFECTS",
    "REVIEWED_OUTCOMES",
    "ResolutionError",
    "ReviewEntry",
    "plan_resolution",
    "review_entries",
]

REVIEWED_EFFECTS = frozenset({ToolEffect.SIDE_EFFECT.value, ToolEffect.UNKNOWN.value})
"""Tool effects whose dead calls a person should check."""

REVIEWED_OUTCOMES = frozenset({CallOutcome.MAY_HAVE_RUN.value, CallOutcome.UNKNOWN.value})
"""Run outcomes that leave what happened unknown."""

_OUTCOMES = frozenset(o.value for o in CallOutcome)
_EFFECTS = frozenset(e.value for e in ToolEffect)
_ARGS_LIMIT = 120


@dataclass(frozen=True, slots=True)
class ReviewEntry:
    """One dead call a person should check.

    Attributes:
        key: The session.
        call_event_id: The event holding the call.
        call_id: The call id.
        tool_name: The tool.
        args: The call's arguments, secrets redacted, as short JSON.
        timestamp: When the call was made (POSIX seconds).
        status: ``healed`` (a heal answers it) or ``dead`` (not healed yet).
        effect: The tool's effect as the heal recorded it (``unknown`` when not healed).
        outcome: The run's outcome as the heal recorded it.
        heal_event_id: The heal answering it (``None`` when not healed).
    """

    key: SessionKey
    call_event_id: str
    call_id: str
    tool_name: str
    args: str
    timestamp: float
    status: str
    effect: str
    outcome: str
    heal_event_id: str | None

    def to_json(self, now: float) -> dict[str, Any]:
        """Returns the entry's JSON object (``age_seconds`` from ``now``)."""
        return {
            "app_name": self.key.app_name, "user_id": self.key.user_id,
            "session_id": self.key.session_id, "call_event_id": self.call_event_id,
            "call_id": self.call_id, "tool_name": self.tool_name, "args": self.args,
            "timestamp": self.timestamp, "age_seconds": round(max(0.0, now - self.timestamp), 3),
            "status": self.status, "tool_effect": self.effect, "run_outcome": self.outcome,
            "synthetic_event_id": self.heal_event_id,
        }


def _calls_of(event: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    parts = (event.get("content") or {}).get("parts") or []
    return [call for p in parts
            if isinstance(p, Mapping) and isinstance(call := p.get("function_call"), Mapping)]


def _args_summary(args: Any) -> str:
    text = json.dumps(redacted(args or {}), sort_keys=True, default=str)
    return text if len(text) <= _ARGS_LIMIT else text[:_ARGS_LIMIT - 1] + "…"


def _parallel(marker: Mapping[str, Any], name: str, index: int) -> str:
    values = marker.get(name)
    if isinstance(values, list) and index < len(values) and isinstance(values[index], str):
        return str(values[index])
    return "unknown"


def review_entries(
    events: Sequence[Mapping[str, Any]], findings: SessionFindings, key: SessionKey
) -> list[ReviewEntry]:
    """Returns the calls of one session a person should check, in history order.

    Args:
        events: The session's stored events (JSON), oldest first.
        findings: Their classification (for the dead calls not healed yet).
        key: The session.
    """
    by_id = {STORED_JSON.event_id(e): e for e in events}
    superseded = {found.heal_event_id for found in late_results(events, STORED_JSON)}
    entries: list[ReviewEntry] = []
    for event in events:
        marker = STORED_JSON.heal_marker(event)
        heal_id = STORED_JSON.event_id(event)
        if marker is None or is_resolution(marker) or heal_id in superseded:
            continue
        call_event_id = str(marker.get("call_event_id", ""))
        call_event = by_id.get(call_event_id, {})
        calls = {c.get("id"): c for c in _calls_of(call_event)}
        for index, call_id in enumerate(marker.get("call_ids") or ()):
            effect, outcome = _parallel(marker, "effects", index), _parallel(
                marker, "outcomes", index)
            if effect not in REVIEWED_EFFECTS or outcome not in REVIEWED_OUTCOMES:
                continue
            call = calls.get(call_id, {})
            entries.append(ReviewEntry(
                key, call_event_id, str(call_id), _parallel(marker, "tool_names", index),
                _args_summary(call.get("args")), STORED_JSON.timestamp(call_event)
                if call_event else STORED_JSON.timestamp(event), "healed", effect, outcome,
                heal_id))
    for finding in findings.calls:
        if finding.status not in HEALABLE or finding.call_id is None:
            continue
        if finding.outcome.value not in REVIEWED_OUTCOMES:
            continue
        calls = {c.get("id"): c for c in _calls_of(events[finding.event_index])}
        entries.append(ReviewEntry(
            key, finding.event_id, finding.call_id, finding.name,
            _args_summary(calls.get(finding.call_id, {}).get("args")), finding.timestamp,
            "dead", ToolEffect.UNKNOWN.value, finding.outcome.value, None))
    return entries


RESOLUTION_ID_SUFFIX = "-resolved"
"""Suffix of a resolution's id after its call event's id (see :func:`heal_event_id`)."""


def plan_resolution(
    events: Sequence[Mapping[str, Any]],
    key: SessionKey,
    call_id: str,
    response: Mapping[str, Any],
    *,
    by: str,
    at: float,
) -> tuple[Heal, Mapping[str, Any]]:
    """Builds the operator's answer to a healed call.

    Args:
        events: The session's stored events (JSON), oldest first.
        key: The session.
        call_id: The call resolved.
        response: Its true response (``{"result": ...}`` or ``{"error": ...}``).
        by: Who resolves it.
        at: When (POSIX seconds).

    Returns:
        The resolution to write (through the store's writer), and the newest heal
        (or earlier resolution) it supersedes: that event's JSON.

    Raises:
        ResolutionError: No heal of ours answers ``call_id`` in ``events``.
    """
    answering = [(i, e) for i, e in enumerate(events)
                 if call_id in ((STORED_JSON.heal_marker(e) or {}).get("call_ids") or ())]
    if not answering:
        raise ResolutionError(
            f"no heal answers call {call_id!r} in session {key.session_id!r}: run repair "
            "first (only a healed call can be resolved)")
    index, heal = answering[-1]
    marker = STORED_JSON.heal_marker(heal) or {}
    call_event_id = str(marker.get("call_event_id", ""))
    earlier = sum(1 for _, e in answering if is_resolution(STORED_JSON.heal_marker(e)))
    parts = (heal.get("content") or {}).get("parts") or []
    kept = {p["function_response"].get("id"): p["function_response"] for p in parts
            if isinstance(p, Mapping) and isinstance(p.get("function_response"), Mapping)}
    call_ids = [str(c) for c in marker.get("call_ids") or ()]
    names = [_parallel(marker, "tool_names", i) for i in range(len(call_ids))]
    outcomes = [_parallel(marker, "outcomes", i) for i in range(len(call_ids))]
    calls = tuple(
        DeadCall(c, n, RESOLVED_REASON, outcome=CallOutcome(o) if o in _OUTCOMES
                 else CallOutcome.UNKNOWN)
        for c, n, o in zip(call_ids, names, outcomes, strict=True))
    effects = {n: ToolEffect(e) for i, n in enumerate(names)
               if (e := _parallel(marker, "effects", i)) in _EFFECTS}
    payloads = {c: dict(response) if c == call_id else dict(kept.get(c, {}).get("response") or {})
                for c in call_ids}
    heal_time = STORED_JSON.timestamp(heal)
    following = events[index + 1] if index + 1 < len(events) else None
    timestamp = placement(heal_time, None if following is None
                          else STORED_JSON.timestamp(following))
    event_id = heal_event_id(key.app_name, key.user_id, key.session_id, call_event_id,
                             earlier + 1, suffix=RESOLUTION_ID_SUFFIX)
    plan = HealPlan(
        call_event_id=call_event_id, call_event_index=index, insert_at=index + 1,
        event_id=event_id, timestamp=timestamp,
        anchor_event_id=STORED_JSON.event_id(heal), anchor_timestamp=heal_time,
        invocation_id=STORED_JSON.invocation_id(heal), author=STORED_JSON.author(heal),
        branch=STORED_JSON.branch(heal), isolation_scope=STORED_JSON.isolation_scope(heal),
        node_path=STORED_JSON.node_path(heal), reason=RESOLVED_REASON, calls=calls)
    policy = HealPolicy(payload=lambda call: payloads[call.call_id], tool_effects=effects)
    return Heal(plan, key, HealTrigger.REVIEW, at, policy, resolved_by=by), heal
