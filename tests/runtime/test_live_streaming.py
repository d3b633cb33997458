"""Live mode (``Runner.run_live``) for real, offline: ADK's live flow over the scripted live
model (``adk_session_heal.testing.ScriptedLiveModel``), a real session database."""

from __future__ import annotations

import asyncio
import os
import sqlite3
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import closing
from pathlib import Path
from typing import Any

import pytest
from google.adk.agents import LlmAgent
from google.adk.agents.run_config import RunConfig, ToolThreadPoolConfig
from google.adk.models.llm_request import LlmRequest
from google.adk.models.llm_response import LlmResponse
from google.adk.runners import Runner
from google.adk.sessions import DatabaseSessionService
from google.genai import types
from live_runs import USER, LiveRun
from paths import CHILDREN
from servers import temporary_database

from adk_session_heal import HealingSessionService
from adk_session_heal.core import idempotency
from adk_session_heal.core.event_access import HEAL_METADATA_KEY
from adk_session_heal.core.session_key import SessionKey
from adk_session_heal.core.tool_runs import RunState, ToolRun, run_outcome
from adk_session_heal.ledger import SqlToolRunLedger
from adk_session_heal.migrate import upgrade
from adk_session_heal.plugins import ToolRunLedgerPlugin
from adk_session_heal.policy import LEDGER_ERRORS, CallOutcome
from adk_session_heal.runtime.tool_run_plugin import STILL_RUNNING_ERROR
from adk_session_heal.testing import (
    History,
    LiveSent,
    ProviderRejected,
    ScriptedLiveModel,
    outline,
)

sys.path.insert(0, str(CHILDREN))
import live_stream  # noqa: E402

APP = live_stream.APP


async def lookup(city: str) -> dict[str, str]:
    """Looks up the weather of a city."""
    return {"city": city, "sky": "sunny"}


def _weather_model_side(sent: LiveSent) -> list[LlmResponse]:
    """Calls ``lookup`` when asked about the weather; says what it got back."""
    if sent.text == "weather in Paris?":
        return [ScriptedLiveModel.call("lookup", {"city": "Paris"}, call_id="live-1")]
    if any(response.id == "live-1" for response in sent.function_responses):
        return [ScriptedLiveModel.say("It is sunny in Paris.")]
    return []


def _runner(service: DatabaseSessionService, model: ScriptedLiveModel, tools: list[Any],
            plugins: list[Any] | None = None) -> Runner:
    return Runner(app_name=APP, agent=LlmAgent(name="assistant", model=model, tools=tools),
                  session_service=service, plugins=plugins or [])


def _sent(model: ScriptedLiveModel) -> list[LiveSent]:
    return [sent for connection in model.connections for sent in connection.sent]


async def test_a_live_run_over_the_scripted_model_calls_a_tool_and_stores_its_answer(
        tmp_path: Path) -> None:
    """The scripted live model's call runs its tool in ADK's live flow; answer and reply stored."""
    service = DatabaseSessionService(f"sqlite+aiosqlite:///{tmp_path / 'live.db'}")
    try:
        session = await service.create_session(app_name=APP, user_id=USER)
        model = ScriptedLiveModel(script=_weather_model_side)
        async with LiveRun(_runner(service, model, [lookup]), session.id) as live:
            live.say("weather in Paris?")
            await live.until(lambda: any(event.content and event.content.parts
                                         and event.content.parts[0].text
                                         for event in live.events))
        answers = [response.response for sent in _sent(model)
                   for response in sent.function_responses]
        assert answers == [{"city": "Paris", "sky": "sunny"}]
        assert [sent.kind for sent in _sent(model)][:2] == ["open", "content"]
        stored = await service.get_session(app_name=APP, user_id=USER, session_id=session.id)
        assert stored is not None
        assert outline(stored.events) == ["weather in Paris?", "call", "response:city,sky",
                                          "It is sunny in Paris."]
    finally:
        await service.close()


async def test_the_scripted_live_connection_refuses_what_a_live_api_would() -> None:
    """An unanswered call in the history, or content with no JSON form: ProviderRejected."""
    model = ScriptedLiveModel(script=_weather_model_side)
    history = History(agent="assistant")
    history.user("weather in Paris?")
    history.call("lookup", {"city": "Paris"}, call_id="dead-1")
    contents = [event.content for event in history.events if event.content is not None]
    async with model.connect(LlmRequest()) as connection:
        with pytest.raises(ProviderRejected, match="dead-1"):
            await connection.send_history(contents)
        unsendable = types.Content(role="user", parts=[types.Part.from_function_response(
            name="lookup", response={"result": object()})])
        with pytest.raises(ProviderRejected, match="cannot be sent"):
            await connection.send_content(unsendable)
    assert [sent.kind for sent in model.connections[0].sent] == ["open"]
    assert model.connections[0].closed


