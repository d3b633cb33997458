"""Opening an ADK session database: which layout, is it usable, and the raw I/O.

ADK 2.13 writes two SQL layouts under the same table names (see
:mod:`adk_session_heal.store.rows`). Which one a database holds is read from
the database before anything else is done with it:

* ``adk_internal_metadata`` says schema ``"1"``: ``DatabaseSessionService``.
* No metadata table, an ``events`` table with ``event_data`` and a REAL
  ``timestamp`` on SQLite: ADK's ``SqliteSessionService``. Such a file is never
  opened through ``DatabaseSessionService`` (which would add its metadata table
  and an index, after which ADK's SQLite service can no longer use it).
* ``events`` with an ``actions`` column and no ``event_data``: ADK's legacy
  pickled "v0" schema, refused with the command that migrates it.

Every failure is raised as a :class:`~adk_session_heal.errors.StoreError`
with one line that says what to do; driver errors are translated here, once,
and passwords are scrubbed from their text. Nothing in this module updates or
deletes a row; the only writes are inserts that skip existing keys.
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import importlib
import inspect as pyinspect
import json
import sqlite3
from collections.abc import AsyncIterator, Callable, Iterable, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from datetime import datetime
from typing import Any, NamedTuple, TypeVar

import aiosqlite
from google.adk.events.event import Event
from google.adk.sessions.schemas.shared import utc_datetime_to_timestamp
from sqlalchemy import inspect, text
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine, create_async_engine

from ..errors import ReadOnlyStoreError, StoreError, UnsupportedStoreError
from ..records import HealRecord
from .inserts import (
    insert_database_events_batch,
    insert_ledger_rows,
    insert_sqlite_events,
    insert_sqlite_ledger_rows,
)
from .ledger_table import LEDGER_TABLE_NAME, LEDGER_VERSION_TABLE, ledger_row
from .rows import database_event_row, sqlite_event_row
from .urls import StoreUrl, parse_store_url

__all__ = [
    "SUPPORTED_SCHEMA_VERSION",
    "HealWrite",
    "Layout",
    "SessionFilter",
    "SessionStore",
    "StoredSession",
    "open_store",
    "read_ledger_revision",
    "translate_error",
]

SUPPORTED_SCHEMA_VERSION = "1"
"""The ``DatabaseSessionService`` schema version this release reads and writes."""

_FETCH = 2_000
try:  # asyncpg's own errors, raised by the raw server-side cursor
    from asyncpg import PostgresError as _PostgresError

    _DRIVER_ERRORS: tuple[type[Exception], ...] = (_PostgresError,)
except ImportError:  # pragma: no cover - the postgres extra is not installed
    _DRIVER_ERRORS = ()
_READ_ERRORS: tuple[type[Exception], ...] = (SQLAlchemyError, OSError, *_DRIVER_ERRORS)
_R = TypeVar("_R")
_ADK_TABLES = ("sessions", "events")


class Layout(str, enum.Enum):
    """Which ADK service's layout a database holds."""

    DATABASE = "database"
    """``DatabaseSessionService``, schema "1" (any SQL backend)."""
    ADK_SQLITE = "adk_sqlite"
    """ADK's own ``SqliteSessionService``."""


@dataclass(frozen=True, slots=True)
class SessionFilter:
    """Restricts a scan to one app, user or session (``None`` = all)."""

    app_name: str | None = None
    user_id: str | None = None
    session_id: str | None = None

    def where(self, session_column: str) -> tuple[str, dict[str, str]]:
        """Returns a ``WHERE`` clause (or ``""``) and its bound parameters.

        Args:
            session_column: The session id's column: ``"session_id"`` in
                ``events``, ``"id"`` in ``sessions``.
        """
        clauses: list[str] = []
        params: dict[str, str] = {}
        for column, name, value in (("app_name", "app_name", self.app_name),
                                    ("user_id", "user_id", self.user_id),
                                    (session_column, "session_id", self.session_id)):
            if value is not None:
                clauses.append(f"{column} = :{name}")
                params[name] = value
        return (" WHERE " + " AND ".join(clauses) if clauses else ""), params


class StoredSession(NamedTuple):
    """One session's stored events, oldest first, as ADK would read them.

    ``events`` are the ``event_data`` JSON dicts, with ``id``,
    ``invocation_id`` and ``timestamp`` as ADK's reader sets them.
    """

    app_name: str
    user_id: str
    session_id: str
    events: list[dict[str, Any]]


