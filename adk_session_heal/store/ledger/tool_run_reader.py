"""Which tool-run ledger a session store has, opened for reading by a scan or a repair.

A SQL store's ledger is its ``adk_session_heal_tool_runs`` table (revision
``0002`` or later); a Redis store's, the hashes beside its sessions
(:mod:`~adk_session_heal.store.ledger.tool_run_redis`). Every other layout has none.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING

from ...core.tool_runs import ToolRunReader
from ..base import Layout, SessionStore
from ..engines import TimeoutArg
from .revisions import Feature, has

if TYPE_CHECKING:  # each imported where it is opened: most stores have neither
    from .tool_run_redis import RedisToolRunLedger
    from .tool_run_sql import SqlToolRunLedger


@asynccontextmanager
async def tool_run_reader(store: SessionStore,
                          timeout: TimeoutArg) -> AsyncIterator[ToolRunReader | None]:
    """The store's tool-run ledger: a SQL store's table (revision 0002 or later), Redis's hashes.

    ``None`` when there is none, or when the SQL table holds no run at all (the
    plugin is not in use): then no session needs a read of its own. A record
    written after this check is of a tool that started after it, whose call
    cannot have been dead by then (measured: a 3,000-heal repair spent 70 %
    of its time on those per-session reads).

    Args:
        store: The open session store.
        timeout: How long to wait for a database server.
    """
    runs: SqlToolRunLedger | RedisToolRunLedger
    if store.url is not None and store.layout is Layout.REDIS:
        from .tool_run_redis import RedisToolRunLedger

        runs = RedisToolRunLedger.from_url(store.url)
    elif store.url is not None and store.layout in (Layout.DATABASE, Layout.ADK_SQLITE) and (
            has(await store.ledger_revision(), Feature.TOOL_RUNS)):
        from .tool_run_sql import SqlToolRunLedger

        runs = SqlToolRunLedger.from_url(store.url, writable=False, timeout=timeout,
                                         engine=store.server_engine())
        if await runs.empty():
            await runs.close()
            yield None
            return
    else:
        yield None
        return
    try:
        yield runs
    finally:
        await runs.close()
