"""Running this package's Alembic migrations (the heal ledger's tables).

See :mod:`adk_session_heal.store.migrations`; this module is its public name.

Example::

    await upgrade("postgresql+asyncpg://app@db/sessions")   # adk-session-heal db upgrade URL
    await current("postgresql+asyncpg://app@db/sessions")   # -> "0001"
"""

from __future__ import annotations

from .store.migrations import (
    Revision,
    alembic_config,
    current,
    downgrade,
    head_revision,
    migrations_dir,
    resolve_revision,
    revisions,
    sql_script,
    upgrade,
)

__all__ = [
    "Revision",
    "alembic_config",
    "current",
    "downgrade",
    "head_revision",
    "migrations_dir",
    "resolve_revision",
    "revisions",
    "sql_script",
    "upgrade",
]
