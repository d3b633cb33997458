"""Tests for adk_session_heal.store: one adapter (one writer) per store layout."""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
import time
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
from sqlalchemy import text
from sqlalchemy.ext.asyncio import create_async_engine
from stores import (
    Store,
    adk_store_fixture,  # noqa: F401  (the adk_store fixture)
    crashed_histories,
    fill,
)
from test_service import APP, USER, store_crashed, synthetic

from adk_session_heal import migrate
from adk_session_heal.policy import HealPolicy
from adk_session_heal.service import HealingSessionService
from adk_session_heal.store import Layout, store_for_service
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


@pytest.mark.parametrize("path", ["wrapper", "repair"])
async def test_a_kill_between_heal_and_ledger_rows_leaves_both_or_neither(
    adk_store: Store, path: str
) -> None:
    """Heal row and ledger row commit in one transaction: a kill between them leaves neither."""
    await fill(adk_store, {"dead": crashed_histories()["dead"]})
    await migrate.upgrade(adk_store.url)
    command = [sys.executable, str(Path(__file__).with_name("kill_between.py")), path,
               adk_store.kind, adk_store.url, "dead"]
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).parent)}
    killed = subprocess.run([*command, "--kill"], env=env, capture_output=True, timeout=120)
    assert killed.returncode == 9, killed.stderr.decode()
    assert await _heal_and_ledger_rows(adk_store) == (0, 0)
    finished = subprocess.run(command, env=env, capture_output=True, timeout=120)
    assert finished.returncode == 0, finished.stderr.decode()
    assert await _heal_and_ledger_rows(adk_store) == (1, 1)
