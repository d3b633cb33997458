"""apply_plan: a plan written as it was made, re-checked session by session."""

from __future__ import annotations

import asyncio
import sqlite3
from contextlib import closing
from pathlib import Path

import pytest
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
from adk_session_heal.core.healing import Heal
from adk_session_heal.errors import StoreError
from adk_session_heal.ledger import SqlHealLedger
from adk_session_heal.ops.apply import apply_plan
from adk_session_heal.ops.scan import plan_repair, scan
from adk_session_heal.policy import DeadCall, HealPolicy
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


def _built(heal: Heal) -> bool:
    """Whether the heal's event and record have been built (they are kept once built)."""
    return "data" in vars(heal) and "record" in vars(heal)


async def test_the_next_batch_is_built_while_a_batch_is_written(adk_store: Store) -> None:
    """While one batch is written, the next one's events are built (filling the write's waits
    on the database), never more than one batch ahead; every heal is written as planned."""
    await fill(adk_store, crashed_histories())
    await migrate.upgrade(adk_store.url)
    plan = await plan_repair(adk_store.url, ScanOptions(policy=POLICY), now=NOW, writing=True)
    sessions = list(plan.sessions)
    assert len(sessions) == 3 and not any(_built(h) for s in sessions for h in s.heals)
    seen: list[tuple[bool, ...]] = []

    def on_heal(_record: object) -> None:
        if not seen:  # the first batch has been written
            seen.append(tuple(all(_built(h) for h in s.heals) for s in sessions))

    report = await apply_plan(plan, batch_size=1, on_heal=on_heal)
    assert seen == [(True, True, False)]
    assert report.healed == 3


async def test_a_write_that_fails_mid_run_ends_the_run_with_its_own_error(tmp_path: Path) -> None:
    """A batch whose write fails (its table dropped after the first batch) ends the run with the
    write's own error while the next batch is being built; the first batch stays recorded and
    no task is left running."""
    path = tmp_path / "db.db"
    store = Store("db_sqlite", f"sqlite+aiosqlite:///{path}")
    await fill(store, crashed_histories())
    await migrate.upgrade(store.url)
    plan = await plan_repair(store.url, ScanOptions(policy=POLICY), now=NOW, writing=True)
    assert len(plan.sessions) == 3

    def drop_events(_record: object) -> None:  # after the first batch: the table goes
        with closing(sqlite3.connect(path)) as db:
            db.execute("DROP TABLE events")

    with pytest.raises(StoreError, match="no such table: events"):
        await apply_plan(plan, batch_size=1, on_heal=drop_events)
    assert asyncio.all_tasks() == {asyncio.current_task()}
    ledger = SqlHealLedger.from_url(store.url)
    try:
        assert [r.session_id for r in await ledger.history()] == [plan.sessions[0].key.session_id]
    finally:
        await ledger.close()


async def test_a_payload_that_fails_for_the_next_batch_fails_in_that_batch_s_write(
    adk_store: Store,
) -> None:
    """A payload function that raises for a later batch's call ends the run in that batch's
    write, as without the overlap: the batch already written stays reported and its run
    recorded (so `--undo` can take it back)."""
    await fill(adk_store, crashed_histories())
    await migrate.upgrade(adk_store.url)
    probe = await plan_repair(adk_store.url, ScanOptions(policy=POLICY), now=NOW)
    refused = {call_id for heal in probe.sessions[1].heals for call_id in heal.plan.call_ids}

    def payload(call: DeadCall) -> dict[str, object]:
        if call.call_id in refused:
            raise RuntimeError("no payload for this call")
        return {"error": "did not finish"}

    policy = HealPolicy(stale_after=3600, payload=payload)
    plan = await plan_repair(adk_store.url, ScanOptions(policy=policy), now=NOW, writing=True)
    written: list[str] = []
    with pytest.raises(RuntimeError, match="no payload"):
        await apply_plan(plan, batch_size=1, on_heal=lambda record: written.append(
            record.session_id))
    first = plan.sessions[0].key.session_id
    assert written == [first]
    ledger = SqlHealLedger.from_url(adk_store.url)
    try:
        assert [run.run_id for run in await ledger.runs()] == [plan.run_id]
        assert [r.session_id for r in await ledger.history()] == [first]
    finally:
        await ledger.close()
