"""Running this package's Alembic migrations (the heal ledger's tables).

See :mod:`adk_session_heal.store.migrations`; this module is its public name.

Example::

    await upgrade("postgresql+asyncpg://app@db/sessions")   # adk-session-heal db upgrade URL
    await current("postgresql+asyncpg://app@db/sessions")   # -> "0001"
"""

from __future__ import annotations

from .store.migrations import (
    alembic_config,
    current,
    downgrade,
    head_revision,
    migrations_dir,
    upgrade,
)

__all__ = [
    "alembic_config",
    "current",
    "downgrade",
    "head_revision",
    "migrations_dir",
    "upgrade",
]
