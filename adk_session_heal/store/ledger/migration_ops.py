"""Schema operations for the migration scripts that a rerun may repeat.

:mod:`~adk_session_heal.store.ledger.migrations` runs each revision step in a
transaction of its own. SQLite and PostgreSQL roll a step back whole when it
fails or its process is killed. MySQL and MariaDB commit each DDL statement
as it runs, so a step killed midway leaves some of its statements done while
the version table still names the revision before it: the rerun repeats the
whole step. Every operation here therefore first looks at what is already
there (online) and does only what is missing: a table or index created once,
a column dropped once. In offline mode (``--sql``) there is nothing to look at
and each operation is emitted as Alembic's own.

How a step is written (0006 and later follow this):

* Use these functions, not ``op.create_table`` and friends, for every change.
* Make the step's first operation one that :func:`~adk_session_heal.store.
  migrations.current` checks (a table or a column appearing or disappearing,
  listed in ``_FEATURES`` there), and let no later operation of the step undo
  it: a step killed midway is then seen as interrupted, and the next ``db``
  command finishes it before anything else.
* A change that SQLite can only make by copying the table
  (``op.batch_alter_table``) is safe there as it is: the copy runs inside the
  step's transaction.

Example (in a script's ``upgrade()``)::

    create_table("adk_session_heal_example", sa.Column("id", sa.Integer, primary_key=True))
    add_column("adk_session_heal_ledger", sa.Column("note", sa.Text, nullable=True))
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import sqlalchemy as sa
from alembic import context, op


def _inspector() -> sa.Inspector | None:
    """Returns a fresh inspector of the migration's connection (``None`` offline)."""
    if context.is_offline_mode():
        return None
    return sa.inspect(op.get_bind())


def _has_table(table: str) -> bool | None:
    inspector = _inspector()
    return None if inspector is None else inspector.has_table(table)


def _columns(table: str) -> set[str] | None:
    inspector = _inspector()
    if inspector is None:
        return None
    if not inspector.has_table(table):
        return set()
    return {column["name"] for column in inspector.get_columns(table)}


def _index_names(table: str) -> set[str] | None:
    """Names of the table's indexes and unique constraints (MySQL keeps the latter as indexes)."""
    inspector = _inspector()
    if inspector is None:
        return None
    if not inspector.has_table(table):
        return set()
    names = {index["name"] for index in inspector.get_indexes(table)}
    names |= {unique["name"] for unique in inspector.get_unique_constraints(table)}
    return {name for name in names if name}


def is_sqlite() -> bool:
    """Returns whether the migration runs (or prints SQL) for SQLite."""
    return bool(op.get_context().dialect.name == "sqlite")


def create_table(table: str, *columns: Any) -> None:
    """Creates ``table`` unless it exists (``op.create_table``'s arguments)."""
    if _has_table(table) is not True:
        op.create_table(table, *columns)


def drop_table(table: str) -> None:
    """Drops ``table`` if it exists."""
    if _has_table(table) is not False:
        op.drop_table(table)


def add_column(table: str, column: sa.Column[Any]) -> None:
    """Adds ``column`` to ``table`` unless it has it."""
    found = _columns(table)
    if found is None or column.name not in found:
        op.add_column(table, column)


def drop_column(table: str, column: str) -> None:
    """Drops ``column`` from ``table`` if it has it (SQLite 3.35+ drops columns itself)."""
    found = _columns(table)
    if found is None or column in found:
        op.drop_column(table, column)


def create_index(name: str, table: str, columns: Sequence[str]) -> None:
    """Creates the index ``name`` unless ``table`` has it."""
    found = _index_names(table)
    if found is None or name not in found:
        op.create_index(name, table, list(columns))


def drop_index(name: str, table: str) -> None:
    """Drops the index ``name`` if ``table`` has it."""
    found = _index_names(table)
    if found is None or name in found:
        op.drop_index(name, table)


def create_unique(name: str, table: str, columns: Sequence[str]) -> None:
    """Adds the unique constraint ``name`` unless ``table`` has it (not SQLite: copy the table)."""
    found = _index_names(table)
    if found is None or name not in found:
        op.create_unique_constraint(name, table, list(columns))


def drop_unique(name: str, table: str) -> None:
    """Drops the unique constraint ``name`` if ``table`` has it (not SQLite: copy the table)."""
    found = _index_names(table)
    if found is None or name in found:
        op.drop_constraint(name, table, type_="unique")
