"""What differs between the SQL dialects this package writes to, stated once."""

from __future__ import annotations

from sqlalchemy import Insert, Table
from sqlalchemy.dialects import mysql, postgresql, sqlite
from sqlalchemy.ext.asyncio import AsyncConnection

__all__ = ["insert_ignoring_duplicates", "prepare_write"]


async def prepare_write(conn: AsyncConnection) -> None:
    """Readies a write transaction that re-counts sessions before it inserts.

    * SQLite: take the write lock now (``BEGIN IMMEDIATE``), so the re-count
      and the inserts see the same database.
    * PostgreSQL 12+: plan each statement for its own values. A repair sends
      the same re-count statement with other session ids batch after batch;
      after five, PostgreSQL switched the prepared statement to a generic plan
      that scanned the table (0.05 s per batch became 1.1 s, measured).
    """
    dialect = conn.dialect
    if dialect.name == "sqlite":
        await conn.exec_driver_sql("BEGIN IMMEDIATE")
    elif dialect.name == "postgresql" and (dialect.server_version_info or (0,)) >= (12,):
        await conn.exec_driver_sql("SET LOCAL plan_cache_mode = force_custom_plan")


def insert_ignoring_duplicates(dialect: str, table: Table) -> Insert:
    """Returns an ``INSERT`` into ``table`` that skips rows whose key exists.

    Args:
        dialect: The SQLAlchemy dialect name of the connection.
        table: The table.

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