@dataclass(frozen=True, slots=True)
class HealWrite:
    """One synthetic event to insert, and its ledger record."""

    event: Event
    record: HealRecord


def translate_error(exc: BaseException, url: StoreUrl, doing: str) -> StoreError:
    """Returns the one-line :class:`StoreError` for a driver error.

    Args:
        exc: The driver or SQLAlchemy error.
        url: The store (for the redacted URL and the password to scrub).
        doing: What was being done, e.g. ``"connect to"``.
    """
    if isinstance(exc, StoreError):
        return exc
    cause: BaseException = getattr(exc, "orig", None) or exc
    detail = url.scrub(str(cause).strip().splitlines()[0] if str(cause).strip() else "")
    detail = detail or type(cause).__name__
    lowered = detail.lower()
    if any(word in lowered for word in ("read-only", "readonly", "read only")):
        return ReadOnlyStoreError(
            f"{url} refuses writes ({detail[:160]}): run repair with a user and database "
            "that may write, or use scan / repair --dry-run"
        )
    if isinstance(cause, ConnectionRefusedError) or "refused" in lowered:
        hint = "check that the server is running and the URL's host and port"
    else:
        hint = "check the URL's host, port, user, password and database"
    return StoreError(f"cannot {doing} {url}: {detail[:200]} ({hint})")


def _bad_schema(url: StoreUrl, tables: set[str], columns: set[str], version: str | None) -> None:
    if not all(name in tables for name in _ADK_TABLES):
        raise UnsupportedStoreError(
            f"{url} has no ADK session tables (sessions, events): point the URL at the "
            "database your ADK app's session service uses"
        )
    if "event_data" not in columns:
        if "actions" in columns:
            raise UnsupportedStoreError(
                f"{url} uses ADK's legacy v0 (pickled) schema: migrate it first with "
                "`adk migrate session --source_db_url=... --dest_db_url=...`, then rerun"
            )
        raise UnsupportedStoreError(
            f"{url} has an events table this release does not know (no event_data column): "
            "check the URL"
        )
    if version is not None and version != SUPPORTED_SCHEMA_VERSION:
        if version == "0":
            raise UnsupportedStoreError(
                f"{url} uses ADK's legacy v0 (pickled) schema: migrate it first with "
                "`adk migrate session`, then rerun"
            )
        raise UnsupportedStoreError(
            f"{url} has ADK session schema version {version!r}; this release reads schema "
            f"{SUPPORTED_SCHEMA_VERSION!r} (google-adk 2.13): use a release of "
            "adk-session-heal made for that ADK version"
        )


def _event_row(builder: Callable[..., _R], write: HealWrite) -> _R:
    """Returns ``write``'s events row, built by one of ADK's row builders."""
    record = write.record
    return builder(write.event, app_name=record.app_name, user_id=record.user_id,
                   session_id=record.session_id)


def _ledger_rows(writes: Sequence[HealWrite], written: Sequence[bool]) -> list[dict[str, Any]]:
    """Returns the ledger rows of the heals this transaction inserted."""
    return [ledger_row(w.record) for w, ok in zip(writes, written, strict=True) if ok]


def _json_event(raw: Any) -> dict[str, Any]:
    if raw is None:
        return {}
    if isinstance(raw, dict):
        return raw
    decoded = json.loads(raw)
    return decoded if isinstance(decoded, dict) else {}


def _column_timestamp(value: Any) -> float:
    if isinstance(value, (int, float)):
        return float(value)
    if isinstance(value, str):
        value = datetime.fromisoformat(value)
    return utc_datetime_to_timestamp(value)


async def _grouped(
    chunks: AsyncIterator[Iterable[Any]], *, key_columns: bool
) -> AsyncIterator[StoredSession]:
    """Groups ordered rows into one :class:`StoredSession` per session.

    Rows are ``(app_name, user_id, session_id, ..., event_data)``. With
    ``key_columns`` (``DatabaseSessionService``, whose ``StorageEvent.to_event``
    does the same) they are ``(..., id, invocation_id, timestamp, event_data)``
    and the columns' id and invocation id override the JSON's, the column
    timestamp filling in only a missing JSON one. This loop runs once per stored
    event, so it is written flat.
    """
    loads = json.loads
    app = user = session = None
    events: list[dict[str, Any]] = []
    async for rows in chunks:
        for row in rows:
            if row[2] != session or row[1] != user or row[0] != app:
                if session is not None:
                    yield StoredSession(app, user, session, events)  # type: ignore[arg-type]
                app, user, session, events = row[0], row[1], row[2], []
            raw = row[-1]
            data = loads(raw) if type(raw) is str else raw
            if type(data) is not dict:
                data = _json_event(data)
            if key_columns:
                data["id"] = row[3]
                data["invocation_id"] = row[4]
                if data.get("timestamp") is None:
                    data["timestamp"] = _column_timestamp(row[5])
            events.append(data)
    if session is not None:
        yield StoredSession(app, user, session, events)  # type: ignore[arg-type]