# -- the tool-run ledger in live mode -----------------------------------------------------

LEASE = 0.3
"""The lease of the in-process tests (renewed every tenth of a second)."""


class _LiveApp:
    """The watcher app of ``tests/children/live_stream.py`` on a SQLite session database here.

    Args:
        tmp_path: Where the database and the effects file live.
    """

    def __init__(self, tmp_path: Path) -> None:
        self.url = f"sqlite+aiosqlite:///{tmp_path / 'live.db'}"
        self.service = DatabaseSessionService(self.url)
        self.effects = tmp_path / "effects"
        self.effects.touch()
        self.ledger: SqlToolRunLedger | None = None
        self.session_id = ""

    async def open(self) -> _LiveApp:
        self.session_id = (await self.service.create_session(app_name=APP, user_id=USER)).id
        await upgrade(self.url)
        self.ledger = SqlToolRunLedger.from_url(self.url)
        return self

    def plugin(self, replay_wait: float = 30.0) -> ToolRunLedgerPlugin:
        assert self.ledger is not None
        return ToolRunLedgerPlugin(self.ledger, lease_seconds=LEASE, replay_wait=replay_wait)

    async def record(self) -> ToolRun | None:
        assert self.ledger is not None
        key = SessionKey(APP, USER, self.session_id)
        return (await self.ledger.runs(key)).get(live_stream.CALL_ID)

    async def key(self) -> str:
        """The idempotency key of the model's first ``live-1`` call."""
        stored = await self.service.get_session(app_name=APP, user_id=USER,
                                                session_id=self.session_id)
        assert stored is not None
        invocation = next(event.invocation_id for event in stored.events
                          if any(call.id == live_stream.CALL_ID
                                 for call in event.get_function_calls()))
        return idempotency.idempotency_key(SessionKey(APP, USER, self.session_id), invocation,
                                           live_stream.CALL_ID)

    def watches(self) -> list[str]:
        return self.effects.read_text().splitlines()

    async def close(self) -> None:
        if self.ledger is not None:
            await self.ledger.close()
        await self.service.close()


def _answers(model: ScriptedLiveModel) -> list[dict[str, Any]]:
    """What the model was sent for ``live-1``, in order: ADK's answers, the stream's values."""
    return [dict(response.response or {}) for sent in _sent(model)
            for response in sent.function_responses if response.id == live_stream.CALL_ID]


PENDING = {"status": "The function is running asynchronously and the results are pending."}
"""ADK's answer to a live streaming call, sent at once."""


async def test_a_live_stream_holds_its_calls_lease_while_it_streams(tmp_path: Path) -> None:
    """A live stream's task holds its call's lease while it streams; once it ends: may_have_run."""
    app = await _LiveApp(tmp_path).open()
    stop = asyncio.Event()
    plugin = app.plugin()
    try:
        live_runner = live_stream.runner(app.service, [plugin], app.effects, stop)
        model = live_stream.model_of(live_runner)
        async with LiveRun(live_runner, app.session_id) as live:
            live.say(live_stream.ASK)

            async def renewed() -> bool:
                run = await app.record()
                return run is not None and run.lease_until - run.started_at > 3 * LEASE

            async with asyncio.timeout(120):
                while not await renewed():
                    await asyncio.sleep(0.05)
            streaming = await app.record()
            assert streaming is not None and streaming.state is RunState.STARTED
            assert run_outcome(streaming, time.time()) is None  # alive: never dead, never healed
            assert len(plugin._leases.held()) == 1
            stop.set()  # the generator ends: ADK's stream task ends with it

            async def lapsed() -> bool:
                run = await app.record()
                return run is not None and run_outcome(run, time.time()) is not None

            async with asyncio.timeout(120):
                while not await lapsed():
                    await asyncio.sleep(0.05)
            assert plugin._leases.held() == []
        ended = await app.record()
        assert ended is not None
        assert (ended.state, ended.attempt, run_outcome(ended, time.time())) == (
            RunState.STARTED, 1, CallOutcome.MAY_HAVE_RUN)
        answers = _answers(model)  # the stream's values may reach the model before "pending"
        assert answers.count(PENDING) == 1
        assert [answer for answer in answers if answer != PENDING][:3] == [
            {"symbol": "ADK", "price": price} for price in (100, 101, 102)]
        assert app.watches() == [f"watch ADK {await app.key()}"]
    finally:
        await plugin.close()
        await app.close()


