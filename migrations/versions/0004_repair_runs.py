"""Repair runs: the runs table, and the run id on heal and removal rows.

Each heal row gets ``run_id`` (``""`` for the wrapper's heals, which belong to
no run) and ``event_digest`` (the digest of the row a run stored, so
``repair --undo`` takes out only rows still as written); the heal rows'
uniqueness takes ``run_id`` in, so a heal undone and written again by a later
run is recorded under that run too. Each removal row gets ``run_id``.

Revision ID: 0004
Revises: 0003
Create Date: 2026-11-26
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None

_LEDGER = "adk_session_heal_ledger"
_KEY = ("app_name", "user_id", "session_id", "synthetic_event_id")


def _ledger_0003() -> sa.Table:
    """The heal ledger as 0001 made it: what SQLite's table copy starts from (also offline)."""
    return sa.Table(
        _LEDGER,
        sa.MetaData(),
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("app_name", sa.String(128), nullable=False),
        sa.Column("user_id", sa.String(128), nullable=False),
        sa.Column("session_id", sa.String(128), nullable=False),
        sa.Column("synthetic_event_id", sa.String(128), nullable=False),
        sa.Column("call_event_id", sa.String(128), nullable=False),
        sa.Column("invocation_id", sa.String(256), nullable=False),
        sa.Column("call_ids", sa.Text, nullable=False),
        sa.Column("tool_names", sa.Text, nullable=False),
        sa.Column("reason", sa.String(32), nullable=False),
        sa.Column("trigger", sa.String(32), nullable=False),
        sa.Column("healed_at", sa.Double, nullable=False),
        sa.UniqueConstraint(*_KEY, name="uq_adk_session_heal_ledger_heal"),
    )


def _ledger_0004() -> sa.Table:
    """The heal ledger as this revision leaves it (what SQLite's downgrade copy starts from)."""
    table = _ledger_0003()
    table.append_column(sa.Column("run_id", sa.String(32), nullable=False, server_default=""))
    table.append_column(sa.Column("event_digest", sa.String(64), nullable=True))
    for constraint in list(table.constraints):
        if isinstance(constraint, sa.UniqueConstraint):
            table.constraints.remove(constraint)
    table.append_constraint(
        sa.UniqueConstraint(*_KEY, "run_id", name="uq_adk_session_heal_ledger_run_heal"))
    return table


def upgrade() -> None:
    op.create_table(
        "adk_session_heal_runs",
        sa.Column("run_id", sa.String(32), primary_key=True),
        sa.Column("kind", sa.String(16), nullable=False),
        sa.Column("undoes", sa.String(32), nullable=True),
        sa.Column("host", sa.String(256), nullable=False),
        sa.Column("started_at", sa.Double, nullable=False),
        sa.Column("finished_at", sa.Double, nullable=True),
        sa.Column("kept", sa.Integer, nullable=True),
    )
    with op.batch_alter_table(_LEDGER, copy_from=_ledger_0003()) as batch:
        batch.add_column(sa.Column("run_id", sa.String(32), nullable=False, server_default=""))
        batch.add_column(sa.Column("event_digest", sa.String(64), nullable=True))
        batch.drop_constraint("uq_adk_session_heal_ledger_heal", type_="unique")
        batch.create_unique_constraint("uq_adk_session_heal_ledger_run_heal", [*_KEY, "run_id"])
    op.create_index("ix_adk_session_heal_ledger_run", _LEDGER, ["run_id"])
    op.add_column("adk_session_heal_removals", sa.Column("run_id", sa.String(32), nullable=True))


def downgrade() -> None:
    op.drop_column("adk_session_heal_removals", "run_id")  # SQLite 3.35+ drops columns itself
    op.drop_index("ix_adk_session_heal_ledger_run", _LEDGER)
    with op.batch_alter_table(_LEDGER, copy_from=_ledger_0004()) as batch:
        batch.drop_constraint("uq_adk_session_heal_ledger_run_heal", type_="unique")
        batch.drop_column("event_digest")
        batch.drop_column("run_id")
        batch.create_unique_constraint("uq_adk_session_heal_ledger_heal", list(_KEY))
    op.drop_table("adk_session_heal_runs")
