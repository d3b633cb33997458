"""What to do with one session: the one decision every healer and report makes.

The wrapper (``HealingSessionService``), ``scan``, ``repair`` and ``review``
each hand one session's events to :func:`decide` and act on what it returns;
none of them classifies or plans on its own. The steps, in order:

1. **classify** the events (:func:`~adk_session_heal.core.findings.classify`)
   with the policy's ``stale_after`` and ``clock_skew``;
2. **late results**: the heals a real response has superseded since
   (:func:`~adk_session_heal.core.late_results.late_results`), for the caller
   to take back;
3. **tool-run correction**: the unanswered calls are corrected by what the
   tool-run ledger knows of them
   (:func:`with_tool_runs`), one read of the
   caller's :class:`~adk_session_heal.core.tool_runs.ToolRunReader` for the
   session, and only when it has unanswered calls;
4. **re-runs deferred**: on a read through the wrapper, with
   ``rerun_safe_calls``, the dead calls that may simply run again are left for
   the re-run plugin (:mod:`~adk_session_heal.core.rerunnable`); with
   ``resumable_app``, the wrapper leaves the dead calls no later invocation
   superseded (``stale``, ``abandoned``) to ADK's resume, which replays them
   (not on ADK 2.0 and 2.1, whose resume does not:
   :data:`~adk_session_heal.core.adk_compat.RESUME_REPLAYS_CALLS`);
5. **reconcile**: a dead call still to be healed that is in doubt (it may
   have run, or nothing is known of its run) is settled by the real system
   where the policy has a reconcile hook for its tool
   (:mod:`~adk_session_heal.core.reconcile`), through the caller's reconciler;
6. **plan** the heals (:func:`~adk_session_heal.core.healing.plan_session`),
   when asked to.

The wrapper asks one question more of each session it reads: is it clean?
:func:`decide_unless_clean` answers it first
(:func:`~adk_session_heal.core.clean_prefix.clean_prefix`, reading only the
events after the prefix found clean on the last read) and decides only a
session that is not; the wrapper gets all it must know in one call.

The module opens nothing: the one await is of the reader the caller hands in.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Generic, TypeVar

from ..policy import CallOutcome, HealPolicy
from . import adk_compat
from .clean_prefix import CleanPrefix, clean_prefix
from .event_access import EventAccess
from .findings import HEALABLE, CallFinding, CallStatus, SessionFindings, classify
from .heal_record import HealTrigger
from .healing import SessionHeals, plan_session
from .late_results import LateResult, late_results
from .reconcile import Reconciler, doubtful_calls, with_reconciliations
from .rerunnable import deferring, rerunnable_calls
from .session_key import SessionKey
from .tool_runs import RunState, ToolRun, ToolRunReader, run_outcome

E = TypeVar("E")

_OPEN = frozenset({*HEALABLE, CallStatus.IN_FLIGHT})
"""The unanswered statuses the tool-run ledger corrects."""

_RESUMED = frozenset({CallStatus.STALE, CallStatus.ABANDONED})
"""The dead calls of an invocation no later one superseded: a resumable app's resume replays
them, so the wrapper of such an app leaves them (``HealPolicy.resumable_app``)."""

_WRAPPER = frozenset({HealTrigger.GET_SESSION, HealTrigger.APPEND})
"""The wrapper's triggers."""


@dataclass(frozen=True, slots=True)
class SessionDecision:
    """What :func:`decide` found in one session and what it plans to write.

    Attributes:
        findings: Every call's status, corrected by the tool-run ledger.
        superseded: The heals a late real response superseded (to take back).
        heals: The heals to write (``None``: nothing, or not asked to plan).
    """

    findings: SessionFindings
    superseded: tuple[LateResult, ...]
    heals: SessionHeals | None


@dataclass(frozen=True, slots=True)
class SessionView(Generic[E]):
    """One session's events as a healer holds them.

    Attributes:
        key: The session.
        events: Its events, oldest first (with an incoming event at the end,
            when one is about to be appended).
        access: How to read ``events`` (ADK ``Event`` objects or stored JSON).
        seen_events: How many stored events ``events`` holds, for the writer
            to re-count (``None``: a partial view, which it cannot).
        before: Heal only calls in events before this index (``None``: all).
    """

    key: SessionKey
    events: Sequence[E]
    access: EventAccess[E]
    seen_events: int | None
    before: int | None = None


