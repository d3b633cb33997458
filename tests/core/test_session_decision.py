"""The one per-session decision: classify, late results, tool runs, re-runs deferred, plan."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from google.adk.events.event import Event
from google.genai import types

from adk_session_heal.core.clean_prefix import clean_prefix
from adk_session_heal.core.event_access import ADK_EVENTS, STORED_JSON
from adk_session_heal.core.findings import CallStatus, classify
from adk_session_heal.core.heal_record import HealTrigger
from adk_session_heal.core.healing import apply_heals, build_heal_event, plan_heals, plan_session
from adk_session_heal.core.session_decision import (
    SessionView,
    decide,
    decide_unless_clean,
    with_tool_runs,
)
from adk_session_heal.core.session_key import SessionKey
from adk_session_heal.core.tool_runs import RunState, ToolRun
from adk_session_heal.policy import LEDGER_ERRORS, CallOutcome, HealPolicy, ToolEffect
from adk_session_heal.testing import History

KEY = SessionKey("app", "user", "s1")
NOW = 1_700_000_000.0


def crashed() -> tuple[list[Event], str]:
    """user asks -> get_weather called -> (process dies) -> user returns."""
    history = History(start=NOW - 60)
    history.user("weather in Paris?")
    call_id = history.call("get_weather", {"city": "Paris"})
    history.user("hello?")
    return history.events, call_id


def view(events: list[Event]) -> SessionView[Event]:
    """The whole session, as the wrapper holds it."""
    return SessionView(KEY, events, ADK_EVENTS, seen_events=len(events))


class Runs:
    """A tool-run ledger holding the given runs, counting the reads it is asked for."""

    def __init__(self, runs: Iterable[ToolRun] = ()) -> None:
        self.by_call = {run.call_id: run for run in runs}
        self.asked: list[set[str]] = []

    async def runs(self, key: SessionKey, call_ids: Iterable[str] | None = None
                   ) -> dict[str, ToolRun]:
        """Returns the runs of ``call_ids`` (all without), and notes the read."""
        wanted = set(self.by_call if call_ids is None else call_ids)
        self.asked.append(wanted)
        return {c: r for c, r in self.by_call.items() if c in wanted}


def running(call_id: str) -> ToolRun:
    """A run of ``call_id`` whose lease is alive at ``NOW``."""
    return ToolRun(KEY.app_name, KEY.user_id, KEY.session_id, call_id, "get_weather", "inv",
                   RunState.STARTED, "host", 1, 1, NOW - 10, NOW + 600)


async def test_a_dead_call_is_planned_as_plan_session_plans_it() -> None:
    """The decision's heals are exactly what classify + plan_session give (same ids, rows)."""
    events, call_id = crashed()
    policy = HealPolicy()

    decision = await decide(view(events), policy, now=NOW, trigger=HealTrigger.GET_SESSION)

    findings = classify(events, now=NOW)
    expected = plan_session(events, findings, KEY, policy, trigger=HealTrigger.GET_SESSION,
                            healed_at=NOW, seen_events=len(events))
    assert decision.heals is not None and expected is not None
    assert [h.event.model_dump() for h in decision.heals.heals] == [
        h.event.model_dump() for h in expected.heals]
    assert decision.heals.heals[0].plan.call_ids == (call_id,)
    assert decision.superseded == ()


async def test_stored_json_and_adk_events_decide_the_same() -> None:
    """Repair (stored JSON) and the wrapper (ADK events) plan the same heal ids."""
    events, _ = crashed()
    rows: list[dict[str, Any]] = [e.model_dump(mode="json", exclude_none=True) for e in events]

    as_events = await decide(view(events), HealPolicy(), now=NOW, trigger=HealTrigger.REPAIR)
    as_rows = await decide(SessionView(KEY, rows, STORED_JSON, seen_events=len(rows)),
                           HealPolicy(), now=NOW, trigger=HealTrigger.REPAIR)

    assert as_events.heals is not None and as_rows.heals is not None
    assert [h.event_id for h in as_rows.heals.heals] == [h.event_id for h in as_events.heals.heals]


async def test_a_live_tool_run_keeps_the_call_from_being_healed() -> None:
    """The tool-run ledger says the tool still runs: the call is in flight, nothing is planned."""
    events, call_id = crashed()
    runs = Runs([running(call_id)])

    decision = await decide(view(events), HealPolicy(), now=NOW,
                            trigger=HealTrigger.GET_SESSION, tool_runs=runs)

    assert decision.heals is None
    (call,) = decision.findings.calls
    assert call.status is CallStatus.IN_FLIGHT
    assert runs.asked == [{call_id}]


