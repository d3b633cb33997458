"""Inserting synthetic event rows, keeping whatever row already holds the key.

Heals have deterministic ids, so two healers racing on one dead call produce
the same primary key. Each insert here skips a row whose key exists (the other
healer won) and reports, row by row, whether it wrote it. Nothing here updates
or deletes a row, and nothing touches ``sessions.update_time``: a heal must not
bump the session's revision, or a runner in the middle of a turn would fail its
next append with ``StaleSessionError``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import aiosqlite
from sqlalchemy import Insert, Table
from sqlalchemy.dialects import mysql, postgresql, sqlite
from sqlalchemy.ext.asyncio import AsyncConnection

from .ledger_table import LEDGER_TABLE
from .rows import DATABASE_EVENTS_TABLE, SQLITE_EVENT_COLUMNS

__all__ = [
    "insert_database_events",
    "insert_database_events_batch",
    "insert_ignoring_duplicates",
    "insert_ledger_rows",
    "insert_sqlite_events",
    "insert_sqlite_ledger_rows",
]

_SQLITE_INSERT = (
    f"INSERT OR IGNORE INTO events ({', '.join(SQLITE_EVENT_COLUMNS)}) "
    f"VALUES ({', '.join('?' for _ in SQLITE_EVENT_COLUMNS)})"
)


_LEDGER_COLUMNS = tuple(c.name for c in LEDGER_TABLE.columns if c.name != "id")
_SQLITE_LEDGER_INSERT = (
    f"INSERT OR IGNORE INTO {LEDGER_TABLE.name} ({', '.join(_LEDGER_COLUMNS)}) "
    f"VALUES ({', '.join(':' + c for c in _LEDGER_COLUMNS)})"
)


def insert_ignoring_duplicates(dialect: str, table: Table = DATABASE_EVENTS_TABLE) -> Insert:
    """Returns an ``INSERT`` into ``table`` that skips rows whose key exists.

    Args:
        dialect: The SQLAlchemy dialect name of the connection.
        table: The table (ADK's ``events`` by default).

    Raises:
        ValueError: The dialect is not SQLite, PostgreSQL, MySQL or MariaDB.
    """
    if dialect == "postgresql":
        return postgresql.insert(table).on_conflict_do_nothing()
    if dialect in ("mysql", "mariadb"):
        return mysql.insert(table).prefix_with("IGNORE")
    if dialect == "sqlite":
        return sqlite.insert(table).on_conflict_do_nothing()
    raise ValueError(f"unsupported SQL dialect {dialect!r}")


async def insert_database_events(
    conn: AsyncConnection, rows: Sequence[dict[str, Any]]
) -> list[bool]:
    """Inserts ``DatabaseSessionService`` event rows, skipping existing keys.

    Args:
        conn: A connection inside the caller's transaction.
        rows: Rows from :func:`~adk_session_heal.store.rows.database_event_row`.

    Returns:
        For each row, whether this call wrote it.
    """
    statement = insert_ignoring_duplicates(conn.dialect.name)
    written: list[bool] = []
    for row in rows:
        result = await conn.execute(statement, row)
        written.append(result.rowcount == 1)
    return written


async def insert_database_events_batch(
    conn: AsyncConnection, rows: Sequence[dict[str, Any]]
) -> list[bool]:
    """Like :func:`insert_database_events`, in one batched statement where possible.

    On PostgreSQL and SQLite the rows go in one multi-row ``INSERT ... ON
    CONFLICT DO NOTHING RETURNING`` (SQLAlchemy's "insertmanyvalues"), and the
    returned keys say exactly which rows this call wrote. MySQL/MariaDB have no
    ``RETURNING`` with ``INSERT IGNORE``, so there the rows go one by one.

    Args:
        conn: A connection inside the caller's transaction.
        rows: Rows from :func:`~adk_session_heal.store.rows.database_event_row`.

    Returns:
        For each row, whether this call wrote it.
    """
    dialect = conn.dialect.name
    if dialect not in ("postgresql", "sqlite") or not rows:
        return await insert_database_events(conn, rows)
    table = DATABASE_EVENTS_TABLE
    key_columns = (table.c.app_name, table.c.user_id, table.c.session_id, table.c.id)
    statement = insert_ignoring_duplicates(dialect).returning(*key_columns)
    result = await conn.execute(statement, list(rows))
    written = {tuple(row) for row in result}
    return [(r["app_name"], r["user_id"], r["session_id"], r["id"]) in written for r in rows]


async def insert_sqlite_events(
    db: aiosqlite.Connection, rows: Sequence[tuple[Any, ...]]
) -> list[bool]:
    """Inserts ``SqliteSessionService`` event rows, skipping existing keys.

    Args:
        db: An open connection; the caller commits.
        rows: Rows from :func:`~adk_session_heal.store.rows.sqlite_event_row`.

    Returns:
        For each row, whether this call wrote it.
    """
    written: list[bool] = []
    for row in rows:
        cursor = await db.execute(_SQLITE_INSERT, row)
        written.append(cursor.rowcount == 1)
        await cursor.close()
    return written


async def insert_ledger_rows(conn: AsyncConnection, rows: Sequence[dict[str, Any]]) -> None:
    """Inserts heal-ledger rows in one statement, skipping heals already recorded.

    Args:
        conn: A connection inside the caller's transaction (the one that wrote
            the heals, so a heal and its record commit together).
        rows: Rows from :func:`~adk_session_heal.store.ledger_table.ledger_row`.
    """
    if rows:
        await conn.execute(insert_ignoring_duplicates(conn.dialect.name, LEDGER_TABLE), rows)


async def insert_sqlite_ledger_rows(
    db: aiosqlite.Connection, rows: Sequence[dict[str, Any]]
) -> None:
    """Inserts heal-ledger rows into an ADK ``SqliteSessionService`` file.

    Args:
        db: An open connection; the caller commits (with the heals' rows).
        rows: Rows from :func:`~adk_session_heal.store.ledger_table.ledger_row`.
    """
    if rows:
        await db.executemany(_SQLITE_LEDGER_INSERT, rows)
