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
"""

from __future__ import annotations

from collections.abc import Sequence

from sqlalchemy import select
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine, create_async_engine

from .errors import LedgerError
from .migrate import head_revision
from .records import HealRecord
from .store.database import read_ledger_revision, translate_error
from .store.inserts import insert_ledger_rows
from .store.ledger_table import LEDGER_TABLE, ledger_row, record_from_row
from .store.urls import StoreUrl, parse_store_url

__all__ = ["SqlHealLedger", "missing_ledger_message"]


def missing_ledger_message(url: object, revision: str | None) -> str:
    """Returns the one-line error for a missing or outdated ledger."""
    if revision is None:
        return (
            f"no heal ledger in {url}: run `adk-session-heal db upgrade URL` once "
            "to create it (or pass --no-ledger to repair without an audit trail)"
        )
    return (
        f"the heal ledger in {url} is at revision {revision!r}, not {head_revision()!r}: "
        "run `adk-session-heal db upgrade URL`"
    )


class SqlHealLedger:
    """Records and reads heals in the ledger table of a SQL database.

    Args:
        engine: An async engine on the database holding the ledger (e.g. the
            ``db_engine`` of a ``DatabaseSessionService``).
        owns_engine: Dispose the engine on :meth:`close`.
    """

    def __init__(self, engine: AsyncEngine, *, owns_engine: bool = False) -> None:
        self.engine = engine
        self._owns_engine = owns_engine
        self._url: StoreUrl | None = None

    @classmethod
    def from_url(cls, url: str) -> SqlHealLedger:
        """Opens the ledger of a session database given by URL (any accepted form)."""
        store_url = parse_store_url(url)
        ledger = cls(create_async_engine(store_url.sqlalchemy_url(writable=True)),
                     owns_engine=True)
        ledger._url = store_url
        return ledger

    def _where(self) -> str:
        return str(self._url) if self._url else "the ledger database"

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
            revision = await self.revision()
            if revision != head_revision():
                raise LedgerError(missing_ledger_message(self._where(), revision)) from exc
            raise LedgerError(
                f"cannot record heals in {self._where()}: {type(exc).__name__}"
            ) from exc

    async def revision(self) -> str | None:
        """Returns the ledger's migration revision (``None``: not installed)."""
        try:
            async with self.engine.connect() as conn:
                return await read_ledger_revision(conn)
        except SQLAlchemyError as exc:
            if self._url is None:
                raise LedgerError(f"cannot read the ledger: {type(exc).__name__}") from exc
            raise translate_error(exc, self._url, "read") from exc

    async def check(self) -> None:
        """Raises :class:`LedgerError` unless the ledger is installed and current."""
        revision = await self.revision()
        if revision != head_revision():
            raise LedgerError(missing_ledger_message(self._where(), revision))

    async def history(
        self,
        *,
        app_name: str | None = None,
        user_id: str | None = None,
        session_id: str | None = None,
        limit: int | None = None,
    ) -> list[HealRecord]:
        """Returns recorded heals, oldest first, optionally filtered.

        Raises:
            LedgerError: The ledger is not installed or out of date.
        """
        await self.check()
        table = LEDGER_TABLE
        statement = select(table)
        for column, value in (("app_name", app_name), ("user_id", user_id),
                              ("session_id", session_id)):
            if value is not None:
                statement = statement.where(table.c[column] == value)
        statement = statement.order_by(table.c.healed_at, table.c.id)
        if limit is not None:
            statement = statement.limit(limit)
        async with self.engine.connect() as conn:
            result = await conn.execute(statement)
            return [record_from_row(row) for row in result]

    async def close(self) -> None:
        """Disposes the engine if this ledger created it."""
        if self._owns_engine:
            await self.engine.dispose()
