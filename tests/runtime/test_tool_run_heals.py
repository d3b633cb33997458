"""Heals from the tool-run ledger: a real Runner killed at each point, healed by another process.

The runner (``tool_run_kill.py``, its own process, the ledger plugin on a 2 s
lease) calls ``charge_card`` and is SIGKILLed before the tool starts, during it,
after its finish record, or after its response event. This process then reads
the session through ``HealingSessionService(tool_runs=...)`` (and ``repair``),
with a clock set inside or past the lease, and runs the next turn with a
scripted model to see what it is told.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from google.adk.agents import LlmAgent
from google.adk.events.event import Event
from google.adk.runners import Runner
from google.genai import types
from stores import (  # noqa: F401
    APP,
    USER,
    Store,
    adk_store_fixture,
    close,
    crashed_histories,
    fill,
    tool_run_ledger_fixture,
)
from tool_run_kill import run_until_killed

from adk_session_heal import HealingSessionService, HealPolicy, ScanOptions
from adk_session_heal.core.event_access import HEAL_METADATA_KEY
from adk_session_heal.core.session_key import SessionKey
from adk_session_heal.ledger import SqlToolRunLedger
from adk_session_heal.ops.repair import repair
from adk_session_heal.policy import LEDGER_ERRORS, NOT_STARTED_ERROR, CallOutcome
from adk_session_heal.testing import ScriptedModel

EXPECTED = {
    "before_start": {"error": NOT_STARTED_ERROR, "outcome": "not_started", "safe_to_retry": True},
    "during_tool": {"error": LEDGER_ERRORS[CallOutcome.MAY_HAVE_RUN], "outcome": "may_have_run",
                    "safe_to_retry": False},
    "after_finish": {"status": "charged"},  # the real result, recovered from the ledger
}
"""What the heal answers for each kill point (charge_card: undeclared, so side effects)."""


async def _killed_run(store: Store, kill_at: str, tmp_path: Path) -> str:
    """Runs the runner in its own process until it reaches ``kill_at``, SIGKILLs it."""
    service = store.service()
    session = await service.create_session(app_name=APP, user_id=USER)
    await close(service)
    await run_until_killed(store.url, session.id, kill_at, tmp_path)
    return session.id


def _heals(events: list[Event]) -> list[Event]:
    return [e for e in events if (e.custom_metadata or {}).get(HEAL_METADATA_KEY)]


@pytest.mark.slow
@pytest.mark.parametrize("kill_at", ["before_start", "during_tool", "after_finish",
                                     "after_response"])
async def test_each_kill_point_is_healed_with_what_the_ledger_knows(
        adk_store: Store, tool_run_ledger: SqlToolRunLedger, kill_at: str,
        tmp_path: Path) -> None:
    """Lease alive: no heal however old; lease out (or finished): healed at once, worded by
    outcome, a finished run's result written; after the response event: nothing to heal."""
    session_id = await _killed_run(adk_store, kill_at, tmp_path)
    key = SessionKey(APP, USER, session_id)
    runs = await tool_run_ledger.runs(key)
    lease_until = max(run.lease_until for run in runs.values())

    def reader(now: float, policy: HealPolicy) -> HealingSessionService:
        return HealingSessionService(adk_store.service(), policy, tool_runs=tool_run_ledger,
                                     clock=lambda: now)

    # stale_after=0: by age alone the call would be dead at once; its live lease wins.
    inside = reader(lease_until - 0.5, HealPolicy(stale_after=0, clock_skew=0))
    session = await inside.get_session(app_name=APP, user_id=USER, session_id=session_id)
    await inside.close()
    assert session is not None
    if kill_at in ("before_start", "during_tool"):
        assert _heals(session.events) == []  # the lease is alive: running, never healed
    # No stale_after: by age alone a call of the newest invocation is never dead.
    past = reader(lease_until + 0.5, HealPolicy(clock_skew=0))
    session = await past.get_session(app_name=APP, user_id=USER, session_id=session_id)
    assert session is not None
    heals = _heals(session.events)
    if kill_at == "after_response":
        assert heals == [] and sum(1 for e in session.events if e.get_function_responses()) == 1
        await past.close()
        return
    (heal,) = heals
    (response,) = heal.get_function_responses()
    assert response.response == EXPECTED[kill_at]
    marker = heal.custom_metadata[HEAL_METADATA_KEY]
    assert marker["reason"] == "abandoned" and marker["outcomes"] == [EXPECTED[kill_at].get(
        "outcome", "finished_result_lost")]
    assert marker["recovered"] == [kill_at == "after_finish"]
    # The next turn: the model sees exactly that answer to its call.
    model = ScriptedModel(script=[ScriptedModel.say("Let me check first.")])
    runner = Runner(app_name=APP, agent=LlmAgent(name="worker", model=model, tools=[]),
                    session_service=past)
    async for _ in runner.run_async(user_id=USER, session_id=session_id,
                                    new_message=types.Content(role="user",
                                                              parts=[types.Part(text="ok?")])):
        pass
    await past.close()
    seen = [p.function_response.response for c in model.requests[0].contents
            for p in c.parts or () if p.function_response is not None]
    assert seen == [EXPECTED[kill_at]]