async def _mysql_chunks(
    conn: AsyncConnection, sql: str, params: dict[str, str]
) -> AsyncIterator[Iterable[Any]]:
    """Streams a query through aiomysql's or asyncmy's unbuffered (SS) cursor."""
    raw = await conn.get_raw_connection()
    driver = raw.driver_connection
    assert driver is not None
    module = "asyncmy.cursors" if conn.dialect.driver == "asyncmy" else "aiomysql"
    unbuffered = importlib.import_module(module).SSCursor
    for name in params:
        sql = sql.replace(f":{name}", f"%({name})s")
    cursor = driver.cursor(unbuffered)
    if pyinspect.isawaitable(cursor):  # aiomysql returns an awaitable, asyncmy the cursor
        cursor = await cursor
    try:
        await cursor.execute(sql, params)
        while rows := await cursor.fetchmany(_FETCH):
            yield rows
    finally:
        await cursor.close()


async def _sqlite_chunks(
    url: StoreUrl, sql: str, params: dict[str, str]
) -> AsyncIterator[Iterable[Any]]:
    """Streams a query over a SQLite file, read-only, in chunks (aiosqlite, bounded memory).

    The next chunk is fetched (in aiosqlite's thread) while the caller works on
    the current one, so reading and classifying overlap; at most two chunks are
    held.
    """
    try:
        async with aiosqlite.connect(url.sqlite_uri(writable=False), uri=True) as db, \
                db.execute(sql, params) as cursor:
            pending = asyncio.ensure_future(cursor.fetchmany(_FETCH))
            try:
                while rows := await pending:
                    pending = asyncio.ensure_future(cursor.fetchmany(_FETCH))
                    yield rows
            finally:
                if not pending.done():
                    pending.cancel()
                    with contextlib.suppress(asyncio.CancelledError, sqlite3.Error):
                        await pending
    except sqlite3.Error as exc:
        raise translate_error(exc, url, "read") from exc


class SessionStore:
    """An opened ADK session database (one of the two layouts).

    Use :func:`open_store`; it checks the database first.

    Attributes:
        url: The store's URL.
        layout: Which ADK service's layout it holds.
    """

    url: StoreUrl
    layout: Layout

    async def count_sessions(self, where: SessionFilter) -> int:
        """Returns how many sessions match."""
        raise NotImplementedError

    def stream_sessions(self, where: SessionFilter) -> AsyncIterator[StoredSession]:
        """Yields every matching session that has events, in one ordered pass.

        Rows are streamed from the server in chunks; one session's events are
        held at a time.
        """
        raise NotImplementedError

    async def ledger_revision(self) -> str | None:
        """Returns the heal ledger's migration revision, or ``None`` if absent."""
        raise NotImplementedError

    async def write(self, writes: Sequence[HealWrite], *, ledger: bool) -> list[bool]:
        """Inserts synthetic events (and their ledger rows) in one transaction.

        Args:
            writes: The events and their records.
            ledger: Also record the heals this call wrote in the ledger.

        Returns:
            For each write, whether this call inserted it (``False``: the row
            already existed, written by the wrapper or an earlier run).
        """
        raise NotImplementedError

    async def close(self) -> None:
        """Releases connections."""