async def test_the_ledger_is_read_only_for_sessions_with_unanswered_calls() -> None:
    """A session whose calls are all answered costs no tool-run read."""
    history = History(start=NOW - 60)
    history.user("weather in Paris?")
    call_id = history.call("get_weather", {"city": "Paris"})
    history.respond((call_id, "get_weather", {"celsius": 21}))
    runs = Runs()

    decision = await decide(view(history.events), HealPolicy(), now=NOW,
                            trigger=HealTrigger.REPAIR, tool_runs=runs)

    assert decision.heals is None and runs.asked == []


async def test_rerun_safe_calls_are_deferred_on_reads_only() -> None:
    """With rerun_safe_calls, a read-only tool's stale call (newest invocation) is left for
    the re-run plugin on get_session; a repair heals it."""
    history = History(start=NOW - 60)
    history.user("weather in Paris?")
    history.call("get_weather", {"city": "Paris"})
    events = history.events
    policy = HealPolicy(rerun_safe_calls=True, tool_effects={"get_weather": ToolEffect.READ_ONLY},
                        stale_after=30, clock_skew=0)

    read = await decide(view(events), policy, now=NOW, trigger=HealTrigger.GET_SESSION)
    repair = await decide(view(events), policy, now=NOW, trigger=HealTrigger.REPAIR)

    assert read.heals is None
    assert read.findings.calls[0].status is CallStatus.IN_FLIGHT
    assert repair.heals is not None and len(repair.heals.heals) == 1


async def test_a_heal_a_late_result_superseded_is_listed_for_taking_back() -> None:
    """A real response stored after our heal: the heal is listed as superseded, nothing new
    is planned."""
    events, call_id = crashed()
    first = await decide(view(events), HealPolicy(), now=NOW, trigger=HealTrigger.GET_SESSION)
    assert first.heals is not None
    (heal,) = first.heals.heals
    healed = apply_heals(events, [(heal.plan.insert_at, heal.event)])
    late = Event(id="late-1", invocation_id=events[1].invocation_id, author="assistant",
                 timestamp=NOW, content=types.Content(role="user", parts=[types.Part(
                     function_response=types.FunctionResponse(
                         id=call_id, name="get_weather", response={"celsius": 21}))]))

    decision = await decide(view([*healed, late]), HealPolicy(), now=NOW + 1,
                            trigger=HealTrigger.GET_SESSION)

    assert [found.heal_event_id for found in decision.superseded] == [heal.event_id]
    assert decision.heals is None


async def test_plan_false_classifies_without_planning() -> None:
    """A scan asks for findings only: the dead call is found, no heal is built."""
    events, _ = crashed()

    decision = await decide(view(events), HealPolicy(), now=NOW, trigger=HealTrigger.REPAIR,
                            plan=False)

    assert decision.findings.needs_healing and decision.heals is None


# ---- the wrapper's question (decide_unless_clean) ----

def answered() -> History:
    """user asks -> get_weather called -> answered -> model replies: a clean session."""
    history = History(start=NOW - 60)
    history.user("weather in Paris?")
    call_id = history.call("get_weather", {"city": "Paris"})
    history.respond((call_id, "get_weather", {"celsius": 21}))
    history.text("21 degrees.")
    return history


async def test_a_clean_session_is_remembered_and_not_decided() -> None:
    """A clean session gives its clean prefix and no decision; read again unchanged, the same
    prefix comes back and the tool-run ledger is never asked."""
    events = answered().events
    runs = Runs()

    first = await decide_unless_clean(view(events), HealPolicy(), known=None, now=NOW,
                                      trigger=HealTrigger.GET_SESSION, tool_runs=runs)
    again = await decide_unless_clean(view(events), HealPolicy(), known=first.clean, now=NOW,
                                      trigger=HealTrigger.GET_SESSION, tool_runs=runs)

    assert first.clean == clean_prefix(events, ADK_EVENTS) and first.decision is None
    assert again.clean is first.clean and again.decision is None
    assert runs.asked == []


async def test_a_session_that_is_not_clean_is_decided_as_decide_decides() -> None:
    """A dead call: no clean prefix, and the decision decide makes."""
    events, _ = crashed()

    checked = await decide_unless_clean(view(events), HealPolicy(), known=None, now=NOW,
                                        trigger=HealTrigger.GET_SESSION)
    decision = await decide(view(events), HealPolicy(), now=NOW,
                            trigger=HealTrigger.GET_SESSION)

    assert checked.clean is None and checked.decision == decision


async def test_an_incoming_call_is_decided_but_the_stored_events_are_remembered() -> None:
    """Stored events clean, an incoming event that calls a tool: the stored events' prefix
    is given for remembering, and the whole is decided."""
    history = answered()
    stored = list(history.events)
    history.call("get_time", {})
    incoming = history.events[-1]
    events = [*stored, incoming]
    whole = SessionView(KEY, events, ADK_EVENTS, seen_events=len(stored), before=len(stored))

    checked = await decide_unless_clean(whole, HealPolicy(), known=None, now=NOW,
                                        trigger=HealTrigger.APPEND)

    assert checked.clean == clean_prefix(stored, ADK_EVENTS)
    assert checked.decision == await decide(whole, HealPolicy(), now=NOW,
                                            trigger=HealTrigger.APPEND)


