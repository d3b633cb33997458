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
  race (a deadlock) runs again. The rows it writes are built in
  :mod:`~adk_session_heal.store.layouts.sql_event_rows`, what it reads first in
  :mod:`~adk_session_heal.store.layouts.sql_recheck`;
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
from collections.abc import AsyncGenerator, Callable, Iterable, Sequence
from contextlib import aclosing
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from sqlalchemy import insert, select, text
from sqlalchemy.exc import MultipleResultsFound, SQLAlchemyError

from ...core.healing import Heal, SessionHeals
from ...core.session_key import SessionKey
from ...errors import LedgerError, StoreError
from ..base import (
    Layout,
    ResolveOutcome,
    SessionStore,
)
from ..batch_outcomes import checked, outcomes, removed
from ..dialects import prepare_write
from ..driver_errors import lost_race, translate_error
from ..incremental import column_seconds
from ..ledger.heal_table import (
    LEDGER_TABLE_NAME,
    LEDGER_VERSION_TABLE,
    REMOVALS_TABLE,
    heal_ledger_row,
    insert_ledger_rows,
    read_ledger_revision,
    removal_row,
    unsettle_params,
    unsettle_sql,
)
from ..ledger.revisions import Feature, has, missing_ledger_message
from ..prefilter import (
    KEY_PARAMS,
    PREFILTER_DIALECTS,
    PREFILTER_PAYS,
    Columns,
    candidates_query,
    keyed_events_query,
)
from ..session_filter_sql import KEYS_PER_READ, EventsQuery, events_in_order, where_clause
from ..streaming import (
    grouped_sessions,
    server_chunks,
    sqlite_chunks,
    sqlite_rows,
    sqlite_sessions,
)
from ..urls import StoreUrl
from .sql_event_rows import (
    events_table,
    heal_row,
    insert_database_events_batch,
    to_event,
)
from .sql_recheck import hold_sessions, recheck

if TYPE_CHECKING:
    from contextlib import AbstractAsyncContextManager

    from google.adk.events.event import Event
    from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

    from ...core.tool_runs import ToolRunReader
    from ..base import (
        Removal,
        RemoveOutcome,
        ResolveResult,
        SessionFilter,
        StoredSession,
        WriteResult,
    )
    from ..engines import TimeoutArg
    from ..ledger.heal_ledger import SqlHealLedger

_NEWEST_FIRST_INDEX = "idx_events_app_user_session_ts_id"
"""ADK's index on ``events`` (app, user, session, timestamp DESC, id DESC)."""

_READ = Columns(("app_name", "user_id", "session_id", "id", "invocation_id", "timestamp",
                 "event_data"), tie="id", key_columns=True)
"""How scans read ``events`` (see :func:`~adk_session_heal.store.streaming.grouped_sessions`)."""

_CLEAN_PASS = ("app_name", "user_id", "session_id", "invocation_id IS NULL OR timestamp IS NULL",
               "event_data")
"""What a SQLite scan's clean pass reads of each row (see
:func:`~adk_session_heal.store.streaming.sqlite_sessions`): the ids, invocation ids and
times are read only for the sessions read again whole (100,000 events: 1.29 -> 0.97 G
instructions to fetch, callgrind)."""

_WHOLE_SESSION = (f"SELECT {', '.join(_READ.select)} FROM events WHERE app_name = ? "
                  f"AND user_id = ? AND session_id = ? ORDER BY timestamp DESC, {_READ.tie} DESC")
"""One session's rows read again whole, newest first as the clean pass read them."""

_WHOLE_READ_SHARE = 0.9
"""From this share of the sessions on, PostgreSQL reads the prefilter's candidates in one
ordered pass over every session: the read by keys cost more than the plain one there
(10,000 candidates of 10,000 sessions: 1.9-2.3 s against 1.6-1.7 s, measured). The
sessions the prefilter passed over are classified too, and found clean."""


