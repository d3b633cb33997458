"""What differs between the SQL dialects this package writes to, stated once."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from sqlalchemy import Table, insert
from sqlalchemy.exc import IntegrityError

from ..errors import UnsupportedStoreError

if TYPE_CHECKING:
    from sqlalchemy.ext.asyncio import AsyncConnection

_MYSQL_DUPLICATE_KEY = frozenset({1022, 1062, 1586})
"""MySQL/MariaDB error codes that mean "a row with this key exists" (ER_DUP_KEY,
ER_DUP_ENTRY, ER_DUP_ENTRY_WITH_KEY_NAME)."""
_MYSQL_NO_PARENT = 1452
"""MySQL/MariaDB: a foreign key names no parent row (ER_NO_REFERENCED_ROW_2)."""


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


def _mysql_code(exc: IntegrityError) -> Any:
    """The MySQL/MariaDB error code of an integrity error (``None`` if none)."""
    args: tuple[Any, ...] = tuple(getattr(exc.orig, "args", ()))
    return args[0] if args else None


async def insert_new_rows(
    conn: AsyncConnection, table: Table, rows: Sequence[Mapping[str, Any]], key: Sequence[str]
) -> list[bool | None]:
    """Inserts rows into ``table``, keeping any row that already holds a row's key.

    Only an existing key makes a row "already present": every other error (a
    value too long for its column, a wrong type) is raised, never turned into
    a warning, so nothing is silently truncated or dropped. On MySQL/MariaDB a
    row whose foreign key names no parent row (its session was deleted after
    the caller re-counted it) is not written and comes back as ``None``; the
    other rows are still inserted. PostgreSQL and SQLite raise then (their
    writers hold the parent rows, so they never meet one).

    * PostgreSQL and SQLite: one multi-row ``INSERT ... ON CONFLICT DO NOTHING
      RETURNING <key>`` (SQLAlchemy's "insertmanyvalues"); the keys returned
      are the rows written.
    * MySQL/MariaDB: one plain ``INSERT`` per row; a duplicate-key error (1062)
      means present, a missing parent (1452) means gone. InnoDB undoes only
      the failed statement, so the transaction (the re-check before, the
      ledger rows after) goes on. ``INSERT IGNORE`` is not used: it also turns
      truncation and type errors into warnings and writes the mangled row.

    Args:
        conn: A connection inside the caller's transaction.
        table: The table.
        rows: The rows, each with every column of ``key``.
        key: The columns of the table's primary key or unique constraint.

    Returns:
        For each row, whether this call wrote it (``None``: its parent row is gone).

    Raises:
        UnsupportedStoreError: The dialect is not SQLite, PostgreSQL, MySQL or MariaDB.
        sqlalchemy.exc.SQLAlchemyError: Any error other than an existing key (or,
            on MySQL/MariaDB, a missing parent row).
    """
    if not rows:
        return []
    dialect = conn.dialect.name
    if dialect in ("mysql", "mariadb"):
        statement = insert(table)
        written: list[bool | None] = []
        for row in rows:
            try:
                await conn.execute(statement, dict(row))
            except IntegrityError as exc:
                code = _mysql_code(exc)
                if code in _MYSQL_DUPLICATE_KEY:
                    written.append(False)
                elif code == _MYSQL_NO_PARENT:
                    written.append(None)
                else:
                    raise
            else:
                written.append(True)
        return written
    # Imported here: a scan never inserts, and both dialects took about 20 ms of every start.
    from sqlalchemy.dialects import postgresql, sqlite

    dialects = {"postgresql": postgresql, "sqlite": sqlite}
    if dialect not in dialects:
        raise UnsupportedStoreError(
            f"unsupported SQL dialect {dialect!r}: use SQLite, PostgreSQL, MySQL or MariaDB"
        )
    returning = dialects[dialect].insert(table).on_conflict_do_nothing().returning(
        *(table.c[name] for name in key))
    result = await conn.execute(returning, [dict(row) for row in rows])
    inserted = {tuple(found) for found in result}
    return [tuple(row[name] for name in key) in inserted for row in rows]
