"""Incremental scans: each scope's watermark and the sessions its last run left unsettled.

Revision ID: 0005
Revises: 0004
Create Date: 2026-11-26
"""

from __future__ import annotations

import sqlalchemy as sa

from adk_session_heal.store.ledger.migration_ops import create_table, drop_table

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None


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
        sa.Column("app_name", sa.String(128), primary_key=True),
        sa.Column("user_id", sa.String(128), primary_key=True),
        sa.Column("session_id", sa.String(128), primary_key=True),
    )


def downgrade() -> None:
    drop_table("adk_session_heal_unsettled")
    drop_table("adk_session_heal_watermarks")
