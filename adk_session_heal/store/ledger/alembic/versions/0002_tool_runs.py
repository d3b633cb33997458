"""The tool-run ledger: one row per tool call, started (with a lease) then finished."""

from __future__ import annotations

import sqlalchemy as sa

from adk_session_heal.store.ledger.migration_ops import create_table, drop_table, session_columns

revision, down_revision = "0002", "0001"  # created 2026-11-26


def upgrade() -> None:
    create_table(
        "adk_session_heal_tool_runs",
        *session_columns("call_id", primary_key=True),
        sa.Column("tool_name", sa.String(256), nullable=False),
        sa.Column("invocation_id", sa.String(256), nullable=False),
        sa.Column("state", sa.String(16), nullable=False),
        sa.Column("host", sa.String(256), nullable=False),
        sa.Column("pid", sa.Integer, nullable=False),
        sa.Column("attempt", sa.Integer, nullable=False),
        sa.Column("started_at", sa.Double, nullable=False),
        sa.Column("lease_until", sa.Double, nullable=False),
        sa.Column("finished_at", sa.Double, nullable=True),
        sa.Column("result", sa.Text, nullable=True),
        sa.Column("result_truncated", sa.Boolean, nullable=False),
    )


def downgrade() -> None:
    drop_table("adk_session_heal_tool_runs")
