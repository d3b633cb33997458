"""ADK's own ``SqliteSessionService`` layout, through aiosqlite as ADK uses it.

The one adapter for these files, used by the wrapper (over the service's own
connection helper, which applies its pragmas and serves ``:memory:``) and by
scan / repair (over the file named by a URL). Same tables names as
``DatabaseSessionService``, another schema: a REAL ``timestamp``, every field
read from ``event_data``, events ordered by ``(timestamp, rowid)``. A write is
one transaction: re-count each planned session's events, insert the heal rows
(``INSERT OR IGNORE``), insert the ledger rows of the heals written. A
removal likewise: read the session's events in ADK's order, delete the heal
row only if the one rule lets it go
(:func:`~adk_session_heal.store.base.decide_removal`), insert the
removals-ledger rows; and an operator's resolution: insert it and delete the
answer it supersedes, both or neither
(:func:`~adk_session_heal.store.base.decide_resolution`).
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import AsyncGenerator, AsyncIterator, Callable, Sequence
from contextlib import AbstractAsyncContextManager, aclosing, asynccontextmanager
from dataclasses import replace
from typing import TYPE_CHECKING, Any

import aiosqlite

from ...core.event_access import STORED_JSON
from ...core.healing import Heal, SessionHeals
from ...core.session_key import SessionKey
from ..base import (
    Layout,
    RemoveOutcome,
    ResolveOutcome,
    ResolveResult,
    SessionStore,
    decide_removal,
    decide_resolution,
)
from ..batch_outcomes import checked, discount_planned, outcomes, removed
from ..driver_errors import translate_error
from ..incremental import column_seconds
from ..ledger.heal_table import (
    LEDGER_TABLE,
    LEDGER_TABLE_NAME,
    LEDGER_VERSION_TABLE,
    REMOVALS_TABLE,
    RESOLUTIONS_TABLE,
    heal_ledger_row,
    removal_row,
    resolution_row,
    unsettle_params,
    unsettle_sql,
)
from ..ledger.revisions import Feature, has
from ..prefilter import PREFILTER_PAYS, Columns, candidates_query
from ..session_filter_sql import events_in_order, where_clause
from ..streaming import grouped_sessions, sqlite_chunks, sqlite_functions
from ..urls import StoreUrl

if TYPE_CHECKING:  # a stored event is read back as an Event only after a lost write race
    from google.adk.events.event import Event

    from ...core.tool_runs import ToolRunReader
    from ..base import Removal, SessionFilter, StoredSession, WriteResult
    from ..engines import TimeoutArg
    from ..ledger.heal_ledger import SqlHealLedger

SQLITE_EVENT_COLUMNS = (
    "id",
    "app_name",
    "user_id",
    "session_id",
    "invocation_id",
    "timestamp",
    "event_data",
)
"""Column order of ``SqliteSessionService``'s ``events`` table inserts."""


_READ = Columns(("app_name", "user_id", "session_id", "id", "event_data"), tie="rowid",
                key_columns=False)
"""How scans read ``events``: every field from ``event_data``, ties by ``rowid``."""

_SQLITE_INSERT = (
    f"INSERT OR IGNORE INTO events ({', '.join(SQLITE_EVENT_COLUMNS)}) "
    f"VALUES ({', '.join('?' for _ in SQLITE_EVENT_COLUMNS)})"
)


def sqlite_event_row(
    event: Event, *, app_name: str, user_id: str, session_id: str
) -> tuple[Any, ...]:
    """Returns the ``events`` row ``SqliteSessionService`` would store for ``event``.

    Values are in :data:`SQLITE_EVENT_COLUMNS` order.
    """
    return (
        event.id,
        app_name,
        user_id,
        session_id,
        event.invocation_id,
        event.timestamp,
        event.model_dump_json(exclude_none=True),
    )


def sqlite_heal_row(key: SessionKey, heal: Heal) -> tuple[Any, ...]:
    """Returns the ``events`` row of a heal (values in :data:`SQLITE_EVENT_COLUMNS` order).

    The ``timestamp`` column is a REAL holding the event's own time in every
    ADK version, so the heal's planned time places it right after its anchor
    (its call, see ``HealPlan.anchor_event_id``).
    """
    plan = heal.plan
    return (
        plan.event_id,
        key.app_name,
        key.user_id,
        key.session_id,
        plan.invocation_id,
        plan.timestamp,
        json.dumps(heal.data, separators=(",", ":")),
    )


async def insert_sqlite_events(
    db: aiosqlite.Connection, rows: Sequence[tuple[Any, ...]]
) -> list[bool]:
    """Inserts ``SqliteSessionService`` event rows, skipping existing keys.

    Args:
        db: An open connection; the caller commits.
        rows: Rows from :func:`sqlite_event_row`.

    Returns:
        For each row, whether this call wrote it.
    """
    written: list[bool] = []
    for row in rows:
        cursor = await db.execute(_SQLITE_INSERT, row)
        written.append(cursor.rowcount == 1)
        await cursor.close()
    return written


