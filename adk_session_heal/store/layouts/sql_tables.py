"""``DatabaseSessionService``'s layout (schema "1"), on SQLite, PostgreSQL and MySQL/MariaDB.

The one adapter for these tables, used by the wrapper (over the service's own
engine) and by scan / repair (over an engine opened from a URL):

* reads stream ``events`` ordered as ADK's ``get_session`` orders them,
  ``(timestamp, id)``, taking ``id`` and ``invocation_id`` from the columns and
  the timestamp from ``event_data`` (see
  :func:`~adk_session_heal.store.streaming.grouped_sessions`);
* a write is one transaction: on PostgreSQL hold the planned sessions (so a
  delete waits for it), count each planned session's events and skip a
  session that moved or is gone, insert the heal rows (keeping any row that
  holds the key; on MySQL/MariaDB skipping one whose session was deleted
  since), insert the ledger rows of the heals it wrote. ``sessions`` is never
  written, so no revision changes and a runner mid-turn never fails with
  ``StaleSessionError``. A transaction the database rolls back for a lost
  race (a deadlock) runs again;
* a removal (a late result superseded a heal) is one transaction too: lock
  the session's row, read its events as ADK orders them, delete the heal row
  only if the one rule lets it go
  (:func:`~adk_session_heal.store.base.decide_removal`), insert the
  removals-ledger rows;
* an operator's resolution likewise: lock, read, check the answer it
  supersedes, insert the resolution, delete that answer, and the ledger rows,
  all in one transaction (:func:`~adk_session_heal.store.base.decide_resolution`).
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import functools
import threading
from collections.abc import AsyncGenerator, Iterable, Sequence
from contextlib import aclosing
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, cast

from sqlalchemy import (
    String,
    Table,
    bindparam,
    func,
    insert,
    literal,
    null,
    select,
    text,
    union_all,
)
from sqlalchemy.dialects.postgresql import ARRAY
from sqlalchemy.exc import DBAPIError, SQLAlchemyError
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from ...core.adk_compat import timestamp_to_column
from ...core.healing import Heal, SessionHeals
from ...core.session_key import SessionKey
from ...errors import LedgerError, StoreError
from ..base import (
    KEYS_PER_READ,
    EventsQuery,
    Layout,
    Removal,
    RemoveOutcome,
    ResolveOutcome,
    ResolveResult,
    SessionFilter,
    SessionStore,
    StoredSession,
    WriteResult,
    checked,
    discount_planned,
    outcomes,
    removed,
)
from ..dialects import insert_new_rows, prepare_write
from ..driver_errors import lost_race, translate_error
from ..incremental import column_seconds
from ..ledger.heal_ledger import missing_ledger_message
from ..ledger.heal_table import (
    INCREMENTAL_REVISIONS,
    REMOVALS_REVISIONS,
    REMOVALS_TABLE,
    RESOLUTIONS_REVISIONS,
    heal_ledger_row,
    insert_ledger_rows,
    read_ledger_revision,
    removal_row,
    unsettle_params,
    unsettle_sql,
)
from ..prefilter import (
    KEY_PARAMS,
    PREFILTER_DIALECTS,
    PREFILTER_PAYS,
    Columns,
    candidates_query,
    keyed_events_query,
)
from ..streaming import grouped_sessions, server_chunks, sqlite_chunks
from ..urls import StoreUrl

if TYPE_CHECKING:
    from google.adk.events.event import Event

__all__ = [
    "DATABASE_EVENTS_TABLE",
    "SqlTablesStore",
    "database_event_row",
    "heal_row",
    "insert_database_events_batch",
]



@functools.cache
def _events_table() -> Table:
    """ADK's ``events`` table, from ADK's own model: imported by the first write, not by a scan."""
    from google.adk.sessions.schemas.v1 import StorageEvent

    return cast(Table, StorageEvent.__table__)


def _load_events_table() -> None:
    """Loads ADK's model of ``events`` (a background thread's work, see ``preload_writer``).

    A failure is left for the first write, which raises it where it is handled.
    """
    with contextlib.suppress(Exception):
        _events_table()


if TYPE_CHECKING:  # computed on first access, by __getattr__ below
    DATABASE_EVENTS_TABLE: Table
    """ADK's ``events`` table (schema "1"), with ADK's own column types."""


def __getattr__(name: str) -> Any:
    """Builds :data:`DATABASE_EVENTS_TABLE` on first use (it loads ADK's storage schema).

    Raises:
        AttributeError: Any other name.
    """
    if name == "DATABASE_EVENTS_TABLE":
        return _events_table()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


_EVENT_KEY = ("app_name", "user_id", "session_id", "id")
_NEWEST_FIRST_INDEX = "idx_events_app_user_session_ts_id"
"""ADK's index on ``events`` (app, user, session, timestamp DESC, id DESC)."""

_READ = Columns(("app_name", "user_id", "session_id", "id", "invocation_id", "timestamp",
                 "event_data"), tie="id", key_columns=True)
"""How scans read ``events`` (see :func:`~adk_session_heal.store.streaming.grouped_sessions`)."""

_WHOLE_READ_SHARE = 0.9
"""From this share of the sessions on, PostgreSQL reads the prefilter's candidates in one
ordered pass over every session: the read by keys cost more than the plain one there
(10,000 candidates of 10,000 sessions: 1.9-2.3 s against 1.6-1.7 s, measured). The
sessions the prefilter passed over are classified too, and found clean."""


def database_event_row(
    event: Event, *, app_name: str, user_id: str, session_id: str
) -> dict[str, Any]:
    """Returns the ``events`` row the installed ``DatabaseSessionService`` stores for ``event``.

    The ``timestamp`` column and the JSON ``timestamp`` hold the same instant,
    in the installed ADK's convention (naive local time up to 2.6, naive UTC
    from 2.7): ADK 2.7+ reads the JSON one, earlier ones the column, and all
    order by the column.
    """
    return {
        "id": event.id,
        "app_name": app_name,
        "user_id": user_id,
        "session_id": session_id,
        "invocation_id": event.invocation_id,
        "timestamp": timestamp_to_column(event.timestamp),
        "event_data": event.model_dump(exclude_none=True, mode="json"),
    }


def heal_row(
    key: SessionKey, heal: Heal, anchor_column: datetime.datetime | None
) -> dict[str, Any]:
    """Returns the ``events`` row of a heal, placed right after its anchor row.

    The ``timestamp`` column is the anchor row's own value (the call's, see
    :attr:`~adk_session_heal.core.heal_plan.HealPlan.anchor_event_id`) plus the
    heal's distance from it, whichever convention (local or UTC, see
    :mod:`~adk_session_heal.core.adk_compat`) and zone its writer used, so the heal
    sorts right after it for every reader, under any ``TZ``.

    Args:
        key: The heal's session.
        heal: The heal.
        anchor_column: The anchor row's ``timestamp`` column as stored, or
            ``None`` when that row was not found (the installed ADK's
            convention is used then).
    """
    plan = heal.plan
    if anchor_column is None:
        column = timestamp_to_column(plan.timestamp)
    else:
        # At least 1 µs: the anchor's JSON time may carry sub-µs digits the column lost.
        after = max(1, round((plan.timestamp - plan.anchor_timestamp) * 1_000_000))
        column = anchor_column.replace(tzinfo=None) + datetime.timedelta(microseconds=after)
    return {
        "id": plan.event_id,
        "app_name": key.app_name,
        "user_id": key.user_id,
        "session_id": key.session_id,
        "invocation_id": plan.invocation_id,
        "timestamp": column,
        "event_data": heal.data,
    }


async def insert_database_events_batch(
    conn: AsyncConnection, rows: Sequence[dict[str, Any]]
) -> list[bool | None]:
    """Inserts ``DatabaseSessionService`` event rows, keeping any row that holds the key.

    See :func:`~adk_session_heal.store.dialects.insert_new_rows`: batched on
    PostgreSQL and SQLite, one by one on MySQL/MariaDB; only an existing key
    counts as present (and, on MySQL/MariaDB, a deleted session as gone), any
    other error is raised.

    Args:
        conn: A connection inside the caller's transaction.
        rows: Rows from :func:`database_event_row` or :func:`heal_row`.

    Returns:
        For each row, whether this call wrote it (``None``: its session is gone).
    """
    return await insert_new_rows(conn, _events_table(), rows, _EVENT_KEY)


_PG_RECHECK = text("""
SELECT app_name, user_id, session_id, 0 AS events, id, timestamp FROM events
WHERE id = ANY(:ids) AND session_id = ANY(:all_sids)
UNION ALL
SELECT k.app, k.usr, k.sid,
  (SELECT count(*) FROM events e
    WHERE e.app_name = k.app AND e.user_id = k.usr AND e.session_id = k.sid),
  NULL, NULL
FROM unnest(:apps, :users, :sids) AS k(app, usr, sid)
""").bindparams(*(
    bindparam(name, type_=ARRAY(String))
    for name in ("apps", "users", "sids", "ids", "all_sids")
))
"""PostgreSQL's re-check: one index range per session (5x faster than ``IN`` lists there)."""

_PG_HOLD = text("""
SELECT 1 FROM sessions s JOIN unnest(:apps, :users, :sids) AS k(app, usr, sid)
  ON s.app_name = k.app AND s.user_id = k.usr AND s.id = k.sid
ORDER BY s.app_name, s.user_id, s.id FOR KEY SHARE OF s
""").bindparams(*(bindparam(name, type_=ARRAY(String)) for name in ("apps", "users", "sids")))
"""PostgreSQL: holds the planned sessions' rows until the write ends (:func:`_hold_sessions`)."""

_PG_NO_PRIVILEGE = "42501"
"""PostgreSQL's insufficient_privilege."""

_WRITE_ATTEMPTS = 5
"""Transactions a write runs at most when each loses a race (see
:func:`~adk_session_heal.store.driver_errors.lost_race`)."""


async def _hold_sessions(conn: AsyncConnection, batch: Sequence[SessionHeals]) -> None:
    """Keeps the planned sessions from being deleted until the write transaction ends.

    PostgreSQL checks an inserted row's foreign key at the end of the
    statement: a session deleted by its application (``delete_session``)
    after the re-count failed the whole batch's insert ("violates foreign key
    constraint"). Locking each session row ``FOR KEY SHARE`` first (the lock
    that check takes anyway) makes the re-count that follows final: a session
    deleted before it has no events there and is skipped as gone. Reads go on;
    a delete, and ADK's ``append_event`` (which locks the row ``FOR UPDATE``
    from ADK 1.28 on), wait until this transaction ends, so an event appended
    meanwhile comes after the heals and one appended before is in the
    re-count. A role without the UPDATE privilege on ``sessions`` (which row
    locks need) writes without the hold; a session deleted under its insert
    then fails the transaction, which runs again (see :meth:`SqlTablesStore.write`).

    SQLite's write lock already excludes the delete; on MySQL/MariaDB, whose
    foreign-key check locks the session as each row is inserted, a session
    gone by then is skipped row by row
    (:func:`~adk_session_heal.store.dialects.insert_new_rows`): holding it from
    the start would make ADK's delete, which locks the session's events first,
    deadlock with the insert.
    """
    if conn.dialect.name != "postgresql" or not batch:
        return
    keys = sorted({s.key for s in batch})
    try:
        async with conn.begin_nested():
            await conn.execute(_PG_HOLD, {"apps": [k.app_name for k in keys],
                                          "users": [k.user_id for k in keys],
                                          "sids": [k.session_id for k in keys]})
    except DBAPIError as exc:
        # A row lock needs the UPDATE privilege on the table: a role that may only
        # insert events writes without the hold, and a session deleted under its
        # insert fails the transaction, which runs again (lost_race).
        if getattr(exc.orig, "sqlstate", None) != _PG_NO_PRIVILEGE:
            raise


@dataclass(frozen=True, slots=True)
class Recheck:
    """What a write transaction reads before it inserts.

    Attributes:
        counts: Each re-checked session's events now, less its planned heals
            already stored (see :func:`~adk_session_heal.store.base.discount_planned`).
        anchor_columns: The stored ``timestamp`` column of each planned heal's
            anchor row (usually its call's), by session and event id.
    """

    counts: dict[SessionKey, int]
    anchor_columns: dict[tuple[SessionKey, str], datetime.datetime]


async def recheck(conn: AsyncConnection, batch: Sequence[SessionHeals]) -> Recheck:
    """Reads, in one statement of ``conn``'s transaction, what the write decides on.

    Counts each re-checked session's events (a planned heal already stored,
    written by a racing healer, is not counted: the session is as planned, and
    the insert will find the heal present) and reads each anchor row's
    ``timestamp`` column, so the heal is placed relative to it. One statement,
    so all parts see the same snapshot. Rows of other sessions a filter lets
    through are ignored.

    PostgreSQL applies an ``IN`` list on ``session_id`` as a filter over the
    app and user's whole index range (every event of the app, measured), so
    there each session is counted over its own range; elsewhere plain ``IN``
    lists, which SQLite and MySQL serve from the index.
    """
    checking = [s for s in batch if s.seen_events is not None]
    heal_ids = {(s.key, heal.event_id) for s in batch for heal in s.heals}
    anchor_ids = {(s.key, heal.plan.anchor_event_id) for s in batch for heal in s.heals}
    ids = sorted({event_id for _, event_id in heal_ids | anchor_ids})
    if conn.dialect.name == "postgresql":
        rows = await conn.execute(_PG_RECHECK, {
            "apps": [s.key.app_name for s in checking],
            "users": [s.key.user_id for s in checking],
            "sids": [s.key.session_id for s in checking],
            "ids": ids,
            "all_sids": sorted({s.key.session_id for s in batch}),
        })
    else:
        table = _events_table()
        columns = (table.c.app_name, table.c.user_id, table.c.session_id)

        def near(sessions: Sequence[SessionHeals]) -> tuple[Any, ...]:
            return (
                table.c.session_id.in_({s.key.session_id for s in sessions}),
                table.c.app_name.in_({s.key.app_name for s in sessions}),
                table.c.user_id.in_({s.key.user_id for s in sessions}),
            )

        # The row-reading part comes first: a UNION takes its result types
        # (here: the timestamp column's) from its first SELECT.
        by_id = select(*columns, literal(0).label("events"), table.c.id,
                       table.c.timestamp).where(*near(batch), table.c.id.in_(ids))
        statement: Any = by_id
        if checking:
            statement = union_all(by_id, select(
                *columns, func.count().label("events"), null().label("id"),
                null().label("timestamp"),
            ).where(*near(checking)).group_by(*columns))
        rows = await conn.execute(statement)
    counts: dict[SessionKey, int] = {}
    present: list[tuple[str, str, str, str]] = []
    anchor_columns: dict[tuple[SessionKey, str], datetime.datetime] = {}
    for app, user, session, events, event_id, column in rows:
        key = SessionKey(app, user, session)
        if event_id is None:
            counts[key] = int(events)
            continue
        if (key, event_id) in heal_ids:
            present.append((app, user, session, event_id))
        if (key, event_id) in anchor_ids and isinstance(column, datetime.datetime):
            anchor_columns[(key, event_id)] = column
    return Recheck(discount_planned(checking, counts, present), anchor_columns)


class SqlTablesStore(SessionStore):
    """The ``DatabaseSessionService`` layout, through a SQLAlchemy async engine.

    Args:
        engine: The engine (the service's ``db_engine``, or one opened from a URL).
        url: The store's URL, for messages and for reading SQLite files
            directly; ``None`` when the engine belongs to a service (errors are
            then raised as the driver raised them).
        owns_engine: Dispose the engine on :meth:`close`.
    """

    layout = Layout.DATABASE

    def __init__(
        self, engine: AsyncEngine, url: StoreUrl | None = None, *, owns_engine: bool = False
    ) -> None:
        self.engine = engine
        self.url = url
        self._owns_engine = owns_engine
        self._index_read = False
        self._newest_first: str | None = None

    def __str__(self) -> str:
        """Returns the redacted URL."""
        return str(self.url) if self.url is not None else "the session database"

    def _error(self, exc: Exception, doing: str) -> Exception:
        return translate_error(exc, self.url, doing) if self.url is not None else exc

    async def count_sessions(self, where: SessionFilter) -> int:
        """Returns how many sessions match."""
        clause, params = where.where("id", self.engine.dialect.name)
        return await self._count(f"SELECT count(*) FROM sessions{clause}", params)

    async def newest_update(self, where: SessionFilter) -> float | None:
        """Returns the matching sessions' newest ``update_time`` (column seconds)."""
        clause, params = replace(where, since=None).where("id", self.engine.dialect.name)
        try:
            async with self.engine.connect() as conn:
                result = await conn.execute(
                    text(f"SELECT max(update_time) FROM sessions{clause}"), params)
                return column_seconds(result.scalar_one())
        except SQLAlchemyError as exc:
            raise self._error(exc, "read") from exc

    async def _count(self, sql: str, params: dict[str, Any]) -> int:
        return int((await self._rows(sql, params))[0][0])

    async def _rows(self, sql: str, params: dict[str, Any]) -> list[Any]:
        try:
            async with self.engine.connect() as conn:
                return list((await conn.execute(text(sql), params)).all())
        except SQLAlchemyError as exc:
            raise self._error(exc, "read") from exc

    async def stream_sessions(self, where: SessionFilter) -> AsyncGenerator[StoredSession, None]:
        """Yields every matching session with events, ordered as ADK reads them."""
        dialect = self.engine.dialect.name
        index = await self._newest_first_index() if dialect in ("mysql", "mariadb") else None
        query = where.events_in_order(_READ.select, _READ.tie, dialect, newest_first_index=index)
        stream = (self._stream(query.sql, query.params, newest_first=query.newest_first)
                  if query.keys is None else self._grouped(self._by_key(query), newest_first=True))
        async with aclosing(stream) as sessions:
            async for stored in sessions:
                yield stored

    async def _by_key(self, query: EventsQuery) -> AsyncGenerator[Iterable[Any], None]:
        """A MySQL/MariaDB shard's rows, :data:`KEYS_PER_READ` sessions at a time
        (see :attr:`EventsQuery.keys`)."""
        url = self._streamed_url()
        last = None
        while True:
            keys = await self._rows(*query.keys_after(last))
            if keys:
                async with aclosing(server_chunks(self.engine, url, *query.page(keys))) as chunks:
                    async for rows in chunks:
                        yield rows
            if len(keys) < KEYS_PER_READ:
                return
            last = keys[-1]

    async def candidates(
        self, where: SessionFilter, *, everywhere: bool = False, all_if_most: bool = False
    ) -> tuple[int, AsyncGenerator[StoredSession, None]] | None:
        """Returns the matching events' count and a stream of the candidate sessions only.

        The database picks them (:mod:`~adk_session_heal.store.prefilter`);
        ``None`` when this engine has no prefilter (PostgreSQL needs
        ``event_data`` stored as ``jsonb``, as ADK creates it), or, unless
        ``everywhere``, where it measured slower than the full scan. With
        ``all_if_most``, PostgreSQL yields every session when the candidates
        are at least :data:`_WHOLE_READ_SHARE` of them.
        """
        dialect = self.engine.dialect.name
        if self.url is None or dialect not in PREFILTER_DIALECTS or (
                dialect not in PREFILTER_PAYS and not everywhere):
            return None
        if dialect == "postgresql" and await self._count(
                "SELECT count(*) FROM information_schema.columns WHERE table_name = 'events' "
                "AND column_name = 'event_data' AND data_type <> 'jsonb' "
                "AND table_schema = current_schema()", {}):
            return None
        clause, params = where.where("session_id", dialect)
        total = await self._count(f"SELECT count(*) FROM events{clause}", params)
        if dialect != "postgresql":
            return total, self._stream(candidates_query(dialect, _READ, clause), params)
        return total, self._keyed_stream(candidates_query(dialect, _READ, clause, keys_only=True),
                                         params, where if all_if_most else None)

    async def _keyed_stream(
        self, keys_sql: str, params: dict[str, str], whole: SessionFilter | None
    ) -> AsyncGenerator[StoredSession, None]:
        """PostgreSQL: the candidates' keys in one query (parallel workers may help), then
        their events through a cursor; with ``whole`` (the filter), every session in one
        ordered pass when the candidates are nearly all of them (:data:`_WHOLE_READ_SHARE`)."""
        try:
            async with self.engine.connect() as conn:
                # Compiling the query (JIT) cost seconds; the grouping spilled to disk
                # at the default 4 MB (both measured on 100k events).
                await conn.execute(text("SET LOCAL jit = off"))
                await conn.execute(text("SET LOCAL work_mem = '64MB'"))
                keys = (await conn.execute(text(keys_sql), params)).all()
        except SQLAlchemyError as exc:
            raise self._error(exc, "read") from exc
        if not keys:
            return
        if whole is not None and len(keys) >= _WHOLE_READ_SHARE * await self.count_sessions(whole):
            async with aclosing(self.stream_sessions(whole)) as stream:
                async for stored in stream:
                    yield stored
            return
        arrays = {name: [str(key[i]) for key in keys] for i, name in enumerate(KEY_PARAMS)}
        async with aclosing(self._stream(keyed_events_query(_READ), arrays)) as stream:
            async for stored in stream:
                yield stored

    async def _newest_first_index(self) -> str | None:
        """MySQL/MariaDB: ADK's events index when it is (app, user, session, timestamp
        DESC, id DESC), read once (see :meth:`SessionFilter.events_in_order`).

        MySQL before 8.0 and databases made without the index (or with other
        directions) read sorted, as before.
        """
        if not self._index_read:
            columns = [(str(name).lower(), str(order).upper()) for name, order in (
                await self._rows(
                    "SELECT column_name, collation FROM information_schema.statistics "
                    "WHERE table_schema = DATABASE() AND table_name = 'events' "
                    "AND index_name = :index ORDER BY seq_in_index",
                    {"index": _NEWEST_FIRST_INDEX}))]
            self._newest_first = _NEWEST_FIRST_INDEX if columns == [
                ("app_name", "A"), ("user_id", "A"), ("session_id", "A"), ("timestamp", "D"),
                ("id", "D")] else None
            self._index_read = True
        return self._newest_first

    def _streamed_url(self) -> StoreUrl:
        """The URL reads stream from (a store over a service's engine has none)."""
        if self.url is None:
            raise NotImplementedError("open the store from its URL to stream it")
        return self.url

    async def _stream(
        self, sql: str, params: dict[str, Any], *, newest_first: bool = False
    ) -> AsyncGenerator[StoredSession, None]:
        """Groups one query's rows into sessions."""
        url = self._streamed_url()
        chunks = (
            sqlite_chunks(url, sql, params) if url.sqlite_path is not None
            else server_chunks(self.engine, url, sql, params)
        )
        async with aclosing(self._grouped(chunks, newest_first=newest_first)) as grouped:
            async for stored in grouped:
                yield stored

    def _grouped(self, chunks: AsyncGenerator[Iterable[Any], None], *,
                 newest_first: bool) -> AsyncGenerator[StoredSession, None]:
        """Groups ordered rows into sessions (PostgreSQL's driver decodes the JSON itself)."""
        return grouped_sessions(chunks, key_columns=True,
                                decoded=self.engine.dialect.name == "postgresql",
                                newest_first=newest_first)

    def preload_writer(self) -> None:
        """Imports ADK's storage model (0.6 s, measured) in a thread while the scan runs.

        The scan spends much of its time waiting on the database (PostgreSQL's
        prefilter query, SQLite's reads in aiosqlite's thread); the first
        write finds the model loaded. A daemon thread: an interpreter
        exiting early does not wait for it.
        """
        threading.Thread(target=_load_events_table, name="adk-session-heal-preload",
                         daemon=True).start()

    async def ledger_revision(self) -> str | None:
        """Returns the heal ledger's revision (``None``: not installed)."""
        try:
            async with self.engine.connect() as conn:
                return await read_ledger_revision(conn)
        except SQLAlchemyError as exc:
            raise self._error(exc, "read") from exc

    async def write(
        self, batch: Sequence[SessionHeals], *, ledger: bool, read_back: bool = False
    ) -> list[WriteResult]:
        """Applies the heals in one transaction (see the module docstring).

        A transaction that lost a race (a deadlock, a lock wait timed out, see
        :func:`~adk_session_heal.store.driver_errors.lost_race`) is rolled
        back whole and run again, up to :data:`_WRITE_ATTEMPTS` times; each
        run re-checks the sessions, so one deleted meanwhile is skipped as
        gone and the rest of the batch is written.
        """
        attempt = 1
        while True:
            try:
                return await self._write_once(batch, ledger, read_back)
            except (SQLAlchemyError, OSError) as exc:  # OSError: asyncpg's TimeoutError
                if attempt < _WRITE_ATTEMPTS and lost_race(exc):
                    await asyncio.sleep(0.01 * attempt)
                    attempt += 1
                    continue
                if ledger and await self.ledger_revision_or_none() is None:
                    raise LedgerError(missing_ledger_message(self, None), missing=True) from exc
                raise self._error(exc, "write to") from exc

    async def _write_once(
        self, batch: Sequence[SessionHeals], ledger: bool, read_back: bool
    ) -> list[WriteResult]:
        """One write transaction: hold the sessions, re-check, insert, ledger rows."""
        async with self.engine.begin() as conn:
            await prepare_write(conn)
            await _hold_sessions(conn, batch)
            found = await recheck(conn, batch)
            live, results = checked(batch, found.counts)
            heals = [(planned.key, heal) for planned in live for heal in planned.heals]
            rows = [
                heal_row(key, heal, found.anchor_columns.get((key, heal.plan.anchor_event_id)))
                for key, heal in heals
            ]
            written = await insert_database_events_batch(conn, rows)
            if ledger:
                await insert_ledger_rows(conn, [
                    heal_ledger_row(heal)
                    for (_, heal), ok in zip(heals, written, strict=True) if ok])
            lost = [key_heal for key_heal, ok in zip(heals, written, strict=True)
                    if ok is False]
            stored = await self._read_back(conn, lost) if read_back and lost else {}
        return outcomes(batch, results, [heal for _, heal in heals], written, stored)

    async def remove(self, batch: Sequence[Removal], *, ledger: bool) -> list[RemoveOutcome]:
        """Takes heal rows of ours out, in one transaction (see the module docstring)."""
        from .sql_removals import remove_rows

        incremental = await self.ledger_revision_or_none() in INCREMENTAL_REVISIONS
        _events_table()  # ADK's model loads (0.6 s) before the write lock is taken, not in it
        try:
            async with self.engine.begin() as conn:
                await prepare_write(conn)
                results = await remove_rows(conn, batch)
                taken = removed(batch, results)
                rows = [removal_row(removal) for removal in taken]
                if ledger and rows:
                    await conn.execute(insert(REMOVALS_TABLE), rows)
                if incremental and taken:
                    await conn.execute(text(unsettle_sql(conn.dialect.name)),
                                       [unsettle_params(r.key) for r in taken])
        except (SQLAlchemyError, OSError) as exc:
            if ledger:
                revision = await self.ledger_revision_or_none()
                if revision not in REMOVALS_REVISIONS:
                    raise LedgerError(missing_ledger_message(self, revision), missing=True) from exc
            raise self._error(exc, "write to") from exc
        return results

    async def resolve(
        self, resolution: Heal, removal: Removal, *, ledger: bool
    ) -> ResolveResult:
        """Writes a resolution and takes out what it supersedes, in one transaction."""
        from .sql_removals import resolve_rows

        incremental = await self.ledger_revision_or_none() in INCREMENTAL_REVISIONS
        _events_table()  # ADK's model loads (0.6 s) before the write lock is taken, not in it
        resolution.data  # noqa: B018  (built, and cached, before the lock too)
        try:
            async with self.engine.begin() as conn:
                await prepare_write(conn)
                result = await resolve_rows(conn, resolution, removal, ledger=ledger)
                if incremental and result.outcome in (ResolveOutcome.WRITTEN,
                                                      ResolveOutcome.PRESENT):
                    await conn.execute(text(unsettle_sql(conn.dialect.name)),
                                       [unsettle_params(removal.key)])
        except (SQLAlchemyError, OSError) as exc:
            if ledger:
                revision = await self.ledger_revision_or_none()
                if revision not in RESOLUTIONS_REVISIONS:
                    raise LedgerError(missing_ledger_message(self, revision)) from exc
            raise self._error(exc, "write to") from exc
        return result

    async def ledger_revision_or_none(self) -> str | None:
        """Returns the ledger's revision, or ``None`` when it cannot be read."""
        try:
            return await self.ledger_revision()
        except (SQLAlchemyError, StoreError, OSError):
            return None

    async def _read_back(
        self, conn: AsyncConnection, lost: Sequence[tuple[SessionKey, Any]]
    ) -> dict[str, Event]:
        stored: dict[str, Event] = {}
        table = _events_table()
        for key, heal in lost:
            # A locking read: on MySQL/MariaDB a plain one reads the transaction's
            # snapshot, taken before the winner's row was committed, and finds nothing.
            statement = select(table).where(
                table.c.app_name == key.app_name,
                table.c.user_id == key.user_id,
                table.c.session_id == key.session_id,
                table.c.id == heal.event_id,
            ).with_for_update(read=True)
            row = (await conn.execute(statement)).first()
            if row is not None:
                stored[heal.event_id] = _to_event(row)
        return stored

    def server_engine(self) -> AsyncEngine | None:
        """This store's engine when it is on a server (see :meth:`SessionStore.server_engine`)."""
        return self.engine if self.url is not None and self.url.sqlite_path is None else None

    async def close(self) -> None:
        """Disposes the engine if this adapter opened it."""
        if self._owns_engine:
            await self.engine.dispose()


def _to_event(row: Any) -> Event:
    """Returns the ``Event`` of an ``events`` row, as ``StorageEvent.to_event`` reads it."""
    from google.adk.sessions.schemas.v1 import StorageEvent

    storage = StorageEvent(**{c.name: getattr(row, c.name) for c in _events_table().columns})
    return storage.to_event()
