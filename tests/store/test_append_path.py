"""The append path: services the wrapper can write only through their own ``append_event``.

A service that is not ADK's own class (here ADK's database and in-memory
services with ``append_event`` overridden, :mod:`append_services`) gets no
direct writer. These tests pin that it judges calls by the same rule as the
direct path, re-classifies right before appending (a call answered since the
plan is not healed), heals before the first event of the next invocation in a
real ``Runner`` turn, and what ADK sends the model when a heal was stored after
a later turn.
"""

from __future__ import annotations

import datetime
import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from append_services import (
    AppendingDatabaseService,
    AppendingInMemoryService,
    ReadingDatabaseService,
)
from google.adk.agents import LlmAgent
from google.adk.events.event import Event
from google.adk.runners import Runner
from google.adk.sessions import BaseSessionService, DatabaseSessionService, Session
from google.genai import types
from service_histories import APP, USER, store_crashed, synthetic

from adk_session_heal import HealingSessionService, HealPolicy
from adk_session_heal.core.findings import classify
from adk_session_heal.core.heal_record import HealRecord, HealTrigger
from adk_session_heal.core.healing import plan_session
from adk_session_heal.core.session_key import SessionKey
from adk_session_heal.providers.validators import (
    PROVIDERS,
    adk_request_contents,
    adk_request_problems,
    provider_problems,
)
from adk_session_heal.store import Layout, WriteOutcome, store_for_service
from adk_session_heal.store.layouts.append import AppendStore
from adk_session_heal.testing import History, ScriptedModel, outline

AGENT = "worker"
ONE_CLOCK = HealPolicy(stale_after=60, quiet_after=0, clock_skew=0)
"""Every process of these tests shares this host's clock."""


@pytest.fixture(params=["direct", "append_database", "append_memory"])
async def service(request: pytest.FixtureRequest, tmp_path: Path
                  ) -> AsyncIterator[BaseSessionService]:
    """ADK's database service (direct writer), or a subclass written through append_event."""
    url = f"sqlite+aiosqlite:///{tmp_path / 's.db'}"
    inner: BaseSessionService
    if request.param == "direct":
        inner = DatabaseSessionService(url)
    elif request.param == "append_database":
        inner = AppendingDatabaseService(url)
    else:
        inner = AppendingInMemoryService()
    yield inner
    close = getattr(inner, "close", None)
    if close is not None:
        await close()


@pytest.fixture(params=["database", "memory"])
async def append_only(request: pytest.FixtureRequest, tmp_path: Path
                      ) -> AsyncIterator[BaseSessionService]:
    """Services whose heals go after the newest event: ADK's database service (SQLite) behind
    an overridden get_session, or its in-memory one behind an overridden append_event."""
    if request.param == "memory":
        yield AppendingInMemoryService()
        return
    inner = ReadingDatabaseService(f"sqlite+aiosqlite:///{tmp_path / 'a.db'}")
    yield inner
    await inner.close()


def newest_call(age: float) -> History:
    """user asks, the agent calls get_weather ``age`` seconds ago; nothing after."""
    history = History(agent=AGENT, start=time.time() - age - 1)
    history.user("weather in Paris?")
    history.call("get_weather", {"city": "Paris"})
    return history


async def stored(inner: BaseSessionService, session_id: str) -> list[Event]:
    session = await inner.get_session(app_name=APP, user_id=USER, session_id=session_id)
    assert session is not None
    return session.events


# -- (a) the same rule, and a re-check right before appending -----------------------


@pytest.mark.parametrize(("age", "healed"), [(30.0, 0), (400.0, 1)], ids=["young", "old"])
async def test_append_path_judges_calls_as_the_direct_path_does(
    service: BaseSessionService, age: float, healed: int
) -> None:
    """stale_after=60 s + 5 min skew: 30 s old is in flight, 400 s old is stale, on every path."""
    session = await store_crashed(service, newest_call(age))
    probe = await service.get_session(app_name=APP, user_id=USER, session_id=session.id)
    assert probe is not None
    is_append = store_for_service(service, probe).layout is Layout.APPEND
    assert is_append == (type(service) is not DatabaseSessionService)
    wrapper = HealingSessionService(service, HealPolicy(stale_after=60, quiet_after=0))
    await wrapper.get_session(app_name=APP, user_id=USER, session_id=session.id)
    assert len(synthetic(await stored(service, session.id))) == healed


