"""The heal ledger: one row per synthetic event written.

Revision ID: 0001
Revises:
Create Date: 2026-11-22
"""

from __future__ import annotations

import sqlalchemy as sa

from adk_session_heal.store.ledger.migration_ops import create_table, drop_table

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    create_table(
        "adk_session_heal_ledger",
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
        sa.UniqueConstraint(
            "app_name", "user_id", "session_id", "synthetic_event_id",
            name="uq_adk_session_heal_ledger_heal",
        ),
    )


def downgrade() -> None:
    drop_table("adk_session_heal_ledger")
