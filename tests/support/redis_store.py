"""ADK's Redis session store for tests: its URL, a session's key, and sessions to scan."""

from __future__ import annotations

from urllib.parse import quote

from google.adk.integrations.redis import RedisSessionService
from servers import REDIS_URL
from stores import APP, USER, crashed_histories


def store_url(prefix: str, base: str = REDIS_URL) -> str:
    """The redis:// URL of the test's sessions."""
    return f"{base}?key_prefix={quote(prefix, safe='')}"


def session_key(prefix: str, session_id: str) -> str:
    """ADK's key of one session."""
    return f"{prefix}{APP}:{USER}:{session_id}"


async def fill(service: RedisSessionService) -> list[str]:
    """Stores every crashed history through ADK, plus a session with app and user state
    (which adds ADK's app_state and user_state keys under the prefix)."""
    for session_id, history in crashed_histories().items():
        session = await service.create_session(app_name=APP, user_id=USER,
                                               session_id=session_id)
        for event in history.events:
            await service.append_event(session, event)
    await service.create_session(app_name=APP, user_id=USER, session_id="stateful",
                                 state={"app:theme": "dark", "user:lang": "fr", "k": 1})
    return [*crashed_histories(), "stateful"]
