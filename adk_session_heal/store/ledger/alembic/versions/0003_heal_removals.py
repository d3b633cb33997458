"""The removals ledger: one row per heal of ours taken back out of storage."""

from __future__ import annotations

import sqlalchemy as sa

from adk_session_heal.store.ledger.migration_ops import create_heal_table, drop_table

revision, down_revision = "0003", "0002"  # created 2026-11-26


def upgrade() -> None:
    create_heal_table(
        "adk_session_heal_removals",
        sa.Column("call_ids", sa.Text, nullable=False),
        sa.Column("reason", sa.String(32), nullable=False),
        sa.Column("removed_by", sa.String(256), nullable=False),
        sa.Column("removed_at", sa.Double, nullable=False),
        sa.Column("detail", sa.Text, nullable=False),
        session_index="ix_adk_session_heal_removals_session",
    )


def downgrade() -> None:
    drop_table("adk_session_heal_removals")  # its index with it
