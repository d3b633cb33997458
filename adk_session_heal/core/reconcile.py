"""Calls in doubt settled by the real system: which to ask about, and what an answer changes.

A dead call whose run started and ended without a result (``may_have_run``,
from the tool-run ledger) may have done its work, and so may any dead call
the ledger knows nothing of (``unknown``: no ledger, or no record).
``HealPolicy.reconcile`` holds, per tool, a hook that asks the real system
what happened, by the call's idempotency key
(:mod:`~adk_session_heal.core.idempotency`). This module picks the calls to ask
about (:func:`doubtful_calls`) and applies the answers
(:func:`with_reconciliations`): a call that happened is answered with its real
result, as a finished run's lost result is; one that did not happen is answered
as one that never started. Asking, with its timeout, is the caller's
(:class:`Reconciler`: ``store/reconcile_hooks.py``); nothing here waits or fails.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any, Protocol

from ..policy import CallOutcome, DoubtfulCall, HealPolicy, Reconciliation, Settled
from .findings import HEALABLE, SessionFindings
from .idempotency import idempotency_key
from .session_key import SessionKey

_IN_DOUBT = frozenset({CallOutcome.UNKNOWN, CallOutcome.MAY_HAVE_RUN})
"""The outcomes a hook is asked about: nothing known, or it may have run."""


class Reconciler(Protocol):
    """Asks the policy's hooks about calls in doubt (``store/reconcile_hooks.py``)."""

    async def settle(self, calls: Sequence[DoubtfulCall]) -> Mapping[str, Reconciliation]:
        """Returns each call's answer by its idempotency key (``UNKNOWN`` where a hook failed)."""
        ...


def in_doubt(outcome: CallOutcome, tool_name: str, policy: HealPolicy) -> bool:
    """Whether a hook is asked about a call: its outcome is in doubt and its tool has a hook."""
    return outcome in _IN_DOUBT and tool_name in policy.reconcile


def doubtful_call(key: SessionKey, invocation_id: str, call_id: str,
                  tool_name: str) -> DoubtfulCall:
    """The question a hook gets about one call (with the call's idempotency key)."""
    return DoubtfulCall(key.app_name, key.user_id, key.session_id, call_id, tool_name,
                        idempotency_key(key, invocation_id, call_id))


def doubtful_calls(key: SessionKey, findings: SessionFindings,
                   policy: HealPolicy) -> list[DoubtfulCall]:
    """The dead calls in doubt (``unknown``, ``may_have_run``) whose tool has a reconcile hook."""
    return [doubtful_call(key, call.invocation_id, call.call_id, call.name)
            for call in findings.calls
            if call.call_id and call.status in HEALABLE
            and in_doubt(call.outcome, call.name, policy)]


def settled_outcome(outcome: CallOutcome, answer: Reconciliation | None
                    ) -> tuple[CallOutcome, Mapping[str, Any] | None] | None:
    """What a hook's answer makes of a call in doubt: its new outcome and recovered result.

    ``FINISHED``: ``finished_result_lost`` with the real result (answered
    with it, as a finished run's lost result is); ``DID_NOT_HAPPEN``:
    ``not_started``. ``None``: nothing changes (no answer, ``UNKNOWN``, or
    a call not in doubt). The heal (:func:`with_reconciliations`) and the
    replay guard (``runtime/tool_run_plugin.py``) both read answers here.
    """
    if answer is None or answer.settled is Settled.UNKNOWN or outcome not in _IN_DOUBT:
        return None
    if answer.settled is Settled.FINISHED:
        return CallOutcome.FINISHED_RESULT_LOST, dict(answer.result or {})
    return CallOutcome.NOT_STARTED, None


def with_reconciliations(key: SessionKey, findings: SessionFindings,
                         answers: Mapping[str, Reconciliation]) -> SessionFindings:
    """Returns the findings with each settled call's outcome (the same object if none is).

    Args:
        key: The session.
        findings: Its findings.
        answers: The hooks' answers by idempotency key (:meth:`Reconciler.settle`).
    """
    calls = []
    changed = False
    for call in findings.calls:
        answer = answers.get(idempotency_key(key, call.invocation_id, call.call_id)) if (
            call.call_id and answers) else None
        settled = settled_outcome(call.outcome, answer)
        if settled is None:
            calls.append(call)
            continue
        changed = True
        outcome, recovered = settled
        calls.append(replace(call, outcome=outcome, recovered=recovered))
    if not changed:
        return findings
    return SessionFindings(calls, findings.orphaned_responses, findings.duplicate_responses)