class _SqlAlchemyStore(SessionStore):
    """``DatabaseSessionService``'s layout, through SQLAlchemy's async engine."""

    def __init__(self, url: StoreUrl, engine: AsyncEngine) -> None:
        self.url = url
        self.layout = Layout.DATABASE
        self.engine = engine

    async def count_sessions(self, where: SessionFilter) -> int:
        clause, params = where.where("id")
        try:
            async with self.engine.connect() as conn:
                result = await conn.execute(text(f"SELECT count(*) FROM sessions{clause}"), params)
                return int(result.scalar_one())
        except SQLAlchemyError as exc:
            raise translate_error(exc, self.url, "read") from exc

    async def stream_sessions(self, where: SessionFilter) -> AsyncIterator[StoredSession]:
        clause, params = where.where("session_id")
        # DatabaseSessionService reads by (timestamp, id) and takes id and
        # invocation_id from the columns, the timestamp from event_data.
        sql = (
            "SELECT app_name, user_id, session_id, id, invocation_id, timestamp, event_data "
            f"FROM events{clause} ORDER BY app_name, user_id, session_id, timestamp, id"
        )
        chunks = (
            _sqlite_chunks(self.url, sql, params) if self.url.sqlite_path is not None
            else self._server_chunks(sql, params)
        )
        async for stored in _grouped(chunks, key_columns=True):
            yield stored

    async def _server_chunks(
        self, sql: str, params: dict[str, str]
    ) -> AsyncIterator[Iterable[Any]]:
        """Streams a query from a server in chunks.

        Through the driver's own server-side cursor: SQLAlchemy's ``stream()``
        over asyncpg and aiomysql kept every row in memory (measured), so memory
        would grow with the database instead of the largest session.
        """
        try:
            async with self.engine.connect() as conn:
                if conn.dialect.name == "postgresql":
                    raw = await conn.get_raw_connection()
                    driver = raw.driver_connection
                    assert driver is not None
                    names = list(params)
                    for position, name in enumerate(names, start=1):
                        sql = sql.replace(f":{name}", f"${position}")
                    async with driver.transaction(readonly=True):
                        cursor = await driver.cursor(sql, *(params[n] for n in names))
                        while rows := await cursor.fetch(_FETCH):
                            yield rows
                    return
                if conn.dialect.name in ("mysql", "mariadb"):
                    async for rows in _mysql_chunks(conn, sql, params):
                        yield rows
                    return
                result = await conn.stream(
                    text(sql), params, execution_options={"yield_per": _FETCH}
                )
                async for rows in result.partitions():
                    yield rows
        except _READ_ERRORS as exc:
            raise translate_error(exc, self.url, "read") from exc

    async def ledger_revision(self) -> str | None:
        try:
            async with self.engine.connect() as conn:
                return await read_ledger_revision(conn)
        except SQLAlchemyError as exc:
            raise translate_error(exc, self.url, "read") from exc

    async def write(self, writes: Sequence[HealWrite], *, ledger: bool) -> list[bool]:
        rows = [_event_row(database_event_row, w) for w in writes]
        try:
            async with self.engine.begin() as conn:
                written = await insert_database_events_batch(conn, rows)
                if ledger:
                    await insert_ledger_rows(conn, _ledger_rows(writes, written))
        except SQLAlchemyError as exc:
            raise translate_error(exc, self.url, "write to") from exc
        return written

    async def close(self) -> None:
        await self.engine.dispose()


async def read_ledger_revision(conn: AsyncConnection) -> str | None:
    """Returns the heal ledger's migration revision over ``conn`` (``None``: absent)."""
    tables = await conn.run_sync(lambda sync: set(inspect(sync).get_table_names()))
    if LEDGER_TABLE_NAME not in tables or LEDGER_VERSION_TABLE not in tables:
        return None
    result = await conn.execute(text(f"SELECT version_num FROM {LEDGER_VERSION_TABLE}"))
    value = result.scalar_one_or_none()
    return str(value) if value is not None else None


class _AdkSqliteStore(SessionStore):
    """ADK's ``SqliteSessionService`` layout, through aiosqlite (as ADK uses it)."""

    def __init__(self, url: StoreUrl, writable: bool) -> None:
        self.url = url
        self.layout = Layout.ADK_SQLITE
        self._writable = writable

    @asynccontextmanager
    async def _connect(self, *, writable: bool) -> AsyncIterator[aiosqlite.Connection]:
        async with aiosqlite.connect(self.url.sqlite_uri(writable=writable), uri=True) as db:
            yield db

    async def count_sessions(self, where: SessionFilter) -> int:
        clause, params = where.where("id")
        try:
            async with self._connect(writable=False) as db, db.execute(
                f"SELECT count(*) FROM sessions{clause}", params
            ) as cursor:
                row = await cursor.fetchone()
                return int(row[0]) if row else 0
        except sqlite3.Error as exc:
            raise translate_error(exc, self.url, "read") from exc

    async def stream_sessions(self, where: SessionFilter) -> AsyncIterator[StoredSession]:
        clause, params = where.where("session_id")
        # SqliteSessionService reads by (timestamp, rowid) and takes every field
        # from event_data.
        sql = (
            "SELECT app_name, user_id, session_id, event_data FROM events"
            f"{clause} ORDER BY app_name, user_id, session_id, timestamp, rowid"
        )
        chunks = _sqlite_chunks(self.url, sql, params)
        async for stored in _grouped(chunks, key_columns=False):
            yield stored

    async def ledger_revision(self) -> str | None:
        try:
            async with self._connect(writable=False) as db:
                tables = {row[0] for row in await db.execute_fetchall(
                    "SELECT name FROM sqlite_master WHERE type = 'table'")}
                if LEDGER_TABLE_NAME not in tables or LEDGER_VERSION_TABLE not in tables:
                    return None
                rows = list(await db.execute_fetchall(
                    f"SELECT version_num FROM {LEDGER_VERSION_TABLE}"))
                return str(rows[0][0]) if rows else None
        except sqlite3.Error as exc:
            raise translate_error(exc, self.url, "read") from exc

    async def write(self, writes: Sequence[HealWrite], *, ledger: bool) -> list[bool]:
        rows = [_event_row(sqlite_event_row, w) for w in writes]
        try:
            async with self._connect(writable=True) as db:
                written = await insert_sqlite_events(db, rows)
                if ledger:
                    await insert_sqlite_ledger_rows(db, _ledger_rows(writes, written))
                await db.commit()
        except sqlite3.Error as exc:
            raise translate_error(exc, self.url, "write to") from exc
        return written


