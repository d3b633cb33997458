"""Storage access (private): the only layer that talks SQL, aiosqlite, Redis or ADK storage.

One adapter per store layout in ``layouts/``, each a :class:`SessionStore` (read
sessions as raw rows, write a plan): ``sql_tables`` (``DatabaseSessionService``),
``adk_sqlite`` (ADK's ``SqliteSessionService``), ``memory``
(``InMemorySessionService``), ``redis_sessions`` (ADK's ``RedisSessionService``;
``redis`` is imported only when used) and ``append`` (any other service, through
``append_event``); every ledger table in ``ledger/``.
:func:`open_store` picks the adapter for a URL, :func:`store_for_service` the
one for a session service; the wrapper and repair write through the same
adapters. ``SessionFilter`` (a plain value, read as SQL per engine by
``session_filter_sql``) is public at the package root; the rest may change.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # imported on first use (below): `store.urls` alone stays light
    # ``X as X``: the names this package serves, for type checkers (no ``__all__`` here).
    from .base import DamagedRow as DamagedRow
    from .base import Layout as Layout
    from .base import SessionFilter as SessionFilter
    from .base import SessionStore as SessionStore
    from .base import StoredSession as StoredSession
    from .base import WriteOutcome as WriteOutcome
    from .base import WriteResult as WriteResult
    from .opening import open_store as open_store
    from .opening import store_for_service as store_for_service

_HOME = {
    "DamagedRow": "base",
    "Layout": "base",
    "SessionFilter": "base",
    "SessionStore": "base",
    "StoredSession": "base",
    "WriteOutcome": "base",
    "WriteResult": "base",
    "open_store": "opening",
    "store_for_service": "opening",
}
"""The module of each name this package serves, imported on the name's first use."""


def __getattr__(name: str) -> Any:
    """Imports an exported name's module on first use."""
    home = _HOME.get(name)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{home}"), name)
    globals()[name] = value
    return value
