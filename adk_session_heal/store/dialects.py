"""What differs between the SQL dialects this package writes to, stated once."""

from __future__ import annotations

from sqlalchemy import Insert, Table
from sqlalchemy.dialects import mysql, postgresql, sqlite

__all__ = ["insert_ignoring_duplicates"]


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
