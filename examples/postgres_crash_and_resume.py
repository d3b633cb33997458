"""The crash-and-resume example on PostgreSQL, with the crash and the resume in two processes.

Run it (offline; needs a PostgreSQL server)::

    python examples/postgres_crash_and_resume.py

The database comes from ``ADK_SESSION_HEAL_PG_URL`` (default
``postgresql+asyncpg://postgres@127.0.0.1:5432/adk_session_heal_example``, a
local server with trust authentication; the database is created if missing).
Put credentials in the environment variable, never in code. Without a
reachable server the example says so and exits 0 (skipped).

Needs the PostgreSQL driver: ``pip install 'adk-session-heal[postgres]'``.
"""

from __future__ import annotations

import asyncio
import os
import socket
import sys

from crash_and_resume import main as crash_and_resume_main
from sqlalchemy import make_url, text
from sqlalchemy.ext.asyncio import create_async_engine

DEFAULT_URL = "postgresql+asyncpg://postgres@127.0.0.1:5432/adk_session_heal_example"


def server_reachable(url: str) -> bool:
    """Returns whether the URL's host accepts TCP connections."""
    parsed = make_url(url)
    try:
        with socket.create_connection((parsed.host or "127.0.0.1", parsed.port or 5432), 2.0):
            return True
    except OSError:
        return False


async def ensure_database(url: str) -> None:
    """Creates the URL's database if it does not exist (example scaffolding)."""
    parsed = make_url(url)
    admin = create_async_engine(parsed.set(database="postgres"), isolation_level="AUTOCOMMIT")
    try:
        async with admin.connect() as conn:
            exists = await conn.scalar(
                text("SELECT 1 FROM pg_database WHERE datname = :name"),
                {"name": parsed.database},
            )
            if not exists:
                await conn.execute(text(f'CREATE DATABASE "{parsed.database}"'))
    finally:
        await admin.dispose()


def main() -> int:
    url = os.environ.get("ADK_SESSION_HEAL_PG_URL", DEFAULT_URL)
    shown = make_url(url).render_as_string(hide_password=True)
    if not server_reachable(url):
        print(f"skipped: no PostgreSQL server reachable for {shown} "
              "(set ADK_SESSION_HEAL_PG_URL)", file=sys.stderr)
        return 0
    asyncio.run(ensure_database(url))
    print(f"PostgreSQL: {shown}")
    return crash_and_resume_main([url])


if __name__ == "__main__":
    raise SystemExit(main())
