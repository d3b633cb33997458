"""apply_plan: a plan written as it was made, re-checked session by session."""

from __future__ import annotations

from google.adk.events.event import Event
from google.genai import types
from stores import (
    APP,
    USER,
    Store,
    adk_store_fixture,  # noqa: F401  (the adk_store fixture)
    close,
    crashed_histories,
    fill,
)

from adk_session_heal import ScanOptions, migrate
from adk_session_heal.ledger import SqlHealLedger
from adk_session_heal.ops.apply import apply_plan
from adk_session_heal.ops.scan import plan_repair, scan
from adk_session_heal.policy import HealPolicy
from adk_session_heal.store import WriteOutcome
from adk_session_heal.store.incremental import scope_of

NOW = 1_700_100_000.0
POLICY = HealPolicy(stale_after=3600)


async def test_apply_skips_sessions_that_moved_since_the_plan(adk_store: Store) -> None:
    """The plan is applied as made: a session answered or deleted since is skipped, reported."""
    await fill(adk_store, crashed_histories())
    await migrate.upgrade(adk_store.url)
    plan = await plan_repair(adk_store.url, ScanOptions(policy=POLICY), now=NOW)
    assert sorted(h.record.session_id for h in plan.heals) == ["dead", "parallel", "stale"]
    service = adk_store.service()
    try:
        session = await service.get_session(app_name=APP, user_id=USER, session_id="dead")
        assert session is not None
        answer = types.Part(function_response=types.FunctionResponse(
            id="call-1", name="get_weather", response={"temperature": 21}))
        await service.append_event(session, Event(
            invocation_id=session.events[-1].invocation_id, author="assistant",
            content=types.Content(role="user", parts=[answer])))
        await service.delete_session(app_name=APP, user_id=USER, session_id="parallel")
    finally:
        await close(service)

    report = await apply_plan(plan)

    outcomes = {h.record.session_id: h.outcome for h in report.heals}
    assert outcomes == {"dead": WriteOutcome.CHANGED, "parallel": WriteOutcome.GONE,
                        "stale": WriteOutcome.WRITTEN}
    assert (report.healed, report.skipped) == (1, 2)
    ledger = SqlHealLedger.from_url(adk_store.url)
    try:
        assert [r.session_id for r in await ledger.history()] == ["stale"]
    finally:
        await ledger.close()
    assert report.to_json()["skipped"] == 2
    assert not (await scan(adk_store.url, ScanOptions(policy=HealPolicy(stale_after=3600)),
                           now=NOW)).needs_healing


async def test_an_incremental_plan_records_its_run_and_its_state_through_one_ledger(
    adk_store: Store,
) -> None:
    """A run that heals records itself and the state; one that heals nothing, the state only."""
    await fill(adk_store, crashed_histories())
    await migrate.upgrade(adk_store.url)
    options = ScanOptions(policy=POLICY, incremental=True)
    first = await apply_plan(await plan_repair(adk_store.url, options, now=NOW, writing=True))
    second = await apply_plan(await plan_repair(adk_store.url, options, now=NOW + 60,
                                                writing=True))
    assert (first.healed, second.healed) == (3, 0)
    assert first.run_id is not None and second.run_id is None
    ledger = SqlHealLedger.from_url(adk_store.url)
    try:
        assert [run.run_id for run in await ledger.runs()] == [first.run_id]
        assert await ledger.watermark(scope_of(options.where)) is not None
    finally:
        await ledger.close()
    assert second.scan.sessions_scanned < first.scan.sessions_scanned  # it read from the state
