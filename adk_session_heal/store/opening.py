"""Opening a store: which layout a URL or a session service holds, and its adapter.

A URL's layout is read from the database before anything else is done with it:

* ``adk_internal_metadata`` says schema ``"1"``: ``DatabaseSessionService``.
* No metadata table, an ``events`` table with ``event_data`` and a REAL
  ``timestamp`` on SQLite: ADK's ``SqliteSessionService``. Such a file is never
  opened through ``DatabaseSessionService`` (which would add its metadata table
  and an index, after which ADK's SQLite service can no longer use it).
* ``events`` with an ``actions`` column and no ``event_data``: ADK's legacy
  pickled "v0" schema, refused with the command that migrates it.
* A SQLite file a killed writer left with a hot journal or WAL is first
  recovered as SQLite does on its next write-capable open
  (:mod:`~adk_session_heal.store.sqlite_recovery`). Then a file opened for
  writing is checked to be writable (one line if not), and one opened for
  reading is read however its permissions allow.
* ``redis://`` or ``rediss://``: ADK's ``RedisSessionService`` keys (the
  ``redis`` package is imported only then).

A session service's adapter is chosen by its class (:func:`store_for_service`).
"""

from __future__ import annotations

import functools
import sqlite3
from collections.abc import Iterable
from contextlib import closing
from typing import TYPE_CHECKING, Any

from sqlalchemy import inspect, text

from ..errors import ReadOnlyStoreError, StoreError, UnsupportedStoreError
from .base import Layout, SessionStore, stores_as_adk_does
from .driver_errors import CONNECT_ERRORS, translate_error
from .engines import TimeoutArg, Timeouts, create_store_engine
from .layouts.sql_tables import SqlTablesStore
from .ledger.revisions import Feature, require
from .sqlite_recovery import check_sqlite_writable, readable_sqlite, recover_sqlite
from .urls import StoreUrl, parse_store_url

if TYPE_CHECKING:  # a store opened from a URL needs no ADK; one over a service imports it below
    from google.adk.sessions import BaseSessionService, Session
    from sqlalchemy.ext.asyncio import AsyncEngine

SUPPORTED_SCHEMA_VERSION = "1"
"""The ``DatabaseSessionService`` schema version this release reads and writes."""

_ADK_TABLES = ("sessions", "events")


def store_for_service(service: BaseSessionService, session: Session) -> SessionStore:
    """Returns the adapter that writes heals for a session service.

    ADK's own stores get an adapter that writes beside ``append_event`` without
    bumping the revision. A direct writer is chosen only for a class known to
    store rows exactly as ADK does: ADK's class itself, or a subclass that
    overrides nothing but ``__init__`` (:func:`stores_as_adk_does`). Any other
    service (a subclass that encrypts, compresses or moves rows, a database
    service on the legacy schema, a third-party store) is written through its
    own ``append_event`` on ``session``.

    Args:
        service: The (inner) session service.
        session: The caller's session object, for the ``append_event`` fallback.
    """
    from google.adk.sessions import DatabaseSessionService, InMemorySessionService
    from google.adk.sessions.sqlite_session_service import SqliteSessionService

    from .layouts.append import AppendStore
    from .layouts.memory import InMemoryStore

    if stores_as_adk_does(service, DatabaseSessionService):
        if getattr(service, "_db_schema_version", None) == SUPPORTED_SCHEMA_VERSION:
            return SqlTablesStore(service.db_engine)
        return AppendStore(service, session)
    if stores_as_adk_does(service, SqliteSessionService):
        from .layouts.adk_sqlite import AdkSqliteStore

        return AdkSqliteStore.from_service(service)
    if stores_as_adk_does(service, InMemorySessionService):
        return InMemoryStore(service)
    from .layouts.redis_sessions import RedisStore, stores_like_adk_redis

    if stores_like_adk_redis(service):
        return RedisStore.from_service(service)
    return AppendStore(service, session)




def _bad_schema(url: StoreUrl, tables: set[str], columns: set[str], version: str | None) -> None:
    if not all(name in tables for name in _ADK_TABLES):
        raise UnsupportedStoreError(
            f"{url} has no ADK session tables (sessions, events): point the URL at the "
            "database your ADK app's session service uses"
        )
    if "event_data" not in columns:
        if "actions" in columns:
            raise UnsupportedStoreError(
                f"{url} uses ADK's legacy v0 (pickled) schema: migrate it first with "
                "`adk migrate session --source_db_url=... --dest_db_url=...`, then rerun"
            )
        raise UnsupportedStoreError(
            f"{url} has an events table this release does not know (no event_data column): "
            "check the URL"
        )
    if version is not None and version != SUPPORTED_SCHEMA_VERSION:
        if version == "0":
            raise UnsupportedStoreError(
                f"{url} uses ADK's legacy v0 (pickled) schema: migrate it first with "
                "`adk migrate session`, then rerun"
            )
        raise UnsupportedStoreError(
            f"{url} has ADK session schema version {version!r}; this release reads schema "
            f"{SUPPORTED_SCHEMA_VERSION!r} (google-adk 1.22 and later): use a release of "
            "adk-session-heal made for that ADK version"
        )