@pytest.mark.slow
async def test_repair_leaves_a_live_lease_alone_and_heals_an_expired_one(
        adk_store: Store, tool_run_ledger: SqlToolRunLedger, tmp_path: Path) -> None:
    """repair reads the store's tool-run ledger: a call superseded by a later turn keeps its
    live lease (not healed); once it expired, repair heals it as may_have_run."""
    session_id = await _killed_run(adk_store, "during_tool", tmp_path)
    service = adk_store.service()
    session = await service.get_session(app_name=APP, user_id=USER, session_id=session_id)
    assert session is not None
    await service.append_event(session, Event(
        invocation_id="inv-later", author="user",
        content=types.Content(role="user", parts=[types.Part(text="hello?")])))
    await close(service)
    (run,) = (await tool_run_ledger.runs(SessionKey(APP, USER, session_id))).values()
    policy = HealPolicy(stale_after=0, clock_skew=0)
    alive = await repair(adk_store.url, ScanOptions(policy=policy),
                         now=run.lease_until - 0.5, ledger=False)
    assert alive.heals == [] and [c.status for c in alive.scan.in_flight_calls] == ["in_flight"]
    assert alive.scan.in_flight_calls[0].lease_holder == f"{run.host}/{run.pid}"
    expired = await repair(adk_store.url, ScanOptions(policy=policy),
                           now=run.lease_until + 0.5, ledger=False)
    assert [h.record.reason for h in expired.heals] == ["superseded"]
    assert [c.run_outcome for c in expired.scan.dead_calls] == ["may_have_run"]
    service = adk_store.service()
    stored = await service.get_session(app_name=APP, user_id=USER, session_id=session_id)
    await close(service)
    assert stored is not None
    responses: list[Any] = [r.response for e in _heals(stored.events)
                            for r in e.get_function_responses()]
    assert responses == [EXPECTED["during_tool"]]


async def test_a_tool_run_ledger_that_cannot_be_read_heals_nothing(adk_store: Store) -> None:
    """No tool-run table (db upgrade never run): the wrapper heals nothing, the session is
    returned as stored; the same wrapper without the ledger heals the dead call."""
    await fill(adk_store, {"dead": crashed_histories()["dead"]})
    unreadable = SqlToolRunLedger.from_url(adk_store.url)
    try:
        blind = HealingSessionService(adk_store.service(), tool_runs=unreadable)
        session = await blind.get_session(app_name=APP, user_id=USER, session_id="dead")
        await blind.close()
    finally:
        await unreadable.close()
    assert session is not None and _heals(session.events) == []
    plain = HealingSessionService(adk_store.service())
    healed = await plain.get_session(app_name=APP, user_id=USER, session_id="dead")
    await plain.close()
    assert healed is not None and len(_heals(healed.events)) == 1
