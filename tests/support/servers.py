"""Real database servers for tests: availability, per-test databases, the skip rule.

The PostgreSQL (127.0.0.1:5432, user postgres, trust auth), MariaDB
(127.0.0.1:3306, user root, empty password) and Redis (127.0.0.1:6379) servers
are used for real: each test that needs one gets a database of its own,
created and dropped around it (on Redis, a key prefix whose keys are deleted).
On a machine without a server, those tests skip with a reason, unless
``ADK_SESSION_HEAL_REQUIRE_SERVERS=1`` (set by ``.ci/run``), which turns the
skip into a failure so CI always exercises them.
"""

from __future__ import annotations

import os
import socket
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import pytest
from sqlalchemy import text
from sqlalchemy.ext.asyncio import create_async_engine

PG_HOST, PG_PORT = os.environ.get("ADK_HEAL_PG_HOST", "127.0.0.1"), 5432
MARIADB_HOST, MARIADB_PORT = os.environ.get("ADK_HEAL_MARIADB_HOST", "127.0.0.1"), 3306
REDIS_HOST, REDIS_PORT = os.environ.get("ADK_HEAL_REDIS_HOST", "127.0.0.1"), 6379
REDIS_URL = f"redis://{REDIS_HOST}:{REDIS_PORT}/0"
REQUIRE_SERVERS = os.environ.get("ADK_SESSION_HEAL_REQUIRE_SERVERS") == "1"

SERVER_BASE_URLS = {
    "postgres": f"postgresql+asyncpg://postgres@{PG_HOST}:{PG_PORT}",
    "mariadb": f"mysql+aiomysql://root@{MARIADB_HOST}:{MARIADB_PORT}",
}
_ADDRESSES = {
    "postgres": (PG_HOST, PG_PORT),
    "mariadb": (MARIADB_HOST, MARIADB_PORT),
    "redis": (REDIS_HOST, REDIS_PORT),
}


def server_available(kind: str) -> bool:
    """Returns whether the named server accepts TCP connections."""
    try:
        with socket.create_connection(_ADDRESSES[kind], timeout=1.0):
            return True
    except OSError:
        return False


SERVERS_USED: set[str] = set()
"""The servers the running test asked for (emptied before each test, see ``tests/conftest.py``,
which fails a test that used a server its markers do not name)."""


def require_server(kind: str) -> None:
    """Skips the calling test when the server is down, or fails it under CI."""
    SERVERS_USED.add(kind)
    if server_available(kind):
        return
    host, port = _ADDRESSES[kind]
    reason = f"{kind} server not reachable on {host}:{port}"
    if REQUIRE_SERVERS:
        pytest.fail(f"{reason}, and ADK_SESSION_HEAL_REQUIRE_SERVERS=1 requires it")
    pytest.skip(reason)


def database_url(kind: str, database: str, driver: str | None = None) -> str:
    """Returns the async URL of one database on a server.

    Args:
        kind: ``"postgres"`` or ``"mariadb"``.
        database: The database name.
        driver: Another async driver scheme (e.g. ``"mariadb+asyncmy"``).
    """
    base = SERVER_BASE_URLS[kind]
    if driver:
        base = driver + base[base.index("://"):]
    return f"{base}/{database}"


@asynccontextmanager
async def temporary_database(kind: str, *, driver: str | None = None) -> AsyncIterator[str]:
    """Creates a fresh database on a server, yields its URL, and drops it after."""
    require_server(kind)
    name = f"heal_test_{uuid.uuid4().hex[:12]}"
    admin_db = "postgres" if kind == "postgres" else "mysql"
    admin = create_async_engine(
        f"{SERVER_BASE_URLS[kind]}/{admin_db}", isolation_level="AUTOCOMMIT"
    )
    try:
        async with admin.connect() as conn:
            await conn.execute(text(f"CREATE DATABASE {name}"))
        yield database_url(kind, name, driver)
    finally:
        async with admin.connect() as conn:
            if kind == "postgres":
                await conn.execute(text(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)"))
            else:
                await conn.execute(text(f"DROP DATABASE IF EXISTS {name}"))
        await admin.dispose()


@asynccontextmanager
async def temporary_redis_prefix() -> AsyncIterator[str]:
    """Yields a fresh ADK key prefix on the Redis server; deletes its keys after.

    Also deletes the heal ledger's hash, the removals and resolutions lists, the runs'
    hash and the tool-run hashes for that prefix.
    """
    require_server("redis")
    import redis.asyncio as redis_asyncio

    prefix = f"adk_session_heal_test:{uuid.uuid4().hex[:12]}:"
    try:
        yield prefix
    finally:
        client = redis_asyncio.from_url(REDIS_URL)
        try:
            keys = [key async for key in client.scan_iter(match=f"{prefix}*")]
            keys += [key async for key in client.scan_iter(
                match=f"adk_session_heal:tool_runs:{prefix}*")]
            await client.delete(f"adk_session_heal:ledger:{prefix}",
                                f"adk_session_heal:removals:{prefix}",
                                f"adk_session_heal:resolutions:{prefix}",
                                f"adk_session_heal:runs:{prefix}", *keys)
        finally:
            await client.aclose()