async def decide(
    view: SessionView[E],
    policy: HealPolicy,
    *,
    now: float,
    trigger: HealTrigger,
    tool_runs: ToolRunReader | None = None,
    plan: bool = True,
    run_id: str | None = None,
    reconciler: Reconciler | None = None,
) -> SessionDecision:
    """Classifies one session and plans its heals (see the module docstring).

    Args:
        view: The session's events.
        policy: Which calls are dead (``stale_after``, ``clock_skew``), which
            may be re-run, and the payload of each heal.
        now: The clock; also the heals' ``healed_at``.
        trigger: Which path decides (re-runs are deferred on ``GET_SESSION`` only).
        tool_runs: The session store's tool-run ledger (``None``: none).
        reconciler: As for :func:`decide`.
        plan: Also plan the heals.
        run_id: The ``repair`` run planning (``None``: not a repair).
        reconciler: Asks the policy's reconcile hooks about the calls that
            may have run (``None``: nobody asks).

    Returns:
        The decision.

    Raises:
        TypeError, AttributeError, ValueError: A stored event holds JSON of the
            wrong shape (stored JSON views only).
    """
    events, access = view.events, view.access
    clock_skew = policy.clock_skew_seconds
    findings = classify(events, access, now=now, stale_after=policy.stale_after_seconds,
                        clock_skew=clock_skew)
    superseded: tuple[LateResult, ...] = ()
    if any(d.involves_heal for d in findings.duplicate_responses):
        superseded = late_results(events, access)
    if tool_runs is not None and (ids := findings.open_call_ids):
        findings = with_tool_runs(findings, await tool_runs.runs(view.key, ids), now=now,
                                  clock_skew=clock_skew)
    if trigger is HealTrigger.GET_SESSION and policy.rerun_safe_calls:
        findings = deferring(findings, rerunnable_calls(events, findings, policy, access=access))
    if (policy.resumable_app and trigger in _WRAPPER and findings.needs_healing
            and adk_compat.RESUME_REPLAYS_CALLS):
        findings = deferring(findings, [c for c in findings.calls if c.status in _RESUMED])
    # Last: only the calls still to be healed now are worth asking the real system about.
    if reconciler is not None and findings.needs_healing and (
            doubtful := doubtful_calls(view.key, findings, policy)):
        findings = with_reconciliations(view.key, findings,
                                        await reconciler.settle(doubtful))
    heals = None
    if plan and findings.needs_healing:
        heals = plan_session(events, findings, view.key, policy, trigger=trigger, healed_at=now,
                             seen_events=view.seen_events, before=view.before, access=access,
                             run_id=run_id)
    return SessionDecision(findings, superseded, heals)


@dataclass(frozen=True, slots=True)
class CheckedDecision:
    """What :func:`decide_unless_clean` tells the wrapper of one session.

    Attributes:
        clean: The view's stored events as one clean prefix, for the caller to
            remember and hand back on its next read (``None``: they are not
            clean, or the view is partial).
        decision: :func:`decide`'s decision (``None``: the events are clean,
            with the incoming event too, so there is nothing to heal or take
            back).
    """

    clean: CleanPrefix | None
    decision: SessionDecision | None


