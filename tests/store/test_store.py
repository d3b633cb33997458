"""Tests for adk_session_heal.store: one adapter (one writer) per store layout."""

from __future__ import annotations

import asyncio
import os
import sqlite3
import subprocess
import sys
import time
import uuid
from collections.abc import Awaitable, Callable
from contextlib import closing
from pathlib import Path
from typing import Any

import pytest
from google.adk.events.event import Event
from google.adk.sessions import (
    BaseSessionService,
    DatabaseSessionService,
    InMemorySessionService,
    Session,
)
from google.adk.sessions.base_session_service import GetSessionConfig, ListSessionsResponse
from google.adk.sessions.sqlite_session_service import SqliteSessionService
from google.genai import types
from paths import CHILDREN, SUPPORT
from servers import SERVER_BASE_URLS, temporary_database
from service_histories import APP, USER, crashed_history, store_crashed, synthetic
from sqlalchemy import text
from sqlalchemy.ext.asyncio import create_async_engine
from stores import (
    Store,
    adk_store_fixture,  # noqa: F401  (the adk_store fixture)
    crashed_histories,
    fill,
)

from adk_session_heal import ScanOptions, migrate
from adk_session_heal.core.event_access import HEAL_METADATA_KEY
from adk_session_heal.errors import UnsupportedStoreError
from adk_session_heal.ops.apply import apply_plan
from adk_session_heal.ops.repair import repair
from adk_session_heal.ops.scan import plan_repair, scan
from adk_session_heal.policy import HealPolicy
from adk_session_heal.runtime.service import HealingSessionService
from adk_session_heal.store import Layout, SessionFilter, WriteOutcome, store_for_service
from adk_session_heal.testing import History


class OpaqueSessionService(BaseSessionService):
    """A session service the wrapper does not know (as Vertex AI's would be).

    It keeps its sessions in an InMemorySessionService it does not expose, so
    the only way to write to it is its public append_event.
    """

    def __init__(self) -> None:
        self._store = InMemorySessionService()

    async def create_session(self, **kwargs: Any) -> Session:
        return await self._store.create_session(**kwargs)

    async def get_session(
        self, *, app_name: str, user_id: str, session_id: str,
        config: GetSessionConfig | None = None,
    ) -> Session | None:
        return await self._store.get_session(
            app_name=app_name, user_id=user_id, session_id=session_id, config=config)

    async def list_sessions(self, *, app_name: str, user_id: str | None = None
                            ) -> ListSessionsResponse:
        return await self._store.list_sessions(app_name=app_name, user_id=user_id)

    async def delete_session(self, *, app_name: str, user_id: str, session_id: str) -> None:
        await self._store.delete_session(app_name=app_name, user_id=user_id,
                                         session_id=session_id)

    async def append_event(self, session: Session, event: Event) -> Event:
        return await self._store.append_event(session, event)


async def test_writer_is_chosen_by_service_kind(tmp_path: Path) -> None:
    """ADK's own stores get revision-safe writers; anything else goes through append."""
    database = DatabaseSessionService(f"sqlite+aiosqlite:///{tmp_path}/d.db")
    await database.prepare_tables()
    session = Session(id="s", app_name=APP, user_id=USER)

    def layout(service: BaseSessionService) -> Layout:
        return store_for_service(service, session).layout

    assert layout(database) is Layout.DATABASE
    assert layout(SqliteSessionService(str(tmp_path / "s.db"))) is Layout.ADK_SQLITE
    assert layout(InMemorySessionService()) is Layout.IN_MEMORY
    assert layout(OpaqueSessionService()) is Layout.APPEND
    assert store_for_service(OpaqueSessionService(), session).bumps_revision
    assert not store_for_service(database, session).bumps_revision
    await database.close()


