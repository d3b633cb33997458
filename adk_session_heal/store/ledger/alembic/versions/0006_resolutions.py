"""Resolutions: one row per operator's resolution (who, when, what)."""

from __future__ import annotations

import sqlalchemy as sa
from sqlalchemy.dialects import mysql

from adk_session_heal.store.ledger.migration_ops import KEY_LENGTH, create_heal_table, drop_table

revision, down_revision = "0006", "0005"  # created 2026-11-27


def upgrade() -> None:
    create_heal_table(
        "adk_session_heal_resolutions",
        sa.Column("call_id", sa.Text, nullable=False),
        sa.Column("supersedes", sa.String(KEY_LENGTH), nullable=False),
        sa.Column("resolved_by", sa.String(256), nullable=False),
        sa.Column("resolved_at", sa.Double, nullable=False),
        # MySQL/MariaDB's TEXT holds 64 KB; a true response may be larger.
        sa.Column("response", sa.Text().with_variant(mysql.LONGTEXT(), "mysql", "mariadb"),
                  nullable=False),
        session_index="ix_adk_session_heal_resolutions_session",
        unique="uq_adk_session_heal_resolutions_event",
    )


def downgrade() -> None:
    drop_table("adk_session_heal_resolutions")  # its index and constraint with it
