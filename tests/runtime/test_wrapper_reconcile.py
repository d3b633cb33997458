"""Tests for the wrapper's heal of a call in doubt settled by the real system through its
reconcile hook (runtime/service.py; a real SQLite session store and ledger)."""

from __future__ import annotations

import time
from typing import Any

import pytest
from stores import APP, USER, Store, adk_store_fixture, close, tool_run_ledger_fixture  # noqa: F401

from adk_session_heal import HealingSessionService
from adk_session_heal.core.event_access import HEAL_METADATA_KEY
from adk_session_heal.core.idempotency import idempotency_key
from adk_session_heal.core.session_key import SessionKey
from adk_session_heal.core.tool_runs import RunState, ToolRun
from adk_session_heal.ledger import SqlToolRunLedger
from adk_session_heal.policy import (
    LEDGER_ERRORS,
    NOT_STARTED_ERROR,
    CallOutcome,
    DoubtfulCall,
    HealPolicy,
    Reconciliation,
    settled,
)
from adk_session_heal.testing import History

SQLITE = pytest.mark.parametrize("adk_store", ["db_sqlite"], indirect=True)


async def _dead_charge(store: Store, call_id: str) -> tuple[str, History]:
    """Stores a session whose charge_card call the next turn superseded; (its id, history)."""
    history = History(start=time.time() - 3600)
    history.user("charge me")
    history.calls(("charge_card", {"amount": 5}), ids=[call_id])
    history.user("well?")  # the next turn: the call is superseded
    service = store.service()
    session = await service.create_session(app_name=APP, user_id=USER)
    for event in history.events:
        await service.append_event(session, event)
    await close(service)
    return session.id, history


async def _healed_answers(store: Store, session_id: str, policy: HealPolicy,
                          tool_runs: SqlToolRunLedger | None = None) -> list[dict[str, Any]]:
    """Reads the session once through the wrapper; the responses its heals hold, in order."""
    healing = HealingSessionService(store.service(), policy, tool_runs=tool_runs)
    try:
        stored = await healing.get_session(app_name=APP, user_id=USER, session_id=session_id)
    finally:
        await healing.close()
    assert stored is not None
    heals = [e for e in stored.events if (e.custom_metadata or {}).get(HEAL_METADATA_KEY)]
    return [dict(r.response or {}) for e in heals for r in e.get_function_responses()]

@SQLITE
@pytest.mark.parametrize(("found", "expected"), [
    ("charged", {"receipt": "r-42"}),
    ("not_charged", {"error": NOT_STARTED_ERROR, "outcome": "not_started",
                     "safe_to_retry": True}),
    ("api_down", {"error": LEDGER_ERRORS[CallOutcome.MAY_HAVE_RUN], "outcome": "may_have_run",
                  "safe_to_retry": False}),
])
async def test_the_wrapper_heals_a_call_in_doubt_with_what_the_hook_settles(
        adk_store: Store, tool_run_ledger: SqlToolRunLedger, found: str,
        expected: dict[str, Any]) -> None:
    """A charge whose run started and died: the hook looks it up by the call's key; the heal
    answers with the real receipt, as never started, or (the API down) as may have run."""
    session_id, history = await _dead_charge(adk_store, "c-9")
    (call_event,) = [e for e in history.events if e.get_function_calls()]
    key = SessionKey(APP, USER, session_id)
    dead_at = time.time() - 3000
    run = ToolRun(app_name=APP, user_id=USER, session_id=session_id, call_id="c-9",
                  tool_name="charge_card", invocation_id=call_event.invocation_id,
                  state=RunState.STARTED, host="dead-host", pid=1, attempt=0,
                  started_at=dead_at, lease_until=dead_at + 30)
    await tool_run_ledger.start(run)
    charged = {idempotency_key(key, call_event.invocation_id, "c-9"): "r-42"}
    asked: list[DoubtfulCall] = []

    async def charge_made(call: DoubtfulCall) -> Reconciliation:
        asked.append(call)
        if found == "api_down":
            raise ConnectionError("payments API down")
        receipt = charged.get(call.idempotency_key) if found == "charged" else None
        return settled({"receipt": receipt}) if receipt else settled(happened=False)

    policy = HealPolicy(clock_skew=0, reconcile={"charge_card": charge_made})
    assert await _healed_answers(adk_store, session_id, policy, tool_run_ledger) == [expected]
    (call,) = asked
    assert (call.call_id, call.tool_name, call.session_id) == ("c-9", "charge_card", session_id)


@SQLITE
async def test_without_a_ledger_a_dead_call_is_still_settled_by_its_hook(
        adk_store: Store) -> None:
    """No tool-run ledger: nothing is known of the run, so the hook is asked; its receipt is
    the heal's answer."""
    session_id, _ = await _dead_charge(adk_store, "c-7")

    async def charge_made(call: DoubtfulCall) -> Reconciliation:
        return settled({"receipt": f"r-{call.call_id}"})

    policy = HealPolicy(reconcile={"charge_card": charge_made})
    assert await _healed_answers(adk_store, session_id, policy) == [{"receipt": "r-c-7"}]


@SQLITE
async def test_a_read_that_takes_back_a_heal_asks_each_hook_once(adk_store: Store) -> None:
    """A read that takes back a heal a late result superseded decides the session twice; the
    charge in doubt in it is asked about once, and healed with the hook's receipt."""
    history = History(start=time.time() - 600)
    history.user("weather?")
    history.calls(("get_weather", {}), ids=["w-1"])
    history.user("next")  # supersedes w-1
    first = len(history.events)
    history.respond(("w-1", "get_weather", {"forecast": "sunny"}))  # its late real result
    history.calls(("charge_card", {"amount": 5}), ids=["c-1"])
    history.user("again?")  # supersedes c-1
    service = adk_store.service()
    session = await service.create_session(app_name=APP, user_id=USER)
    for event in history.events[:first]:
        await service.append_event(session, event)
    healing = HealingSessionService(adk_store.service(), HealPolicy(clock_skew=0))
    healed = await healing.get_session(app_name=APP, user_id=USER, session_id=session.id)
    await healing.close()
    assert healed is not None and len(healed.events) == first + 1  # w-1 healed
    for event in history.events[first:]:
        await service.append_event(healed, event)
    await close(service)
    asked: list[str] = []

    async def charge_made(call: DoubtfulCall) -> Reconciliation:
        asked.append(call.call_id)
        return settled({"receipt": "r-1"})

    answered = await _healed_answers(adk_store, session.id, HealPolicy(
        clock_skew=0, reconcile={"charge_card": charge_made}))
    assert asked == ["c-1"]
    assert answered == [{"receipt": "r-1"}]
