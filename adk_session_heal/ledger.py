"""The ledgers: the heal ledger (every heal, whichever path wrote it) and the tool-run ledger.

They are stored by the private ``store.ledger`` layer (SQL tables in the session database,
or hashes beside ADK's Redis sessions); this module is their public name. The tool-run
ledger is written by :class:`~adk_session_heal.plugins.ToolRunLedgerPlugin`.

Example::

    ledger = SqlHealLedger.from_url("sqlite+aiosqlite:///sessions.db")
    service = HealingSessionService(inner, ledger=ledger)   # heal and record commit together
    records = await ledger.history(session_id="s1")
"""

from __future__ import annotations

from .store.ledger.heal_ledger import SqlHealLedger
from .store.ledger.heal_redis import RedisHealLedger
from .store.ledger.revisions import missing_ledger_message
from .store.ledger.tool_run_redis import RedisToolRunLedger
from .store.ledger.tool_run_sql import SqlToolRunLedger

__all__ = [
    "RedisHealLedger",
    "RedisToolRunLedger",
    "SqlHealLedger",
    "SqlToolRunLedger",
    "missing_ledger_message",
]
