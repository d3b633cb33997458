"""Streaming a session table in chunks, one session at a time, with bounded memory.

Each driver is read through its own cursor: SQLAlchemy's ``stream()`` over
asyncpg, aiomysql and aiosqlite kept every row in memory (measured), so memory
would grow with the database instead of with the largest session.
:func:`grouped_sessions` turns the ordered rows into one
:class:`~adk_session_heal.store.base.StoredSession` per session.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import importlib
import inspect as pyinspect
import json
import sqlite3
from collections.abc import AsyncGenerator, Callable, Iterable, Iterator
from datetime import datetime
from typing import TYPE_CHECKING, Any

import aiosqlite
from sqlalchemy import text
from sqlalchemy.exc import SQLAlchemyError

from ..core.adk_compat import column_to_timestamp
from ..core.event_access import STORED_JSON, stored_event_problem
from ..core.findings import all_answered
from ..core.session_key import SessionKey
from ..core.shards import SQLITE_FUNCTION, bucket
from .base import DamagedRow, StoredSession
from .driver_errors import translate_error
from .json_decode import clean_test_decode
from .json_decode import loads as json_loads
from .urls import StoreUrl

if TYPE_CHECKING:
    from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

_FETCH = 2_000


@functools.cache
def _read_errors() -> tuple[type[Exception], ...]:
    """What a server read may raise; asyncpg is imported only once a read has failed."""
    try:  # asyncpg's own errors, raised by the raw server-side cursor
        from asyncpg import PostgresError
    except ImportError:  # pragma: no cover - the postgres extra is not installed
        return SQLAlchemyError, OSError
    return SQLAlchemyError, OSError, PostgresError


def _decode_row(raw: Any, decoded: bool) -> dict[str, Any] | str:
    """Decodes an ``event_data`` value the fast path refused: its dict, or its problem.

    The problem is one short line that never quotes the value (it may be huge,
    binary, or private). ``decoded``: the driver already decoded the JSON
    (asyncpg as SQLAlchemy sets it up), so a string was a JSON string, and
    ``None`` SQL NULL or JSON null.
    """
    if decoded:
        if raw is None:
            return "event_data is null, not an object (SQL NULL or JSON null)"
        return stored_event_problem(raw) or "event_data is not an object"
    if raw is None:
        return "event_data is NULL"
    if isinstance(raw, (bytes, bytearray, memoryview)):
        try:
            raw = bytes(raw).decode()
        except UnicodeDecodeError:
            return f"event_data is binary ({len(raw):,} bytes, not UTF-8 text)"
    if isinstance(raw, str):
        try:
            raw = json.loads(raw)
        except json.JSONDecodeError as exc:
            cut = exc.pos >= len(raw.rstrip()) or exc.msg.startswith("Unterminated")
            shape = "truncated JSON" if cut else "not JSON"
            return f"event_data is {shape} ({exc.msg} at char {exc.pos:,} of {len(raw):,})"
        except RecursionError:
            return "event_data is JSON nested too deeply to decode"
    if isinstance(raw, dict):
        return raw
    return stored_event_problem(raw) or "event_data is not an object"


def _column_timestamp(value: Any) -> float:
    if isinstance(value, (int, float)):
        return float(value)
    if isinstance(value, str):
        value = datetime.fromisoformat(value)
    return column_to_timestamp(value)


async def grouped_sessions(
    chunks: AsyncGenerator[Iterable[Any], None], *, key_columns: bool, decoded: bool = False,
    newest_first: bool = False, whole: Callable[[SessionKey], list[Any]] | None = None,
) -> AsyncGenerator[StoredSession, None]:
    """Groups ordered rows into one :class:`StoredSession` per session.

    Rows are ``(app_name, user_id, session_id, id, ..., event_data)``. With
    ``key_columns`` (``DatabaseSessionService``, whose ``StorageEvent.to_event``
    does the same) they are ``(..., id, invocation_id, timestamp, event_data)``
    and the columns' id and invocation id override the JSON's, the column
    timestamp filling in only a missing JSON one. A row that is not a JSON
    object (NULL, binary, not JSON, truncated, a list, a string, ...) or whose
    ``invocation_id`` or ``timestamp`` column is NULL goes to the session's
    ``damaged`` rows instead (wrong types inside an object are found by
    classification, see :func:`~adk_session_heal.core.event_access.stored_event_problem`).
    ``decoded``: the driver hands JSON values already decoded (PostgreSQL).
    ``newest_first``: each session's rows come newest first; its events (and
    damaged rows) are turned round before it is yielded.

    ``whole`` (the clean pass, :func:`sqlite_sessions`): the rows are
    ``(app_name, user_id, session_id, null_key, event_data)``, ``null_key``
    true where the invocation id or timestamp column is NULL, and each
    session is first decoded only in the fields
    :func:`~adk_session_heal.core.findings.all_answered` reads
    (:func:`~adk_session_heal.store.json_decode.clean_test_fields`). When
    every row decodes so, with its own timestamp and no NULL key column, and
    the test holds, the session is yielded with ``clean`` set and those
    partial events; any other session's rows are read again whole, ordered as
    these were, by ``whole(key)``, and decoded as without it.
    """
    app = user = session = None
    held: list[Any] = []
    async with contextlib.aclosing(chunks) as chunked:
        async for rows in chunked:
            for row in rows:
                if row[2] != session or row[1] != user or row[0] != app:
                    if session is not None:
                        key = SessionKey(app, user, session)  # type: ignore[arg-type]
                        yield _stored(key, held, key_columns=key_columns, decoded=decoded,
                                      newest_first=newest_first, whole=whole)
                    app, user, session, held = row[0], row[1], row[2], []
                held.append(row)
        if session is not None:
            key = SessionKey(app, user, session)  # type: ignore[arg-type]
            yield _stored(key, held, key_columns=key_columns, decoded=decoded,
                          newest_first=newest_first, whole=whole)


def _stored(key: SessionKey, rows: list[Any], *, key_columns: bool, decoded: bool,
            newest_first: bool, whole: Callable[[SessionKey], list[Any]] | None,
            ) -> StoredSession:
    """One session's rows (all of them, in read order) as read, oldest first."""
    if newest_first:
        rows.reverse()
    if whole is not None:
        clean = _clean_events(rows)
        if clean is not None:
            return StoredSession(key, clean, clean=True)
        rows = whole(key)
        if newest_first:
            rows.reverse()
    events, damaged = _decoded(rows, key_columns=key_columns, decoded=decoded)
    return StoredSession(key, events, tuple(damaged))


