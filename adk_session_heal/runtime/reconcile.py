"""Asking the policy's reconcile hooks about calls in doubt, each bounded by a timeout.

:class:`HookReconciler` is the :class:`~adk_session_heal.core.reconcile.Reconciler`
the wrapper hands the decision, and ``ToolRunLedgerPlugin`` asks before it
answers a replayed call. Each call's hook runs at most
``HealPolicy.reconcile_timeout`` seconds; the hooks of one session run
together. A hook that raises, returns something other than a
:class:`~adk_session_heal.policy.Reconciliation` or runs out of time gives
``UNKNOWN`` (the call stays ``may_have_run``), with one log line.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping, Sequence

from ..policy import DoubtfulCall, HealPolicy, Reconciliation, Settled

logger = logging.getLogger("adk_session_heal")

_UNKNOWN = Reconciliation(Settled.UNKNOWN)


class HookReconciler:
    """Runs ``policy.reconcile``'s hooks.

    Args:
        policy: The hooks (by tool name) and their timeout.
    """

    def __init__(self, policy: HealPolicy) -> None:
        self.policy = policy

    async def settle(self, calls: Sequence[DoubtfulCall]) -> Mapping[str, Reconciliation]:
        """Returns each call's answer by call id (``UNKNOWN`` where its hook failed)."""
        answers = await asyncio.gather(*(self._ask(call) for call in calls))
        return {call.call_id: answer for call, answer in zip(calls, answers, strict=True)}

    async def _ask(self, call: DoubtfulCall) -> Reconciliation:
        hook = self.policy.reconcile.get(call.tool_name)
        if hook is None:
            return _UNKNOWN
        try:
            answer = await asyncio.wait_for(hook(call), self.policy.reconcile_timeout)
        except TimeoutError:
            logger.warning("adk_session_heal: the reconcile hook of %s#%s took longer than %ss;"
                           " the call may have run", call.tool_name, call.call_id,
                           self.policy.reconcile_timeout)
            return _UNKNOWN
        except Exception:
            logger.exception("adk_session_heal: the reconcile hook of %s#%s raised; the call "
                             "may have run", call.tool_name, call.call_id)
            return _UNKNOWN
        if not isinstance(answer, Reconciliation):
            logger.warning("adk_session_heal: the reconcile hook of %s#%s returned %s, not a "
                           "Reconciliation (use settled(...)); the call may have run",
                           call.tool_name, call.call_id, type(answer).__name__)
            return _UNKNOWN
        return answer
