"""Session databases for the scan/repair/ledger tests, built through real ADK services.

``adk_store`` (a fixture: import ``adk_store_fixture`` into a test module) yields a fresh empty
store of each kind the CLI supports: ADK's ``SqliteSessionService`` file, and
``DatabaseSessionService`` on SQLite, PostgreSQL and MariaDB. ``fill`` writes
histories through the kind's real ADK service (``create_session`` +
``append_event``), ``bulk_fill`` writes many sessions fast with the exact rows
ADK writes (for the interruption test and the benchmark), and ``snapshot``
reads every table of a store for byte-for-byte comparisons. ``make_store`` also
makes a ``redis`` store (:data:`CLI_KINDS`): a key prefix of its own on the
real Redis, its sessions written by ADK's ``RedisSessionService``.
"""

from __future__ import annotations

import random
import sqlite3
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager, closing
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest
from google.adk.sessions import BaseSessionService, DatabaseSessionService
from google.adk.sessions.schemas.v1 import StorageEvent, StorageSession
from google.adk.sessions.sqlite_session_service import SqliteSessionService
from servers import REDIS_URL, temporary_database, temporary_redis_prefix
from sqlalchemy import Table, insert, inspect, text
from sqlalchemy.ext.asyncio import create_async_engine

from adk_session_heal.core.adk_compat import timestamp_to_column
from adk_session_heal.ledger import SqlToolRunLedger
from adk_session_heal.migrate import upgrade
from adk_session_heal.store import open_store
from adk_session_heal.store.layouts.adk_sqlite import insert_sqlite_events, sqlite_event_row
from adk_session_heal.store.layouts.sql_event_rows import database_event_row
from adk_session_heal.store.urls import parse_store_url
from adk_session_heal.testing import History

ADK_EVENTS_TABLE: Table = StorageEvent.__table__
"""ADK's own model of the ``events`` table: what the tests write and read rows through."""

KINDS = ["adk_sqlite", "db_sqlite", "postgres", "mariadb"]
"""Every SQL store layout/backend the CLI reads."""

CLI_KINDS = [*KINDS, "redis"]
"""Every layout the CLI reads and writes: the SQL ones and ADK's Redis sessions."""

APP, USER = "app", "user"


@dataclass(frozen=True)
class Store:
    """A test store: its kind and URL."""

    kind: str
    url: str

    @property
    def sqlite_path(self) -> Path | None:
        """The SQLite file, for SQLite kinds."""
        if self.kind in ("adk_sqlite", "db_sqlite"):
            return Path(self.url.split(":///", 1)[1])
        return None

    def service(self) -> BaseSessionService:
        """Returns a new instance of the ADK service that owns this store."""
        if self.kind == "adk_sqlite":
            return SqliteSessionService(str(self.sqlite_path))
        if self.kind == "redis":
            from google.adk.integrations.redis import (
                RedisSessionService,
                RedisSessionServiceConfig,
            )
            return RedisSessionService(RedisSessionServiceConfig(
                uri=REDIS_URL, key_prefix=parse_store_url(self.url).redis_key_prefix))
        return DatabaseSessionService(self.url)


async def make_store(kind: str, tmp_path: Path) -> AsyncIterator[Store]:
    """Yields a fresh store of ``kind`` (server databases are dropped after)."""
    if kind == "adk_sqlite":
        yield Store(kind, f"sqlite:///{tmp_path / 'adk.db'}")
    elif kind == "db_sqlite":
        yield Store(kind, f"sqlite+aiosqlite:///{tmp_path / 'db.db'}")
    elif kind == "redis":
        async with temporary_redis_prefix() as prefix:
            yield Store(kind, f"{REDIS_URL}?key_prefix={quote(prefix, safe='')}")
    else:
        async with temporary_database(kind) as url:
            yield Store(kind, url)


@pytest.fixture(params=KINDS, name="adk_store")
async def adk_store_fixture(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Store]:
    """A fresh, empty store of each supported kind."""
    async for store in make_store(request.param, tmp_path):
        yield store


async def close(service: BaseSessionService) -> None:
    """Closes a service that has a ``close`` (or the client ADK's Redis service opened)."""
    closer = getattr(service, "close", None)
    if closer is not None:
        await closer()
    client = getattr(service, "_redis_client", None)
    if client is not None:
        await client.aclose()


