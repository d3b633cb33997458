"""Repair runs: the runs table, and the run id on heal and removal rows.

Each heal row gets ``run_id`` (``""`` for the wrapper's heals, which belong to
no run) and ``event_digest`` (the digest of the row a run stored, so
``repair --undo`` takes out only rows still as written); the heal rows'
uniqueness takes ``run_id`` in, so a heal undone and written again by a later
run is recorded under that run too. Each removal row gets ``run_id``.

The downgrade takes out only what this revision added: the runs table, the
two columns, the removal rows' ``run_id``, and the rows that only ``run_id``
in the uniqueness made possible: when one heal was recorded by several runs
(written, undone, written again), the newest row of it stays and the older
ones go, since ``0003`` keeps one row per heal.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from adk_session_heal.store.ledger.migration_ops import (
    HEAL_KEY,
    add_column,
    create_index,
    create_table,
    create_unique,
    drop_column,
    drop_index,
    drop_table,
    drop_unique,
    is_sqlite,
    ledger_0001,
)

revision, down_revision = "0004", "0003"  # created 2026-11-26

_LEDGER, _REMOVALS = "adk_session_heal_ledger", "adk_session_heal_removals"
_RUNS = "adk_session_heal_runs"
_OLD_UNIQUE, _NEW_UNIQUE = "uq_adk_session_heal_ledger_heal", "uq_adk_session_heal_ledger_run_heal"
_RUN_INDEX = "ix_adk_session_heal_ledger_run"
_RUN_ID = 32
"""The length of a run id (32 hex digits) in every column that holds one."""


def _run_id() -> sa.Column[str]:
    return sa.Column("run_id", sa.String(_RUN_ID), nullable=False, server_default="")


def _event_digest() -> sa.Column[str]:
    return sa.Column("event_digest", sa.String(64), nullable=True)


def _ledger_0003() -> sa.Table:
    """The heal ledger as 0001 made it: what SQLite's table copy starts from (also offline)."""
    return sa.Table(_LEDGER, sa.MetaData(), *ledger_0001())


def _ledger_0004() -> sa.Table:
    """The heal ledger as this revision leaves it (what SQLite's downgrade copy starts from)."""
    table = _ledger_0003()
    table.append_column(_run_id())
    table.append_column(_event_digest())
    for constraint in list(table.constraints):
        if isinstance(constraint, sa.UniqueConstraint):
            table.constraints.remove(constraint)
    table.append_constraint(sa.UniqueConstraint(*HEAL_KEY, "run_id", name=_NEW_UNIQUE))
    return table


def upgrade() -> None:
    create_table(  # first: what `db current` sees of a step killed midway on MySQL/MariaDB
        _RUNS,
        sa.Column("run_id", sa.String(_RUN_ID), primary_key=True),
        sa.Column("kind", sa.String(16), nullable=False),
        sa.Column("undoes", sa.String(_RUN_ID), nullable=True),
        sa.Column("host", sa.String(256), nullable=False),
        sa.Column("started_at", sa.Double, nullable=False),
        sa.Column("finished_at", sa.Double, nullable=True),
        sa.Column("kept", sa.Integer, nullable=True),
    )
    if is_sqlite():  # a copy of the table, inside the step's transaction
        with op.batch_alter_table(_LEDGER, copy_from=_ledger_0003()) as batch:
            batch.add_column(_run_id())
            batch.add_column(_event_digest())
            batch.drop_constraint(_OLD_UNIQUE, type_="unique")
            batch.create_unique_constraint(_NEW_UNIQUE, [*HEAL_KEY, "run_id"])
    else:
        add_column(_LEDGER, _run_id())
        add_column(_LEDGER, _event_digest())
        drop_unique(_OLD_UNIQUE, _LEDGER)
        create_unique(_NEW_UNIQUE, _LEDGER, [*HEAL_KEY, "run_id"])
    create_index(_RUN_INDEX, _LEDGER, ["run_id"])
    add_column(_REMOVALS, sa.Column("run_id", sa.String(_RUN_ID), nullable=True))


_KEEP_NEWEST = (
    f"DELETE FROM {_LEDGER} WHERE id NOT IN (SELECT id FROM (SELECT MAX(id) AS id FROM {_LEDGER} "
    f"GROUP BY {', '.join(HEAL_KEY)}) newest)"
)
"""Keeps the newest row of each heal (the derived table lets MySQL read the table it deletes
from)."""


def downgrade() -> None:
    drop_column(_REMOVALS, "run_id")  # first: what `db current` sees of a step killed midway
    drop_index(_RUN_INDEX, _LEDGER)
    op.execute(_KEEP_NEWEST)  # before 0003's uniqueness comes back
    if is_sqlite():
        with op.batch_alter_table(_LEDGER, copy_from=_ledger_0004()) as batch:
            batch.drop_constraint(_NEW_UNIQUE, type_="unique")
            batch.drop_column("event_digest")
            batch.drop_column("run_id")
            batch.create_unique_constraint(_OLD_UNIQUE, list(HEAL_KEY))
    else:
        drop_unique(_NEW_UNIQUE, _LEDGER)
        create_unique(_OLD_UNIQUE, _LEDGER, list(HEAL_KEY))
        drop_column(_LEDGER, "event_digest")
        drop_column(_LEDGER, "run_id")
    drop_table(_RUNS)
