"""The ledgers: the heal ledger (every heal, whichever path wrote it) and the tool-run ledger.

See :mod:`adk_session_heal.store.ledger`, :mod:`adk_session_heal.store.tool_runs`
and :mod:`adk_session_heal.store.redis_tool_runs` (ADK's Redis sessions) for how
they are stored; this module is their public name. The tool-run ledger
is written by :class:`~adk_session_heal.tool_run_plugin.ToolRunLedgerPlugin`.

Example::

    ledger = SqlHealLedger.from_url("sqlite+aiosqlite:///sessions.db")
    service = HealingSessionService(inner, ledger=ledger)   # heal and record commit together
    records = await ledger.history(session_id="s1")
"""

from __future__ import annotations

from .store.ledger import SqlHealLedger, missing_ledger_message
from .store.redis_tool_runs import RedisToolRunLedger
from .store.tool_runs import SqlToolRunLedger

__all__ = ["RedisToolRunLedger", "SqlHealLedger", "SqlToolRunLedger", "missing_ledger_message"]
