"""Resolutions: one row per operator's resolution (who, when, what).

Revision ID: 0006
Revises: 0005
Create Date: 2026-11-27
"""

from __future__ import annotations

import sqlalchemy as sa
from sqlalchemy.dialects import mysql

from adk_session_heal.store.ledger.migration_ops import create_index, create_table, drop_table

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None


def upgrade() -> None:
    create_table(
        "adk_session_heal_resolutions",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("app_name", sa.String(128), nullable=False),
        sa.Column("user_id", sa.String(128), nullable=False),
        sa.Column("session_id", sa.String(128), nullable=False),
        sa.Column("synthetic_event_id", sa.String(128), nullable=False),
        sa.Column("call_event_id", sa.String(128), nullable=False),
        sa.Column("call_id", sa.Text, nullable=False),
        sa.Column("supersedes", sa.String(128), nullable=False),
        sa.Column("resolved_by", sa.String(256), nullable=False),
        sa.Column("resolved_at", sa.Double, nullable=False),
        # MySQL/MariaDB's TEXT holds 64 KB; a true response may be larger.
        sa.Column("response", sa.Text().with_variant(mysql.LONGTEXT(), "mysql", "mariadb"),
                  nullable=False),
        sa.UniqueConstraint("app_name", "user_id", "session_id", "synthetic_event_id",
                            name="uq_adk_session_heal_resolutions_event"),
    )
    create_index(
        "ix_adk_session_heal_resolutions_session", "adk_session_heal_resolutions",
        ["app_name", "user_id", "session_id"],
    )


def downgrade() -> None:
    drop_table("adk_session_heal_resolutions")  # its index and constraint with it