def _clean_events(rows: list[Any]) -> list[dict[str, Any]] | None:
    """A session's rows of the clean pass decoded in part, when that shows it clean.

    Clean is :func:`~adk_session_heal.core.findings.all_answered` over the
    fields it reads (:func:`~adk_session_heal.store.json_decode.clean_test_fields`).
    ``None``, for the session to be read again and decoded whole (which reports
    what is wrong with it): a row that is not a text, has a NULL key column,
    does not decode so or has no timestamp of its own (the column's is not
    read here), or a test that raises.
    """
    lean = clean_test_decode  # clean_test_fields, without a call of its own per row
    events: list[dict[str, Any]] = []
    for row in rows:
        raw = row[-1]
        if row[3] or type(raw) is not str:
            return None
        try:
            data = lean(raw)
        except (ValueError, RecursionError):
            return None
        if data.get("timestamp") is None:
            return None
        events.append(data)
    try:
        return events if all_answered(events, STORED_JSON) else None
    except (TypeError, AttributeError, ValueError):
        return None


def _decoded(rows: Iterable[Any], *, key_columns: bool,
             decoded: bool) -> tuple[list[dict[str, Any]], list[DamagedRow]]:
    """One session's rows decoded whole: its events and its damaged rows, in row order.

    This loop runs once per stored event, so it is written flat: a healthy row
    pays for nothing but the type checks it always had.
    """
    loads = json_loads
    events: list[dict[str, Any]] = []
    damaged: list[DamagedRow] = []
    for row in rows:
        raw = row[-1]
        try:
            data = loads(raw) if type(raw) is str else raw
        except (ValueError, RecursionError):
            data = None
        if type(data) is not dict:
            data = _decode_row(raw, decoded)
            if type(data) is str:
                damaged.append(DamagedRow(str(row[3]), data))
                continue
        if key_columns:
            invocation, stamp = row[4], row[5]
            if invocation is None or stamp is None:
                column = "invocation_id" if invocation is None else "timestamp"
                damaged.append(DamagedRow(str(row[3]), f"the {column} column is NULL"))
                continue
            data["id"] = row[3]
            data["invocation_id"] = invocation
            if data.get("timestamp") is None:
                data["timestamp"] = _column_timestamp(stamp)
        events.append(data)
    return events, damaged


