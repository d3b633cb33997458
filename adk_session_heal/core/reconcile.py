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
(:class:`Reconciler`: ``runtime/reconcile.py``); nothing here waits or fails.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Protocol

from ..policy import CallOutcome, DoubtfulCall, HealPolicy, Reconciliation, Settled
from .findings import HEALABLE, SessionFindings
from .idempotency import idempotency_key
from .session_key import SessionKey

_IN_DOUBT = frozenset({CallOutcome.UNKNOWN, CallOutcome.MAY_HAVE_RUN})
"""The outcomes a hook is asked about: nothing known, or it may have run."""


class Reconciler(Protocol):
    """Asks the policy's hooks about calls in doubt (``runtime/reconcile.py``)."""

    async def settle(self, calls: Sequence[DoubtfulCall]) -> Mapping[str, Reconciliation]:
        """Returns each call's answer by call id (``UNKNOWN`` where a hook failed)."""
        ...


def doubtful_calls(key: SessionKey, findings: SessionFindings,
                   policy: HealPolicy) -> list[DoubtfulCall]:
    """The dead calls in doubt (``unknown``, ``may_have_run``) whose tool has a reconcile hook."""
    return [
        DoubtfulCall(key.app_name, key.user_id, key.session_id, call.call_id, call.name,
                     idempotency_key(key, call.invocation_id, call.call_id))
        for call in findings.calls
        if call.call_id and call.status in HEALABLE and call.outcome in _IN_DOUBT
        and call.name in policy.reconcile
    ]


def with_reconciliations(findings: SessionFindings,
                         answers: Mapping[str, Reconciliation]) -> SessionFindings:
    """Returns the findings with each settled call's outcome (the same object if none is).

    ``FINISHED``: ``finished_result_lost`` with the real result (the heal
    answers with it); ``DID_NOT_HAPPEN``: ``not_started``; ``UNKNOWN``: as it was.
    """
    calls = []
    changed = False
    for call in findings.calls:
        answer = answers.get(call.call_id or "")
        if (answer is None or answer.settled is Settled.UNKNOWN
                or call.outcome not in _IN_DOUBT):
            calls.append(call)
            continue
        changed = True
        if answer.settled is Settled.FINISHED:
            calls.append(replace(call, outcome=CallOutcome.FINISHED_RESULT_LOST,
                                 recovered=dict(answer.result or {})))
        else:
            calls.append(replace(call, outcome=CallOutcome.NOT_STARTED))
    if not changed:
        return findings
    return SessionFindings(calls, findings.orphaned_responses, findings.duplicate_responses)
