"""The tool-run ledger's SQL writer: one row per tool call, in the session database.

The table ``adk_session_heal_tool_runs`` is created by migration ``0002``
(``adk-session-heal db upgrade URL``) beside the heal ledger, in the database
the sessions live in (also an ADK ``SqliteSessionService`` file, whose own
tables it leaves alone). Its key is the session's plus the function-call id.

Every method is one short transaction of its own (a single statement in
autocommit where one suffices), committed before it returns:
:meth:`SqlToolRunLedger.announce` (when the model's call event reaches the
runner), :meth:`~SqlToolRunLedger.start` (before the tool runs), :meth:`~SqlToolRunLedger.renew`
(the heartbeat), :meth:`~SqlToolRunLedger.finish`. The rows written carry the
attempt they belong to, so a heartbeat or a finish of an older attempt of the
same call id (a resumed run) never overwrites a newer one. The pure meaning of
a row is :mod:`adk_session_heal.core.tool_runs`.
"""

from __future__ import annotations

import functools
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Sequence
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Any

from sqlalchemy import (
    Boolean,
    Column,
    Double,
    Integer,
    MetaData,
    String,
    Table,
    Text,
    and_,
    bindparam,
    func,
    select,
    update,
)
from sqlalchemy.engine import URL
from sqlalchemy.exc import SQLAlchemyError

from ...core.session_key import SessionKey
from ...core.tool_runs import RunState, ToolRun, kept_result
from ...errors import LedgerError
from ..dialects import insert_new_rows
from ..engines import TimeoutArg
from ..urls import StoreUrl
from .ledger_base import SqlLedger
from .revisions import Feature, has

if TYPE_CHECKING:
    from sqlalchemy.ext.asyncio import AsyncEngine

_KEY = 128
TOOL_RUNS_TABLE = Table(
    "adk_session_heal_tool_runs",
    MetaData(),
    Column("app_name", String(_KEY), primary_key=True),
    Column("user_id", String(_KEY), primary_key=True),
    Column("session_id", String(_KEY), primary_key=True),
    Column("call_id", String(_KEY), primary_key=True),
    Column("tool_name", String(256), nullable=False),
    Column("invocation_id", String(256), nullable=False),
    Column("state", String(16), nullable=False),
    Column("host", String(256), nullable=False),
    Column("pid", Integer, nullable=False),
    Column("attempt", Integer, nullable=False),
    Column("started_at", Double, nullable=False),
    Column("lease_until", Double, nullable=False),
    Column("finished_at", Double, nullable=True),
    Column("result", Text, nullable=True),
    Column("result_truncated", Boolean, nullable=False),
)
"""The tool-run table (revision ``0002``; the migration is a frozen copy of it)."""

_KEY_COLUMNS = ("app_name", "user_id", "session_id", "call_id")


_COLUMNS = TOOL_RUNS_TABLE.c
_KEY_MATCH = and_(*(_COLUMNS[name] == bindparam(f"k_{name}") for name in _KEY_COLUMNS),
                  _COLUMNS.attempt == bindparam("k_attempt"))
"""The row of one attempt: its key, and the attempt a writer holds."""

_RENEW = (update(TOOL_RUNS_TABLE)
          .where(_KEY_MATCH, _COLUMNS.state == RunState.STARTED.value)
          .values(lease_until=bindparam("new_lease_until")))
_FINISH = update(TOOL_RUNS_TABLE).where(_KEY_MATCH).values(
    state=bindparam("new_state"), finished_at=bindparam("new_finished_at"),
    lease_until=bindparam("new_finished_at"), result=bindparam("new_result"),
    result_truncated=bindparam("new_result_truncated"))
"""Built once: statements rebuilt per write cost more than their round trip (measured)."""

_STARTED = ("tool_name", "invocation_id", "state", "host", "pid", "started_at", "lease_until",
            "finished_at", "result", "result_truncated")
"""The columns a start sets (besides the attempt)."""


def _upsert(dialect: Any) -> Any:
    """``INSERT ... ON CONFLICT DO UPDATE ... RETURNING attempt`` (PostgreSQL, SQLite)."""
    statement = dialect.insert(TOOL_RUNS_TABLE)
    return statement.on_conflict_do_update(
        index_elements=list(_KEY_COLUMNS),
        set_={"attempt": _COLUMNS.attempt + 1,
              **{name: statement.excluded[name] for name in _STARTED}},
    ).returning(_COLUMNS.attempt)


