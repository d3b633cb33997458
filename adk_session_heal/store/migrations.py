"""Running this package's Alembic migrations, configured in code.

The migrations live in the repository's top-level ``migrations/`` directory and
ship in the wheel as ``adk_session_heal/_migrations``. No ``alembic.ini`` is
needed: :func:`alembic_config` builds the configuration, and each command runs
on an async engine through ``AsyncConnection.run_sync`` (the Alembic cookbook's
"programmatic API use with asyncio"). Revisions are recorded in
``adk_session_heal_alembic_version``, never in a host application's
``alembic_version``.

Example::

    await upgrade("postgresql+asyncpg://app@db/sessions")   # adk-session-heal db upgrade URL
    await current("postgresql+asyncpg://app@db/sessions")   # -> "0001"
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy.exc import SQLAlchemyError

from .driver_errors import translate_error
from .engines import TimeoutArg, Timeouts, create_store_engine
from .ledger_table import LEDGER_VERSION_TABLE
from .urls import StoreUrl

__all__ = [
    "alembic_config",
    "current",
    "downgrade",
    "head_revision",
    "migrations_dir",
    "upgrade",
]


def migrations_dir() -> Path:
    """Returns the migrations directory (installed wheel first, then the checkout)."""
    package = Path(__file__).resolve().parent.parent
    for candidate in (package / "_migrations", package.parent / "migrations"):
        if (candidate / "env.py").is_file():
            return candidate
    raise FileNotFoundError(
        "adk-session-heal's migrations directory is missing from this installation"
    )


def alembic_config(connection: Any = None) -> Config:
    """Returns the Alembic configuration (optionally bound to an open connection)."""
    config = Config()
    config.set_main_option("script_location", str(migrations_dir()))
    config.set_main_option("version_table", LEDGER_VERSION_TABLE)
    if connection is not None:
        config.attributes["connection"] = connection
    return config


def head_revision() -> str:
    """Returns the newest revision of the migrations."""
    head = ScriptDirectory.from_config(alembic_config()).get_current_head()
    assert head is not None
    return head


async def _checked_url(url: str | StoreUrl, *, writable: bool, timeout: TimeoutArg) -> StoreUrl:
    from .opening import open_store  # opening imports the adapters, which import this

    store = await open_store(url, writable=writable, timeout=timeout)
    await store.close()
    assert store.url is not None
    return store.url


async def _run(
    url: str | StoreUrl, action: str, revision: str, timeout: TimeoutArg
) -> str | None:
    store_url = await _checked_url(url, writable=True, timeout=timeout)
    engine = create_store_engine(store_url, writable=True, timeouts=Timeouts.of(timeout))

    def run(sync_connection: Any) -> str | None:
        config = alembic_config(sync_connection)
        if action == "upgrade":
            command.upgrade(config, revision)
        else:
            command.downgrade(config, revision)
        context = MigrationContext.configure(
            sync_connection, opts={"version_table": LEDGER_VERSION_TABLE}
        )
        return context.get_current_revision()

    try:
        async with engine.begin() as conn:
            return await conn.run_sync(run)
    except (SQLAlchemyError, OSError) as exc:
        raise translate_error(exc, store_url, f"migrate ({action})") from exc
    finally:
        await engine.dispose()


async def upgrade(
    url: str | StoreUrl, revision: str = "head", *, timeout: TimeoutArg = None
) -> str | None:
    """Upgrades the heal ledger's tables to ``revision``.

    Args:
        url: An ADK session database (checked like every other command's).
        revision: The target revision (default: the newest).
        timeout: How long to wait for a database server (see
            :func:`~adk_session_heal.store.open_store`).

    Returns:
        The revision now current.
    """
    return await _run(url, "upgrade", revision, timeout)


async def downgrade(
    url: str | StoreUrl, revision: str, *, timeout: TimeoutArg = None
) -> str | None:
    """Downgrades the heal ledger's tables to ``revision`` (``"base"`` drops them).

    Args:
        url: An ADK session database.
        revision: The target revision.
        timeout: How long to wait for a database server.

    Returns:
        The revision now current (``None`` at base).
    """
    return await _run(url, "downgrade", revision, timeout)


async def current(url: str | StoreUrl, *, timeout: TimeoutArg = None) -> str | None:
    """Returns the heal ledger's current revision (``None``: not installed). Read-only.

    Args:
        url: An ADK session database.
        timeout: How long to wait for a database server.
    """
    from .opening import open_store

    store = await open_store(url, timeout=timeout)
    try:
        return await store.ledger_revision()
    finally:
        await store.close()
