"""Tests for store/reconcile_hooks.py: reconcile hooks asked about calls in doubt, each within
its timeout."""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

import pytest

from adk_session_heal.policy import DoubtfulCall, HealPolicy, Reconciliation, Settled, settled
from adk_session_heal.store.reconcile_hooks import HookReconciler

APP, USER = "app", "user"

CALL = DoubtfulCall(APP, USER, "s-1", "c-1", "charge_card", "k" * 40)


async def _answer(hook: Any, timeout: float = 5.0) -> Reconciliation:
    policy = HealPolicy(reconcile={"charge_card": hook}, reconcile_timeout=timeout)
    return (await HookReconciler(policy).settle([CALL]))[CALL.idempotency_key]


async def test_a_hook_s_answer_is_returned_by_the_call_s_key() -> None:
    """What the hook settles is what the reconciler returns, for that call."""
    async def found(call: DoubtfulCall) -> Reconciliation:
        return settled({"receipt": call.idempotency_key[:4]})

    async def gone(call: DoubtfulCall) -> Reconciliation:
        return settled(happened=False)

    assert await _answer(found) == Reconciliation(Settled.FINISHED, {"receipt": "kkkk"})
    assert await _answer(gone) == Reconciliation(Settled.DID_NOT_HAPPEN)


@pytest.mark.parametrize("failure", ["raises", "too_slow", "wrong_type"])
async def test_a_hook_that_fails_leaves_the_call_in_doubt(
        failure: str, caplog: pytest.LogCaptureFixture) -> None:
    """A hook that raises, outlasts its timeout or returns something else: unknown, logged in
    one warning that never quotes the error's text (it may hold a key)."""
    async def hook(call: DoubtfulCall) -> Any:
        if failure == "raises":
            raise ConnectionError("down: https://pay.example/v1/charges?api_key=sk_live_42")
        if failure == "too_slow":
            await asyncio.sleep(10)
        return {"receipt": "r-1"}

    started = time.monotonic()
    with caplog.at_level(logging.WARNING, logger="adk_session_heal"):
        answer = await _answer(hook, timeout=0.2)
    assert answer == Reconciliation(Settled.UNKNOWN)
    assert time.monotonic() - started < 5
    assert "charge_card#c-1" in caplog.text and "may have run" in caplog.text
    assert "sk_live_42" not in caplog.text


def test_the_policy_refuses_a_timeout_that_is_not_positive() -> None:
    """reconcile_timeout=0 would settle nothing: refused when the policy is made."""
    with pytest.raises(ValueError, match="reconcile_timeout"):
        HealPolicy(reconcile_timeout=0)


async def test_a_plain_function_hook_runs_in_a_thread_within_its_timeout() -> None:
    """A plain def hook (a blocking HTTP client, say) is answered like an async one, off the
    event loop; one that blocks past its timeout gives unknown while the loop goes on."""
    def found(call: DoubtfulCall) -> Reconciliation:
        return settled({"receipt": call.call_id})

    def blocking(call: DoubtfulCall) -> Reconciliation:
        time.sleep(1.0)
        return settled({"receipt": "late"})

    assert await _answer(found) == Reconciliation(Settled.FINISHED, {"receipt": "c-1"})
    ticks = 0

    async def ticking() -> None:
        nonlocal ticks
        while True:
            await asyncio.sleep(0.01)
            ticks += 1

    ticker = asyncio.create_task(ticking())
    assert await _answer(blocking, timeout=0.3) == Reconciliation(Settled.UNKNOWN)
    ticker.cancel()
    assert ticks > 5  # the loop ran while the hook blocked its thread
