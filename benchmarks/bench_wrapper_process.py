"""Whole-process wrapper reads: ``get_session`` of the first N sessions through
HealingSessionService over ``DatabaseSessionService`` (not a test).

Meant to be timed from outside, so that import time counts too, and to compare two
checkouts of the package on one database, alternating (``PYTHONPATH`` picks the
checkout), e.g. with ``/usr/bin/time`` around each run, old and new in turn::

    env PYTHONPATH=OLD /usr/bin/time -f %e python benchmarks/bench_wrapper_process.py DB
    env PYTHONPATH=NEW /usr/bin/time -f %e python benchmarks/bench_wrapper_process.py DB

DB is a SQLite file in ADK's ``DatabaseSessionService`` layout (``bench_scan.py`` and
``tests/support/stores.py`` write them). It uses only public names, so it runs
against any checkout since the root exported them.
"""

from __future__ import annotations

import argparse
import asyncio
import sqlite3
from contextlib import closing

from google.adk.sessions import DatabaseSessionService

from adk_session_heal import HealingSessionService


async def read_sessions(path: str, count: int) -> None:
    """Reads the first ``count`` sessions of the file through the wrapper."""
    with closing(sqlite3.connect(path)) as db:
        keys = db.execute("SELECT app_name, user_id, id FROM sessions ORDER BY id LIMIT ?",
                          (count,)).fetchall()
    inner = DatabaseSessionService(f"sqlite+aiosqlite:///{path}")
    service = HealingSessionService(inner)
    try:
        for app_name, user_id, session_id in keys:
            await service.get_session(app_name=app_name, user_id=user_id, session_id=session_id)
    finally:
        await inner.close()


def main() -> None:
    """Parses the arguments and reads."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("db", help="a SQLite file in DatabaseSessionService's layout")
    parser.add_argument("--sessions", type=int, default=300, help="how many to read")
    args = parser.parse_args()
    asyncio.run(read_sessions(args.db, args.sessions))


if __name__ == "__main__":
    main()