async def fill(store: Store, histories: Mapping[str, History], *, app: str = APP,
               user: str = USER) -> None:
    """Creates one session per history and appends its events through ADK's service."""
    service = store.service()
    try:
        await fill_service(service, histories, app=app, user=user)
    finally:
        await close(service)


async def fill_service(service: BaseSessionService, histories: Mapping[str, History], *,
                       app: str = APP, user: str = USER) -> None:
    """Creates one session per history in ``service`` and appends its events through it."""
    for session_id, history in histories.items():
        session = await service.create_session(app_name=app, user_id=user,
                                               session_id=session_id)
        for event in history.events:
            await service.append_event(session, event)


def crashed_histories() -> dict[str, History]:
    """One session per kind of finding (timestamps from 2023, so all are old).

    * ``dead``: a call superseded by the next user turn;
    * ``stale``: a call left in the newest invocation;
    * ``parallel``: two calls in one event, one answered, both in an old invocation;
    * ``ok``: every call answered;
    * ``long``: a long-running call (pending);
    * ``idless``: an id-less call;
    * ``orphan``: a response without a call;
    * ``empty``: no events.
    """
    dead = History()
    dead.user("weather in Paris?")
    dead.call("get_weather", {"city": "Paris"})
    dead.user("hello?")
    dead.text("Hi!")

    stale = History()
    stale.user("book a table")
    stale.call("book", {"people": 2})

    parallel = History()
    parallel.user("two things")
    ids = parallel.calls("a", "b")
    parallel.respond((ids[0], "a"))
    parallel.user("and now?")
    parallel.text("done")

    ok = History()
    ok.user("time?")
    call = ok.call("clock")
    ok.respond((call, "clock"))
    ok.text("noon")

    long = History()
    long.user("approve my expense")
    long.call("approve", long_running=True)

    idless = History()
    idless.user("go")
    idless.calls("anon", ids=[None])
    idless.user("again")

    orphan = History()
    orphan.user("hm")
    orphan.respond(("ghost-1", "ghost"))
    orphan.text("ok")

    return {"dead": dead, "stale": stale, "parallel": parallel, "ok": ok, "long": long,
            "idless": idless, "orphan": orphan, "empty": History()}


async def snapshot(store: Store) -> Any:
    """Returns every table's full content (the file's bytes for SQLite; for Redis, every
    key of the prefix and of our ledger beside it)."""
    if store.sqlite_path is not None:
        return store.sqlite_path.read_bytes()
    if store.kind == "redis":
        import redis.asyncio as redis_asyncio

        prefix = parse_store_url(store.url).redis_key_prefix
        client = redis_asyncio.from_url(REDIS_URL)
        try:
            keys = sorted([k async for k in client.scan_iter(match=f"{prefix}*")] + [
                k async for k in client.scan_iter(match=f"adk_session_heal:*:{prefix}")])
            return {k: await client.dump(k) for k in keys}
        finally:
            await client.aclose()
    engine = create_async_engine(store.url)
    try:
        async with engine.connect() as conn:
            tables = await conn.run_sync(lambda c: sorted(inspect(c).get_table_names()))
            dump: dict[str, list[str]] = {}
            for table in tables:
                rows = (await conn.execute(text(f"SELECT * FROM {table}"))).all()
                dump[table] = sorted(repr(tuple(row)) for row in rows)
            return dump
    finally:
        await engine.dispose()


