"""Any other session service: heals go through its public ``append_event``.

The only write API such a service has. The events are appended after
everything the caller's session object holds, with timestamps just after its
newest event. ``append_event`` bumps the session's revision, so the wrapper
heals through this adapter from ``get_session`` only once the session has
been quiet (``HealPolicy.quiet_after``). No transaction: the service's own
stale-session check is the only re-check, and a ledger is recorded after.
"""

from __future__ import annotations

from collections.abc import Sequence

from google.adk.sessions import BaseSessionService, Session

from ..healing import SessionHeals
from .base import Layout, SessionStore, WriteOutcome, WriteResult

__all__ = ["AppendStore"]


class AppendStore(SessionStore):
    """Writes heals through ``append_event`` on the caller's session object.

    Args:
        service: The session service.
        session: The caller's session (the heals are appended to it).
    """

    layout = Layout.APPEND
    transactional = False
    bumps_revision = True

    def __init__(self, service: BaseSessionService, session: Session) -> None:
        self._service = service
        self._session = session

    async def write(
        self, batch: Sequence[SessionHeals], *, ledger: bool, read_back: bool = False
    ) -> list[WriteResult]:
        """Appends each heal via the service (the caller skips ids already present)."""
        results: list[WriteResult] = []
        events = self._session.events
        newest = events[-1].timestamp if events else 0.0
        for planned in batch:
            for heal in planned.heals:
                newest = max(newest + 1e-6, heal.event.timestamp)
                appended = heal.event.model_copy(update={"timestamp": newest})
                stored = await self._service.append_event(self._session, appended)
                results.append(WriteResult(heal, WriteOutcome.WRITTEN, stored))
        return results