async def test_a_store_built_over_a_service_keeps_no_ledger_of_its_own(tmp_path: Path) -> None:
    """Only a store opened by URL opens a ledger: over a service (the wrapper's), there is no
    tool-run ledger to read and asking for the heal ledger is one clear refusal."""
    database = DatabaseSessionService(f"sqlite+aiosqlite:///{tmp_path}/d.db")
    await database.prepare_tables()
    session = Session(id="s", app_name=APP, user_id=USER)
    try:
        for service in (database, SqliteSessionService(str(tmp_path / "s.db")),
                        InMemorySessionService(), OpaqueSessionService()):
            store = store_for_service(service, session)
            async with store.tool_runs() as runs:
                assert runs is None, store
            with pytest.raises(UnsupportedStoreError, match="open the store by its URL"):
                store.heal_ledger()
    finally:
        await database.close()


class SealingSessionService(DatabaseSessionService):
    """A subclass that changes what it stores (as an encrypting store does): a seal per event."""

    async def append_event(self, session: Session, event: Event) -> Event:
        sealed = dict(event.custom_metadata or {}, sealed_by="subclass")
        return await super().append_event(
            session, event.model_copy(update={"custom_metadata": sealed}))


class ConfiguredSessionService(DatabaseSessionService):
    """A subclass that only configures ADK's service: it stores rows exactly as ADK does."""

    def __init__(self, path: Path) -> None:
        super().__init__(f"sqlite+aiosqlite:///{path}")


async def test_a_subclass_that_changes_storage_is_written_through_its_own_api(
    tmp_path: Path,
) -> None:
    """Only ADK's own classes (or subclasses overriding nothing but __init__) get direct SQL."""
    session = Session(id="s", app_name=APP, user_id=USER)
    sealing = SealingSessionService(f"sqlite+aiosqlite:///{tmp_path}/sealed.db")
    configured = ConfiguredSessionService(tmp_path / "configured.db")
    try:
        await configured.prepare_tables()
        assert store_for_service(sealing, session).layout is Layout.APPEND
        assert store_for_service(configured, session).layout is Layout.DATABASE

        history = History(start=time.time() - 3600)
        history.user("weather?")
        history.call("get_weather")
        history.user("hello?")
        crashed = await store_crashed(sealing, history)
        service = HealingSessionService(sealing, HealPolicy(quiet_after=5))
        healed = await service.get_session(app_name=APP, user_id=USER, session_id=crashed.id)
        assert healed is not None
        (heal,) = synthetic(healed.events)
        assert heal.custom_metadata is not None
        assert heal.custom_metadata["sealed_by"] == "subclass"  # its append_event stored it
        engine = create_async_engine(f"sqlite+aiosqlite:///{tmp_path}/sealed.db")
        try:
            async with engine.connect() as conn:
                raw = (await conn.execute(text(
                    "SELECT event_data FROM events WHERE id = :id"), {"id": heal.id})).scalar_one()
        finally:
            await engine.dispose()
        assert "sealed_by" in str(raw)
    finally:
        await sealing.close()
        await configured.close()


async def test_unknown_service_heals_on_get_only_when_quiet() -> None:
    """Through append_event a heal bumps the revision, so get_session waits for quiet."""
    inner = OpaqueSessionService()
    history = History(start=time.time() - 30)
    history.user("weather?")
    history.call("get_weather")
    history.user("hello?")
    session = await store_crashed(inner, history)

    busy = HealingSessionService(inner, HealPolicy(quiet_after=600))
    loaded = await busy.get_session(app_name=APP, user_id=USER, session_id=session.id)
    assert loaded is not None and synthetic(loaded.events) == []

    quiet = HealingSessionService(inner, HealPolicy(quiet_after=5, clock_skew=0))  # one clock
    healed = await quiet.get_session(app_name=APP, user_id=USER, session_id=session.id)
    assert healed is not None and len(synthetic(healed.events)) == 1
    stored = await inner.get_session(app_name=APP, user_id=USER, session_id=session.id)
    assert stored is not None and len(synthetic(stored.events)) == 1
    again = await quiet.get_session(app_name=APP, user_id=USER, session_id=session.id)
    assert again is not None and len(synthetic(again.events)) == 1