_READER_CONNECT_TIMEOUT = 10.0
"""Seconds for an asyncmy reader's connection when aiomysql's own is not known."""


async def _asyncmy_reader(conn: AsyncConnection) -> Any | None:
    """An asyncmy connection to read a stream of an aiomysql engine's database, or ``None``.

    aiomysql parses every row in pure Python (about 72 % of a MariaDB scan's
    profile; 100,000 events: 0.80 s of client CPU, asyncmy 0.14 s, measured), so
    when asyncmy is installed (the ``mysql`` extra installs both) a stream of a
    ``mysql+aiomysql://`` store reads through a connection of its own opened
    with asyncmy, with the same host, port, user, password, database and
    character set, and no statement timeout (aiomysql has none). Only for a URL
    without query options (TLS, a socket, ...), which the two drivers spell
    differently; any failure to connect leaves the read on aiomysql. Writes
    always go through the engine's own driver.
    """
    if conn.dialect.driver != "aiomysql" or conn.engine.url.query:
        return None
    try:
        asyncmy = importlib.import_module("asyncmy")
    except ImportError:  # pragma: no cover - the mysql extra installs it
        return None
    raw = await conn.get_raw_connection()
    driver = raw.driver_connection
    url = conn.engine.url
    try:
        async with asyncio.timeout(
                getattr(driver, "connect_timeout", None) or _READER_CONNECT_TIMEOUT):
            return await asyncmy.connect(
                host=url.host or "localhost", port=url.port or 3306,
                user=url.username or "", password=url.password or "",
                database=url.database, charset=getattr(driver, "charset", None) or "utf8mb4")
    except Exception:  # noqa: BLE001 - the engine's own driver reads instead
        return None


async def _mysql_chunks(
    conn: AsyncConnection, sql: str, params: dict[str, Any]
) -> AsyncGenerator[Iterable[Any], None]:
    """Streams a query through aiomysql's or asyncmy's unbuffered (SS) cursor.

    Over aiomysql, asyncmy reads when it can (see :func:`_asyncmy_reader`).
    """
    reader = await _asyncmy_reader(conn)
    if reader is not None:
        driver: Any = reader
        module = "asyncmy.cursors"
    else:
        raw = await conn.get_raw_connection()
        driver = raw.driver_connection
        assert driver is not None
        module = "asyncmy.cursors" if conn.dialect.driver == "asyncmy" else "aiomysql"
    unbuffered = importlib.import_module(module).SSCursor
    sql = sql.replace("%", "%%")  # the drivers format the query with Python's % operator
    for name in params:
        sql = sql.replace(f":{name}", f"%({name})s")
    try:
        cursor = driver.cursor(unbuffered)
        if pyinspect.isawaitable(cursor):  # aiomysql returns an awaitable, asyncmy the cursor
            cursor = await cursor
        try:
            await cursor.execute(sql, params)
            while rows := await cursor.fetchmany(_FETCH):
                yield rows
        finally:
            await cursor.close()
    finally:
        if reader is not None:
            await reader.ensure_closed()


async def sqlite_functions(db: aiosqlite.Connection) -> None:
    """Registers the SQL functions our queries use on a SQLite connection (the shard hash)."""
    await db.create_function(SQLITE_FUNCTION, 3, bucket, deterministic=True)


