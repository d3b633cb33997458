"""The heal ledger: an audit table of every heal, whichever path wrote it.

One row per synthetic event: app, user, session, call event, synthetic event
id, invocation, call ids, tool names, reason, trigger (``get_session``,
``append`` or ``repair``) and time. The table is unique on
``(app_name, user_id, session_id, synthetic_event_id)``, so recording is
idempotent and a heal is recorded once, whichever healer (wrapper or CLI)
wrote it.

Switching it on:

1. Create the table once, in the session database: ``adk-session-heal db
   upgrade URL`` (or ``await adk_session_heal.migrate.upgrade(URL)``).
2. ``repair`` records its heals in the same transaction as the synthetic
   events (``--no-ledger`` skips that).
3. The wrapper records when given a ledger::

       ledger = SqlHealLedger.from_url(db_url)     # or SqlHealLedger(engine)
       service = HealingSessionService(inner, ledger=ledger)

   It calls ``await ledger.record([...])`` after each heal it wrote.

Both ADK layouts are supported: for a ``SqliteSessionService`` file
(``sqlite:///x.db``) the ledger table lives in that file beside ADK's tables,
which ADK's SQLite service ignores.

A heal taken back out of storage (a late result superseded it) gets a row in
a second table, ``adk_session_heal_removals`` (revision ``0003``): session,
heal and call event ids, calls, reason, who, when, and what superseded it.
The heal's own row stays, so the history keeps both.

Revision ``0004`` records repair runs (:mod:`adk_session_heal.store.ledger.repair_runs`): a third
table, ``adk_session_heal_runs``, and the run id on each heal and removal row
a run wrote, which :func:`~adk_session_heal.ops.undo.undo` reads back
(:meth:`SqlHealLedger.run_heals`).

Revision ``0005`` keeps the state of incremental scans
(:mod:`adk_session_heal.store.incremental`): :meth:`SqlHealLedger.watermark` and
:meth:`SqlHealLedger.save_watermark`.

Revision ``0006`` records each operator's resolution (``review resolve``): who,
when, what (:meth:`SqlHealLedger.resolutions`), written in the resolution's
own transaction.
"""

from __future__ import annotations

import json
import os
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any
from urllib.parse import unquote, urlsplit

from sqlalchemy import Column, Row, Table, delete, func, insert, select, update
from sqlalchemy.exc import SQLAlchemyError

from ...core.heal_record import HealRecord, ResolutionRecord
from ...core.session_key import SessionKey
from ...errors import LedgerError, StoreError
from ..driver_errors import translate_error
from ..engines import TimeoutArg
from ..incremental import Watermark, scope_id
from ..urls import StoreUrl
from .heal_table import (
    LEDGER_TABLE,
    REMOVALS_TABLE,
    RESOLUTIONS_TABLE,
    RUNS_TABLE,
    UNSETTLED_TABLE,
    WATERMARKS_TABLE,
    base_columns,
    insert_ledger_rows,
    ledger_row,
    record_from_row,
    removal_from_row,
    removal_row,
    resolution_from_row,
)
from .ledger_base import HealHistory, SqlLedger
from .repair_runs import RepairRun, run_from_row, run_row, undone_run, with_counts
from .revisions import Feature, has, missing_ledger_message, require

if TYPE_CHECKING:
    from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

    from ..base import Removal


def _sqlite_file(database: str | None) -> str | None:
    """Returns the file a SQLite database name (a path or a ``file:`` URI) opens."""
    if database and database.startswith("file:"):
        database = unquote(urlsplit(database).path)
    if not database or database == ":memory:":
        return None
    return os.path.realpath(database)


def _same_file(first: str | None, second: str | None) -> bool:
    """Whether two SQLite database names open the same file (never in-memory ones)."""
    mine, theirs = _sqlite_file(first), _sqlite_file(second)
    return mine is not None and mine == theirs


def _of_session(session_id: str | None) -> dict[str, str]:
    """The rows wanted: all, or those of one session id."""
    return {} if session_id is None else {"session_id": session_id}


