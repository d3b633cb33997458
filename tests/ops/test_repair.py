"""Repair: the same heals as the wrapper, idempotent, revision-preserving, kill-safe."""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import sqlite3
import subprocess
import sys
import time
from contextlib import closing
from pathlib import Path
from typing import Any

import pytest
from deleting import DELETE_SESSIONS, repair_while_deleting
from paths import ROOT, SUPPORT
from sqlalchemy import select, text
from sqlalchemy.ext.asyncio import create_async_engine
from stores import (
    ADK_EVENTS_TABLE,
    APP,
    USER,
    Store,
    adk_store_fixture,  # noqa: F401  (the adk_store fixture)
    bulk_fill,
    bulk_histories,
    close,
    crashed_histories,
    fill,
    make_store,
    snapshot,
)

from adk_session_heal import ScanOptions, migrate
from adk_session_heal.core.adk_compat import timestamp_to_column
from adk_session_heal.core.event_access import ADK_EVENTS
from adk_session_heal.core.findings import classify
from adk_session_heal.core.heal_record import HealTrigger
from adk_session_heal.core.healing import Heal, build_heal_event, plan_heals
from adk_session_heal.core.session_key import SessionKey
from adk_session_heal.errors import LedgerError, ReadOnlyStoreError
from adk_session_heal.ledger import SqlHealLedger
from adk_session_heal.ops.repair import repair
from adk_session_heal.ops.scan import scan
from adk_session_heal.policy import HealPolicy
from adk_session_heal.store.layouts.adk_sqlite import sqlite_heal_row
from adk_session_heal.store.layouts.sql_event_rows import (
    database_event_row,
    heal_row,
)
from adk_session_heal.testing import History

NOW = 1_700_100_000.0
POLICY = HealPolicy(stale_after=3600)


async def _sessions_table(store: Store) -> Any:
    if store.sqlite_path is not None:
        with closing(sqlite3.connect(store.sqlite_path)) as db, db:
            return sorted(db.execute("SELECT * FROM sessions").fetchall())
    engine = create_async_engine(store.url)
    try:
        async with engine.connect() as conn:
            return sorted(tuple(r) for r in (await conn.execute(text("SELECT * FROM sessions"))))
    finally:
        await engine.dispose()


async def test_repair_heals_once_and_adk_reads_the_result(adk_store: Store) -> None:
    """Repair heals every dead call; a rerun heals 0; ADK reads healed sessions, no dead call."""
    await fill(adk_store, crashed_histories())
    await migrate.upgrade(adk_store.url)
    first = await repair(adk_store.url, ScanOptions(policy=POLICY), now=NOW)
    assert [(h.record.session_id, h.record.call_ids, h.written) for h in first.heals] == [
        ("dead", ("call-1",), True), ("parallel", ("call-2",), True),
        ("stale", ("call-1",), True)]
    second = await repair(adk_store.url, ScanOptions(policy=POLICY), now=NOW + 60)
    assert second.heals == [] and second.healed == 0
    assert not (await scan(adk_store.url, ScanOptions(policy=HealPolicy(stale_after=3600)),
                           now=NOW)).needs_healing
    service = adk_store.service()
    try:
        for session_id in ("dead", "parallel", "stale"):
            session = await service.get_session(app_name=APP, user_id=USER,
                                                session_id=session_id)
            assert session is not None
            assert not classify(session.events, now=NOW, stale_after=3600).dead
            # ADK can keep appending to the healed session (its revision was not bumped).

            more = History(start=NOW)
            more.user("still there?")
            await service.append_event(
                session, more.events[0].model_copy(update={"id": f"after-{session_id}"}))
    finally:
        await close(service)
    ledger = SqlHealLedger.from_url(adk_store.url)
    try:
        recorded = await ledger.history()
    finally:
        await ledger.close()
    assert sorted(r.synthetic_event_id for r in recorded) == sorted(
        h.record.synthetic_event_id for h in first.heals)
    assert {r.trigger.value for r in recorded} == {"repair"}


