"""Undoes a repair run, SIGKILLed right after its first removal batch committed.

``python undo_kill.py URL RUN_ID``: runs :func:`adk_session_heal.ops.undo.undo`
with one removal per batch; once the store's remover has returned from its
first batch (committed, with its ledger row), the process sends itself SIGKILL.
"""

from __future__ import annotations

import asyncio
import os
import signal
import sys
from collections.abc import Sequence
from typing import Any

from adk_session_heal.ops.undo import undo
from adk_session_heal.store.base import Removal, RemoveOutcome
from adk_session_heal.store.layouts.adk_sqlite import AdkSqliteStore
from adk_session_heal.store.layouts.redis_sessions import RedisStore
from adk_session_heal.store.layouts.sql_tables import SqlTablesStore


def _killing(remove: Any) -> Any:
    async def remove_then_die(self: Any, batch: Sequence[Removal], *,
                              ledger: bool) -> list[RemoveOutcome]:
        results: list[RemoveOutcome] = await remove(self, batch, ledger=ledger)
        os.kill(os.getpid(), signal.SIGKILL)
        return results

    return remove_then_die


if __name__ == "__main__":
    for store_class in (SqlTablesStore, AdkSqliteStore, RedisStore):
        store_class.remove = _killing(store_class.remove)  # type: ignore[method-assign]
    asyncio.run(undo(sys.argv[1], sys.argv[2], batch_size=1))