async def test_a_partial_view_is_always_decided() -> None:
    """A partial read (no seen_events) cannot be recognised again: it is decided, never
    remembered."""
    events = answered().events
    partial = SessionView(KEY, events, ADK_EVENTS, seen_events=None)

    checked = await decide_unless_clean(partial, HealPolicy(), known=None, now=NOW,
                                        trigger=HealTrigger.GET_SESSION)

    assert checked.clean is None
    assert checked.decision is not None and checked.decision.heals is None


# ---- the tool-run correction (with_tool_runs) ----

def ledger_run(call_id: str, state: str, lease_until: float,
               result: dict[str, Any] | None = None) -> ToolRun:
    """A tool run of ``call_id`` as the ledger keeps it."""
    return ToolRun(app_name="app", user_id="u", session_id="s", call_id=call_id, tool_name="f",
                   invocation_id="i", state=RunState(state), host="h", pid=7, attempt=1,
                   started_at=NOW - 50, lease_until=lease_until, result=result)


def test_the_tool_run_ledger_keeps_live_leases_and_ends_dead_runs_at_once() -> None:
    """A live lease keeps a superseded or stale call in flight; an expired lease or a finish
    makes an in-flight call abandoned; calls without records and answered calls are left."""
    h = History(start=NOW - 100)
    h.user("q")
    superseded = h.call("f")
    h.user("again")
    h.respond((h.call("f"), "f"))
    ended, expired, silent, unrecorded = (h.call("f") for _ in range(4))
    findings = classify(h.events, now=NOW)
    assert findings.open_call_ids == (superseded, ended, expired, silent, unrecorded)
    runs = {superseded: ledger_run(superseded, "started", NOW + 5),
            ended: ledger_run(ended, "finished", NOW - 1, {"ok": True}),
            expired: ledger_run(expired, "started", NOW - 1),
            silent: ledger_run(silent, "announced", NOW - 1)}
    fixed = with_tool_runs(findings, runs, now=NOW)
    got = {c.call_id: (c.status, c.outcome, c.recovered, c.lease_holder) for c in fixed.calls}
    assert got[superseded] == (CallStatus.IN_FLIGHT, CallOutcome.UNKNOWN, None, "h/7")
    assert got[ended] == (CallStatus.ABANDONED, CallOutcome.FINISHED_RESULT_LOST, {"ok": True},
                          None)
    assert got[expired] == (CallStatus.ABANDONED, CallOutcome.MAY_HAVE_RUN, None, None)
    assert got[silent] == (CallStatus.ABANDONED, CallOutcome.NOT_STARTED, None, None)
    assert got[unrecorded] == (CallStatus.IN_FLIGHT, CallOutcome.UNKNOWN, None, None)
    assert [c.call_id for c in fixed.dead] == [ended, expired, silent]
    assert with_tool_runs(findings, {}, now=NOW) is findings
    # The clock skew stretches a lease for a reader whose clock runs ahead.
    skewed = with_tool_runs(findings, {expired: runs[expired]}, now=NOW, clock_skew=2)
    assert {c.call_id: c.status for c in skewed.calls}[expired] is CallStatus.IN_FLIGHT


def test_a_live_lease_keeps_its_whole_call_event_in_flight() -> None:
    """Parallel calls: while one still holds its lease, the runner will answer them all in one
    event, so a sibling that finished, failed or has no record is in flight too (that holder
    named), even superseded; once no lease of the event is alive, each is decided by its own."""
    h = History(start=NOW - 100)
    h.user("q")
    slow, done, failed, unrecorded = (str(i) for i in h.calls("f", "f", "f", "f"))
    other = h.call("f")
    h.user("again")
    runs = {slow: ledger_run(slow, "started", NOW + 5),
            done: ledger_run(done, "finished", NOW - 1, {"ok": 1}),
            failed: ledger_run(failed, "failed", NOW - 1),
            other: ledger_run(other, "finished", NOW - 1)}
    findings = classify(h.events, now=NOW)
    assert {c.status for c in findings.calls} == {CallStatus.SUPERSEDED}
    fixed = with_tool_runs(findings, runs, now=NOW)
    got = {c.call_id: (c.status, c.lease_holder) for c in fixed.calls}
    assert got == {slow: (CallStatus.IN_FLIGHT, "h/7"), done: (CallStatus.IN_FLIGHT, "h/7"),
                   failed: (CallStatus.IN_FLIGHT, "h/7"),
                   unrecorded: (CallStatus.IN_FLIGHT, "h/7"),
                   other: (CallStatus.SUPERSEDED, None)}  # another call event: its own record
    assert [c.call_id for c in fixed.dead] == [other]
    later = with_tool_runs(findings, runs, now=NOW + 6)  # the slow call's lease ran out
    outcomes = {c.call_id: (c.status, c.outcome) for c in later.calls}
    assert outcomes[slow] == (CallStatus.SUPERSEDED, CallOutcome.MAY_HAVE_RUN)
    assert outcomes[done] == (CallStatus.SUPERSEDED, CallOutcome.FINISHED_RESULT_LOST)
    assert outcomes[unrecorded] == (CallStatus.SUPERSEDED, CallOutcome.UNKNOWN)