@pytest.mark.parametrize("seen", ["counted", "partial"])
async def test_append_store_skips_a_call_answered_since_the_plan(
    append_only: BaseSessionService, seen: str
) -> None:
    """A real response stored between plan and append: re-read, re-classified, not healed."""
    session = await store_crashed(append_only, newest_call(3600))
    view = await append_only.get_session(app_name=APP, user_id=USER, session_id=session.id)
    assert view is not None
    now = time.time()
    findings = classify(view.events, now=now, stale_after=60)
    planned = plan_session(view.events, findings, SessionKey.of(view), ONE_CLOCK,
                           trigger=HealTrigger.GET_SESSION, healed_at=now,
                           seen_events=len(view.events) if seen == "counted" else None)
    assert planned is not None

    runner_view = await append_only.get_session(app_name=APP, user_id=USER,
                                                session_id=session.id)
    assert runner_view is not None
    (call,) = runner_view.events[-1].get_function_calls()
    answer = Event(invocation_id=runner_view.events[-1].invocation_id, author=AGENT,
                   content=types.Content(role="user", parts=[types.Part(
                       function_response=types.FunctionResponse(
                           id=call.id, name=call.name, response={"forecast": "sunny"}))]))
    await append_only.append_event(runner_view, answer)  # the tool answered meanwhile

    results = await AppendStore(append_only, view).write([planned], ledger=False)
    assert [r.outcome for r in results] == [WriteOutcome.CHANGED]
    events = await stored(append_only, session.id)
    assert synthetic(events) == []
    assert outline(events) == ["weather in Paris?", "call", "response:forecast"]


async def test_append_store_writes_when_the_call_is_still_unanswered(
    append_only: BaseSessionService,
) -> None:
    """The same re-check lets a heal through when nothing answered the call (partial plan)."""
    session = await store_crashed(append_only, newest_call(3600))
    view = await append_only.get_session(app_name=APP, user_id=USER, session_id=session.id)
    assert view is not None
    now = time.time()
    planned = plan_session(view.events, classify(view.events, now=now, stale_after=60),
                           SessionKey.of(view), ONE_CLOCK, trigger=HealTrigger.GET_SESSION,
                           healed_at=now, seen_events=None)
    assert planned is not None
    results = await AppendStore(append_only, view).write([planned], ledger=False)
    assert [r.outcome for r in results] == [WriteOutcome.WRITTEN]
    assert outline(await stored(append_only, session.id)) == [
        "weather in Paris?", "call", "response:error"]


# -- (b) a real Runner turn heals before the new message ------------------------------


async def test_runner_turn_on_the_append_path_stores_call_heal_then_the_message(
    service: BaseSessionService,
) -> None:
    """The user comes back: stored order is call, heal, new message, reply (healed on append)."""
    history = newest_call(60)  # a minute ago: not quiet, so get_session leaves it
    session = await store_crashed(service, history)
    heals: list[HealRecord] = []
    model = ScriptedModel(script=[ScriptedModel.say("Sorry, the weather tool failed.")])
    runner = Runner(app_name=APP, agent=LlmAgent(name=AGENT, model=model),
                    session_service=HealingSessionService(service, on_heal=heals.append))
    message = types.Content(role="user", parts=[types.Part(text="hello?")])
    async for _ in runner.run_async(user_id=USER, session_id=session.id, new_message=message):
        pass

    events = await stored(service, session.id)
    assert outline(events) == [
        "weather in Paris?", "call", "response:error", "hello?",
        "Sorry, the weather tool failed."]
    assert [h.trigger for h in heals] == [HealTrigger.APPEND]
    (request,) = model.requests
    assert outline(request.contents) == [
        "weather in Paris?", "call", "response:error", "hello?"]


# -- (c) a later turn stored before the heal -------------------------------------------


async def _healed_after_a_later_turn(inner: BaseSessionService,
                                     start: float | None = None) -> Session:
    """user, call, user2, reply2 stored without the wrapper; the heal appended after them."""
    history = History(agent=AGENT, start=time.time() - 3600 if start is None else start)
    history.user("weather in Paris?")
    history.call("get_weather", {"city": "Paris"})
    history.user("hello?")
    history.text("Hi! What can I do for you?")
    crashed = await store_crashed(inner, history)
    wrapper = HealingSessionService(inner)  # quiet for an hour: get_session heals
    session = await wrapper.get_session(app_name=APP, user_id=USER, session_id=crashed.id)
    assert session is not None
    return session


async def test_heal_stored_after_a_later_turn_adk_sends_it_right_after_its_call(
    append_only: BaseSessionService,
) -> None:
    """Stored user, call, user2, reply2, heal, user3: ADK's request puts the heal after the call."""
    session = await _healed_after_a_later_turn(append_only)
    user3 = Event(invocation_id="inv-3", author="user",
                  content=types.Content(role="user", parts=[types.Part(text="and now?")]))
    await append_only.append_event(session, user3)
    events = await stored(append_only, session.id)
    assert outline(events) == [
        "weather in Paris?", "call", "hello?", "Hi! What can I do for you?", "response:error",
        "and now?"]
    stored_problems = {provider: {p.code for p in provider_problems(events, provider)}
                       for provider in PROVIDERS}  # the stored order, as it is
    assert stored_problems == {
        "openai_chat": {"unanswered_call", "orphaned_result"}, "openai_responses": set(),
        "anthropic": {"unanswered_call", "orphaned_result"},
        "gemini": {"count_mismatch", "orphaned_result"}}

    agent = LlmAgent(name=AGENT, model=ScriptedModel())
    contents = await adk_request_contents(session, agent)
    assert outline(contents) == [
        "weather in Paris?", "call", "response:error", "hello?", "Hi! What can I do for you?",
        "and now?"]
    for provider in PROVIDERS:
        assert await adk_request_problems(session, agent, provider) == []