def _inspect_sqlite(url: StoreUrl) -> Layout:
    """Reads a SQLite file's layout with the standard library, read-only."""
    try:
        with sqlite3.connect(url.sqlite_uri(writable=False), uri=True) as db:
            tables = {row[0] for row in db.execute(
                "SELECT name FROM sqlite_master WHERE type = 'table'")}
            info = db.execute("PRAGMA table_info(events)").fetchall()
            columns = {row[1]: str(row[2]).upper() for row in info}
            version = None
            if "adk_internal_metadata" in tables:
                found = db.execute(
                    "SELECT value FROM adk_internal_metadata WHERE key = 'schema_version'"
                ).fetchone()
                version = str(found[0]) if found else "(missing)"
    except sqlite3.DatabaseError as exc:
        raise StoreError(
            f"{url} is not a readable SQLite database ({exc}): check the path"
        ) from exc
    _bad_schema(url, tables, set(columns), version)
    if version is None and columns.get("timestamp") == "REAL":
        return Layout.ADK_SQLITE
    return Layout.DATABASE


async def _inspect_server(url: StoreUrl, engine: AsyncEngine) -> None:
    def read(sync: Any) -> tuple[set[str], set[str], str | None]:
        inspector = inspect(sync)
        tables = set(inspector.get_table_names())
        columns = (
            {c["name"] for c in inspector.get_columns("events")} if "events" in tables else set()
        )
        version = None
        if "adk_internal_metadata" in tables:
            key = inspector.dialect.identifier_preparer.quote("key")
            found = sync.execute(
                text(f"SELECT value FROM adk_internal_metadata WHERE {key} = 'schema_version'")
            ).fetchone()
            version = str(found[0]) if found else "(missing)"
        return tables, columns, version

    async with engine.connect() as conn:
        tables, columns, version = await conn.run_sync(read)
    _bad_schema(url, tables, columns, version)


async def open_store(url: str | StoreUrl, *, writable: bool = False) -> SessionStore:
    """Opens an ADK session database after checking its layout and schema.

    Args:
        url: The store URL (see :mod:`adk_session_heal.store.urls`).
        writable: Open for repair. Otherwise SQLite files are opened read-only.

    Returns:
        The opened store; ``await store.close()`` when done.

    Raises:
        UnsupportedStoreError: Bad URL, missing file, no ADK tables, legacy or
            unknown schema.
        ReadOnlyStoreError: ``writable`` on a URL that asked for read-only.
        StoreError: The database could not be reached.
    """
    store_url = url if isinstance(url, StoreUrl) else parse_store_url(url)
    if writable and store_url.read_only:
        raise ReadOnlyStoreError(
            f"{store_url} was opened with mode=ro: drop ?mode=ro to repair, "
            "or use scan / repair --dry-run"
        )
    if store_url.sqlite_path is not None and _inspect_sqlite(store_url) is Layout.ADK_SQLITE:
        return _AdkSqliteStore(store_url, writable)
    engine = create_async_engine(store_url.sqlalchemy_url(writable=writable))
    try:
        if store_url.sqlite_path is None:
            await _inspect_server(store_url, engine)
    except (SQLAlchemyError, OSError) as exc:
        await engine.dispose()
        raise translate_error(exc, store_url, "connect to") from exc
    except BaseException:
        await engine.dispose()
        raise
    return _SqlAlchemyStore(store_url, engine)
