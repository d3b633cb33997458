"""Third-party session stores from the package index, healed through their own API.

``adk-session-services`` (a Redis store: a hash, a state key and an event
list per session, events appended with ``RPUSH``) is not ADK's layout, so the
wrapper heals it through its ``append_event``. Redis runs on 127.0.0.1:6379;
each test uses its own key prefix and deletes it.

``adk-secure-sessions``' ``EncryptedSessionService`` (Python 3.12+) is a
``DatabaseSessionService`` subclass with its own encrypted tables: the direct
writers refuse it, so it is healed through ``append_event`` too, and it reads
events in timestamp order. Tested on SQLite and PostgreSQL with a real AES-GCM
key.
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
import time
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from adk_session_services.redis_session import RedisSessionService
from google.adk.agents import LlmAgent
from google.adk.events.event import Event
from google.adk.runners import Runner
from google.adk.sessions import BaseSessionService
from google.genai import types
from servers import require_server, temporary_database
from sqlalchemy import text
from sqlalchemy.ext.asyncio import create_async_engine

from adk_session_heal import HealingSessionService, HealPolicy
from adk_session_heal.core.event_access import HEAL_METADATA_KEY
from adk_session_heal.providers.validators import PROVIDERS, provider_problems
from adk_session_heal.store import Layout, store_for_service
from adk_session_heal.testing import History, ScriptedModel, outline

pytestmark = pytest.mark.redis

REDIS_URL = "redis://127.0.0.1:6379/0"
APP, USER = "app", "user"
POLICY = HealPolicy(stale_after=0, quiet_after=0)

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


@pytest.mark.slow
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


# -- adk-secure-sessions: a DatabaseSessionService subclass that encrypts ---------------

AGENT = "worker"
LATER_TURNS = ["weather in Paris?", "call", "response:error", "hello?",
               "Hi! What can I do for you?"]
"""Stored order once healed: the heal right after its call, before the later turn."""


@pytest.fixture(params=["sqlite", "postgres"])
async def encrypted_url(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[str]:
    """A fresh database for adk-secure-sessions (skipped where it cannot install)."""
    pytest.importorskip("adk_secure_sessions",
                        reason="adk-secure-sessions needs Python 3.12 or later")
    if request.param == "sqlite":
        yield f"sqlite+aiosqlite:///{tmp_path / 'encrypted.db'}"
        return
    async with temporary_database("postgres") as url:
        yield url


def encrypted(url: str, key: bytes) -> BaseSessionService:
    """adk-secure-sessions' EncryptedSessionService on ``url`` with an AES-256-GCM key."""
    from adk_secure_sessions import AesGcmBackend, EncryptedSessionService

    service: BaseSessionService = EncryptedSessionService(db_url=url,
                                                          backend=AesGcmBackend(key=key))
    return service


def aes_key() -> bytes:
    """A fresh 256-bit key, as adk-secure-sessions' README makes one."""
    from cryptography.hazmat.primitives.ciphers.aead import AESGCM

    return AESGCM.generate_key(bit_length=256)


async def _crashed_before_a_later_turn(inner: BaseSessionService) -> str:
    """user, call (the process died), user2, reply2: stored through the service itself."""
    history = History(agent=AGENT, start=time.time() - 3600)
    history.user("weather in Paris?")
    history.call("get_weather", {"city": "Paris"})
    history.user("hello?")
    history.text("Hi! What can I do for you?")
    session = await inner.create_session(app_name=APP, user_id=USER)
    for event in history.events:
        await inner.append_event(session, event)
    return session.id


async def _raw_event_data(url: str, event_id: str) -> Any:
    """The heal's ``event_data`` cell as the database holds it."""
    engine = create_async_engine(url)
    try:
        async with engine.connect() as conn:
            return (await conn.execute(text("SELECT event_data FROM events WHERE id = :id"),
                                       {"id": event_id})).scalar_one()
    finally:
        await engine.dispose()


async def test_adk_secure_sessions_reads_the_heal_right_after_its_call(
        encrypted_url: str) -> None:
    """EncryptedSessionService sorts by timestamp: the heal, written through its append_event,
    is read back between the call and the later turn (encrypted like every row), and the stored
    history passes the OpenAI Chat, OpenAI Responses, Anthropic and Gemini rules."""
    key = aes_key()
    inner = encrypted(encrypted_url, key)
    try:
        session_id = await _crashed_before_a_later_turn(inner)
        probe = await inner.get_session(app_name=APP, user_id=USER, session_id=session_id)
        assert probe is not None
        assert store_for_service(inner, probe).layout is Layout.APPEND
        healed = await HealingSessionService(inner, POLICY).get_session(
            app_name=APP, user_id=USER, session_id=session_id)
        assert healed is not None and outline(healed.events) == LATER_TURNS
    finally:
        await inner.close()  # type: ignore[attr-defined]

    reader = encrypted(encrypted_url, key)  # another process's view, the same key
    try:
        stored = await reader.get_session(app_name=APP, user_id=USER, session_id=session_id)
    finally:
        await reader.close()  # type: ignore[attr-defined]
    assert stored is not None
    assert outline(stored.events) == LATER_TURNS
    for provider in PROVIDERS:
        assert provider_problems(stored.events, provider) == [], provider
    (heal,) = _healed(stored.events)
    # ADK's append_event set the session's update time to the heal's: back before reply2.
    assert stored.last_update_time == pytest.approx(heal.timestamp, abs=1e-6)
    assert stored.last_update_time < stored.events[-1].timestamp
    raw = await _raw_event_data(encrypted_url, heal.id)
    assert b"get_weather" not in (raw if isinstance(raw, bytes) else str(raw).encode())


async def test_adk_secure_sessions_runner_holding_the_healed_session_appends_on(
        encrypted_url: str) -> None:
    """A real Runner turn heals as it reads the session (which moves the session's update
    time back to the heal's); it then appends its message and reply on that same session
    object without a stale-session error, and the stored order and the model's request both
    pass every provider rule."""
    key = aes_key()
    inner = encrypted(encrypted_url, key)
    try:
        session_id = await _crashed_before_a_later_turn(inner)
        model = ScriptedModel(script=[ScriptedModel.say("Still no weather, sorry.")])
        runner = Runner(app_name=APP, agent=LlmAgent(name=AGENT, model=model),
                        session_service=HealingSessionService(inner, POLICY))
        message = types.Content(role="user", parts=[types.Part(text="and now?")])
        async for _ in runner.run_async(user_id=USER, session_id=session_id,
                                        new_message=message):
            pass
        stored = await inner.get_session(app_name=APP, user_id=USER, session_id=session_id)
    finally:
        await inner.close()  # type: ignore[attr-defined]
    assert stored is not None
    assert outline(stored.events) == [*LATER_TURNS, "and now?", "Still no weather, sorry."]
    (request,) = model.requests
    assert outline(request.contents) == [*LATER_TURNS, "and now?"]
    for provider in PROVIDERS:
        assert provider_problems(stored.events, provider) == [], provider
        assert provider_problems(request.contents, provider) == [], provider
