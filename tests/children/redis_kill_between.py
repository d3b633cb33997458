"""Repairs a Redis store, optionally dying inside the heal's MULTI before its EXEC.

``python redis_kill_between.py URL [--kill]`` runs the library's repair (with
the ledger). With ``--kill``, the first transaction that holds a ledger record
is sent to the server without its closing EXEC (so MULTI, the session's SET
and the ledger's HSETNX all reach the server and are queued), and the process
then ends with ``os._exit``, as a SIGKILL would end it.
"""

from __future__ import annotations

import asyncio
import os
import sys
import time
from typing import Any

from redis.asyncio.connection import AbstractConnection

from adk_session_heal import ScanOptions
from adk_session_heal.ops.repair import repair
from adk_session_heal.policy import HealPolicy

KILLED = 9
_EXEC = b"*1\r\n$4\r\nEXEC\r\n"
_send = AbstractConnection.send_packed_command


async def _send_then_die_before_exec(self: Any, command: Any, check_health: bool = True) -> None:
    packed = command if isinstance(command, bytes) else b"".join(
        part if isinstance(part, bytes) else bytes(part) for part in command)
    if b"HSETNX" in packed and packed.endswith(_EXEC):
        await _send(self, packed[: -len(_EXEC)], check_health)
        time.sleep(0.5)  # the server queues MULTI, SET, HSETNX
        os._exit(KILLED)
    await _send(self, command, check_health)


async def main(url: str, kill: bool) -> None:
    if kill:
        AbstractConnection.send_packed_command = _send_then_die_before_exec  # type: ignore[method-assign]
    await repair(url, ScanOptions(policy=HealPolicy(stale_after=3600)))


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], kill="--kill" in sys.argv))
