"""Heals one store, optionally dying between a heal's INSERT and its ledger row's INSERT.

``python kill_between.py PATH KIND URL SESSION_ID [--kill]``: PATH is
``wrapper`` (a ``HealingSessionService`` with a ``SqlHealLedger`` on the same
database reads the session) or ``repair`` (the library's repair). With
``--kill`` the process ends with ``os._exit`` (as a SIGKILL would end it) right
before the ledger statement of the write transaction, after the heal row's
statement ran.
"""

from __future__ import annotations

import asyncio
import os
import sys
from typing import Any

from stores import APP, USER, Store

from adk_session_heal import ScanOptions
from adk_session_heal.ledger import SqlHealLedger
from adk_session_heal.ops.repair import repair
from adk_session_heal.policy import HealPolicy
from adk_session_heal.runtime.service import HealingSessionService
from adk_session_heal.store.layouts import adk_sqlite, sql_tables

KILLED = 9


async def _die(*_args: Any, **_kwargs: Any) -> None:
    os._exit(KILLED)


async def main(path: str, kind: str, url: str, session_id: str, kill: bool) -> None:
    if kill:
        sql_tables.insert_ledger_rows = _die  # type: ignore[assignment]
        adk_sqlite.insert_sqlite_ledger_rows = _die  # type: ignore[assignment]
    if path == "repair":
        await repair(url, ScanOptions(policy=HealPolicy(stale_after=3600)))
        return
    inner = Store(kind, url).service()
    ledger = SqlHealLedger.from_url(url)
    service = HealingSessionService(inner, HealPolicy(raise_errors=True), ledger=ledger)
    await service.get_session(app_name=APP, user_id=USER, session_id=session_id)
    await ledger.close()
    await service.close()


if __name__ == "__main__":
    asyncio.run(main(*sys.argv[1:5], kill="--kill" in sys.argv))