async def insert_sqlite_ledger_rows(
    db: aiosqlite.Connection, rows: Sequence[dict[str, Any]]
) -> None:
    """Inserts heal-ledger rows into an ADK ``SqliteSessionService`` file.

    Args:
        db: An open connection; the caller commits (with the heals' rows).
        rows: Rows from :func:`~adk_session_heal.store.ledger.heal_table.ledger_row`.
    """
    if rows:
        await db.executemany(_insert_sql(LEDGER_TABLE.name, rows, "INSERT OR IGNORE"), rows)

def _insert_sql(table: str, rows: Sequence[dict[str, Any]], verb: str = "INSERT") -> str:
    """The insert of ``rows`` (all with the same keys): only the columns they hold.

    A ledger not yet at revision ``0004`` lacks its columns, and a row outside
    a run leaves them out.
    """
    columns = tuple(rows[0])
    return (f"{verb} INTO {table} ({', '.join(columns)}) "
            f"VALUES ({', '.join(':' + c for c in columns)})")


Connect = Callable[[bool], AbstractAsyncContextManager[aiosqlite.Connection]]
"""Opens a connection: ``connect(writable)``."""


class AdkSqliteStore(SessionStore):
    """ADK's ``SqliteSessionService`` layout.

    Args:
        connect: Opens a connection (``connect(writable)``); see
            :meth:`from_url` and :meth:`from_service`.
        url: The file's URL, for messages and scans; ``None`` when the
            connections come from a service.
    """

    layout = Layout.ADK_SQLITE

    def __init__(self, connect: Connect, url: StoreUrl | None = None) -> None:
        self._connect = connect
        self.url = url

    @classmethod
    def from_url(cls, url: StoreUrl) -> AdkSqliteStore:
        """Opens the file a URL names (read-only unless a write asks for more)."""

        @asynccontextmanager
        async def connect(writable: bool) -> AsyncIterator[aiosqlite.Connection]:
            async with aiosqlite.connect(url.sqlite_uri(writable=writable), uri=True) as db:
                await sqlite_functions(db)
                yield db

        return cls(connect, url)

    @classmethod
    def from_service(cls, service: object) -> AdkSqliteStore:
        """Uses a ``SqliteSessionService``'s own connection helper."""
        helper = service._get_db_connection  # type: ignore[attr-defined]
        return cls(lambda _writable: helper())

    def __str__(self) -> str:
        """Returns the redacted URL."""
        return str(self.url) if self.url is not None else "the SQLite session file"

    def _error(self, exc: sqlite3.Error, doing: str) -> Exception:
        return translate_error(exc, self.url, doing) if self.url is not None else exc

    async def count_sessions(self, where: SessionFilter) -> int:
        """Returns how many sessions match."""
        clause, params = where_clause(where, "id", "sqlite", epoch_times=True)
        return await self._count(f"SELECT count(*) FROM sessions{clause}", params)

    async def newest_update(self, where: SessionFilter) -> float | None:
        """Returns the matching sessions' newest ``update_time`` (POSIX seconds)."""
        clause, params = where_clause(replace(where, since=None), "id", "sqlite",
                                       epoch_times=True)
        try:
            async with self._connect(False) as db, db.execute(
                    f"SELECT max(update_time) FROM sessions{clause}", params) as cursor:
                row = await cursor.fetchone()
                return column_seconds(row[0]) if row else None
        except sqlite3.Error as exc:
            raise self._error(exc, "read") from exc

    async def _count(self, sql: str, params: dict[str, Any]) -> int:
        try:
            async with self._connect(False) as db, db.execute(sql, params) as cursor:
                row = await cursor.fetchone()
                return int(row[0]) if row else 0
        except sqlite3.Error as exc:
            raise self._error(exc, "read") from exc

    async def stream_sessions(self, where: SessionFilter, *, pass_clean: bool = False,
                              ) -> AsyncGenerator[StoredSession, None]:
        """Yields every matching session, ordered as ``SqliteSessionService`` reads them.

        Every session is decoded whole (``pass_clean`` is not used here).
        """
        del pass_clean
        query = events_in_order(where, _READ.select, _READ.tie, "sqlite", epoch_times=True)
        async with aclosing(self._stream(query.sql, query.params)) as stream:
            async for stored in stream:
                yield stored

    async def candidates(
        self, where: SessionFilter, *, everywhere: bool = False, all_if_most: bool = False
    ) -> tuple[int, AsyncGenerator[StoredSession, None]] | None:
        """Returns the matching events' count and a stream of the candidate sessions only.

        The file's SQLite picks them (:mod:`~adk_session_heal.store.prefilter`);
        ``None`` unless ``everywhere``: SQLite ran the prefilter slower than the
        full scan (:data:`~adk_session_heal.store.prefilter.PREFILTER_PAYS`).
        """
        if self.url is None or ("sqlite" not in PREFILTER_PAYS and not everywhere):
            return None
        clause, params = where_clause(where, "session_id", "sqlite", epoch_times=True)
        total = await self._count(f"SELECT count(*) FROM events{clause}", params)
        return total, self._stream(candidates_query("sqlite", _READ, clause), params)

    async def _stream(
        self, sql: str, params: dict[str, Any]
    ) -> AsyncGenerator[StoredSession, None]:
        if self.url is None:
            raise NotImplementedError("open the store from its URL to stream it")
        async with aclosing(grouped_sessions(sqlite_chunks(self.url, sql, params),
                                             key_columns=False)) as grouped:
            async for stored in grouped:
                yield stored

    def heal_ledger(self, timeout: TimeoutArg = None) -> SqlHealLedger:
        """Opens the ledger tables in this file."""
        from ..ledger.heal_ledger import SqlHealLedger

        return SqlHealLedger.from_url(self._opened_url(), timeout=timeout)

    def tool_runs(
        self, timeout: TimeoutArg = None
    ) -> AbstractAsyncContextManager[ToolRunReader | None]:
        """This file's ``adk_session_heal_tool_runs`` table, read-only (see the base class)."""
        from ..ledger.tool_run_sql import SqlToolRunLedger

        return SqlToolRunLedger.reading(self.url, self.ledger_revision, timeout=timeout,
                                        engine=None)

    async def ledger_revision(self) -> str | None:
        """Returns the heal ledger's revision (``None``: not installed)."""
        try:
            async with self._connect(False) as db:
                tables = {row[0] for row in await db.execute_fetchall(
                    "SELECT name FROM sqlite_master WHERE type = 'table'")}
                if LEDGER_TABLE_NAME not in tables or LEDGER_VERSION_TABLE not in tables:
                    return None
                rows = list(await db.execute_fetchall(
                    f"SELECT version_num FROM {LEDGER_VERSION_TABLE}"))
                return str(rows[0][0]) if rows else None
        except sqlite3.Error as exc:
            raise self._error(exc, "read") from exc

    async def write(
        self, batch: Sequence[SessionHeals], *, ledger: bool, read_back: bool = False
    ) -> list[WriteResult]:
        """Applies the heals in one transaction (see the module docstring)."""
        try:
            async with self._connect(True) as db:
                if not db.in_transaction:  # take the write lock before re-counting
                    await db.execute("BEGIN IMMEDIATE")
                counts = await _session_counts(db, batch)
                live, results = checked(batch, counts)
                heals = [(planned.key, heal) for planned in live for heal in planned.heals]
                written = await insert_sqlite_events(
                    db, [sqlite_heal_row(key, heal) for key, heal in heals])
                if ledger:
                    await insert_sqlite_ledger_rows(db, [
                        heal_ledger_row(heal)
                        for (_, heal), ok in zip(heals, written, strict=True) if ok])
                await db.commit()
                stored: dict[str, Event] = {}
                for (key, heal), ok in zip(heals, written, strict=True):
                    if not ok and read_back:
                        found = await _read_event(db, key, heal.event_id)
                        if found is not None:
                            stored[heal.event_id] = found
        except sqlite3.Error as exc:
            raise self._error(exc, "write to") from exc
        return outcomes(batch, results, [heal for _, heal in heals], written, stored)

    async def remove(self, batch: Sequence[Removal], *, ledger: bool) -> list[RemoveOutcome]:
        """Takes heal rows of ours out, in one transaction (see the module docstring)."""
        incremental = has(await self.ledger_revision(), Feature.INCREMENTAL)
        try:
            async with self._connect(True) as db:
                if not db.in_transaction:
                    await db.execute("BEGIN IMMEDIATE")
                results = [await _remove_one(db, removal) for removal in batch]
                taken = removed(batch, results)
                rows = [removal_row(removal) for removal in taken]
                if ledger and rows:
                    await db.executemany(_insert_sql(REMOVALS_TABLE.name, rows), rows)
                if incremental and taken:
                    await db.executemany(unsettle_sql("sqlite"),
                                         [unsettle_params(r.key) for r in taken])
                await db.commit()
        except sqlite3.Error as exc:
            raise self._error(exc, "write to") from exc
        return results

    async def resolve(
        self, resolution: Heal, removal: Removal, *, ledger: bool
    ) -> ResolveResult:
        """Writes a resolution and takes out what it supersedes, in one transaction."""
        incremental = has(await self.ledger_revision(), Feature.INCREMENTAL)
        key = removal.key
        row = sqlite_heal_row(key, resolution)  # built before the write lock is taken
        try:
            async with self._connect(True) as db:
                if not db.in_transaction:
                    await db.execute("BEGIN IMMEDIATE")
                events = await _session_events(db, key)
                if events is None:
                    await db.rollback()
                    return ResolveResult(ResolveOutcome.KEPT, _NOT_JSON)
                decision = decide_resolution(events, resolution.data, removal,
                                             access=STORED_JSON, stored=dict)
                if decision.result.outcome not in (ResolveOutcome.WRITTEN,
                                                   ResolveOutcome.PRESENT):
                    await db.rollback()
                    return decision.result
                written = decision.insert and (await insert_sqlite_events(db, [row]))[0]
                await _delete(db, removal)
                if ledger:
                    if written:
                        await insert_sqlite_ledger_rows(db, [heal_ledger_row(resolution)])
                    await db.executemany(_insert_sql(REMOVALS_TABLE.name, [
                        removal_row(removal)]), [removal_row(removal)])
                    record = resolution_row(resolution, removal)
                    await db.execute(
                        _insert_sql(RESOLUTIONS_TABLE.name, [record], "INSERT OR IGNORE"), record)
                if incremental:
                    await db.executemany(unsettle_sql("sqlite"), [unsettle_params(key)])
                await db.commit()
        except sqlite3.Error as exc:
            raise self._error(exc, "write to") from exc
        return decision.result