@functools.cache
def _returning(dialect: str) -> tuple[Any, Any] | None:
    """A dialect's start and announce statements, each one round trip with ``RETURNING``.

    The start is ``INSERT ... ON CONFLICT DO UPDATE ... RETURNING attempt``, the
    announce ``INSERT ... ON CONFLICT DO NOTHING RETURNING call_id`` (the ids
    returned were written). Built once, on the dialect's first write (a scan that
    only reads loads no dialect's module); ``None`` for MySQL/MariaDB.
    """
    from sqlalchemy.dialects import postgresql, sqlite

    module = {"postgresql": postgresql, "sqlite": sqlite}.get(dialect)
    if module is None:
        return None
    announce = module.insert(TOOL_RUNS_TABLE).on_conflict_do_nothing().returning(
        _COLUMNS.call_id)
    return _upsert(module), announce


@functools.cache
def _mysql_start() -> Any:
    """``INSERT ... ON DUPLICATE KEY UPDATE`` of a start, its attempt left in ``LAST_INSERT_ID``."""
    from sqlalchemy.dialects import mysql

    statement = mysql.insert(TOOL_RUNS_TABLE).values(
        attempt=func.last_insert_id(1),
        **{name: bindparam(name) for name in (*_KEY_COLUMNS, *_STARTED)},
    )
    return statement.on_duplicate_key_update(
        attempt=func.last_insert_id(_COLUMNS.attempt + 1),
        **{name: statement.inserted[name] for name in _STARTED})


def _key_params(run: ToolRun) -> dict[str, Any]:
    return {"k_app_name": run.app_name, "k_user_id": run.user_id,
            "k_session_id": run.session_id, "k_call_id": run.call_id, "k_attempt": run.attempt}


def _in_memory(url: URL) -> bool:
    """Whether a SQLite URL names an in-memory database (``:memory:``, empty, ``mode=memory``)."""
    database = url.database or ""
    return (database in ("", ":memory:") or database.startswith("file::memory:")
            or url.query.get("mode") == "memory")


def _run(row: Any) -> ToolRun:
    return ToolRun(
        app_name=row.app_name, user_id=row.user_id, session_id=row.session_id,
        call_id=row.call_id, tool_name=row.tool_name, invocation_id=row.invocation_id,
        state=RunState(row.state), host=row.host, pid=int(row.pid), attempt=int(row.attempt),
        started_at=float(row.started_at), lease_until=float(row.lease_until),
        finished_at=None if row.finished_at is None else float(row.finished_at),
        result=kept_result(row.result),
        result_truncated=bool(row.result_truncated),
    )


