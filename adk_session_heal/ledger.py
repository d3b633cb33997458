"""The heal ledger: an audit table of every heal, whichever path wrote it.

See :mod:`adk_session_heal.store.ledger` for how it is stored; this module is
its public name.

Example::

    ledger = SqlHealLedger.from_url("sqlite+aiosqlite:///sessions.db")
    service = HealingSessionService(inner, ledger=ledger)   # heal and record commit together
    records = await ledger.history(session_id="s1")
"""

from __future__ import annotations

from .store.ledger import SqlHealLedger, missing_ledger_message

__all__ = ["SqlHealLedger", "missing_ledger_message"]