@contextlib.contextmanager
def _sqlite_read(url: StoreUrl) -> Iterator[sqlite3.Connection]:
    """A read-only connection to a SQLite file, with the functions our queries use; its
    errors as one line (:func:`~adk_session_heal.store.driver_errors.translate_error`)."""
    try:
        db = sqlite3.connect(url.sqlite_uri(writable=False), uri=True, check_same_thread=False)
        try:
            db.create_function(SQLITE_FUNCTION, 3, bucket, deterministic=True)
            yield db
        finally:
            db.close()
    except sqlite3.Error as exc:
        raise translate_error(exc, url, "read") from exc


async def _fetched(cursor: sqlite3.Cursor) -> AsyncGenerator[Iterable[Any], None]:
    """A cursor's rows in chunks, letting other tasks run between two."""
    while rows := cursor.fetchmany(_FETCH):
        yield rows
        await asyncio.sleep(0)


def sqlite_rows(url: StoreUrl, sql: str, params: dict[str, Any]) -> list[Any]:
    """All rows of a short query over a SQLite file (a count, the ledger's revision), read-only.

    In the loop's own thread, as :func:`sqlite_chunks` reads.
    """
    with _sqlite_read(url) as db:
        return db.execute(sql, params).fetchall()


async def sqlite_chunks(
    url: StoreUrl, sql: str, params: dict[str, Any]
) -> AsyncGenerator[Iterable[Any], None]:
    """Streams a query over a SQLite file, read-only, in chunks (bounded memory).

    Through the standard library's driver, in the event loop's own thread: the
    read holds the loop for one chunk at a time (a few milliseconds), and lets
    other tasks run between chunks. aiosqlite's thread fetched each chunk
    while the loop classified the last, but the two threads then took turns
    on the interpreter lock at every row, and the loop mostly waited
    (BENCHMARKS.md).
    """
    with _sqlite_read(url) as db:
        async with contextlib.aclosing(_fetched(db.execute(sql, params))) as chunks:
            async for rows in chunks:
                yield rows


async def sqlite_sessions(
    url: StoreUrl, sql: str, params: dict[str, Any], whole_sql: str
) -> AsyncGenerator[StoredSession, None]:
    """A SQLite scan's sessions through the clean pass (see :func:`grouped_sessions`).

    ``sql`` reads the clean pass's rows, each session newest first;
    ``whole_sql`` one session's whole rows (``?`` for its app, user and
    session id) in the same order. Both run in one read transaction, so a
    session read again is read as it was.
    """
    with _sqlite_read(url) as db:
        db.execute("BEGIN")

        def whole(key: SessionKey) -> list[Any]:
            return db.execute(whole_sql, (key.app_name, key.user_id, key.session_id)).fetchall()

        async with contextlib.aclosing(grouped_sessions(
                _fetched(db.execute(sql, params)), key_columns=True, newest_first=True,
                whole=whole)) as sessions:
            async for stored in sessions:
                yield stored


async def server_chunks(
    engine: AsyncEngine, url: StoreUrl, sql: str, params: dict[str, Any]
) -> AsyncGenerator[Iterable[Any], None]:
    """Streams a query from a server in chunks.

    Through the driver's own server-side cursor: SQLAlchemy's ``stream()``
    over asyncpg and aiomysql kept every row in memory (measured), so memory
    would grow with the database instead of the largest session.
    """
    try:
        async with engine.connect() as conn:
            if conn.dialect.name == "postgresql":
                raw = await conn.get_raw_connection()
                driver = raw.driver_connection
                assert driver is not None
                names = list(params)
                for position, name in enumerate(names, start=1):
                    sql = sql.replace(f":{name}", f"${position}")
                async with driver.transaction(readonly=True):
                    # A streamed scan runs once: compiling it (JIT) cost seconds, measured.
                    await driver.execute("SET LOCAL jit = off")
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
    except _read_errors() as exc:
        raise translate_error(exc, url, "read") from exc
