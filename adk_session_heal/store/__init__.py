"""Storage access (private): the only layer that talks SQL, aiosqlite, Redis or ADK storage.

One adapter per store layout in ``layouts/``, each a :class:`SessionStore` (read
sessions as raw rows, write a plan): ``sql_tables`` (``DatabaseSessionService``),
``adk_sqlite`` (ADK's ``SqliteSessionService``), ``memory``
(``InMemorySessionService``), ``redis_sessions`` (ADK's ``RedisSessionService``;
``redis`` is imported only when used) and ``append`` (any other service, through
``append_event``); every ledger table in ``ledger/``.
:func:`open_store` picks the adapter for a URL, :func:`store_for_service` the
one for a session service; the wrapper and repair write through the same
adapters. ``SessionFilter`` is public at the package root; the rest may change.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # imported on first use (below): `store.urls` alone stays light
    from .base import (
        DamagedRow,
        Layout,
        SessionFilter,
        SessionStore,
        StoredSession,
        WriteOutcome,
        WriteResult,
    )
    from .opening import open_store, store_for_service

__all__ = [
    "DamagedRow",
    "Layout",
    "SessionFilter",
    "SessionStore",
    "StoredSession",
    "WriteOutcome",
    "WriteResult",
    "open_store",
    "store_for_service",
]

_HOME = {name: "base" for name in __all__[:7]} | {
    "open_store": "opening", "store_for_service": "opening"}


def __getattr__(name: str) -> Any:
    """Imports an exported name's module on first use."""
    home = _HOME.get(name)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{home}"), name)
    globals()[name] = value
    return value
