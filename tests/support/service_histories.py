"""A crashed history stored through ADK's own session services, and its events read back.

For the contract tests of ``HealingSessionService`` and the tests built on them (races,
clock skew, the append path, the stores, Redis, end to end).
"""

from __future__ import annotations

import time

from conftest import ServiceFactory
from google.adk.events.event import Event
from google.adk.sessions import BaseSessionService, Session

from adk_session_heal.core.event_access import HEAL_METADATA_KEY
from adk_session_heal.testing import History

APP, USER = "app", "user"


async def store_crashed(
    inner: BaseSessionService, history: History, session_id: str | None = None
) -> Session:
    """Creates a session in ``inner`` and appends ``history`` through ADK itself."""
    session = await inner.create_session(app_name=APP, user_id=USER, session_id=session_id)
    for event in history.events:
        await inner.append_event(session, event)
    return session


def crashed_history(now: float | None = None) -> History:
    """user asks -> model calls get_weather -> (process dies) -> user returns."""
    history = History(start=(now or time.time()) - 60)
    history.user("weather in Paris?")
    history.call("get_weather", {"city": "Paris"})
    history.user("hello?")
    return history


async def stored_events(factory: ServiceFactory, session_id: str) -> list[Event]:
    """Reads the session through a fresh, bare inner service (a second process)."""
    bare = await factory()
    session = await bare.get_session(app_name=APP, user_id=USER, session_id=session_id)
    assert session is not None
    return session.events


def synthetic(events: list[Event]) -> list[Event]:
    """The synthetic events among ``events``: those carrying the heal marker."""
    return [e for e in events if (e.custom_metadata or {}).get(HEAL_METADATA_KEY)]