@pytest.mark.parametrize("adk_class", ["database", "sqlite"])
async def test_a_subclass_of_a_store_that_sorts_by_time_reads_the_heal_right_after_its_call(
    adk_class: str, tmp_path: Path,
) -> None:
    """ADK's database and SQLite services sort by timestamp: through a subclass's own
    append_event the heal keeps the time the core placed it at, is read between the call and
    the later turn, and the stored history passes every provider rule; the caller's session
    object shows the same order."""
    from google.adk.sessions.sqlite_session_service import SqliteSessionService

    class AppendingSqliteService(SqliteSessionService):
        async def append_event(self, session: Session, event: Event) -> Event:
            return await super().append_event(session, event)

    inner: BaseSessionService = (
        AppendingDatabaseService(f"sqlite+aiosqlite:///{tmp_path / 'a.db'}")
        if adk_class == "database" else AppendingSqliteService(str(tmp_path / "s.db")))
    try:
        session = await _healed_after_a_later_turn(inner)
        probe = await inner.get_session(app_name=APP, user_id=USER, session_id=session.id)
        assert probe is not None
        assert store_for_service(inner, probe).layout is Layout.APPEND
        expected = ["weather in Paris?", "call", "response:error", "hello?",
                    "Hi! What can I do for you?"]
        assert outline(session.events) == expected  # the caller's object
        events = await stored(inner, session.id)
        assert outline(events) == expected
        for provider in PROVIDERS:
            assert provider_problems(events, provider) == [], provider
        again = await HealingSessionService(inner).get_session(
            app_name=APP, user_id=USER, session_id=session.id)
        assert again is not None and outline(again.events) == expected  # nothing more
    finally:
        await inner.close()  # type: ignore[attr-defined]


def _start_whose_last_event_rounds_like_a_microsecond_later() -> float:
    """A start an hour ago whose fourth event (start + 3 s) and that time + 1e-6 are one
    stored microsecond: ADK's SQL column rounds both to the same value."""
    base = float(int(time.time()) - 3600)
    for tenth in range(10_000_000):
        start = base + tenth * 1e-7
        last = start + 3
        if (datetime.datetime.fromtimestamp(last)
                == datetime.datetime.fromtimestamp(last + 1e-6)):
            return start
    raise AssertionError("no such start in a second")


async def test_a_heal_appended_after_an_event_a_float_microsecond_away_still_reads_after_it(
    tmp_path: Path,
) -> None:
    """The append path stamps a heal two whole microseconds past the newest event, so a
    rounding column never ties them (the old +1e-6 tied and the heal read first)."""
    inner = ReadingDatabaseService(f"sqlite+aiosqlite:///{tmp_path / 'a.db'}")
    try:
        session = await _healed_after_a_later_turn(
            inner, _start_whose_last_event_rounds_like_a_microsecond_later())
        assert outline(await stored(inner, session.id)) == [
            "weather in Paris?", "call", "hello?", "Hi! What can I do for you?",
            "response:error"]
    finally:
        await inner.close()


async def test_the_helper_builds_what_the_runner_sends(
    append_only: BaseSessionService,
) -> None:
    """adk_request_contents on the stored session equals the contents a real Runner sends."""
    session = await _healed_after_a_later_turn(append_only)
    model = ScriptedModel(script=[ScriptedModel.say("Still no weather, sorry.")])
    agent = LlmAgent(name=AGENT, model=model)
    runner = Runner(app_name=APP, agent=agent,
                    session_service=HealingSessionService(append_only))
    message = types.Content(role="user", parts=[types.Part(text="and now?")])
    async for _ in runner.run_async(user_id=USER, session_id=session.id, new_message=message):
        pass
    (request,) = model.requests
    after = await append_only.get_session(app_name=APP, user_id=USER, session_id=session.id)
    assert after is not None
    after.events = after.events[:-1]  # as the runner held it: before the model's reply
    assert [c.model_dump() for c in await adk_request_contents(after, agent)] == [
        c.model_dump() for c in request.contents]
    assert outline(request.contents) == [
        "weather in Paris?", "call", "response:error", "hello?", "Hi! What can I do for you?",
        "and now?"]