class SqlHealLedger(SqlLedger, HealHistory):
    """Records and reads heals in the ledger table of a SQL database.

    Args:
        engine: An async engine on the database holding the ledger (e.g. the
            ``db_engine`` of a ``DatabaseSessionService``).
        owns_engine: Dispose the engine on :meth:`close`.
    """

    @classmethod
    def from_url(cls, url: str | StoreUrl, *, timeout: TimeoutArg = None,
                 engine: AsyncEngine | None = None) -> SqlHealLedger:
        """Opens the ledger of a session database given by URL (any accepted form).

        Args:
            url: The session database.
            timeout: How long to wait for a database server (see
                :func:`~adk_session_heal.store.open_store`).
            engine: An engine already open on that database, to share (not
                disposed on :meth:`close`); by default the ledger opens its own.

        Raises:
            UnsupportedStoreError: The URL is not one this package reads.
        """
        return cls._open(url, timeout=timeout, writable=True, engine=engine)

    def shares_database(self, service: object) -> bool:
        """Whether this ledger lives in the database a session service stores sessions in.

        Then the service's writer records heals in the heals' own transaction.

        Args:
            service: A ``DatabaseSessionService`` or ``SqliteSessionService``
                (any other service never shares it).
        """
        from sqlalchemy.ext.asyncio import AsyncEngine

        mine = self.engine.url
        engine = getattr(service, "db_engine", None)
        if isinstance(engine, AsyncEngine):
            theirs = engine.url
            if mine.get_backend_name() == "sqlite" == theirs.get_backend_name():
                return _same_file(mine.database, theirs.database)
            return (
                mine.get_backend_name() == theirs.get_backend_name()
                and (mine.host, mine.port, mine.database, mine.username)
                == (theirs.host, theirs.port, theirs.database, theirs.username)
            )
        path = getattr(service, "_db_path", None)
        return (
            isinstance(path, str)
            and mine.get_backend_name() == "sqlite"
            and _same_file(mine.database, path)
        )

    async def record(
        self, records: Sequence[HealRecord], *, conn: AsyncConnection | None = None
    ) -> None:
        """Records heals; a heal already recorded is skipped (idempotent).

        Args:
            records: The heals.
            conn: Record inside this connection's transaction (so the records
                commit with the heals); by default in a transaction of its own.

        Raises:
            LedgerError: The ledger table is missing (run ``db upgrade``).
        """
        rows = [ledger_row(r) for r in records]
        if not rows:
            return
        try:
            if conn is not None:
                await insert_ledger_rows(conn, rows)
                return
            async with self.engine.begin() as own:
                await insert_ledger_rows(own, rows)
        except SQLAlchemyError as exc:
            raise await self._failure(exc, Feature.HEALS, "heals") from exc

    async def record_removals(self, removals: Sequence[Removal]) -> None:
        """Records heals taken back out of storage (see :mod:`~adk_session_heal.core.late_results`).

        Raises:
            LedgerError: The removals table is missing (run ``db upgrade``).
        """
        if not removals:
            return
        try:
            async with self.engine.begin() as conn:
                await conn.execute(insert(REMOVALS_TABLE), [removal_row(r) for r in removals])
        except SQLAlchemyError as exc:
            raise await self._failure(exc, Feature.REMOVALS, "removals") from exc

    async def _failure(self, exc: Exception, feature: Feature,
                       what: str) -> LedgerError | StoreError:
        """The one-line error of a failed record: the table is missing, or what failed."""
        revision = await self.revision()
        if not has(revision, feature):
            return LedgerError(missing_ledger_message(self._where(), revision), missing=True)
        if self._url is not None:  # the driver's own words (a read-only file, say)
            return translate_error(exc, self._url, f"record {what} in")
        return LedgerError(f"cannot record {what} in {self._where()}: {type(exc).__name__}")

    async def removals(self, *, session_id: str | None = None) -> list[Removal]:
        """Returns the heals taken back out, oldest first (optionally of one session id).

        Raises:
            LedgerError: The removals table is missing (run ``db upgrade``).
        """
        revision = await self.check(Feature.REMOVALS)
        rows = await self._oldest_first(REMOVALS_TABLE, base_columns(REMOVALS_TABLE, revision),
                                        "removed_at", _of_session(session_id))
        return [removal_from_row(row) for row in rows]

    async def resolutions(self, *, session_id: str | None = None) -> list[ResolutionRecord]:
        """Returns every operator's resolution, oldest first (optionally of one session id).

        Raises:
            LedgerError: The resolutions table is missing (run ``db upgrade``).
        """
        await self.check(Feature.RESOLUTIONS)
        rows = await self._oldest_first(RESOLUTIONS_TABLE, RESOLUTIONS_TABLE.columns,
                                        "resolved_at", _of_session(session_id))
        return [resolution_from_row(row) for row in rows]

    async def _oldest_first(self, table: Table, columns: Iterable[Column[Any]], at: str,
                            wanted: Mapping[str, str], limit: int | None = None
                            ) -> list[Row[Any]]:
        """Reads rows of ``table``, oldest first (by column ``at``, then ``id``).

        Args:
            table: The table.
            columns: Its columns to read.
            at: The column holding each row's time.
            wanted: Only rows with these column values.
            limit: At most this many rows (the oldest); ``None``: all.
        """
        statement = select(*columns).where(
            *(table.c[column] == value for column, value in wanted.items()))
        statement = statement.order_by(table.c[at], table.c.id)
        if limit is not None:
            statement = statement.limit(limit)
        async with self.engine.connect() as conn:
            return list(await conn.execute(statement))

    async def check(self, feature: Feature = Feature.HEALS) -> str:
        """Returns the ledger's revision; raises :class:`LedgerError` unless it has ``feature``.

        Args:
            feature: What the caller is about to use (default: the heal ledger).
        """
        return require(self._where(), await self.revision(), feature)

    async def start_run(self, run: RepairRun) -> None:
        """Records a run as it starts (revision ``0004``), in a transaction of its own."""
        await self._write_run(insert(RUNS_TABLE).values(run_row(run)))

    async def finish_run(self, run_id: str, finished_at: float, *, kept: int | None = None) -> None:
        """Records that a run ended (and, for an undo, the rows it kept)."""
        await self._write_run(update(RUNS_TABLE).where(RUNS_TABLE.c.run_id == run_id)
                              .values(finished_at=finished_at, kept=kept))

    async def forget_run(self, run_id: str) -> None:
        """Deletes the record of a run that failed before it wrote anything."""
        await self._write_run(delete(RUNS_TABLE).where(RUNS_TABLE.c.run_id == run_id))

    async def _write_run(self, statement: Any) -> None:
        try:
            async with self.engine.begin() as conn:
                await conn.execute(statement)
        except SQLAlchemyError as exc:
            raise await self._failure(exc, Feature.RUNS, "runs") from exc

    async def runs(self, *, run_id: str | None = None) -> list[RepairRun]:
        """Returns the runs, oldest first, counted from their rows (or just ``run_id``'s).

        Raises:
            LedgerError: The ledger is below revision ``0004`` (run ``db upgrade``).
        """
        await self.check(Feature.RUNS)
        heals, removals = LEDGER_TABLE.c, REMOVALS_TABLE.c
        statement = select(RUNS_TABLE)
        only: tuple[Any, ...] = ()  # one run: count its rows only (an undo reads one)
        if run_id is not None:
            statement = statement.where(RUNS_TABLE.c.run_id == run_id)
            only = (heals.run_id == run_id, removals.run_id == run_id,
                    removals.detail == json.dumps([run_id]))
        async with self.engine.connect() as conn:
            found = [run_from_row(row) for row in await conn.execute(statement)]
            written = {r: int(n) for r, n in await conn.execute(
                select(heals.run_id, func.count()).where(heals.run_id != "", *only[:1])
                .group_by(heals.run_id))}
            removed = {r: int(n) for r, n in await conn.execute(
                select(removals.run_id, func.count())
                .where(removals.run_id.is_not(None), *only[1:2]).group_by(removals.run_id))}
            undone: Counter[str] = Counter()
            for detail, n in await conn.execute(
                    select(removals.detail, func.count())
                    .where(removals.reason == "undo", *only[2:]).group_by(removals.detail)):
                if (undone_id := undone_run("undo", detail)) is not None:
                    undone[undone_id] += int(n)
        return with_counts(found, written, removed, undone)

    async def run_heals(self, run_id: str) -> list[tuple[HealRecord, str | None]]:
        """Returns each heal row a run wrote, with the digest of the row it stored."""
        await self.check(Feature.RUNS)
        table = LEDGER_TABLE
        async with self.engine.connect() as conn:
            result = await conn.execute(select(table).where(table.c.run_id == run_id)
                                        .order_by(table.c.id))
            return [(record_from_row(row), row.event_digest) for row in result]

    async def undone_heals(self, run_id: str) -> set[tuple[SessionKey, str]]:
        """Returns the heals of a run that undo runs took out: (session, synthetic event id)."""
        await self.check(Feature.RUNS)
        table = REMOVALS_TABLE
        async with self.engine.connect() as conn:
            result = await conn.execute(select(table).where(
                table.c.reason == "undo", table.c.detail == json.dumps([run_id])))
            return {(SessionKey(r.app_name, r.user_id, r.session_id), r.synthetic_event_id)
                    for r in result}

    async def watermark(self, scope: str) -> float | None:
        """Returns the watermark a scope's last incremental run recorded (``None``: none).

        Raises:
            LedgerError: The ledger is below revision ``0005`` (run ``db upgrade``).
        """
        await self.check(Feature.INCREMENTAL)
        table = WATERMARKS_TABLE
        try:
            async with self.engine.connect() as conn:
                found = (await conn.execute(select(table.c.watermark).where(
                    table.c.scope_id == scope_id(scope)))).scalar_one_or_none()
        except SQLAlchemyError as exc:
            raise await self._failure(exc, Feature.INCREMENTAL, "watermarks") from exc
        return None if found is None else float(found)

    async def save_watermark(self, mark: Watermark, run_at: float) -> None:
        """Records an incremental run's watermark and unsettled sessions, in one transaction.

        The scope's previous state is replaced whole; a run killed before this
        commits leaves the previous state, so the next run reads more, never less.

        Raises:
            LedgerError: The ledger is below revision ``0005`` (run ``db upgrade``).
        """
        key = scope_id(mark.scope)
        marks, kept = WATERMARKS_TABLE, UNSETTLED_TABLE
        rows = [{"scope_id": key, "app_name": k.app_name, "user_id": k.user_id,
                 "session_id": k.session_id} for k in dict.fromkeys(mark.unsettled)]
        try:
            async with self.engine.begin() as conn:
                await conn.execute(delete(marks).where(marks.c.scope_id == key))
                await conn.execute(delete(kept).where(kept.c.scope_id == key))
                await conn.execute(insert(marks).values(scope_id=key, scope=mark.scope,
                                                        watermark=mark.value, run_at=run_at))
                for start in range(0, len(rows), 1000):
                    await conn.execute(insert(kept), rows[start:start + 1000])
        except SQLAlchemyError as exc:
            raise await self._failure(exc, Feature.INCREMENTAL, "watermarks") from exc

    async def _history(self, wanted: Mapping[str, str], limit: int | None) -> list[HealRecord]:
        """The ledger table's rows with the ``wanted`` values, oldest first (see :meth:`history`).

        Raises:
            LedgerError: The ledger is not installed or out of date.
        """
        revision = await self.check()
        rows = await self._oldest_first(LEDGER_TABLE, base_columns(LEDGER_TABLE, revision),
                                        "healed_at", wanted, limit)
        return [record_from_row(row) for row in rows]