async def test_repair_of_tied_and_stepped_clocks_heals_once_after_each_call(
    adk_store: Store,
) -> None:
    """Call and next turn tied, 1 µs apart or stepped back: repair heals once, after the call."""
    gaps = {"tie": 0.0, "sub_us": 1e-7, "one_us": 1e-6, "backwards": -3.0}
    histories: dict[str, History] = {}
    for name, gap in gaps.items():
        history = History(start=NOW - 7200 + len(histories) * 10)
        history.user("q")
        history.call("f")
        history.user("next")
        history.events[2].timestamp = history.events[1].timestamp + gap
        histories[name] = history
    await fill(adk_store, histories)
    await migrate.upgrade(adk_store.url)
    first = await repair(adk_store.url, ScanOptions(policy=POLICY), now=NOW)
    assert sorted(h.record.session_id for h in first.heals if h.written) == sorted(gaps)
    for rerun in range(3):
        again = await repair(adk_store.url, ScanOptions(policy=POLICY), now=NOW + 60 * (rerun + 1))
        assert again.heals == []
    service = adk_store.service()
    try:
        for name, history in histories.items():
            session = await service.get_session(app_name=APP, user_id=USER, session_id=name)
            assert session is not None
            ids = [e.id for e in session.events]
            call_id = history.events[1].id
            heal_at, call_at = ids.index(f"{call_id}-heal"), ids.index(call_id)
            assert heal_at > call_at, (name, ids)
            assert session.events[heal_at].timestamp > session.events[call_at].timestamp
    finally:
        await close(service)


async def test_repair_never_touches_sessions_rows(adk_store: Store) -> None:
    """The sessions table (update_time: ADK's revision marker) is identical after repair."""
    await fill(adk_store, crashed_histories())
    before = await _sessions_table(adk_store)
    report = await repair(adk_store.url, ScanOptions(policy=POLICY), now=NOW, ledger=False)
    assert report.healed == 3
    assert await _sessions_table(adk_store) == before


async def test_dry_run_writes_nothing_and_shows_the_rows(adk_store: Store) -> None:
    """--dry-run plans the exact events a real run writes, and the store stays identical."""
    await fill(adk_store, crashed_histories())
    before = await snapshot(adk_store)
    planned = await repair(adk_store.url, ScanOptions(policy=POLICY), now=NOW, dry_run=True)
    assert await snapshot(adk_store) == before
    assert {h.written for h in planned.heals} == {None}
    real = await repair(adk_store.url, ScanOptions(policy=POLICY), now=NOW, ledger=False)
    assert [h.event for h in planned.heals] == [h.event for h in real.heals]


async def test_synthetic_row_is_the_wrappers_row(adk_store: Store) -> None:
    """The stored row equals plan_heals + Heal + the layout's heal-row builder over ADK Events."""
    histories = crashed_histories()
    await fill(adk_store, histories)
    await repair(adk_store.url, ScanOptions(policy=POLICY), now=NOW, ledger=False)
    # What the wrapper would compute from the Events ADK returned before the heal.
    expected_rows = []
    for session_id, history in histories.items():
        findings = classify(history.events, ADK_EVENTS, now=NOW, stale_after=3600)
        for plan in plan_heals(history.events, findings, app_name=APP, user_id=USER,
                               session_id=session_id):
            key = SessionKey(APP, USER, session_id)
            heal = Heal(plan, key, HealTrigger.REPAIR, NOW, POLICY)
            if adk_store.kind == "adk_sqlite":
                expected_rows.append(sqlite_heal_row(key, heal))
            else:  # placed relative to the anchor row, stored as the installed ADK stores it
                anchor_column = timestamp_to_column(plan.anchor_timestamp)
                expected_rows.append(heal_row(key, heal, anchor_column))
    assert len(expected_rows) == 3
    if adk_store.kind == "adk_sqlite":
        assert adk_store.sqlite_path is not None
        with closing(sqlite3.connect(adk_store.sqlite_path)) as db, db:
            stored = db.execute(
                "SELECT id, app_name, user_id, session_id, invocation_id, timestamp, event_data "
                "FROM events WHERE id LIKE '%-heal' ORDER BY id").fetchall()
        assert sorted(stored) == sorted(expected_rows)
        return
    engine = create_async_engine(adk_store.url)
    try:
        async with engine.connect() as conn:
            table = ADK_EVENTS_TABLE
            rows = (await conn.execute(select(table).where(table.c.id.like("%-heal")))).all()
    finally:
        await engine.dispose()
    stored_rows = sorted((dict(r._mapping) for r in rows), key=lambda r: r["session_id"])
    assert stored_rows == sorted(expected_rows, key=lambda r: r["session_id"])


async def test_repair_requires_the_ledger_unless_told(adk_store: Store) -> None:
    """Without the ledger installed, repair refuses (one line) and writes nothing."""
    await fill(adk_store, crashed_histories())
    before = await snapshot(adk_store)
    with pytest.raises(LedgerError, match="db upgrade"):
        await repair(adk_store.url, ScanOptions(policy=POLICY), now=NOW)
    assert await snapshot(adk_store) == before


