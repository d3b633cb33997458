"""Session services the wrapper can write only through ``append_event`` (the append path).

Each is one of ADK's own services with ``append_event`` overridden (here
trivially, as a subclass adding logging or metrics would; one overrides
``get_session`` too), so
:func:`~adk_session_heal.store.base.stores_as_adk_does` rejects it and heals
go through :class:`~adk_session_heal.store.layouts.append.AppendStore`. The multi-process
scripts import them too.
"""

from __future__ import annotations

from typing import Any

from google.adk.events.event import Event
from google.adk.sessions import DatabaseSessionService, InMemorySessionService, Session


class AppendingDatabaseService(DatabaseSessionService):
    """ADK's database service behind its own ``append_event`` (stores exactly what ADK does)."""

    async def append_event(self, session: Session, event: Event) -> Event:
        return await super().append_event(session, event)


class ReadingDatabaseService(AppendingDatabaseService):
    """ADK's database service behind its own ``append_event`` and ``get_session``.

    It reads exactly as ADK does, but the wrapper cannot know that a
    ``get_session`` of a subclass sorts by timestamp, so heals go after the
    newest event, as for a store that keeps insertion order.
    """

    async def get_session(self, **kwargs: Any) -> Session | None:
        return await super().get_session(**kwargs)


class AppendingInMemoryService(InMemorySessionService):
    """ADK's in-memory service behind its own ``append_event``."""

    async def append_event(self, session: Session, event: Event) -> Event:
        return await super().append_event(session, event)


def database_service(kind: str, url: str) -> DatabaseSessionService:
    """Returns ADK's service (``direct``) or the append-path subclass (``append``) on ``url``."""
    if kind == "direct":
        return DatabaseSessionService(url)
    if kind == "append":
        return AppendingDatabaseService(url)
    raise ValueError(f"unknown kind {kind!r}")