async def table_names(store: Store) -> set[str]:
    """Returns the store's table names."""
    if store.sqlite_path is not None:
        if not store.sqlite_path.exists():
            return set()
        with closing(sqlite3.connect(store.sqlite_path)) as db, db:
            return {r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    engine = create_async_engine(store.url)
    try:
        async with engine.connect() as conn:
            return set(await conn.run_sync(lambda c: inspect(c).get_table_names()))
    finally:
        await engine.dispose()


def bulk_histories(sessions: int, events_per_session: int, dead_fraction: float,
                   *, seed: int = 7, start: float = 1_700_000_000.0) -> list[History]:
    """Builds many histories of answered calls; ``dead_fraction`` of them hold one dead call.

    A session is turns of (user, call, response, text); in a dead session one
    early turn has no response, and the next turn supersedes the call.
    """
    rng = random.Random(seed)
    result = []
    for _ in range(sessions):
        history = History(start=start + rng.random() * 1000, step=0.5)
        dead_at = rng.randrange(0, max(1, events_per_session // 8)) \
            if rng.random() < dead_fraction else -1
        turn = 0
        while len(history.events) + 4 <= events_per_session:
            history.user(f"question {turn}")
            call_id = history.call("lookup", {"q": turn})
            if turn != dead_at:
                history.respond((call_id, "lookup", {"answer": turn}))
            history.text(f"answer {turn}")
            turn += 1
        while len(history.events) < events_per_session:
            history.text("more")
        result.append(history)
    return result


async def bulk_fill(store: Store, histories: list[History], *, app: str = APP,
                    user: str = USER, chunk: int = 200) -> None:
    """Writes sessions fast, with exactly the rows ADK's service would write.

    The schema is created by ADK's own service (one real session), then
    ``sessions``, state and ``events`` rows are inserted in bulk.
    """
    service = store.service()
    try:
        await service.create_session(app_name=app, user_id=user, session_id="seed")
    finally:
        await close(service)
    if store.kind == "adk_sqlite":
        import aiosqlite

        async with aiosqlite.connect(str(store.sqlite_path)) as db:
            for index, history in enumerate(histories):
                session_id = f"s{index:07d}"
                last = history.events[-1].timestamp
                await db.execute(
                    "INSERT INTO sessions (app_name, user_id, id, state, create_time, "
                    "update_time) VALUES (?, ?, ?, '{}', ?, ?)",
                    (app, user, session_id, history.events[0].timestamp, last))
                await insert_sqlite_events(db, [
                    sqlite_event_row(e, app_name=app, user_id=user, session_id=session_id)
                    for e in history.events])
                if index % chunk == 0:
                    await db.commit()
            await db.commit()
        return
    engine = create_async_engine(store.url)
    try:
        for first in range(0, len(histories), chunk):
            async with engine.begin() as conn:
                sessions = []
                rows = []
                for index in range(first, min(first + chunk, len(histories))):
                    history = histories[index]
                    session_id = f"s{index:07d}"
                    stamp = timestamp_to_column(history.events[-1].timestamp)
                    sessions.append({"app_name": app, "user_id": user, "id": session_id,
                                     "state": {},
                                     "create_time": stamp, "update_time": stamp})
                    rows.extend(database_event_row(e, app_name=app, user_id=user,
                                                   session_id=session_id)
                                for e in history.events)
                await conn.execute(insert(StorageSession.__table__), sessions)
                await conn.execute(insert(ADK_EVENTS_TABLE), rows)
    finally:
        await engine.dispose()



@asynccontextmanager
async def heal_ledger_at(url: str) -> AsyncIterator[Any]:
    """The heal ledger of the store at ``url``, opened through its layout as a repair opens it."""
    store = await open_store(url)
    ledger = store.heal_ledger()
    try:
        yield ledger
    finally:
        await ledger.close()
        await store.close()


@pytest.fixture(name="tool_run_ledger")
async def tool_run_ledger_fixture(adk_store: Store) -> AsyncIterator[SqlToolRunLedger]:
    """The store's tool-run ledger, its table created by `db upgrade` once ADK made its own."""
    service = adk_store.service()
    await service.list_sessions(app_name=APP, user_id=USER)  # ADK creates its tables
    await close(service)
    await upgrade(adk_store.url)
    runs = SqlToolRunLedger.from_url(adk_store.url)
    yield runs
    await runs.close()


def unhealable_histories(start: float = 1_700_010_000.0) -> dict[str, History]:
    """One session per kind of dead call a heal would make worse, and one healed beside them.

    * ``nameless``: a call with an empty name (``malformed``);
    * ``shared``: two parallel calls sharing one id (``malformed``);
    * ``late``: a call right after its agent's text reply (``out_of_turn``);
    * ``fine``: a plain dead call (``superseded``).
    """
    nameless = History(start=start)
    nameless.user("q")
    nameless.calls("", ids=["n1"])
    nameless.user("next")
    shared = History(start=start)
    shared.user("two things")
    shared.calls("a", "b", ids=["x", "x"])
    shared.user("next")
    late = History(start=start)
    late.user("q")
    late.text("let me check")
    late.call("f")
    late.user("next")
    fine = History(start=start)
    fine.user("q")
    fine.call("f")
    fine.user("next")
    return {"nameless": nameless, "shared": shared, "late": late, "fine": fine}