async def decide_unless_clean(
    view: SessionView[E],
    policy: HealPolicy,
    *,
    known: CleanPrefix | None,
    now: float,
    trigger: HealTrigger,
    tool_runs: ToolRunReader | None = None,
    reconciler: Reconciler | None = None,
) -> CheckedDecision:
    """Checks whether one session is clean and, only when it is not, decides it.

    A clean session (every call answered once, no rewind) has nothing to heal
    under any policy, so it costs no classification. Only a whole view
    (``seen_events`` set) is checked: its stored events (the first
    ``seen_events``) are read on from ``known``, and an incoming event after
    them is checked on top of what they are found to be.

    Args:
        view: The session's events, perhaps with an incoming event at the end.
        policy: As for :func:`decide`.
        known: The clean prefix remembered from an earlier read of the same
            session (``None``: none).
        now: The clock; also the heals' ``healed_at``.
        trigger: Which path decides.
        tool_runs: The session store's tool-run ledger (``None``: none).

    Returns:
        The stored events' clean prefix, and the decision unless everything
        is clean.
    """
    clean: CleanPrefix | None = None
    stored = view.seen_events
    if stored is not None:
        events = view.events if stored == len(view.events) else view.events[:stored]
        clean = clean_prefix(events, view.access, known)
        if clean is not None and (events is view.events
                                  or clean_prefix(view.events, view.access, clean) is not None):
            return CheckedDecision(clean, None)
    decision = await decide(view, policy, now=now, trigger=trigger, tool_runs=tool_runs,
                            reconciler=reconciler)
    return CheckedDecision(clean, decision)


def with_tool_runs(findings: SessionFindings, runs: Mapping[str, ToolRun], *, now: float,
                   clock_skew: float = 0.0) -> SessionFindings:
    """Corrects the findings with what the tool-run ledger knows of each unanswered call.

    For each ``superseded``, ``stale`` or ``in_flight`` call with a record in
    ``runs`` (by call id), :func:`~adk_session_heal.core.tool_runs.run_outcome`
    decides:

    * lease alive (announced or started, on some host): ``in_flight``, never
      healed however old, its holder named;
    * a call of the same call event as a call whose lease is alive, whatever
      its own record says (or without one): ``in_flight`` too, that holder
      named. ADK answers a call event's parallel calls in one response event,
      stored once the last of them ends, so a sibling that finished is not
      lost while the runner still runs the others;
    * otherwise the call is dead: ``in_flight`` becomes ``abandoned`` (no
      waiting for ``stale_after``); it carries the outcome (``not_started``,
      ``may_have_run``, ``finished_result_lost``) and, for a finished run
      whose result was kept, that result.

    Calls without a record keep their status and the ``unknown`` outcome.

    Args:
        findings: :func:`~adk_session_heal.core.findings.classify`'s findings.
        runs: The session's tool runs by call id.
        now: The reader's time (seconds since the epoch).
        clock_skew: How far the reader's clock may run ahead of the runners'.

    Returns:
        New findings (the same object when nothing changes).
    """
    if not runs:
        return findings
    outcomes: dict[int, CallOutcome | None] = {}
    live: dict[int, str] = {}  # call event (its index) -> the holder of a live lease in it
    for position, call in enumerate(findings.calls):
        run = runs.get(call.call_id) if call.call_id else None
        if run is not None and call.status in _OPEN:
            outcomes[position] = run_outcome(run, now, clock_skew)
            if outcomes[position] is None:
                live.setdefault(call.event_index, f"{run.host}/{run.pid}")
    calls: list[CallFinding] = []
    changed = False
    for position, call in enumerate(findings.calls):
        run = runs.get(call.call_id) if call.call_id else None
        sibling = live.get(call.event_index) if call.status in _OPEN else None
        if position not in outcomes and sibling is None:
            calls.append(call)
            continue
        outcome = outcomes.get(position)
        if run is None or outcome is None:  # its lease, or a sibling's, is alive
            holder = f"{run.host}/{run.pid}" if run is not None else sibling
            calls.append(replace(call, status=CallStatus.IN_FLIGHT, lease_holder=holder))
        elif sibling is not None:  # done, but the runner answers its event as one
            calls.append(replace(call, status=CallStatus.IN_FLIGHT, lease_holder=sibling))
        else:
            status = CallStatus.ABANDONED if call.status is CallStatus.IN_FLIGHT else call.status
            recovered = run.result if run.state is RunState.FINISHED else None
            calls.append(replace(call, status=status, outcome=outcome, recovered=recovered))
        changed = True
    if not changed:
        return findings
    return SessionFindings(calls, findings.orphaned_responses, findings.duplicate_responses)
