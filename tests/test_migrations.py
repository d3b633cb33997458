"""Our Alembic migrations: up, down, up again on every backend, beside a host's Alembic."""

from __future__ import annotations

import asyncio
import sqlite3
from contextlib import closing
from pathlib import Path

from sqlalchemy import text
from sqlalchemy.ext.asyncio import create_async_engine
from stores import (
    Store,
    adk_store_fixture,  # noqa: F401  (the adk_store fixture)
    crashed_histories,
    fill,
    table_names,
)

from adk_session_heal import migrate


async def _host_alembic_version(store: Store, value: str | None = None) -> str:
    """Creates (with ``value``) or reads a host application's own alembic_version row."""
    engine = create_async_engine(store.url if store.sqlite_path is None
                                 else f"sqlite+aiosqlite:///{store.sqlite_path}")
    try:
        async with engine.begin() as conn:
            if value is not None:
                await conn.execute(text(
                    "CREATE TABLE alembic_version (version_num VARCHAR(32) NOT NULL)"))
                await conn.execute(text("INSERT INTO alembic_version VALUES (:v)"), {"v": value})
            result = await conn.execute(text("SELECT version_num FROM alembic_version"))
            return str(result.scalar_one())
    finally:
        await engine.dispose()


async def test_upgrade_downgrade_upgrade(adk_store: Store) -> None:
    """The ledger migrates up, down to base (table gone) and up again; the host's table stays."""
    await fill(adk_store, {"ok": crashed_histories()["ok"]})
    await _host_alembic_version(adk_store, "host_rev_42")
    adk_tables = await table_names(adk_store)
    assert await migrate.current(adk_store.url) is None
    assert await migrate.upgrade(adk_store.url) == migrate.head_revision() == "0001"
    assert await migrate.current(adk_store.url) == "0001"
    assert {"adk_session_heal_ledger", "adk_session_heal_alembic_version"} <= (
        await table_names(adk_store))
    assert await migrate.upgrade(adk_store.url) == "0001"  # a second upgrade is a no-op
    assert await migrate.downgrade(adk_store.url, "base") is None
    assert "adk_session_heal_ledger" not in await table_names(adk_store)
    assert await migrate.upgrade(adk_store.url) == "0001"
    assert await _host_alembic_version(adk_store) == "host_rev_42"
    assert adk_tables <= await table_names(adk_store)


async def test_db_current_is_read_only(adk_store: Store) -> None:
    """db current on a database without the ledger creates nothing."""
    await fill(adk_store, {"ok": crashed_histories()["ok"]})
    before = await table_names(adk_store)
    assert await migrate.current(adk_store.url) is None
    assert await table_names(adk_store) == before


def test_migrations_are_found_from_the_checkout() -> None:
    """In a source checkout the top-level migrations/ directory is used (a wheel ships
    the same files as adk_session_heal/_migrations, found first)."""
    directory = migrate.migrations_dir()
    assert (directory / "env.py").is_file()
    assert (directory / "versions" / "0001_heal_ledger.py").is_file()


def test_adk_sqlite_file_stays_adk_sqlite(tmp_path: Path) -> None:
    """Upgrading a SqliteSessionService file adds only our two tables (no ADK metadata)."""
    path = tmp_path / "adk.db"
    store = Store("adk_sqlite", f"sqlite:///{path}")
    asyncio.run(fill(store, {"ok": crashed_histories()["ok"]}))
    asyncio.run(migrate.upgrade(store.url))
    with closing(sqlite3.connect(path)) as db, db:
        tables = {r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    assert tables == {"app_states", "user_states", "sessions", "events",
                      "adk_session_heal_ledger", "adk_session_heal_alembic_version"}


def test_the_head_revision_known_without_alembic_is_the_scripts_head() -> None:
    """LEDGER_HEAD_REVISION (read where Alembic is not loaded) names the newest migration script."""
    from adk_session_heal.store.ledger_table import LEDGER_HEAD_REVISION

    assert migrate.head_revision() == LEDGER_HEAD_REVISION