class SqlToolRunLedger(SqlLedger):
    """Writes and reads tool runs in the session database's ``adk_session_heal_tool_runs``.

    Args:
        engine: An async engine on the session database (e.g. a
            ``DatabaseSessionService``'s ``db_engine``).
        owns_engine: Dispose the engine on :meth:`close`.
    """

    _unnamed = "the session database"

    def __init__(self, engine: AsyncEngine, *, owns_engine: bool = False) -> None:
        super().__init__(engine, owns_engine=owns_engine)
        # One statement per write: autocommit, set once on a copy of the engine (a
        # per-connection setting cost a call per write).
        self._autocommit = engine.execution_options(isolation_level="AUTOCOMMIT")

    @classmethod
    def from_url(cls, url: str | StoreUrl, *, timeout: TimeoutArg = None,
                 writable: bool = True, engine: AsyncEngine | None = None) -> SqlToolRunLedger:
        """Opens the tool-run ledger of the session database at ``url`` (any accepted form).

        Args:
            url: The session database.
            timeout: How long to wait for a database server.
            writable: ``False`` only reads (a scan opens SQLite files read-only).
            engine: An engine already open on that database, to share (not
                disposed on :meth:`close`); by default the ledger opens its own.
        """
        return cls._open(url, timeout=timeout, writable=writable, engine=engine)

    @classmethod
    @asynccontextmanager
    async def reading(
        cls, url: StoreUrl | None, revision: Callable[[], Awaitable[str | None]], *,
        timeout: TimeoutArg, engine: AsyncEngine | None,
    ) -> AsyncIterator[SqlToolRunLedger | None]:
        """A SQL store's tool-run ledger, read-only; ``None`` when it has none to read.

        ``None`` for a store built over a service (no URL), a ledger before
        revision ``0002``, or a table that holds no run at all (the plugin is
        not in use): then no session needs a read of its own. A record
        written after this check is of a tool that started after it, whose
        call cannot have been dead by then (measured: a 3,000-heal repair
        spent 70 % of its time on those per-session reads).

        Args:
            url: The store's URL.
            revision: Reads the store's ledger revision.
            timeout: How long to wait for a database server.
            engine: The store's engine on a database server, to share.
        """
        if url is None or not has(await revision(), Feature.TOOL_RUNS):
            yield None
            return
        runs = cls.from_url(url, writable=False, timeout=timeout, engine=engine)
        try:
            yield None if await runs.empty() else runs
        finally:
            await runs.close()

    def open_copy(self) -> SqlToolRunLedger:
        """Returns this ledger over an engine of its own, for another thread's event loop.

        The engine has the same URL and a new pool of the same kind and settings
        that connects the same way (SQLAlchemy's ``Pool.recreate``: the connect
        arguments, timeouts and connect hooks of the engine this ledger was given
        are kept). Nothing connects until the copy is used; :meth:`close` disposes it.

        Raises:
            LedgerError: The database is an in-memory SQLite one, which no other
                connection can see.
        """
        if self.engine.dialect.name == "sqlite" and _in_memory(self.engine.url):
            raise LedgerError("an in-memory SQLite database cannot hold tool leases: no other "
                              "connection sees it (use a database file)")
        from sqlalchemy.ext.asyncio import create_async_engine

        engine = create_async_engine(self.engine.url, pool=self.engine.sync_engine.pool.recreate())
        copy = SqlToolRunLedger(engine, owns_engine=True)
        copy._url = self._url
        return copy

    async def check(self) -> None:
        """Raises :class:`LedgerError` unless the tool-run table is installed (revision 0002+)."""
        revision = await self.revision()
        if not has(revision, Feature.TOOL_RUNS):
            raise LedgerError(
                f"no tool-run ledger in {self._where()} (ledger revision {revision!r}): run "
                f"`adk-session-heal db upgrade {self._where()}` once to create it")

    async def _write(self, statement: Any, params: dict[str, Any], doing: str) -> int:
        """Runs one statement in autocommit (one round trip; a single statement is atomic)."""
        try:
            async with self._autocommit.connect() as conn:
                result = await conn.execute(statement, params)
                return int(result.rowcount)
        except SQLAlchemyError as exc:
            raise LedgerError(f"cannot {doing} in {self._where()}: {type(exc).__name__}") from exc

    async def announce(self, runs: Sequence[ToolRun]) -> set[str]:
        """Records calls the runner is about to run (``announced``), keeping any existing row.

        One multi-row insert that skips call ids already recorded (a start or
        an earlier announcement is never overwritten).

        Returns:
            The call ids this call recorded: an id already recorded (the model
            sent the call again, or another process announced it) is not one.

        Raises:
            LedgerError: The records could not be written.
        """
        rows = [{"app_name": run.app_name, "user_id": run.user_id,
                 "session_id": run.session_id, "call_id": run.call_id, "attempt": 0,
                 "tool_name": run.tool_name, "invocation_id": run.invocation_id,
                 "state": RunState.ANNOUNCED.value, "host": run.host, "pid": run.pid,
                 "started_at": run.started_at, "lease_until": run.lease_until,
                 "finished_at": None, "result": None, "result_truncated": False}
                for run in runs]
        if not rows:
            return set()
        returning = _returning(self.engine.dialect.name)
        statement = None if returning is None else returning[1]
        try:
            async with self._autocommit.connect() as conn:
                if statement is not None:
                    return {str(call_id) for call_id in
                            (await conn.execute(statement, rows)).scalars()}
                # MySQL/MariaDB: a duplicate key is found by its error code, row by row
                written = await insert_new_rows(conn, TOOL_RUNS_TABLE, rows, _KEY_COLUMNS)
                return {run.call_id for run, new in zip(runs, written, strict=True) if new}
        except SQLAlchemyError as exc:
            raise LedgerError(
                f"cannot announce tool calls in {self._where()}: {type(exc).__name__}") from exc

    async def start(self, run: ToolRun) -> int:
        """Records that a tool is about to run; returns the attempt number recorded.

        A new call id is inserted (attempt 1); a call id seen before (a run
        resumed or repeated) becomes a new attempt, its old result cleared.
        PostgreSQL and SQLite do either in one ``INSERT ... ON CONFLICT DO
        UPDATE ... RETURNING``, MySQL and MariaDB in one ``INSERT ... ON
        DUPLICATE KEY UPDATE`` (each in autocommit: one round trip).

        Raises:
            LedgerError: The record could not be written (the tool must not run).
        """
        row = {"app_name": run.app_name, "user_id": run.user_id,
               "session_id": run.session_id, "call_id": run.call_id, "attempt": 1,
               "tool_name": run.tool_name, "invocation_id": run.invocation_id,
               "state": RunState.STARTED.value, "host": run.host, "pid": run.pid,
               "started_at": run.started_at, "lease_until": run.lease_until,
               "finished_at": None, "result": None, "result_truncated": False}
        returning = _returning(self.engine.dialect.name)
        statement = None if returning is None else returning[0]
        try:
            async with self._autocommit.connect() as conn:
                if statement is not None:
                    return int((await conn.execute(statement, row)).scalar_one())
                # MySQL/MariaDB: LAST_INSERT_ID(expr) leaves this statement's attempt in the
                # connection, so the SELECT on it reads ours, whatever other connections do.
                del row["attempt"]
                await conn.execute(_mysql_start(), row)
                return int((await conn.execute(select(func.last_insert_id()))).scalar_one())
        except SQLAlchemyError as exc:
            raise LedgerError(
                f"cannot record a tool start in {self._where()}: {type(exc).__name__}") from exc

    async def renew(self, run: ToolRun, lease_until: float) -> bool:
        """Pushes a running attempt's lease to ``lease_until``; ``False`` if it is not running."""
        count = await self._write(_RENEW, {**_key_params(run), "new_lease_until": lease_until},
                                  "renew a tool lease")
        return count > 0

    async def finish(self, run: ToolRun, state: RunState, finished_at: float,
                     result: str | None, truncated: bool) -> bool:
        """Records how an attempt ended; ``False`` if a newer attempt replaced it.

        Args:
            run: The attempt (its ``attempt`` as :meth:`start` returned it).
            state: ``FINISHED`` or ``FAILED``.
            finished_at: When.
            result: The stored result's JSON
                (:func:`~adk_session_heal.core.tool_runs.stored_result`), or ``None``.
            truncated: The result was too large to keep.
        """
        count = await self._write(_FINISH, {
            **_key_params(run), "new_state": state.value, "new_finished_at": finished_at,
            "new_result": result, "new_result_truncated": truncated}, "record a tool's end")
        return count > 0

    async def runs(self, key: SessionKey, call_ids: Iterable[str] | None = None
                   ) -> dict[str, ToolRun]:
        """Returns the session's tool runs by call id (only ``call_ids`` when given)."""
        table = TOOL_RUNS_TABLE
        statement = select(table).where(table.c.app_name == key.app_name,
                                        table.c.user_id == key.user_id,
                                        table.c.session_id == key.session_id)
        if call_ids is not None:
            wanted = sorted(set(call_ids))
            if not wanted:
                return {}
            statement = statement.where(table.c.call_id.in_(wanted))
        try:
            async with self.engine.connect() as conn:
                rows = (await conn.execute(statement)).all()
        except SQLAlchemyError as exc:
            raise LedgerError(
                f"cannot read tool runs in {self._where()}: {type(exc).__name__}") from exc
        return {row.call_id: _run(row) for row in rows}

    async def empty(self) -> bool:
        """Whether no tool run is recorded at all (then no session needs reading)."""
        try:
            async with self.engine.connect() as conn:
                row = (await conn.execute(select(TOOL_RUNS_TABLE.c.call_id).limit(1))).first()
        except SQLAlchemyError as exc:
            raise LedgerError(
                f"cannot read tool runs in {self._where()}: {type(exc).__name__}") from exc
        return row is None