@pytest.mark.parametrize("guarded", [True, pytest.param(False, marks=pytest.mark.slow)],
                         ids=["guarded", "adk_alone"])
async def test_a_call_sent_again_after_a_reconnect_is_refused_while_its_stream_runs(
        tmp_path: Path, guarded: bool) -> None:
    """A call re-sent after ADK resumed the connection is refused while it streams (ADK: twice)."""
    app = await _LiveApp(tmp_path).open()
    plugin = app.plugin(replay_wait=2 * LEASE)
    try:
        live_runner = live_stream.runner(app.service, [plugin] if guarded else [], app.effects)
        model = live_stream.model_of(live_runner)
        async with LiveRun(live_runner, app.session_id) as live:
            live.say(live_stream.ASK)
            await live.until(lambda: len(_answers(model)) > 3)  # streaming
            live.say(live_stream.RECONNECT)
            await live.until(lambda: len(model.connections) == 2)
            # ADK resumed the session (a handle): the new connection is sent no history.
            assert "history" not in [sent.kind for sent in model.connections[1].sent]
            if guarded:
                await live.until(lambda: {"error": STILL_RUNNING_ERROR} in _answers(model))
                assert (await app.record()) is not None
                assert run_outcome(await app.record(), time.time()) is None  # still streams
            else:
                await live.until(lambda: len(app.watches()) == 2)
        assert len(app.watches()) == (1 if guarded else 2)
        assert {line.split()[2] for line in app.watches()} == {await app.key()}
        if guarded:
            run = await app.record()
            assert run is not None and (run.state, run.attempt) == (RunState.STARTED, 1)
    finally:
        await plugin.close()
        await app.close()


def _blocking_lookup(app: _LiveApp) -> Any:
    """A plain ``def`` tool that blocks four leases, then reads its own record's lease."""

    def lookup(city: str) -> dict[str, Any]:
        """Looks up a city, slowly."""
        time.sleep(4 * LEASE)  # holds the event loop (or a pool thread) the whole time
        path = app.url.split(":///", 1)[1]
        with closing(sqlite3.connect(path)) as db:
            (lease_until,) = db.execute(
                "SELECT lease_until FROM adk_session_heal_tool_runs WHERE call_id = ?",
                ("lookup-1",)).fetchone()
        return {"city": city, "lease_alive": lease_until > time.time()}

    return lookup


def _lookup_side(sent: LiveSent) -> list[LlmResponse]:
    if sent.text == "look Paris up":
        return [ScriptedLiveModel.call("lookup", {"city": "Paris"}, call_id="lookup-1")]
    return []


@pytest.mark.parametrize("pool", [False, pytest.param(True, marks=pytest.mark.slow)],
                         ids=["on_the_loop", "in_the_pool"])
async def test_a_plain_def_tool_in_live_mode_keeps_its_lease_and_records_its_result(
        tmp_path: Path, pool: bool) -> None:
    """A plain def in live mode, on the loop or in ADK's pool: lease renewed, result recorded."""
    app = await _LiveApp(tmp_path).open()
    plugin = app.plugin()
    try:
        model = ScriptedLiveModel(script=_lookup_side)
        live_runner = _runner(app.service, model, [_blocking_lookup(app)], [plugin])
        config = RunConfig(response_modalities=[types.Modality.TEXT],
                           tool_thread_pool_config=ToolThreadPoolConfig() if pool else None)
        async with LiveRun(live_runner, app.session_id, config) as live:
            live.say("look Paris up")
            await live.until(lambda: any(sent.function_responses for sent in _sent(model)))
        assert app.ledger is not None
        record = (await app.ledger.runs(SessionKey(APP, USER, app.session_id)))["lookup-1"]
        assert (record.state, record.result) == (RunState.FINISHED,
                                                 {"city": "Paris", "lease_alive": True})
    finally:
        await plugin.close()
        await app.close()


def _counting_generator(runs: list[int]) -> Any:
    def ticks(n: int):
        """Counts to n (a plain generator)."""
        runs.append(n)
        yield from range(n)

    return ticks


def _ticks_side(sent: LiveSent) -> list[LlmResponse]:
    if sent.text == "count to three":
        return [ScriptedLiveModel.call("ticks", {"n": 3}, call_id="ticks-1")]
    return []