_WRITE_ATTEMPTS = 5
"""Transactions a write runs at most when each loses a race (see
:func:`~adk_session_heal.store.driver_errors.lost_race`)."""


class SqlTablesStore(SessionStore):
    """The ``DatabaseSessionService`` layout, through a SQLAlchemy async engine.

    A SQLite file opened from its URL is read through the standard library's
    ``sqlite3`` (read-only, as its scans stream it), and its engine is built
    (``engine_factory``) only when something writes: a scan loads no async
    engine, driver or SQLAlchemy ORM (about 55 ms of a quiet start).

    Args:
        engine: The engine (the service's ``db_engine``, or one opened from a
            URL); ``None`` with ``engine_factory``.
        url: The store's URL, for messages and for reading SQLite files
            directly; ``None`` when the engine belongs to a service (errors are
            then raised as the driver raised them).
        owns_engine: Dispose the engine on :meth:`close`.
        engine_factory: Builds the engine on first use (a SQLite ``url``).
    """

    layout = Layout.DATABASE

    def __init__(
        self, engine: AsyncEngine | None, url: StoreUrl | None = None, *,
        owns_engine: bool = False, engine_factory: Callable[[], AsyncEngine] | None = None,
    ) -> None:
        assert engine is not None or (engine_factory is not None and url is not None
                                      and url.sqlite_path is not None)
        self._engine = engine
        self._engine_factory = engine_factory
        self.url = url
        self._sqlite = url is not None and url.sqlite_path is not None
        self._dialect = "sqlite" if engine is None else engine.dialect.name
        self._owns_engine = owns_engine
        self._index_read = False
        self._newest_first: str | None = None

    def __str__(self) -> str:
        """Returns the redacted URL."""
        return str(self.url) if self.url is not None else "the session database"

    @property
    def engine(self) -> AsyncEngine:
        """The engine, built on first use where it was not given."""
        if self._engine is None:
            assert self._engine_factory is not None
            self._engine = self._engine_factory()
        return self._engine

    def _error(self, exc: Exception, doing: str) -> Exception:
        return translate_error(exc, self.url, doing) if self.url is not None else exc

    async def count_sessions(self, where: SessionFilter) -> int:
        """Returns how many sessions match."""
        clause, params = where_clause(where, "id", self._dialect)
        return await self._count(f"SELECT count(*) FROM sessions{clause}", params)

    async def newest_update(self, where: SessionFilter) -> float | None:
        """Returns the matching sessions' newest ``update_time`` (column seconds)."""
        clause, params = where_clause(replace(where, since=None), "id", self._dialect)
        if self._sqlite:
            return column_seconds(
                (await self._rows(f"SELECT max(update_time) FROM sessions{clause}", params))[0][0])
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
        if self._sqlite:
            return sqlite_rows(self._streamed_url(), sql, params)
        try:
            async with self.engine.connect() as conn:
                return list((await conn.execute(text(sql), params)).all())
        except SQLAlchemyError as exc:
            raise self._error(exc, "read") from exc

    async def stream_sessions(self, where: SessionFilter, *,
                              pass_clean: bool = False) -> AsyncGenerator[StoredSession, None]:
        """Yields every matching session with events, ordered as ADK reads them.

        With ``pass_clean``, a SQLite file is read through the clean pass
        (:func:`~adk_session_heal.store.streaming.sqlite_sessions`): only the
        keys, a NULL check of the key columns and ``event_data`` of each row,
        the JSON decoded only in what the clean test reads; a session found
        clean so is yielded so, any other read again whole.
        """
        dialect = self._dialect
        if pass_clean and self.url is not None and self.url.sqlite_path is not None:
            query = events_in_order(where, _CLEAN_PASS, _READ.tie, dialect,
                                    newest_first_index=_NEWEST_FIRST_INDEX)
            async with aclosing(sqlite_sessions(self.url, query.sql, query.params,
                                                _WHOLE_SESSION)) as passed:
                async for stored in passed:
                    yield stored
            return
        index = (await self._newest_first_index() if dialect in ("mysql", "mariadb")
                 else _NEWEST_FIRST_INDEX if dialect == "sqlite" else None)
        query = events_in_order(where, _READ.select, _READ.tie, dialect,
                                newest_first_index=index)
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
        dialect = self._dialect
        if self.url is None or dialect not in PREFILTER_DIALECTS or (
                dialect not in PREFILTER_PAYS and not everywhere):
            return None
        if dialect == "postgresql" and await self._count(
                "SELECT count(*) FROM information_schema.columns WHERE table_name = 'events' "
                "AND column_name = 'event_data' AND data_type <> 'jsonb' "
                "AND table_schema = current_schema()", {}):
            return None
        clause, params = where_clause(where, "session_id", dialect)
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
        DESC, id DESC), read once (see
        :func:`~adk_session_heal.store.session_filter_sql.events_in_order`).

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
                                decoded=self._dialect == "postgresql",
                                newest_first=newest_first)

    def heal_ledger(self, timeout: TimeoutArg = None) -> SqlHealLedger:
        """Opens this database's ledger tables, sharing a server's engine (server_engine)."""
        from ..ledger.heal_ledger import SqlHealLedger

        return SqlHealLedger.from_url(self._opened_url(), timeout=timeout,
                                      engine=self.server_engine())

    def tool_runs(
        self, timeout: TimeoutArg = None
    ) -> AbstractAsyncContextManager[ToolRunReader | None]:
        """This database's ``adk_session_heal_tool_runs`` table, read-only (see the base class)."""
        from ..ledger.tool_run_sql import SqlToolRunLedger

        return SqlToolRunLedger.reading(self.url, self.ledger_revision, timeout=timeout,
                                        engine=self.server_engine())

    async def ledger_revision(self) -> str | None:
        """Returns the heal ledger's revision (``None``: not installed)."""
        if self._sqlite:
            tables = {row[0] for row in await self._rows(
                "SELECT name FROM sqlite_master WHERE type = 'table'", {})}
            if LEDGER_TABLE_NAME not in tables or LEDGER_VERSION_TABLE not in tables:
                return None
            found = await self._rows(f"SELECT version_num FROM {LEDGER_VERSION_TABLE}", {})
            if len(found) > 1:  # as read_ledger_revision's scalar_one_or_none refuses it
                raise self._error(MultipleResultsFound(
                    "Multiple rows were found when one or none was required"), "read")
            return str(found[0][0]) if found and found[0][0] is not None else None
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
            await hold_sessions(conn, batch)
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

        incremental = has(await self.ledger_revision_or_none(), Feature.INCREMENTAL)
        events_table()  # ADK's model loads (0.6 s) before the write lock is taken, not in it
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
                if not has(revision, Feature.REMOVALS):
                    raise LedgerError(missing_ledger_message(self, revision), missing=True) from exc
            raise self._error(exc, "write to") from exc
        return results

    async def resolve(
        self, resolution: Heal, removal: Removal, *, ledger: bool
    ) -> ResolveResult:
        """Writes a resolution and takes out what it supersedes, in one transaction."""
        from .sql_removals import resolve_rows

        incremental = has(await self.ledger_revision_or_none(), Feature.INCREMENTAL)
        events_table()  # ADK's model loads (0.6 s) before the write lock is taken, not in it
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
                if not has(revision, Feature.RESOLUTIONS):
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
        table = events_table()
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
                stored[heal.event_id] = to_event(row)
        return stored

    def server_engine(self) -> AsyncEngine | None:
        """This store's engine when it is on a server (see :meth:`SessionStore.server_engine`)."""
        return self.engine if self.url is not None and not self._sqlite else None

    async def close(self) -> None:
        """Disposes the engine if this adapter opened it."""
        if self._owns_engine and self._engine is not None:
            await self._engine.dispose()
