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

What several revisions define alike is written here once, as they defined it:
the session's key columns (:func:`session_columns`), the columns every table
of heal rows starts with (:func:`heal_row_columns`, :func:`create_heal_table`)
and the heal ledger as ``0001`` made it (:func:`ledger_0001`, which ``0004``
copies from on SQLite). A revision never changes once released, so neither do
these; the tables the code reads and writes are
:mod:`~adk_session_heal.store.ledger.heal_table`'s.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import sqlalchemy as sa
from alembic import context, op

KEY_LENGTH = 128
"""The length of the session, user, app and event id columns: ADK's ``DEFAULT_MAX_KEY_LENGTH``."""

SESSION_KEY = ("app_name", "user_id", "session_id")
"""A session's key columns."""

HEAL_KEY = (*SESSION_KEY, "synthetic_event_id")
"""A heal's key: its session and its synthetic event's id."""


def _found(table: str, read: Callable[[sa.Inspector], set[str]]) -> set[str] | None:
    """Returns what ``read`` finds of ``table`` on the migration's connection.

    Args:
        table: The table looked at; when it does not exist, nothing is found.
        read: Reads the names wanted from a fresh inspector.

    Returns:
        The names found (empty without the table), or ``None`` offline, where
        there is nothing to look at.
    """
    if context.is_offline_mode():
        return None
    inspector = sa.inspect(op.get_bind())
    if not inspector.has_table(table):
        return set()
    return read(inspector)


def _tables(table: str) -> set[str] | None:
    """Returns ``{table}`` if it exists, else an empty set (``None`` offline)."""
    return _found(table, lambda inspector: {table})


def _columns(table: str) -> set[str] | None:
    """Returns the names of ``table``'s columns (``None`` offline)."""
    return _found(table, lambda inspector: {
        column["name"] for column in inspector.get_columns(table)})


def _index_names(table: str) -> set[str] | None:
    """Names of the table's indexes and unique constraints (MySQL keeps the latter as indexes)."""
    def read(inspector: sa.Inspector) -> set[str]:
        names = {index["name"] for index in inspector.get_indexes(table)}
        names |= {unique["name"] for unique in inspector.get_unique_constraints(table)}
        return {name for name in names if name}

    return _found(table, read)


def _add(name: str, found: set[str] | None, operation: Callable[..., object],
         *args: Any) -> None:
    """Runs ``operation(*args)``, which adds ``name``, unless ``found`` has it already."""
    if found is None or name not in found:
        operation(*args)


def _drop(name: str, found: set[str] | None, operation: Callable[..., object],
          *args: Any, **kwargs: Any) -> None:
    """Runs ``operation(*args, **kwargs)``, which drops ``name``, if ``found`` has it still."""
    if found is None or name in found:
        operation(*args, **kwargs)


def is_sqlite() -> bool:
    """Returns whether the migration runs (or prints SQL) for SQLite."""
    return bool(op.get_context().dialect.name == "sqlite")


def create_table(table: str, *columns: Any) -> None:
    """Creates ``table`` unless it exists (``op.create_table``'s arguments)."""
    _add(table, _tables(table), op.create_table, table, *columns)


def add_column(table: str, column: sa.Column[Any]) -> None:
    """Adds ``column`` to ``table`` unless it has it."""
    _add(column.name, _columns(table), op.add_column, table, column)


def create_index(name: str, table: str, columns: Sequence[str]) -> None:
    """Creates the index ``name`` unless ``table`` has it."""
    _add(name, _index_names(table), op.create_index, name, table, list(columns))


def create_unique(name: str, table: str, columns: Sequence[str]) -> None:
    """Adds the unique constraint ``name`` unless ``table`` has it (not SQLite: copy the table)."""
    _add(name, _index_names(table), op.create_unique_constraint, name, table, list(columns))


def drop_table(table: str) -> None:
    """Drops ``table`` if it exists."""
    _drop(table, _tables(table), op.drop_table, table)


def drop_column(table: str, column: str) -> None:
    """Drops ``column`` from ``table`` if it has it (SQLite 3.35+ drops columns itself)."""
    _drop(column, _columns(table), op.drop_column, table, column)


def drop_index(name: str, table: str) -> None:
    """Drops the index ``name`` if ``table`` has it."""
    _drop(name, _index_names(table), op.drop_index, name, table)


def drop_unique(name: str, table: str) -> None:
    """Drops the unique constraint ``name`` if ``table`` has it (not SQLite: copy the table)."""
    _drop(name, _index_names(table), op.drop_constraint, name, table, type_="unique")


def session_columns(*more: str, **options: Any) -> list[sa.Column[str]]:
    """Returns new ``app_name``, ``user_id`` and ``session_id`` columns, then ``more`` alike.

    Args:
        *more: Further id columns of the key, of the same type.
        **options: ``sa.Column``'s options for each (``nullable=False`` or
            ``primary_key=True``).
    """
    return [sa.Column(name, sa.String(KEY_LENGTH), **options) for name in (*SESSION_KEY, *more)]


def heal_row_columns() -> list[sa.Column[Any]]:
    """Returns new columns that every table of heal rows starts with (``0001``, ``0003``, ``0006``).

    A surrogate id, the session, the heal's synthetic event and the call event it answers.
    """
    return [
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        *session_columns("synthetic_event_id", "call_event_id", nullable=False),
    ]


def ledger_0001() -> list[sa.schema.SchemaItem]:
    """Returns the heal ledger's columns and uniqueness as ``0001`` made them (new objects)."""
    return [
        *heal_row_columns(),
        sa.Column("invocation_id", sa.String(256), nullable=False),
        sa.Column("call_ids", sa.Text, nullable=False),
        sa.Column("tool_names", sa.Text, nullable=False),
        sa.Column("reason", sa.String(32), nullable=False),
        sa.Column("trigger", sa.String(32), nullable=False),
        sa.Column("healed_at", sa.Double, nullable=False),
        sa.UniqueConstraint(*HEAL_KEY, name="uq_adk_session_heal_ledger_heal"),
    ]


def create_heal_table(table: str, *columns: Any, session_index: str,
                      unique: str | None = None) -> None:
    """Creates a table of heal rows and its index on the session, each unless it exists.

    Args:
        table: The table's name.
        *columns: Its columns after :func:`heal_row_columns`.
        session_index: The name of its index on :data:`SESSION_KEY`.
        unique: The name of its uniqueness on :data:`HEAL_KEY` (one row per
            heal), if it has one.
    """
    constraints = [] if unique is None else [sa.UniqueConstraint(*HEAL_KEY, name=unique)]
    create_table(table, *heal_row_columns(), *columns, *constraints)
    create_index(session_index, table, SESSION_KEY)