async def test_a_plain_generator_tool_in_live_mode_runs_when_adk_stores_its_answer(
        tmp_path: Path) -> None:
    """A plain generator in live mode runs when ADK stores its answer: no finish, may_have_run."""
    app = await _LiveApp(tmp_path).open()
    plugin = app.plugin()
    runs: list[int] = []
    try:
        model = ScriptedLiveModel(script=_ticks_side)
        live_runner = _runner(app.service, model, [_counting_generator(runs)], [plugin])
        async with LiveRun(live_runner, app.session_id) as live:
            live.say("count to three")
            await live.until(lambda: any(sent.function_responses for sent in _sent(model)))
        assert runs == [3]
        sent = [response.response for s in _sent(model) for response in s.function_responses]
        assert sent == [{"result": []}]
        stored = await app.service.get_session(app_name=APP, user_id=USER,
                                               session_id=app.session_id)
        assert stored is not None
        assert [r.response for e in stored.events for r in e.get_function_responses()] == [
            {"result": [0, 1, 2]}]
        assert app.ledger is not None
        key = SessionKey(APP, USER, app.session_id)
        async with asyncio.timeout(120):
            while run_outcome((await app.ledger.runs(key))["ticks-1"], time.time()) is None:
                await asyncio.sleep(0.05)
        record = (await app.ledger.runs(key))["ticks-1"]
        assert (record.state, run_outcome(record, time.time())) == (RunState.STARTED,
                                                                    CallOutcome.MAY_HAVE_RUN)
    finally:
        await plugin.close()
        await app.close()


# -- a stream in another process, killed for real -------------------------------------------

MAY_HAVE_RUN = {"error": LEDGER_ERRORS[CallOutcome.MAY_HAVE_RUN], "outcome": "may_have_run",
                "safe_to_retry": False}