_NOT_JSON = "the session holds a row that is not JSON, so it cannot be judged"


async def _session_events(
    db: aiosqlite.Connection, key: SessionKey
) -> list[dict[str, Any]] | None:
    """A session's stored events in ``SqliteSessionService``'s order (``None``: a row is
    not a JSON object)."""
    async with db.execute(
        "SELECT event_data FROM events WHERE app_name=? AND user_id=? AND session_id=? "
        "ORDER BY timestamp, rowid", (key.app_name, key.user_id, key.session_id),
    ) as cursor:
        rows = await cursor.fetchall()
    events: list[dict[str, Any]] = []
    for (text,) in rows:
        try:
            data = json.loads(text)
        except (TypeError, ValueError):
            return None
        if not isinstance(data, dict):
            return None
        events.append(data)
    return events


async def _delete(db: aiosqlite.Connection, removal: Removal) -> bool:
    """Deletes one row (inside the caller's transaction); whether it was there."""
    key = removal.key
    async with db.execute(
        "DELETE FROM events WHERE app_name=? AND user_id=? AND session_id=? AND id=?",
        (key.app_name, key.user_id, key.session_id, removal.event_id),
    ) as cursor:
        return bool(cursor.rowcount == 1)


async def _remove_one(db: aiosqlite.Connection, removal: Removal) -> RemoveOutcome:
    """Deletes one heal row of ours if the one rule lets it go (inside the caller's
    transaction, which holds the file's write lock)."""
    events = await _session_events(db, removal.key)
    if events is None:
        return RemoveOutcome.KEPT
    decision = decide_removal(events, removal, access=STORED_JSON, stored=dict)
    if decision.outcome is not RemoveOutcome.REMOVED:
        return decision.outcome
    return RemoveOutcome.REMOVED if await _delete(db, removal) else RemoveOutcome.ABSENT


