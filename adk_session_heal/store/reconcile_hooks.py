"""Asking the policy's reconcile hooks about calls in doubt, each bounded by a timeout.

A hook asks the real system (a payment API, a ticketing system) what happened:
I/O outside the session store, so it lives beside the store's. :class:`HookReconciler`
is the :class:`~adk_session_heal.core.reconcile.Reconciler` that the wrapper,
``scan``/``repair`` and ``review`` hand the decision, and ``ToolRunLedgerPlugin``
asks before it answers a replayed call. Each call's hook runs at most
``HealPolicy.reconcile_timeout`` seconds; the hooks of one session run
together. A hook may be ``async`` or a plain function, which runs in a worker
thread so that a blocking HTTP client does not hold the event loop (after its
timeout the thread is left to finish; its answer is dropped). A hook that
raises, returns something other than a
:class:`~adk_session_heal.policy.Reconciliation` or runs out of time gives
``UNKNOWN`` (the call stays ``may_have_run``), with one warning line on the
``adk_session_heal.reconcile`` logger naming the error's type (its text and
traceback at ``DEBUG``: an API client's error can quote a URL with a key),
which the command line prints when it is given hooks.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
from collections.abc import Mapping, Sequence
from typing import Any

from ..policy import DoubtfulCall, HealPolicy, Reconciliation, Settled

logger = logging.getLogger("adk_session_heal.reconcile")

_UNKNOWN = Reconciliation(Settled.UNKNOWN)


class HookReconciler:
    """Runs ``policy.reconcile``'s hooks.

    Args:
        policy: The hooks (by tool name) and their timeout.
    """

    def __init__(self, policy: HealPolicy) -> None:
        self.policy = policy
        self._answers: dict[str, Reconciliation] | None = None

    def once(self) -> HookReconciler:
        """A reconciler over the same hooks that asks about each call at most once.

        For one read that decides a session twice (the wrapper, after taking
        back a heal a late result superseded): the second decision gets the
        first one's answers.
        """
        remembering = HookReconciler(self.policy)
        remembering._answers = {}
        return remembering

    async def settle(self, calls: Sequence[DoubtfulCall]) -> Mapping[str, Reconciliation]:
        """Returns each call's answer by its idempotency key (``UNKNOWN`` where its hook failed).

        By key, not by call id: a session may reuse a call id in another
        invocation, and each call is asked about on its own.
        """
        known = self._answers if self._answers is not None else {}
        asking = [call for call in calls if call.idempotency_key not in known]
        answers = await asyncio.gather(*(self._ask(call) for call in asking))
        known.update((call.idempotency_key, answer)
                     for call, answer in zip(asking, answers, strict=True))
        return {call.idempotency_key: known[call.idempotency_key] for call in calls}

    async def _ask(self, call: DoubtfulCall) -> Reconciliation:
        hook = self.policy.reconcile.get(call.tool_name)
        if hook is None:
            return _UNKNOWN
        try:
            answer = await asyncio.wait_for(_answer_of(hook, call), self.policy.reconcile_timeout)
        except TimeoutError:
            logger.warning("adk_session_heal: the reconcile hook of %s#%s took longer than %ss;"
                           " the call may have run", call.tool_name, call.call_id,
                           self.policy.reconcile_timeout)
            return _UNKNOWN
        except Exception as exc:
            # Its type only: the text of an API client's error can quote a URL with a key in it.
            logger.warning("adk_session_heal: the reconcile hook of %s#%s raised %s; the call "
                           "may have run", call.tool_name, call.call_id, type(exc).__name__)
            logger.debug("the reconcile hook's error", exc_info=True)
            return _UNKNOWN
        if not isinstance(answer, Reconciliation):
            logger.warning("adk_session_heal: the reconcile hook of %s#%s returned %s, not a "
                           "Reconciliation (use settled(...)); the call may have run",
                           call.tool_name, call.call_id, type(answer).__name__)
            return _UNKNOWN
        return answer


async def _answer_of(hook: Any, call: DoubtfulCall) -> Any:
    """Runs one hook: awaited when async, in a worker thread when a plain function."""
    if inspect.iscoroutinefunction(hook) or inspect.iscoroutinefunction(type(hook).__call__):
        return await hook(call)
    answer = await asyncio.to_thread(hook, call)
    return await answer if inspect.isawaitable(answer) else answer
