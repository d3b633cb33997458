"""Taking rows out of ``DatabaseSessionService``'s ``events``, inside a write transaction.

What :meth:`~adk_session_heal.store.layouts.sql_tables.SqlTablesStore.remove` and
:meth:`~adk_session_heal.store.layouts.sql_tables.SqlTablesStore.resolve` run in
their transaction, on every SQL engine: lock the session's row (as ADK's own
``append_event`` does first), read the session's events as ADK orders them
with a locking read, and ask the one rule
(:func:`~adk_session_heal.store.base.decide_removal`,
:func:`~adk_session_heal.store.base.decide_resolution`) before any row is
deleted.
"""

from __future__ import annotations

import datetime
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from sqlalchemy import delete, insert, select, text

from ...core.event_access import STORED_JSON
from ...core.healing import Heal
from ...core.session_key import SessionKey
from ..base import (
    Removal,
    RemoveOutcome,
    ResolveOutcome,
    ResolveResult,
    decide_removal,
    decide_resolution,
)
from ..dialects import insert_new_rows
from ..ledger.heal_table import (
    REMOVALS_TABLE,
    RESOLUTION_KEY,
    RESOLUTIONS_TABLE,
    heal_ledger_row,
    insert_ledger_rows,
    removal_row,
    resolution_row,
)
from .sql_event_rows import events_table as _events_table
from .sql_event_rows import heal_row, insert_database_events_batch

if TYPE_CHECKING:
    from sqlalchemy.ext.asyncio import AsyncConnection

_NOT_JSON = "the session holds a row that is not JSON, so it cannot be judged"


async def _lock_session(conn: AsyncConnection, key: SessionKey) -> None:
    """Locks the session's row until the transaction ends, as ADK's ``append_event`` does.

    Every remover and ADK's own writer (2.x locks that row first too) then
    take turns on the session. SQLite needs nothing: ``BEGIN IMMEDIATE``
    holds the whole file's write lock.
    """
    if conn.dialect.name == "sqlite":
        return
    await conn.execute(text(
        "SELECT id FROM sessions WHERE app_name = :app_name AND user_id = :user_id "
        "AND id = :session_id FOR UPDATE"),
        {"app_name": key.app_name, "user_id": key.user_id, "session_id": key.session_id})


@dataclass(frozen=True, slots=True)
class _Session:
    """One session's ``events`` rows, read in a write transaction, in ADK's order.

    Attributes:
        events: Each row's ``event_data`` with ``id`` and ``invocation_id``
            from the columns, as ADK reads them.
        raw: Each row's ``event_data`` exactly as stored.
        columns: Each row's ``timestamp`` column.
    """

    events: list[dict[str, Any]]
    raw: list[dict[str, Any]]
    columns: list[datetime.datetime]

    def stored(self, event: Any) -> dict[str, Any]:
        """The stored ``event_data`` of one of :attr:`events`."""
        for read, raw in zip(self.events, self.raw, strict=True):
            if read is event:
                return raw
        return dict(event)


async def _read_session(conn: AsyncConnection, key: SessionKey) -> _Session | None:
    """Reads a session's rows in ADK's order, locking them (``None``: a row is not JSON).

    A locking read, so MySQL/MariaDB's repeatable read sees the rows as they
    are now, not as the transaction's snapshot had them.
    """
    table = _events_table()
    statement = select(table.c.id, table.c.invocation_id, table.c.timestamp,
                       table.c.event_data).where(
        table.c.app_name == key.app_name, table.c.user_id == key.user_id,
        table.c.session_id == key.session_id,
    ).order_by(table.c.timestamp, table.c.id).with_for_update()
    try:
        rows = (await conn.execute(statement)).all()
    except ValueError:  # event_data that is not JSON
        return None
    if any(not isinstance(row.event_data, dict) for row in rows):
        return None
    return _Session(
        [{**row.event_data, "id": row.id, "invocation_id": row.invocation_id} for row in rows],
        [row.event_data for row in rows], [row.timestamp for row in rows])


async def _delete(conn: AsyncConnection, removal: Removal) -> bool:
    """Deletes one row (inside the caller's transaction); whether it was there."""
    table = _events_table()
    key = removal.key
    deleted = await conn.execute(delete(table).where(
        table.c.app_name == key.app_name, table.c.user_id == key.user_id,
        table.c.session_id == key.session_id, table.c.id == removal.event_id))
    return bool(deleted.rowcount == 1)


async def _remove_one(conn: AsyncConnection, removal: Removal) -> RemoveOutcome:
    """Deletes one heal row of ours if the one rule lets it go."""
    await _lock_session(conn, removal.key)
    read = await _read_session(conn, removal.key)
    if read is None:
        return RemoveOutcome.KEPT
    decision = decide_removal(read.events, removal, access=STORED_JSON, stored=read.stored)
    if decision.outcome is not RemoveOutcome.REMOVED:
        return decision.outcome
    return RemoveOutcome.REMOVED if await _delete(conn, removal) else RemoveOutcome.ABSENT


async def remove_rows(conn: AsyncConnection, batch: Sequence[Removal]) -> list[RemoveOutcome]:
    """Applies removals inside the caller's transaction; one outcome each, in ``batch`` order.

    Sessions are locked in key order, so two removers never wait on each other
    in a circle.
    """
    results: dict[int, RemoveOutcome] = {}
    for n in sorted(range(len(batch)), key=lambda n: batch[n].key):
        results[n] = await _remove_one(conn, batch[n])
    return [results[n] for n in range(len(batch))]


async def resolve_rows(
    conn: AsyncConnection, resolution: Heal, removal: Removal, *, ledger: bool
) -> ResolveResult:
    """Writes a resolution and deletes what it supersedes, inside the caller's transaction.

    Nothing is written unless the superseded row is still stored and the one
    rule lets it go with the resolution in place. With ``ledger``, the
    resolution's heal-ledger row, the removal's row and the resolution's own
    record go in the same transaction.
    """
    key = removal.key
    await _lock_session(conn, key)
    read = await _read_session(conn, key)
    if read is None:
        return ResolveResult(ResolveOutcome.KEPT, _NOT_JSON)
    decision = decide_resolution(read.events, resolution.data, removal, access=STORED_JSON,
                                 stored=read.stored)
    index = decision.removal.position
    if decision.result.outcome not in (ResolveOutcome.WRITTEN, ResolveOutcome.PRESENT) or (
            index is None):
        return decision.result
    written = decision.insert and (await insert_database_events_batch(
        conn, [heal_row(key, resolution, read.columns[index])]))[0]
    await _delete(conn, removal)
    if ledger:
        if written:
            await insert_ledger_rows(conn, [heal_ledger_row(resolution)])
        await conn.execute(insert(REMOVALS_TABLE), [removal_row(removal)])
        await insert_new_rows(conn, RESOLUTIONS_TABLE, [resolution_row(resolution, removal)],
                              RESOLUTION_KEY)
    return decision.result