@pytest.fixture(params=["sqlite", "postgres"])
async def live_url(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[str]:
    """A fresh session database: a SQLite file, or a PostgreSQL database of its own."""
    if request.param == "sqlite":
        yield f"sqlite+aiosqlite:///{tmp_path / 'live.db'}"
    else:
        async with temporary_database("postgres") as url:
            yield url


class _Streaming:
    """A child process streaming ``live-1`` (``tests/children/live_stream.py``), and this
    process's view of its session.

    Args:
        url: The session database.
        effects: The stream's side-effect file.
    """

    def __init__(self, url: str, effects: Path) -> None:
        self.url = url
        self.effects = effects
        self.effects.touch()
        self.service = DatabaseSessionService(url)
        self._ledger: SqlToolRunLedger | None = None
        self.session_id = ""
        self.child: asyncio.subprocess.Process | None = None

    @property
    def ledger(self) -> SqlToolRunLedger:
        assert self._ledger is not None, "start() opens the ledger"
        return self._ledger

    async def start(self) -> None:
        """Starts the child; returns once its stream's lease was renewed past three leases
        and the session holds ADK's "pending" answer."""
        self.session_id = (await self.service.create_session(app_name=APP, user_id=USER)).id
        await upgrade(self.url)
        self._ledger = SqlToolRunLedger.from_url(self.url)
        self.child = await asyncio.create_subprocess_exec(
            sys.executable, str(CHILDREN / "live_stream.py"), self.url, self.session_id,
            env={**os.environ, "LIVE_EFFECTS": str(self.effects)},
            stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.PIPE)
        async with asyncio.timeout(120):
            while not (await self._renewed_past(3) and await self._answered()):
                assert self.child.returncode is None, "the streaming child ended"
                await asyncio.sleep(0.05)

    async def record(self) -> ToolRun:
        key = SessionKey(APP, USER, self.session_id)
        return (await self.ledger.runs(key))[live_stream.CALL_ID]

    async def _renewed_past(self, leases: float, since: float | None = None) -> bool:
        try:
            run = await self.record()
        except KeyError:
            return False
        base = run.started_at if since is None else since
        return run.lease_until > base + leases * live_stream.LEASE_SECONDS

    async def renewed_after(self, moment: float, leases: float) -> None:
        """Waits until the child renewed its lease ``leases`` leases past ``moment``."""
        async with asyncio.timeout(120):
            while not await self._renewed_past(leases, since=moment):
                await asyncio.sleep(0.05)

    async def _answered(self) -> bool:
        return bool(await self.answers())

    async def answers(self) -> list[dict[str, Any]]:
        """The stored answers of ``live-1``, in order."""
        stored = await self.service.get_session(app_name=APP, user_id=USER,
                                                session_id=self.session_id)
        assert stored is not None
        return [dict(response.response or {}) for event in stored.events
                for response in event.get_function_responses()
                if response.id == live_stream.CALL_ID]

    async def kill(self) -> float:
        """SIGKILLs the child; returns when this process saw it dead (epoch seconds)."""
        assert self.child is not None
        self.child.kill()
        await self.child.wait()
        return time.time()

    async def close(self) -> None:
        if self.child is not None and self.child.returncode is None:
            await self.kill()
        if self._ledger is not None:
            await self._ledger.close()
        await self.service.close()


async def _ask_again(streaming: _Streaming, replay_wait: float,
                     while_waiting: Callable[[float], Awaitable[None]]) -> dict[str, Any]:
    """Another live run of the session, here: the model sends ``live-1`` again. Calls
    ``while_waiting(asked_at)`` once the question went to the model; returns the answer the
    model is sent for the call."""
    plugin = ToolRunLedgerPlugin(streaming.ledger, lease_seconds=live_stream.LEASE_SECONDS,
                                 replay_wait=replay_wait)
    live_runner = live_stream.runner(streaming.service, [plugin], streaming.effects)
    model = live_stream.model_of(live_runner)
    try:
        async with LiveRun(live_runner, streaming.session_id) as live:
            live.say(live_stream.ASK_AGAIN)
            await live.until(lambda: any(sent.text == live_stream.ASK_AGAIN
                                         for sent in _sent(model)))
            await while_waiting(time.time())
            await live.until(lambda: bool(_answers(model)))
        (answer,) = _answers(model)
        return answer
    finally:
        await plugin.close()


async def _one_watch_with_its_key(streaming: _Streaming) -> None:
    """The stream's side effect happened once, under its call's idempotency key."""
    stored = await streaming.service.get_session(app_name=APP, user_id=USER,
                                                 session_id=streaming.session_id)
    assert stored is not None
    invocation = next(event.invocation_id for event in stored.events
                      if any(call.id == live_stream.CALL_ID for call in event.get_function_calls()))
    key = idempotency.idempotency_key(SessionKey(APP, USER, streaming.session_id), invocation,
                                      live_stream.CALL_ID)
    assert streaming.effects.read_text().splitlines() == [f"watch ADK {key}"]
    run = await streaming.record()
    assert (run.state, run.attempt) == (RunState.STARTED, 1)  # one start, never a second


@pytest.mark.slow
async def test_a_stream_outliving_its_leases_is_refused_from_another_process(
        live_url: str, tmp_path: Path) -> None:
    """A stream past 3 leases elsewhere: a re-sent call is refused, nothing healed, one effect."""
    streaming = _Streaming(live_url, tmp_path / "effects")
    try:
        await streaming.start()

        async def renewals_go_on(asked_at: float) -> None:
            await streaming.renewed_after(asked_at, 2)

        answer = await _ask_again(streaming, live_stream.LEASE_SECONDS, renewals_go_on)
        assert answer == {"error": STILL_RUNNING_ERROR}
        assert streaming.child is not None and streaming.child.returncode is None  # streams on
        refused_at = time.time()
        await streaming.renewed_after(refused_at, 1)
        healing = HealingSessionService(streaming.service, tool_runs=streaming.ledger)
        read = await healing.get_session(app_name=APP, user_id=USER,
                                         session_id=streaming.session_id)
        assert read is not None
        assert not any((event.custom_metadata or {}).get(HEAL_METADATA_KEY)
                       for event in read.events)
        assert await streaming.answers() == [PENDING, {"error": STILL_RUNNING_ERROR}]
        await streaming.kill()
        await _one_watch_with_its_key(streaming)
    finally:
        await streaming.close()


@pytest.mark.slow
async def test_a_stream_killed_while_another_process_waits_is_answered_may_have_run(
        live_url: str, tmp_path: Path) -> None:
    """A re-sent call waits while the stream renews; its runner killed: may_have_run, once."""
    streaming = _Streaming(live_url, tmp_path / "effects")
    died_at: list[float] = []
    try:
        await streaming.start()

        async def kill_after_renewals(asked_at: float) -> None:
            await streaming.renewed_after(asked_at, 2)  # the other process waits meanwhile
            died_at.append(await streaming.kill())

        answer = await _ask_again(streaming, 60, kill_after_renewals)
        assert answer == MAY_HAVE_RUN
        stored = await streaming.service.get_session(app_name=APP, user_id=USER,
                                                     session_id=streaming.session_id)
        assert stored is not None
        answered_at = [event.timestamp for event in stored.events
                       if any(response.response == MAY_HAVE_RUN
                              for response in event.get_function_responses())]
        assert len(answered_at) == 1 and answered_at[0] > died_at[0]
        await _one_watch_with_its_key(streaming)
    finally:
        await streaming.close()
