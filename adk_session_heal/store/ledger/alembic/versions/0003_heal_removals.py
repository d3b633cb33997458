"""The removals ledger: one row per heal of ours taken back out of storage.

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-26
"""

from __future__ import annotations

import sqlalchemy as sa

from adk_session_heal.store.ledger.migration_ops import create_index, create_table, drop_table

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    create_table(
        "adk_session_heal_removals",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("app_name", sa.String(128), nullable=False),
        sa.Column("user_id", sa.String(128), nullable=False),
        sa.Column("session_id", sa.String(128), nullable=False),
        sa.Column("synthetic_event_id", sa.String(128), nullable=False),
        sa.Column("call_event_id", sa.String(128), nullable=False),
        sa.Column("call_ids", sa.Text, nullable=False),
        sa.Column("reason", sa.String(32), nullable=False),
        sa.Column("removed_by", sa.String(256), nullable=False),
        sa.Column("removed_at", sa.Double, nullable=False),
        sa.Column("detail", sa.Text, nullable=False),
    )
    create_index(
        "ix_adk_session_heal_removals_session", "adk_session_heal_removals",
        ["app_name", "user_id", "session_id"],
    )


def downgrade() -> None:
    drop_table("adk_session_heal_removals")  # its index with it