def _inspect_sqlite(url: StoreUrl) -> Layout:
    """Reads a SQLite file's layout with the standard library, read-only."""
    try:
        with closing(sqlite3.connect(url.sqlite_uri(writable=False), uri=True)) as db, db:
            tables = {row[0] for row in db.execute(
                "SELECT name FROM sqlite_master WHERE type = 'table'")}
            info = db.execute("PRAGMA table_info(events)").fetchall()
            columns = {row[1]: str(row[2]).upper() for row in info}
            version = None
            if "adk_internal_metadata" in tables:
                found = db.execute(
                    "SELECT value FROM adk_internal_metadata WHERE key = 'schema_version'"
                ).fetchone()
                version = str(found[0]) if found else "(missing)"
    except sqlite3.DatabaseError as exc:
        raise StoreError(
            f"{url} is not a readable SQLite database ({exc}): check the path"
        ) from exc
    _bad_schema(url, tables, set(columns), version)
    if version is None and columns.get("timestamp") == "REAL":
        return Layout.ADK_SQLITE
    return Layout.DATABASE


async def _inspect_server(url: StoreUrl, engine: AsyncEngine) -> None:
    def read(sync: Any) -> tuple[set[str], set[str], str | None]:
        inspector = inspect(sync)
        tables = set(inspector.get_table_names())
        columns = (
            {c["name"] for c in inspector.get_columns("events")} if "events" in tables else set()
        )
        version = None
        if "adk_internal_metadata" in tables:
            key = inspector.dialect.identifier_preparer.quote("key")
            found = sync.execute(
                text(f"SELECT value FROM adk_internal_metadata WHERE {key} = 'schema_version'")
            ).fetchone()
            version = str(found[0]) if found else "(missing)"
        return tables, columns, version

    async with engine.connect() as conn:
        tables, columns, version = await conn.run_sync(read)
    _bad_schema(url, tables, columns, version)


async def open_store(
    url: str | StoreUrl, *, writable: bool = False, timeout: TimeoutArg = None,
    needs: Iterable[Feature] = (),
) -> SessionStore:
    """Opens an ADK session database after checking its layout, its schema and its ledger.

    Args:
        url: The store URL (see :mod:`adk_session_heal.store.urls`).
        writable: Open for repair. Otherwise SQLite files are opened read-only.
        timeout: How long to wait for a database server: seconds for both
            connecting and each statement, or a
            :class:`~adk_session_heal.store.engines.Timeouts` (default: 10 s to
            connect, 60 s per statement).
        needs: What the caller will use of the heal ledger: checked once, here,
            so a refusal is one line before anything is read or written.

    Returns:
        The opened store; ``await store.close()`` when done.

    Raises:
        UnsupportedStoreError: Bad URL, missing file, no ADK tables, legacy or
            unknown schema, no ``redis`` package for a Redis URL.
        ReadOnlyStoreError: ``writable`` on a URL that asked for read-only, or a
            SQLite file left mid-transaction that cannot be recovered (see
            :mod:`~adk_session_heal.store.sqlite_recovery`).
        StoreError: The database could not be reached or did not answer in time.
        LedgerError: The ledger is missing or too old for one of ``needs``.
    """
    store = await _open(url, writable=writable, timeout=timeout)
    if needs:
        try:
            revision = await store.ledger_revision()
            for feature in needs:
                require(store, revision, feature)
        except BaseException:
            await store.close()
            raise
    return store


async def _open(url: str | StoreUrl, *, writable: bool, timeout: TimeoutArg) -> SessionStore:
    """Opens the store a URL names (see :func:`open_store`)."""
    store_url = url if isinstance(url, StoreUrl) else parse_store_url(url)
    timeouts = Timeouts.of(timeout)
    if store_url.backend == "redis":
        from .layouts.redis_sessions import open_redis_store  # each layout imported when opened

        return await open_redis_store(store_url, writable=writable, timeouts=timeouts)
    if writable and store_url.read_only:
        raise ReadOnlyStoreError(
            f"{store_url} was opened with mode=ro: drop ?mode=ro to write to it (repair, "
            "scan --incremental, review resolve, db upgrade), or use scan / repair --dry-run"
        )
    if store_url.sqlite_path is not None:
        recover_sqlite(store_url)
        if writable:
            check_sqlite_writable(store_url)
        else:
            store_url = readable_sqlite(store_url)
        if _inspect_sqlite(store_url) is Layout.ADK_SQLITE:
            from .layouts.adk_sqlite import AdkSqliteStore

            return AdkSqliteStore.from_url(store_url)
        return SqlTablesStore(None, store_url, owns_engine=True, engine_factory=functools.partial(
            create_store_engine, store_url, writable=writable, timeouts=timeouts))
    engine = create_store_engine(store_url, writable=writable, timeouts=timeouts)
    try:
        await _inspect_server(store_url, engine)
    except CONNECT_ERRORS as exc:
        await engine.dispose()
        raise translate_error(exc, store_url, "connect to") from exc
    except BaseException:
        await engine.dispose()
        raise
    return SqlTablesStore(engine, store_url, owns_engine=True)
