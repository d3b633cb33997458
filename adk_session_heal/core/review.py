"""Operator review: which healed calls need a human, and writing the true outcome.

A heal tells the model a tool call "may have completed". For a call to a tool
with side effects (or an unknown one) whose run may have happened
(``may_have_run``) or is not known (``unknown``), only a person who checks the
real system (the payment provider, the deploy log) knows what happened.
:func:`review_entries` lists those calls of one session: every heal of ours
whose marker says so, and not yet resolved, plus the dead calls not healed yet
(their tool's effect is not known to a store scan, so they count as
``unknown``). A call whose real response was stored after all is never
listed, and never resolved: both ask
:func:`~adk_session_heal.core.late_results.superseding_answers`.
:func:`plan_resolution` builds the operator's answer: one response event per
healed call event, written right after the answer it supersedes (the heal, or
an earlier resolution), with the true result (or failure) for the call
resolved and that answer's own responses for its other calls still without a
real one, marked ``"reason": "resolved"`` and ``resolved_by``. The store
writes it and takes the superseded answer out in one transaction
(:meth:`~adk_session_heal.store.SessionStore.resolve`). Its id is derived
from the answer it supersedes and its content (:func:`resolution_id`), so a
correction never reuses an earlier resolution's id.

:func:`check_response` refuses what ADK could store but not read back: text
that is not Unicode, a NUL (PostgreSQL refuses it), numbers JSON readers
refuse, nesting deeper than ADK's JSON parser reads.

Pure: reads stored event JSON (:data:`~adk_session_heal.views.STORED_JSON`), no I/O.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ..errors import ResolutionError
from ..policy import CallOutcome, DeadCall, DoubtfulCall, HealPolicy, ToolEffect
from .event_access import STORED_JSON
from .findings import HEALABLE, SessionFindings
from .heal_plan import HealPlan, heal_event_id, placement
from .heal_record import HealTrigger
from .healing import Heal, event_digest
from .idempotency import idempotency_key
from .late_results import RESOLVED_REASON, is_resolution, superseding_answers
from .reconcile import doubtful_call
from .session_key import SessionKey
from .tool_runs import as_response, redacted

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
        invocation_id: The invocation that made the call (with ``key`` and
            ``call_id``, its idempotency key).
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
    invocation_id: str

    @property
    def idempotency_key(self) -> str:
        """The call's idempotency key: what a tool that passed it sent the real system."""
        return idempotency_key(self.key, self.invocation_id, self.call_id)

    def doubt(self) -> DoubtfulCall:
        """The question a reconcile hook gets about this call."""
        return doubtful_call(self.key, self.invocation_id, self.call_id, self.tool_name)

    def to_json(self, now: float) -> dict[str, Any]:
        """Returns the entry's JSON object (``age_seconds`` from ``now``)."""
        return {
            "app_name": self.key.app_name, "user_id": self.key.user_id,
            "session_id": self.key.session_id, "call_event_id": self.call_event_id,
            "call_id": self.call_id, "tool_name": self.tool_name, "args": self.args,
            "timestamp": self.timestamp, "age_seconds": round(max(0.0, now - self.timestamp), 3),
            "status": self.status, "tool_effect": self.effect, "run_outcome": self.outcome,
            "synthetic_event_id": self.heal_event_id, "idempotency_key": self.idempotency_key,
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
    answers = superseding_answers(events, STORED_JSON)
    entries: list[ReviewEntry] = []
    for position, event in enumerate(events):
        marker = STORED_JSON.heal_marker(event)
        heal_id = STORED_JSON.event_id(event)
        if marker is None or is_resolution(marker):
            continue
        superseded = answers.get(position, {})
        call_event_id = str(marker.get("call_event_id", ""))
        call_event = by_id.get(call_event_id, {})
        calls = {c.get("id"): c for c in _calls_of(call_event)}
        for index, call_id in enumerate(marker.get("call_ids") or ()):
            effect, outcome = _parallel(marker, "effects", index), _parallel(
                marker, "outcomes", index)
            if effect not in REVIEWED_EFFECTS or outcome not in REVIEWED_OUTCOMES or (
                    superseded.get(call_id)):
                continue
            call = calls.get(call_id, {})
            entries.append(ReviewEntry(
                key, call_event_id, str(call_id), _parallel(marker, "tool_names", index),
                _args_summary(call.get("args")), STORED_JSON.timestamp(call_event)
                if call_event else STORED_JSON.timestamp(event), "healed", effect, outcome,
                heal_id, STORED_JSON.invocation_id(call_event or event)))
    for finding in findings.calls:
        if finding.status not in HEALABLE or finding.call_id is None:
            continue
        if finding.outcome.value not in REVIEWED_OUTCOMES:
            continue
        calls = {c.get("id"): c for c in _calls_of(events[finding.event_index])}
        entries.append(ReviewEntry(
            key, finding.event_id, finding.call_id, finding.name,
            _args_summary(calls.get(finding.call_id, {}).get("args")), finding.timestamp,
            "dead", ToolEffect.UNKNOWN.value, finding.outcome.value, None,
            finding.invocation_id))
    return entries


RESOLUTION_ID_SUFFIX = "-resolved"
"""What follows the call event's id in a resolution's id (then a digest, see
:func:`resolution_id`)."""

MAX_RESPONSE_DEPTH = 100
"""How deeply a resolved response may nest (the response object is level 1).

ADK's JSON readers parse with pydantic, whose parser stops at 200 levels for a
whole document: ``Session.model_validate_json`` (Redis) failed for a response
nested 194 levels and ``Event.model_validate_json`` (ADK's SQLite file) at
196, which ``adk api_server`` serves inside further envelopes (measured,
pydantic-core 2.50). 100 leaves that room."""

MAX_INT_DIGITS = 4300
"""The most digits an integer may have: Python's ``json`` (and so every ADK reader
of SQL storage) refuses a longer one (``sys.get_int_max_str_digits()``'s default)."""

_INT_LIMIT = 10 ** MAX_INT_DIGITS


def check_text(text: str, source: str) -> None:
    """Refuses text ADK could not store or read back.

    Args:
        text: The text.
        source: What it is, for the message (``--by``, say).

    Raises:
        ResolutionError: It holds a NUL (PostgreSQL stores none) or a lone
            surrogate (not Unicode: bytes that were not UTF-8, decoded by Python
            with ``surrogateescape``; ``Session.model_dump_json()`` then raises).
    """
    _check_text(text, source, "")


def _check_text(text: str, source: str, path: str) -> None:
    where = f" at {path}" if path else ""
    if "\x00" in text:
        raise ResolutionError(f"{source} holds a NUL character{where}, which PostgreSQL "
                              "cannot store: remove it")
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        raise ResolutionError(
            f"{source} holds text that is not valid Unicode{where} (a lone surrogate, as from "
            "bytes that are not UTF-8): pass UTF-8 text") from None


def check_response(response: Any, source: str = "the response") -> None:
    """Refuses a resolved response ADK could store but not serve back.

    Every key and value is checked, iteratively (so any depth is safe to check).

    Args:
        response: The response (a JSON object's Python form).
        source: What it came from, for the message (``--result``, say).

    Raises:
        ResolutionError: A value is not JSON (a non-string key, a type JSON
            lacks, ``NaN`` or an infinity), an integer has more than
            :data:`MAX_INT_DIGITS` digits, it nests deeper than
            :data:`MAX_RESPONSE_DEPTH`, or text fails :func:`check_text`.
    """
    stack: list[tuple[Any, int, str]] = [(response, 1, "$")]
    while stack:
        value, depth, path = stack.pop()
        if isinstance(value, (dict, list)) and depth > MAX_RESPONSE_DEPTH:
            raise ResolutionError(
                f"{source} nests deeper than {MAX_RESPONSE_DEPTH} levels (at {path}): ADK's "
                "JSON readers stop at 200 levels in a whole session; flatten it")
        if isinstance(value, dict):
            for key, item in value.items():
                if not isinstance(key, str):
                    raise ResolutionError(f"{source} has a key that is not text (at {path}): "
                                          "pass a JSON object")
                _check_text(key, source, path)
                stack.append((item, depth + 1, f"{path}.{key}"))
        elif isinstance(value, list):
            stack.extend((item, depth + 1, f"{path}[{n}]") for n, item in enumerate(value))
        elif isinstance(value, str):
            _check_text(value, source, path)
        elif isinstance(value, bool) or value is None:
            continue
        elif isinstance(value, int):
            if abs(value) >= _INT_LIMIT:
                raise ResolutionError(
                    f"{source} holds an integer of more than {MAX_INT_DIGITS} digits (at {path}), "
                    "which ADK's JSON readers refuse: store it as a string")
        elif isinstance(value, float):
            if not math.isfinite(value):
                raise ResolutionError(f"{source} holds {value!r} (at {path}), which is not "
                                      "JSON: store it as a string or null")
        else:
            raise ResolutionError(f"{source} holds a {type(value).__name__} (at {path}), "
                                  "which is not JSON")


def parse_response(text: str, source: str = "--result") -> dict[str, Any]:
    """Parses a resolved response given as JSON text (a non-object is wrapped in ``result``).

    Args:
        text: The JSON.
        source: Where it came from, for the messages.

    Raises:
        ResolutionError: It is not JSON, or fails :func:`check_response`.
    """
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ResolutionError(f"{source} is not JSON ({exc.msg} at {exc.pos}): quote it, e.g. "
                              f"{source} '{{\"charged\": true}}'") from None
    except RecursionError:
        raise ResolutionError(
            f"{source} nests deeper than {MAX_RESPONSE_DEPTH} levels: ADK's JSON readers stop "
            "at 200 levels in a whole session; flatten it") from None
    except ValueError:  # an integer beyond Python's digit limit
        raise ResolutionError(
            f"{source} holds an integer of more than {MAX_INT_DIGITS} digits, which ADK's JSON "
            "readers refuse: store it as a string") from None
    response = as_response(value)
    check_response(response, source)
    return response


def resolution_id(
    key: SessionKey, call_event_id: str, supersedes: str,
    responses: Mapping[str, Mapping[str, Any]], by: str,
) -> str:
    """Returns a resolution's id: its call event's, ``-resolved-`` and a digest.

    The digest covers the answer it supersedes, its responses and who
    resolves, so a resolution never takes an earlier, different one's id (a
    correction A, then B, then A again gets three ids) and the same
    resolution planned twice gets the same one. Too long for ADK's id column,
    it is a UUID5 (:func:`~adk_session_heal.core.heal_plan.heal_event_id`).

    Args:
        key: The session.
        call_event_id: The event holding the calls.
        supersedes: The id of the heal or resolution it supersedes.
        responses: Its response per call.
        by: Who resolves.
    """
    digest = event_digest({"supersedes": supersedes, "responses": dict(responses), "by": by})
    return heal_event_id(key.app_name, key.user_id, key.session_id, call_event_id,
                         suffix=f"{RESOLUTION_ID_SUFFIX}-{digest[:16]}")


def describe_answer(events: Sequence[Mapping[str, Any]], call_id: str) -> str:
    """Says, in a few words, what answers a call in ``events`` now (its newest response).

    Args:
        events: The session's stored events (JSON), oldest first.
        call_id: The call.
    """
    for event in reversed(events):
        response = _response_of(event, call_id)
        if response is None:
            continue
        marker = STORED_JSON.heal_marker(event)
        what = ("its real response" if marker is None
                else f"the resolution by {marker.get('resolved_by')}" if is_resolution(marker)
                else "a heal")
        return (f"{what} (event {STORED_JSON.event_id(event)}): "
                f"{_args_summary(response)}")
    return "no answer"


def _response_of(event: Mapping[str, Any], call_id: str) -> Mapping[str, Any] | None:
    for part in (event.get("content") or {}).get("parts") or []:
        response = part.get("function_response") if isinstance(part, Mapping) else None
        if isinstance(response, Mapping) and response.get("id") == call_id:
            payload = response.get("response")
            return payload if isinstance(payload, Mapping) else {}
    return None


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
        The resolution to write (through the store's
        :meth:`~adk_session_heal.store.SessionStore.resolve`), and the newest
        heal (or earlier resolution) it supersedes: that event's JSON. The
        resolution answers the call resolved and that answer's other calls
        that have no real response (those keep the answer they had); a
        sibling whose real response is stored is left to it.

    Raises:
        ResolutionError: No heal of ours answers ``call_id`` in ``events``,
            the call has its real response already, or ``response`` or ``by``
            fails :func:`check_response` / :func:`check_text`.
    """
    check_response(response)
    check_text(by, "the resolver's name (--by)")
    answering = [(i, e) for i, e in enumerate(events)
                 if call_id in ((STORED_JSON.heal_marker(e) or {}).get("call_ids") or ())]
    if not answering:
        raise ResolutionError(
            f"no heal answers call {call_id!r} in session {key.session_id!r}: run repair "
            "first (only a healed call can be resolved)")
    index, heal = answering[-1]
    marker = STORED_JSON.heal_marker(heal) or {}
    superseded = superseding_answers(events, STORED_JSON).get(index, {})
    real = {c: [i for i in found if STORED_JSON.heal_marker(events[i]) is None]
            for c, found in superseded.items()}
    if real.get(call_id):
        raise ResolutionError(
            f"call {call_id!r} in session {key.session_id!r} already has its real response "
            f"(event {STORED_JSON.event_id(events[real[call_id][0]])}): nothing to resolve")
    call_event_id = str(marker.get("call_event_id", ""))
    parts = (heal.get("content") or {}).get("parts") or []
    kept = {p["function_response"].get("id"): p["function_response"] for p in parts
            if isinstance(p, Mapping) and isinstance(p.get("function_response"), Mapping)}
    all_ids = [str(c) for c in marker.get("call_ids") or ()]
    answered = [(n, c) for n, c in enumerate(all_ids) if c == call_id or not real.get(c)]
    call_ids = [c for _, c in answered]
    names = [_parallel(marker, "tool_names", n) for n, _ in answered]
    outcomes = [_parallel(marker, "outcomes", n) for n, _ in answered]
    calls = tuple(
        DeadCall(c, name, RESOLVED_REASON, outcome=CallOutcome(o) if o in _OUTCOMES
                 else CallOutcome.UNKNOWN)
        for c, name, o in zip(call_ids, names, outcomes, strict=True))
    effects = {name: ToolEffect(e) for (n, _), name in zip(answered, names, strict=True)
               if (e := _parallel(marker, "effects", n)) in _EFFECTS}
    payloads = {c: dict(response) if c == call_id else dict(kept.get(c, {}).get("response") or {})
                for c in call_ids}
    heal_time = STORED_JSON.timestamp(heal)
    following = events[index + 1] if index + 1 < len(events) else None
    timestamp = placement(heal_time, None if following is None
                          else STORED_JSON.timestamp(following))
    event_id = resolution_id(key, call_event_id, STORED_JSON.event_id(heal), payloads, by)
    plan = HealPlan(
        call_event_id=call_event_id, call_event_index=index, insert_at=index + 1,
        event_id=event_id, timestamp=timestamp,
        anchor_event_id=STORED_JSON.event_id(heal), anchor_timestamp=heal_time,
        invocation_id=STORED_JSON.invocation_id(heal), author=STORED_JSON.author(heal),
        branch=STORED_JSON.branch(heal), isolation_scope=STORED_JSON.isolation_scope(heal),
        node_path=STORED_JSON.node_path(heal), reason=RESOLVED_REASON, calls=calls)
    policy = HealPolicy(payload=lambda call: payloads[call.call_id], tool_effects=effects)
    return Heal(plan, key, HealTrigger.REVIEW, at, policy, resolved_by=by,
                resolved_call=call_id), heal
