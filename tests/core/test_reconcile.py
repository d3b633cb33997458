"""Tests for core/reconcile.py: which calls in doubt are asked about, what answers change."""

from __future__ import annotations

from dataclasses import replace

from adk_session_heal.core.findings import CallFinding, CallStatus, SessionFindings
from adk_session_heal.core.idempotency import idempotency_key
from adk_session_heal.core.reconcile import doubtful_calls, with_reconciliations
from adk_session_heal.core.session_key import SessionKey
from adk_session_heal.policy import (
    CallOutcome,
    DoubtfulCall,
    HealPolicy,
    Reconciliation,
    Settled,
    settled,
)

KEY = SessionKey("shop", "customer", "s-1")


async def _hook(call: DoubtfulCall) -> Reconciliation:
    return settled(happened=None)


def _call(call_id: str, name: str = "charge_card", *, status: CallStatus = CallStatus.SUPERSEDED,
          outcome: CallOutcome = CallOutcome.MAY_HAVE_RUN,
          invocation_id: str = "inv-1") -> CallFinding:
    return CallFinding(event_index=1, event_id="e-1", invocation_id=invocation_id,
                       call_id=call_id, name=name, timestamp=1.0, status=status, outcome=outcome)


def _by_key(answers: dict[str, Reconciliation], invocation_id: str = "inv-1"
            ) -> dict[str, Reconciliation]:
    """Answers by call id, as the reconciler returns them: by each call's idempotency key."""
    return {idempotency_key(KEY, invocation_id, call_id): answer
            for call_id, answer in answers.items()}


def test_only_dead_calls_in_doubt_with_a_hook_are_asked_about() -> None:
    """Healable, in doubt (may have run, or nothing known), a hook for its tool: asked, with
    the call's idempotency key."""
    findings = SessionFindings([
        _call("asked"),
        _call("no-record", outcome=CallOutcome.UNKNOWN),
        _call("no-hook", name="send_email"),
        _call("finished", outcome=CallOutcome.FINISHED_RESULT_LOST),
        _call("running", status=CallStatus.IN_FLIGHT),
        _call("pending", status=CallStatus.PENDING),
    ])
    asked = doubtful_calls(KEY, findings, HealPolicy(reconcile={"charge_card": _hook}))
    assert asked == [DoubtfulCall("shop", "customer", "s-1", call_id, "charge_card",
                                  idempotency_key(KEY, "inv-1", call_id))
                     for call_id in ("asked", "no-record")]


def test_answers_become_outcomes_and_unknown_changes_nothing() -> None:
    """Finished: its real result is recovered; did not happen: not started; unknown: kept."""
    findings = SessionFindings([_call("paid"), _call("never"), _call("unsure")])
    settled_findings = with_reconciliations(KEY, findings, _by_key({
        "paid": settled({"receipt": "r-1"}),
        "never": settled(happened=False),
        "unsure": Reconciliation(Settled.UNKNOWN),
    }))
    paid, never, unsure = settled_findings.calls
    assert (paid.outcome, paid.recovered) == (CallOutcome.FINISHED_RESULT_LOST, {"receipt": "r-1"})
    assert never.outcome is CallOutcome.NOT_STARTED and never.recovered is None
    assert unsure == findings.calls[2]
    assert with_reconciliations(KEY, findings,
                                _by_key({"unsure": settled(happened=None)})) is findings


def test_an_answer_for_a_call_no_longer_in_doubt_is_ignored() -> None:
    """A call the ledger shows finished keeps its recorded result whatever a hook says."""
    done = replace(_call("done"), outcome=CallOutcome.FINISHED_RESULT_LOST,
                   recovered={"receipt": "ledger"})
    findings = SessionFindings([done])
    assert with_reconciliations(KEY, findings,
                                _by_key({"done": settled(happened=False)})) is findings


def test_a_reused_call_id_gets_the_answer_about_its_own_invocation() -> None:
    """Two dead calls with one id in two invocations: each is settled by the answer asked
    with its own idempotency key, never by the other's."""
    first, again = _call("c-1", invocation_id="inv-1"), _call("c-1", invocation_id="inv-2")
    asked = doubtful_calls(KEY, SessionFindings([first, again]),
                           HealPolicy(reconcile={"charge_card": _hook}))
    assert len({call.idempotency_key for call in asked}) == 2
    answers = {**_by_key({"c-1": settled({"receipt": "r-1"})}, "inv-1"),
               **_by_key({"c-1": settled(happened=False)}, "inv-2")}
    settled_first, settled_again = with_reconciliations(
        KEY, SessionFindings([first, again]), answers).calls
    assert settled_first.recovered == {"receipt": "r-1"}
    assert settled_again.outcome is CallOutcome.NOT_STARTED