async def test_repair_refuses_read_only_sqlite(tmp_path: Path) -> None:
    """A SQLite URL with mode=ro is refused for repair before anything is read or written."""
    async for store in make_store("db_sqlite", tmp_path):
        await fill(store, crashed_histories())
        with pytest.raises(ReadOnlyStoreError, match="mode=ro"):
            await repair(store.url + "?mode=ro", now=NOW)


async def test_repair_on_a_read_only_postgres_writes_nothing(tmp_path: Path) -> None:
    """A PostgreSQL database that refuses writes gives ReadOnlyStoreError and stays identical."""
    async for store in make_store("postgres", tmp_path):
        await fill(store, crashed_histories())
        database = store.url.rsplit("/", 1)[1]
        admin = create_async_engine(store.url, isolation_level="AUTOCOMMIT")
        try:
            async with admin.connect() as conn:
                await conn.execute(
                    text(f"ALTER DATABASE {database} SET default_transaction_read_only = on"))
        finally:
            await admin.dispose()
        before = await snapshot(store)
        with pytest.raises(ReadOnlyStoreError, match="refuses writes"):
            await repair(store.url, ScanOptions(policy=POLICY), now=NOW, ledger=False)
        assert await snapshot(store) == before


def _count(store: Store, sql: str) -> int:
    assert store.sqlite_path is not None
    with closing(sqlite3.connect(store.sqlite_path, timeout=10)) as db, db:
        return int(db.execute(sql).fetchone()[0])


async def _server_count(store: Store, sql: str) -> int:
    engine = create_async_engine(store.url)
    try:
        async with engine.connect() as conn:
            return int((await conn.execute(text(sql))).scalar_one())
    finally:
        await engine.dispose()


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["db_sqlite", "adk_sqlite", "postgres", "mariadb"])
async def test_sigkill_during_repair_then_rerun(kind: str, tmp_path: Path) -> None:
    """A repair killed with SIGKILL mid-way is finished by a rerun: no duplicates, nothing lost."""
    sessions = 400
    async for store in make_store(kind, tmp_path):
        await bulk_fill(store, bulk_histories(sessions, 12, 1.0))
        await migrate.upgrade(store.url)
        dead = len((await scan(store.url)).dead_calls)
        assert dead == sessions
        ledger_sql = "SELECT count(*) FROM adk_session_heal_ledger"
        env = {**os.environ, "PYTHONPATH": f"{ROOT}{os.pathsep}{SUPPORT}"}
        child = subprocess.Popen(
            [sys.executable, "-m", "adk_session_heal", "repair", store.url, "--yes",
             "--batch-size", "1", "--json"],
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env)
        deadline = time.monotonic() + 60
        recorded = 0
        while time.monotonic() < deadline and child.poll() is None:
            recorded = (_count(store, ledger_sql) if store.sqlite_path
                        else await _server_count(store, ledger_sql))
            if recorded >= 20:
                break
            await asyncio.sleep(0.02)
        child.send_signal(signal.SIGKILL)
        _, errors = child.communicate()
        assert child.returncode == -signal.SIGKILL, errors.decode()
        heal_sql = "SELECT count(*) FROM events WHERE id LIKE '%-heal%'"
        partial = (_count(store, heal_sql) if store.sqlite_path
                   else await _server_count(store, heal_sql))
        assert 20 <= partial < sessions
        rerun = await repair(store.url)
        assert rerun.healed == sessions - partial
        assert not (await scan(store.url)).needs_healing
        final = (_count(store, heal_sql) if store.sqlite_path
                 else await _server_count(store, heal_sql))
        final_ledger = (_count(store, ledger_sql) if store.sqlite_path
                        else await _server_count(store, ledger_sql))
        assert final == final_ledger == sessions
        again = await repair(store.url)
        assert again.healed == 0 and again.heals == []