async def test_unknown_service_heals_at_once_on_a_new_invocation() -> None:
    """On the append path the heal goes through the caller's own session object."""
    inner = OpaqueSessionService()
    history = History(start=time.time() - 30)
    history.user("weather?")
    history.call("get_weather")
    session = await store_crashed(inner, history)
    service = HealingSessionService(inner, HealPolicy(quiet_after=600))
    loaded = await service.get_session(app_name=APP, user_id=USER, session_id=session.id)
    assert loaded is not None

    message = Event(invocation_id="inv-next", author="user",
                    content=types.Content(role="user", parts=[types.Part(text="hello?")]))
    await service.append_event(loaded, message)

    stored = await inner.get_session(app_name=APP, user_id=USER, session_id=session.id)
    assert stored is not None
    assert [e.id for e in stored.events] == ["e-0001", "e-0002", "e-0002-heal", message.id]
    (heal,) = synthetic(stored.events)
    assert stored.events[1].timestamp < heal.timestamp < message.timestamp


async def _heal_and_ledger_rows(store: Store) -> tuple[int, int]:
    heals = "SELECT count(*) FROM events WHERE id LIKE '%-heal%'"
    recorded = "SELECT count(*) FROM adk_session_heal_ledger"
    if store.sqlite_path is not None:
        with closing(sqlite3.connect(store.sqlite_path)) as db, db:
            return db.execute(heals).fetchone()[0], db.execute(recorded).fetchone()[0]
    engine = create_async_engine(store.url)
    try:
        async with engine.connect() as conn:
            return ((await conn.execute(text(heals))).scalar_one(),
                    (await conn.execute(text(recorded))).scalar_one())
    finally:
        await engine.dispose()


@pytest.mark.slow
@pytest.mark.parametrize("path", ["wrapper", "repair"])
async def test_a_kill_between_heal_and_ledger_rows_leaves_both_or_neither(
    adk_store: Store, path: str
) -> None:
    """Heal row and ledger row commit in one transaction: a kill between them leaves neither."""
    await fill(adk_store, {"dead": crashed_histories()["dead"]})
    await migrate.upgrade(adk_store.url)
    command = [sys.executable, str(CHILDREN / "kill_between.py"), path,
               adk_store.kind, adk_store.url, "dead"]
    env = {**os.environ, "PYTHONPATH": str(SUPPORT)}
    killed = subprocess.run([*command, "--kill"], env=env, capture_output=True, timeout=120)
    assert killed.returncode == 9, killed.stderr.decode()
    assert await _heal_and_ledger_rows(adk_store) == (0, 0)
    finished = subprocess.run(command, env=env, capture_output=True, timeout=120)
    assert finished.returncode == 0, finished.stderr.decode()
    assert await _heal_and_ledger_rows(adk_store) == (1, 1)


def _between_recheck_and_insert(monkeypatch: pytest.MonkeyPatch,
                                act: Callable[[], Awaitable[None]]) -> None:
    """Runs ``act`` once inside the next SQL write transaction, after its re-count.

    That is the instant a concurrent writer (another healer, the application
    deleting a session) lands between the write's re-check and its inserts.
    """
    from adk_session_heal.store.layouts import sql_tables

    real = sql_tables.recheck
    fired = False

    async def recheck(conn: Any, batch: Any) -> Any:
        nonlocal fired
        found = await real(conn, batch)
        if not fired:
            fired = True
            await act()
        return found

    monkeypatch.setattr(sql_tables, "recheck", recheck)


