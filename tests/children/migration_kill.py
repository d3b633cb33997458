"""Runs one ``adk-session-heal`` command, SIGKILLed right after its Nth write statement.

``python migration_kill.py N db downgrade URL base --yes``: every SQLAlchemy
engine in the process counts the statements that write (``CREATE``, ``ALTER``,
``DROP``, ``INSERT``, ``UPDATE``, ``DELETE``) as each returns; the Nth sends
the process SIGKILL, inside the transaction that statement belongs to (on
SQLite and PostgreSQL uncommitted, on MySQL/MariaDB a DDL statement has
already committed). ``N = 0`` never kills; the count is then printed on stderr
as ``writes: K`` when the command ends.
"""

from __future__ import annotations

import atexit
import os
import signal
import sys
from typing import Any

from sqlalchemy import event
from sqlalchemy.engine import Engine

from adk_session_heal.cli import main

_WRITES = ("CREATE", "ALTER", "DROP", "INSERT", "UPDATE", "DELETE")
_count = 0


def _after(_conn: Any, _cursor: Any, statement: str, *_args: Any) -> None:
    global _count
    if statement.lstrip().upper().startswith(_WRITES):
        _count += 1
        if _count == KILL_AT:
            os.kill(os.getpid(), signal.SIGKILL)


if __name__ == "__main__":
    KILL_AT = int(sys.argv[1])
    event.listen(Engine, "after_cursor_execute", _after)
    atexit.register(lambda: print(f"writes: {_count}", file=sys.stderr))
    sys.argv = ["adk-session-heal", *sys.argv[2:]]
    main()
