"""``python -m adk_session_heal.testing crash DB_URL SESSION_ID``: the child process of
:func:`~adk_session_heal.testing.spawn_crash`."""

from __future__ import annotations

import asyncio
import sys

from . import crash_turn

if __name__ == "__main__":  # the child process of spawn_crash
    if len(sys.argv) != 4 or sys.argv[1] != "crash":
        raise SystemExit("usage: python -m adk_session_heal.testing crash DB_URL SESSION_ID")
    asyncio.run(crash_turn(sys.argv[2], sys.argv[3]))