async def _session_counts(
    db: aiosqlite.Connection, batch: Sequence[SessionHeals]
) -> dict[SessionKey, int]:
    """Counts each re-checked session's events, less its planned heals already stored."""
    counts: dict[SessionKey, int] = {}
    present: list[Sequence[Any]] = []
    for planned in batch:
        if planned.seen_events is None:
            continue
        key = planned.key
        where = (key.app_name, key.user_id, key.session_id)
        async with db.execute(
            "SELECT count(*) FROM events WHERE app_name=? AND user_id=? AND session_id=?", where
        ) as cursor:
            row = await cursor.fetchone()
        if row and row[0]:
            counts[key] = int(row[0])
        ids = [heal.event_id for heal in planned.heals]
        async with db.execute(
            "SELECT app_name, user_id, session_id, id FROM events WHERE app_name=? AND "
            f"user_id=? AND session_id=? AND id IN ({', '.join('?' for _ in ids)})",
            (*where, *ids),
        ) as cursor:
            present.extend(await cursor.fetchall())
    return discount_planned(batch, counts, present)


async def _read_event(db: aiosqlite.Connection, key: SessionKey, event_id: str) -> Event | None:
    async with db.execute(
        "SELECT event_data FROM events WHERE app_name=? AND user_id=? AND session_id=? AND id=?",
        (key.app_name, key.user_id, key.session_id, event_id),
    ) as cursor:
        row = await cursor.fetchone()
    if row is None:
        return None
    from google.adk.events.event import Event

    return Event.model_validate_json(row[0])
