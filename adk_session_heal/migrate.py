"""Running this package's Alembic migrations (the ledger's tables), from code.

The same as ``adk-session-heal db upgrade|downgrade|current URL``: configured in
code (no ``alembic.ini``), revisions kept in ``adk_session_heal_alembic_version``.
For example ``await upgrade(url)`` brings a session database to the newest
revision, and ``await current(url)`` tells where it stands (``None``: no ledger).
"""

from __future__ import annotations

from .store.ledger.migrations import (
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
