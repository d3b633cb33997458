"""Incremental scans: each scope's watermark and the sessions its last run left unsettled."""

from __future__ import annotations

import sqlalchemy as sa

from adk_session_heal.store.ledger.migration_ops import create_table, drop_table, session_columns

revision, down_revision = "0005", "0004"  # created 2026-11-26


def upgrade() -> None:
    create_table(
        "adk_session_heal_watermarks",
        sa.Column("scope_id", sa.String(40), primary_key=True),
        sa.Column("scope", sa.Text, nullable=False),
        sa.Column("watermark", sa.Double, nullable=False),
        sa.Column("run_at", sa.Double, nullable=False),
    )
    create_table(
        "adk_session_heal_unsettled",
        sa.Column("scope_id", sa.String(40), primary_key=True),
        *session_columns(primary_key=True),
    )


def downgrade() -> None:
    drop_table("adk_session_heal_unsettled")
    drop_table("adk_session_heal_watermarks")