@pytest.mark.parametrize("kind", ["postgres", "mariadb"])
async def test_a_heal_another_healer_stores_mid_write_is_read_back_as_stored(
    kind: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The loser of an insert race returns the winner's row: on MariaDB a plain read in the
    write transaction sees its snapshot, taken before the winner committed."""
    async with temporary_database(kind) as url:
        inner, other = DatabaseSessionService(url), DatabaseSessionService(url)
        winner = HealingSessionService(other, clock=lambda: 1_000_000.0)
        try:
            session = await store_crashed(inner, crashed_history())

            async def heal() -> None:
                await winner.get_session(app_name=APP, user_id=USER, session_id=session.id)

            _between_recheck_and_insert(monkeypatch, heal)
            healed = await HealingSessionService(inner).get_session(
                app_name=APP, user_id=USER, session_id=session.id)
            assert healed is not None
            (heal_event,) = synthetic(healed.events)
            assert heal_event.custom_metadata is not None
            assert heal_event.custom_metadata[HEAL_METADATA_KEY]["healed_at"] == 1_000_000.0
        finally:
            await inner.close()
            await other.close()


async def _until_done_or_waiting(task: asyncio.Task[None], url: str) -> None:
    """Waits until ``task`` is done or a connection to ``url``'s database waits for a lock."""
    engine = create_async_engine(url)
    waiting = ("SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
               "AND wait_event_type = 'Lock'")
    try:
        while not task.done():
            if url.startswith("postgresql"):
                async with engine.connect() as conn:
                    if (await conn.execute(text(waiting))).scalar_one():
                        return
            await asyncio.sleep(0.01)
    finally:
        await engine.dispose()


@pytest.mark.parametrize(("kind", "deleted"), [("postgres", WriteOutcome.WRITTEN),
                                               ("mariadb", WriteOutcome.GONE)])
async def test_a_session_deleted_inside_the_write_transaction_costs_only_its_own_heal(
    kind: str, deleted: WriteOutcome, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The application deletes a planned session (ADK's delete_session) after the write's
    re-count: the rest of the batch is written, and the delete succeeds. On PostgreSQL
    the write holds the sessions, so the delete waits for it (then takes the heal with
    the session); on MariaDB the delete goes first and that session's heal is skipped
    as gone, its row refused by the foreign key without undoing the others."""
    async with temporary_database(kind) as url:
        await fill(Store(kind, url), {sid: crashed_histories()["dead"] for sid in "abc"})
        plan = await plan_repair(url, ScanOptions(policy=HealPolicy()), writing=True, ledger=False)
        app = DatabaseSessionService(url)
        deleting: list[asyncio.Task[None]] = []

        async def delete_b() -> None:
            deleting.append(asyncio.create_task(
                app.delete_session(app_name=APP, user_id=USER, session_id="b")))
            await _until_done_or_waiting(deleting[0], url)

        _between_recheck_and_insert(monkeypatch, delete_b)
        try:
            report = await apply_plan(plan, ledger=False)
            await deleting[0]
        finally:
            await app.close()
        assert {h.record.session_id: h.outcome for h in report.heals} == {
            "a": WriteOutcome.WRITTEN, "b": deleted, "c": WriteOutcome.WRITTEN}
        after = await scan(url, ScanOptions(policy=HealPolicy(stale_after=None)))
        assert (after.sessions_scanned, after.needs_healing) == (2, False)


@pytest.mark.postgres
async def test_a_write_that_loses_a_deadlock_runs_again(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A write the database picks as a deadlock's victim is rolled back and run again
    whole: the batch is written, and the other transaction goes on."""
    async with temporary_database("postgres") as url:
        await fill(Store("postgres", url), {sid: crashed_histories()["dead"] for sid in "ax"})
        plan = await plan_repair(url, ScanOptions(policy=HealPolicy(),
                                                  where=SessionFilter(session_id="a")))
        other = create_async_engine(url)
        rechecks = 0
        finishing: list[asyncio.Task[None]] = []

        async def lock_a_then_commit(conn: Any) -> None:
            try:
                await conn.execute(text(
                    "SELECT 1 FROM sessions WHERE id = 'a' FOR UPDATE"))  # waits for the write
                await conn.commit()
            finally:
                await conn.close()

        async def deadlock(ours: Any) -> None:
            # The other transaction holds x and then waits for a (the write holds it);
            # the write then waits for x. Its shorter deadlock_timeout makes it the victim.
            conn = await other.connect()
            await conn.execute(text("SET LOCAL deadlock_timeout = '10s'"))
            await conn.execute(text("SELECT 1 FROM sessions WHERE id = 'x' FOR UPDATE"))
            finishing.append(asyncio.create_task(lock_a_then_commit(conn)))
            probe = create_async_engine(url)
            try:
                while True:
                    async with probe.connect() as watch:
                        if (await watch.execute(text(
                                "SELECT count(*) FROM pg_stat_activity WHERE datname = "
                                "current_database() AND wait_event_type = 'Lock'"))).scalar_one():
                            break
                    await asyncio.sleep(0.01)
            finally:
                await probe.dispose()
            await ours.execute(text("SET LOCAL deadlock_timeout = '50ms'"))
            await ours.execute(text("SELECT 1 FROM sessions WHERE id = 'x' FOR KEY SHARE"))

        from adk_session_heal.store.layouts import sql_tables

        real = sql_tables.recheck

        async def recheck(conn: Any, batch: Any) -> Any:
            nonlocal rechecks
            rechecks += 1
            if rechecks == 1:
                await deadlock(conn)
            return await real(conn, batch)

        monkeypatch.setattr(sql_tables, "recheck", recheck)
        try:
            report = await apply_plan(plan, ledger=False)
            await finishing[0]
        finally:
            await other.dispose()
        assert rechecks == 2
        assert [h.outcome for h in report.heals] == [WriteOutcome.WRITTEN]


@pytest.mark.postgres
async def test_a_role_that_may_not_lock_sessions_still_repairs(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """PostgreSQL row locks need the UPDATE privilege: a repair role that has every other
    right but not that one on `sessions` writes without holding the sessions, and a
    session deleted under its insert fails the transaction once, then is skipped as gone."""
    role = f"heal_limited_{uuid.uuid4().hex[:8]}"
    admin = create_async_engine(f"{SERVER_BASE_URLS['postgres']}/postgres",
                                isolation_level="AUTOCOMMIT")
    try:
        async with temporary_database("postgres") as url:
            await fill(Store("postgres", url), crashed_histories())
            await migrate.upgrade(url)
            owner = create_async_engine(url, isolation_level="AUTOCOMMIT")
            try:
                async with owner.connect() as conn:
                    await conn.execute(text(f"CREATE ROLE {role} LOGIN"))
                    await conn.execute(text(f"GRANT ALL ON ALL TABLES IN SCHEMA public TO {role}"))
                    await conn.execute(text(
                        f"GRANT ALL ON ALL SEQUENCES IN SCHEMA public TO {role}"))
                    await conn.execute(text(f"REVOKE UPDATE ON sessions FROM {role}"))
            finally:
                await owner.dispose()
            app = DatabaseSessionService(url)

            async def delete() -> None:
                await app.delete_session(app_name=APP, user_id=USER, session_id="parallel")

            _between_recheck_and_insert(monkeypatch, delete)
            limited = url.replace("://postgres@", f"://{role}@")
            try:
                report = await repair(limited, ScanOptions(policy=HealPolicy(stale_after=3600)))
            finally:
                await app.close()
            assert {h.record.session_id: h.outcome for h in report.heals} == {
                "dead": WriteOutcome.WRITTEN, "parallel": WriteOutcome.GONE,
                "stale": WriteOutcome.WRITTEN}
    finally:
        async with admin.connect() as conn:
            await conn.execute(text(f"DROP ROLE IF EXISTS {role}"))
        await admin.dispose()