@pytest.mark.parametrize("kind", ["db_sqlite", "postgres", "mariadb"])
async def test_batched_insert_reports_exactly_what_it_wrote(kind: str, tmp_path: Path) -> None:
    """The batched insert skips existing keys and flags each row written or not."""
    from adk_session_heal.store.layouts.sql_event_rows import insert_database_events_batch

    async for store in make_store(kind, tmp_path):
        histories = crashed_histories()
        await fill(store, {"dead": histories["dead"]})
        findings = classify(histories["dead"].events, now=NOW)
        (plan,) = plan_heals(histories["dead"].events, findings, app_name=APP, user_id=USER,
                             session_id="dead")
        heal = database_event_row(build_heal_event(plan, POLICY, healed_at=NOW),
                                  app_name=APP, user_id=USER, session_id="dead")
        existing = database_event_row(histories["dead"].events[0], app_name=APP, user_id=USER,
                                      session_id="dead")
        engine = create_async_engine(store.url)
        try:
            async with engine.begin() as conn:
                assert await insert_database_events_batch(conn, [existing, heal]) == [
                    False, True]
            async with engine.begin() as conn:
                assert await insert_database_events_batch(conn, [heal]) == [False]
                assert await insert_database_events_batch(conn, []) == []
        finally:
            await engine.dispose()


async def test_repair_reports_each_heal_once(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Like the wrapper, repair reports every heal it writes: one DEBUG record, one callback."""
    store = Store("db_sqlite", f"sqlite+aiosqlite:///{tmp_path / 'db.db'}")
    await fill(store, crashed_histories())
    await migrate.upgrade(store.url)
    caplog.set_level(logging.DEBUG, logger="adk_session_heal")
    seen: list[Any] = []
    first = await repair(store.url, ScanOptions(policy=POLICY), now=NOW, on_heal=seen.append)
    per_heal = [r for r in caplog.records
                if r.name == "adk_session_heal" and hasattr(r, "adk_session_heal")
                and "trigger" in r.adk_session_heal]
    assert [r.synthetic_event_id for r in seen] == [h.record.synthetic_event_id
                                                    for h in first.heals]
    assert len(per_heal) == len(first.heals) == 3
    assert {r.levelno for r in per_heal} == {logging.DEBUG}
    assert {r.adk_session_heal["trigger"] for r in per_heal} == {"repair"}  # type: ignore[attr-defined]
    await repair(store.url, ScanOptions(policy=POLICY), now=NOW + 60, on_heal=seen.append)
    assert len(seen) == 3


async def test_a_repair_run_logs_one_summary_line_and_each_heal_at_debug(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """One WARNING line per run with counts by reason and outcome; per-heal lines only at DEBUG."""
    async for store in make_store("db_sqlite", tmp_path):
        await fill(store, crashed_histories())
        caplog.set_level(logging.DEBUG, logger="adk_session_heal")
        report = await repair(store.url, ScanOptions(policy=POLICY), now=NOW, ledger=False)
        records = [r for r in caplog.records if r.name == "adk_session_heal"]
        (summary,) = [r for r in records if r.levelno >= logging.INFO]
        assert summary.levelno == logging.WARNING
        assert summary.getMessage() == (
            f"adk_session_heal: repair of {store.url} wrote 3 synthetic event(s) "
            "(by reason: stale=1, superseded=2; by outcome: written=3)")
        per_heal = [r for r in records if r.levelno == logging.DEBUG and "healed" in r.msg]
        assert len(per_heal) == report.healed == 3
        caplog.clear()
        await repair(store.url, ScanOptions(policy=POLICY), now=NOW + 60, ledger=False)
        assert [(r.levelno, r.getMessage()) for r in caplog.records
                if r.name == "adk_session_heal" and r.levelno >= logging.INFO] == [
            (logging.INFO, f"adk_session_heal: repair of {store.url} wrote 0 synthetic event(s) "
                           "(by reason: none; by outcome: none)")]


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["adk_sqlite", "db_sqlite", "postgres", "mariadb"])
async def test_sessions_deleted_during_a_repair_are_skipped_and_reported(
    kind: str, tmp_path: Path
) -> None:
    """The application deletes 300 sessions through ADK's delete_session during a
    3,000-session `repair` (before and while it writes): each is reported as deleted or
    was healed before its deletion, every other one is healed and recorded, no delete
    fails, and the run ends with exit code 3 (done, sessions skipped), not an error."""
    async for store in make_store(kind, tmp_path):
        await bulk_fill(store, bulk_histories(DELETE_SESSIONS, 8, 1.0))
        await migrate.upgrade(store.url)
        service = store.service()
        try:
            _, gone = await repair_while_deleting(store.url, service, tmp_path / "repair.log",
                                                  others=1)  # bulk_fill's seed
        finally:
            await close(service)
        ledger = SqlHealLedger.from_url(store.url)
        try:
            recorded = {r.session_id for r in await ledger.history()}
        finally:
            await ledger.close()
        assert recorded == {f"s{n:07d}" for n in range(DELETE_SESSIONS)} - gone