def test_a_heal_answers_with_the_ledger_s_outcome_or_the_recovered_result() -> None:
    """The payload is worded by outcome; a finished run's result is the response, marked."""
    h = History(start=NOW - 100)
    h.user("q")
    lost, started = (str(i) for i in h.calls("charge_card", "charge_card"))
    runs = {lost: ledger_run(lost, "finished", NOW - 1, {"status": "charged"}),
            started: ledger_run(started, "started", NOW - 1)}
    findings = with_tool_runs(classify(h.events, now=NOW), runs, now=NOW)
    (plan,) = plan_heals(h.events, findings, app_name="app", user_id="u", session_id="s")
    event = build_heal_event(plan, HealPolicy(), healed_at=NOW)
    responses = [r.response for r in event.get_function_responses()]
    assert responses[0] == {"status": "charged"}
    assert responses[1] == {"error": LEDGER_ERRORS[CallOutcome.MAY_HAVE_RUN],
                            "outcome": "may_have_run", "safe_to_retry": False}
    marker = (event.custom_metadata or {})["adk_session_heal"]
    assert marker["outcomes"] == ["finished_result_lost", "may_have_run"]
    assert marker["recovered"] == [True, False] and marker["reason"] == "abandoned"


async def test_a_resumable_app_s_wrapper_leaves_an_unsuperseded_dead_call_to_the_resume() -> None:
    """resumable_app: on the wrapper's triggers a stale call is left in flight (ADK's resume
    replays it); repair still heals it, and a call a later turn superseded is healed anyway."""
    interrupted = History(start=NOW - 7200)
    interrupted.user("send 5")
    interrupted.calls(("transfer", {"amount": 5}), ids=["t-1"])
    superseded = History(start=NOW - 7200)
    superseded.user("send 5")
    superseded.calls(("transfer", {"amount": 5}), ids=["t-1"])
    superseded.user("well?")
    policy = HealPolicy(stale_after=60, clock_skew=0, resumable_app=True)

    async def status(history: History, trigger: HealTrigger) -> CallStatus:
        view = SessionView(SessionKey("a", "u", "s"), history.events, ADK_EVENTS,
                           seen_events=len(history.events))
        decision = await decide(view, policy, now=NOW, trigger=trigger)
        (call,) = decision.findings.calls
        assert (decision.heals is None) == (call.status is CallStatus.IN_FLIGHT)
        return call.status

    assert await status(interrupted, HealTrigger.GET_SESSION) is CallStatus.IN_FLIGHT
    assert await status(interrupted, HealTrigger.APPEND) is CallStatus.IN_FLIGHT
    assert await status(interrupted, HealTrigger.REPAIR) is CallStatus.STALE
    assert await status(superseded, HealTrigger.GET_SESSION) is CallStatus.SUPERSEDED


async def test_the_real_system_is_asked_only_about_calls_healed_now() -> None:
    """A call the wrapper leaves to the resume (resumable_app) is not reconciled; repair,
    which heals it, asks its hook once."""
    from adk_session_heal.policy import DoubtfulCall, Reconciliation, settled
    from adk_session_heal.store.reconcile_hooks import HookReconciler

    interrupted = History(start=NOW - 7200)
    interrupted.user("send 5")
    interrupted.calls(("transfer", {"amount": 5}), ids=["t-1"])
    asked: list[str] = []

    async def transfer_made(call: DoubtfulCall) -> Reconciliation:
        asked.append(call.call_id)
        return settled({"status": "sent"})

    policy = HealPolicy(stale_after=60, clock_skew=0, resumable_app=True,
                        reconcile={"transfer": transfer_made})
    view = SessionView(SessionKey("a", "u", "s"), interrupted.events, ADK_EVENTS,
                       seen_events=len(interrupted.events))
    left = await decide(view, policy, now=NOW, trigger=HealTrigger.GET_SESSION,
                        reconciler=HookReconciler(policy))
    assert left.heals is None and asked == []
    healed = await decide(view, policy, now=NOW, trigger=HealTrigger.REPAIR,
                          reconciler=HookReconciler(policy))
    assert asked == ["t-1"] and healed.findings.calls[0].recovered == {"status": "sent"}
