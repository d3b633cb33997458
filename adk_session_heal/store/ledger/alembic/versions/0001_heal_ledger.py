"""The heal ledger: one row per synthetic event written."""

from __future__ import annotations

from adk_session_heal.store.ledger.migration_ops import create_table, drop_table, ledger_0001

revision, down_revision = "0001", None  # created 2026-11-22


def upgrade() -> None:
    create_table("adk_session_heal_ledger", *ledger_0001())


def downgrade() -> None:
    drop_table("adk_session_heal_ledger")
