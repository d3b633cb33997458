"""Third-party session stores from the package index, healed through their own API.

``adk-session-services`` (a Redis store: a hash, a state key and an event
list per session, events appended with ``RPUSH``) is not ADK's layout, so the
wrapper heals it through its ``append_event``. Redis runs on 127.0.0.1:6379;
each test uses its own key prefix and deletes it.
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
import time
import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from adk_session_services.redis_session import RedisSessionService
from google.adk.events.event import Event
from servers import require_server

from adk_session_heal import HealingSessionService, HealPolicy
from adk_session_heal.event_access import HEAL_METADATA_KEY
from adk_session_heal.store import Layout, store_for_service
from adk_session_heal.testing import History

pytestmark = pytest.mark.redis

REDIS_URL = "redis://127.0.0.1:6379/0"
APP, USER = "app", "user"
POLICY = HealPolicy(stale_after=0, quiet_after=0)
HERE = Path(__file__).parent

_READER = """
import asyncio, sys
from adk_session_services.redis_session import RedisSessionService
from adk_session_heal import HealingSessionService, HealPolicy

async def main(prefix, session_id, go):
    inner = RedisSessionService(sys.argv[1], prefix=prefix)
    service = HealingSessionService(inner, HealPolicy(stale_after=0, quiet_after=0))
    while not __import__("os").path.exists(go):
        await asyncio.sleep(0.001)
    await service.get_session(app_name="app", user_id="user", session_id=session_id)
    await inner.client.aclose()

asyncio.run(main(*sys.argv[2:5]))
"""


@pytest.fixture
async def prefix() -> AsyncIterator[str]:
    """A key prefix of this test's own; its keys are deleted after."""
    require_server("redis")
    import redis.asyncio as aioredis

    name = f"adk_session_heal_test:{uuid.uuid4().hex}:"
    yield name
    client = aioredis.from_url(REDIS_URL)
    try:
        keys = [key async for key in client.scan_iter(match=f"{name}*")]
        if keys:
            await client.delete(*keys)
    finally:
        await client.aclose()


def _healed(events: list[Event]) -> list[Event]:
    return [e for e in events if (e.custom_metadata or {}).get(HEAL_METADATA_KEY)]


@pytest.fixture
async def store(prefix: str) -> AsyncIterator[RedisSessionService]:
    """The third-party store on this test's prefix; its client is closed after."""
    service = RedisSessionService(REDIS_URL, prefix=prefix)
    yield service
    await service.client.aclose()


async def _crashed(service: RedisSessionService) -> str:
    """Stores a session whose last invocation died mid-tool; returns its id."""
    history = History(start=time.time() - 3600)
    history.user("weather in Paris?")
    history.call("get_weather", {"city": "Paris"})
    session = await service.create_session(app_name=APP, user_id=USER)
    for event in history.events:
        await service.append_event(session, event)
    return session.id


async def test_adk_session_services_redis_is_healed_through_its_own_api(
    store: RedisSessionService,
) -> None:
    """One heal, right after its call, read back by the store itself; later reads add none."""
    inner = store
    session_id = await _crashed(inner)
    probe = await inner.get_session(app_name=APP, user_id=USER, session_id=session_id)
    assert probe is not None
    assert store_for_service(inner, probe).layout is Layout.APPEND
    service = HealingSessionService(inner, POLICY)
    for _ in range(3):
        read = await service.get_session(app_name=APP, user_id=USER, session_id=session_id)
        assert read is not None
    stored = await inner.get_session(app_name=APP, user_id=USER, session_id=session_id)
    assert stored is not None
    (heal,) = _healed(stored.events)
    assert stored.events[-1].id == heal.id  # right after the call: nothing came later
    assert stored.events[-2].get_function_calls()[0].id == heal.get_function_responses()[0].id


async def test_adk_session_services_redis_with_four_racing_processes(
    store: RedisSessionService, prefix: str, tmp_path: Path
) -> None:
    """Four processes heal one crashed session at once: how many heals this store keeps.

    The store's append is ``RPUSH`` after a non-atomic stale check, so nothing
    in its API lets a writer append only if a heal is absent; the adapter
    re-reads right before appending, which narrows the race to that gap. The
    README says so. This test pins what is guaranteed: at least one heal, every
    heal the same event (same id), and no heal once one is stored.
    """
    inner = store
    session_id = await _crashed(inner)
    go = tmp_path / "go"
    readers = [subprocess.Popen([sys.executable, "-c", _READER, REDIS_URL, prefix, session_id,
                                 str(go)], stderr=subprocess.DEVNULL) for _ in range(4)]
    await asyncio.sleep(3)  # every reader has imported ADK and waits
    go.touch()
    assert [reader.wait(timeout=120) for reader in readers] == [0, 0, 0, 0]
    stored = await inner.get_session(app_name=APP, user_id=USER, session_id=session_id)
    assert stored is not None
    heals = _healed(stored.events)
    assert 1 <= len(heals) <= 4
    assert {heal.id for heal in heals} == {heals[0].id}
    again = HealingSessionService(inner, POLICY)
    await again.get_session(app_name=APP, user_id=USER, session_id=session_id)
    after = await inner.get_session(app_name=APP, user_id=USER, session_id=session_id)
    assert after is not None and len(_healed(after.events)) == len(heals)
