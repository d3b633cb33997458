"""ToolRunLedgerPlugin on a real Runner, recording into every SQL store layout."""

from __future__ import annotations

import asyncio
import os
import sqlite3
import threading
import time
import warnings
from contextlib import closing
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from google.adk.agents import LlmAgent
from google.adk.runners import Runner
from google.adk.tools.tool_context import ToolContext
from google.genai import types
from sqlalchemy.ext.asyncio import create_async_engine
from stores import (  # noqa: F401
    APP,
    USER,
    Store,
    adk_store_fixture,
    close,
    tool_run_ledger_fixture,
)
from tool_run_kill import TOOL_KINDS, run_until_killed, watch_then_kill

from adk_session_heal.core.session_key import SessionKey
from adk_session_heal.core.tool_runs import RunState, ToolRun, run_outcome
from adk_session_heal.policy import CallOutcome
from adk_session_heal.runtime import tool_leases
from adk_session_heal.runtime.tool_run_plugin import (
    NOT_RECORDED_ERROR,
    STILL_RUNNING_ERROR,
    ToolRunLedgerPlugin,
)
from adk_session_heal.store.ledger.tool_run_sql import TOOL_RUNS_TABLE, SqlToolRunLedger
from adk_session_heal.testing import ScriptedModel


async def _run(store: Store, tool: Any, plugin: ToolRunLedgerPlugin,
               args: dict[str, Any]) -> tuple[str, list[types.Content]]:
    """Runs one turn calling ``tool``; returns the session id and the model's requests."""
    service = store.service()
    try:
        session = await service.create_session(app_name=APP, user_id=USER)
        model = ScriptedModel(script=[ScriptedModel.call(tool.__name__, args),
                                      ScriptedModel.say("done")])
        runner = Runner(app_name=APP, agent=LlmAgent(name="worker", model=model, tools=[tool]),
                        session_service=service, plugins=[plugin])
        message = types.Content(role="user", parts=[types.Part(text="go")])
        async for _ in runner.run_async(user_id=USER, session_id=session.id,
                                        new_message=message):
            pass
        return session.id, list(model.requests[-1].contents)
    finally:
        await close(service)


async def _captured_context(store: Store, ledger: SqlToolRunLedger, call_id: str) -> ToolContext:
    """A real ToolContext from one Runner call, given the function-call id ``call_id``."""
    contexts: list[ToolContext] = []

    async def lookup(q: str, tool_context: ToolContext) -> dict[str, str]:
        """Looks something up."""
        contexts.append(tool_context)
        return {"q": q}

    await _run(store, lookup, ToolRunLedgerPlugin(ledger), {"q": "x"})
    (context,) = contexts
    context.function_call_id = call_id
    return context


def _only(runs: dict[str, ToolRun]) -> ToolRun:
    assert len(runs) == 1
    return next(iter(runs.values()))


async def test_start_is_committed_before_the_tool_runs_and_the_result_after(
        adk_store: Store, tool_run_ledger: SqlToolRunLedger) -> None:
    """In the tool its record is started with a live lease; after, finished, result redacted."""
    seen: list[ToolRun] = []

    async def charge_card(amount: int) -> dict[str, Any]:
        """Charges a card."""
        runs = await tool_run_ledger.runs(key)  # its own connection: committed rows only
        seen.append(_only(runs))
        return {"status": "charged", "amount": amount, "api_token": "tok-123"}

    service = adk_store.service()
    session = await service.create_session(app_name=APP, user_id=USER)
    await close(service)
    key = SessionKey(APP, USER, session.id)
    model = ScriptedModel(script=[ScriptedModel.call("charge_card", {"amount": 5}),
                                  ScriptedModel.say("done")])
    service = adk_store.service()
    runner = Runner(app_name=APP, agent=LlmAgent(name="worker", model=model, tools=[charge_card]),
                    session_service=service, plugins=[ToolRunLedgerPlugin(tool_run_ledger)])
    async for _ in runner.run_async(user_id=USER, session_id=session.id,
                                    new_message=types.Content(role="user",
                                                              parts=[types.Part(text="go")])):
        pass
    stored = await service.get_session(app_name=APP, user_id=USER, session_id=session.id)
    await close(service)
    assert stored is not None
    call_ids = [e.get_function_calls()[0].id for e in stored.events if e.get_function_calls()]
    (during,) = seen
    assert during.state is RunState.STARTED and during.call_id == call_ids[0]
    assert during.lease_alive(time.time()) and during.attempt == 1
    assert during.tool_name == "charge_card" and during.pid == os.getpid()
    after = _only(await tool_run_ledger.runs(key))
    assert after.state is RunState.FINISHED and after.finished_at is not None
    assert after.result == {"status": "charged", "amount": 5, "api_token": "***"}
    assert not after.result_truncated
    assert run_outcome(after, time.time()) is CallOutcome.FINISHED_RESULT_LOST


async def test_heartbeat_keeps_a_long_tool_alive(adk_store: Store,
                                                 tool_run_ledger: SqlToolRunLedger) -> None:
    """A tool running for several leases keeps its lease alive: it is never judged dead."""
    leases: list[tuple[float, float]] = []

    async def slow_report(job: str) -> dict[str, str]:
        """Runs for longer than its lease."""
        for _ in range(4):
            await asyncio.sleep(0.4)
            runs = await tool_run_ledger.runs(SessionKey(APP, USER, session_id_box[0]))
            run = _only(runs)
            leases.append((time.time(), run.lease_until))
            assert run_outcome(run, time.time()) is None  # still running: never healed
        return {"job": job}

    session_id_box: list[str] = []
    service = adk_store.service()
    session = await service.create_session(app_name=APP, user_id=USER)
    await close(service)
    session_id_box.append(session.id)
    model = ScriptedModel(script=[ScriptedModel.call("slow_report", {"job": "q3"}),
                                  ScriptedModel.say("done")])
    service = adk_store.service()
    plugin = ToolRunLedgerPlugin(tool_run_ledger, lease_seconds=0.6)
    runner = Runner(app_name=APP, agent=LlmAgent(name="worker", model=model, tools=[slow_report]),
                    session_service=service, plugins=[plugin])
    async for _ in runner.run_async(user_id=USER, session_id=session.id,
                                    new_message=types.Content(role="user",
                                                              parts=[types.Part(text="go")])):
        pass
    await close(service)
    assert len(leases) == 4
    assert all(now < until for now, until in leases)  # 1.6 s of work on a 0.6 s lease
    assert leases[-1][1] > leases[0][1]  # the heartbeat moved it
    final = _only(await tool_run_ledger.runs(SessionKey(APP, USER, session.id)))
    assert final.state is RunState.FINISHED


async def test_a_failing_tool_is_recorded_failed_with_its_type_only(
        adk_store: Store, tool_run_ledger: SqlToolRunLedger) -> None:
    """A tool that raises leaves `failed` and the exception's type, never its text."""

    async def deploy(service_name: str) -> dict[str, str]:
        """Deploys a service."""
        raise RuntimeError("password=hunter2 rejected")

    service = adk_store.service()
    session = await service.create_session(app_name=APP, user_id=USER)
    model = ScriptedModel(script=[ScriptedModel.call("deploy", {"service_name": "web"}),
                                  ScriptedModel.say("done")])
    runner = Runner(app_name=APP, agent=LlmAgent(name="worker", model=model, tools=[deploy]),
                    session_service=service, plugins=[ToolRunLedgerPlugin(tool_run_ledger)])
    with pytest.raises(RuntimeError):
        async for _ in runner.run_async(user_id=USER, session_id=session.id,
                                        new_message=types.Content(role="user",
                                                                  parts=[types.Part(text="go")])):
            pass
    await close(service)
    run = _only(await tool_run_ledger.runs(SessionKey(APP, USER, session.id)))
    assert run.state is RunState.FAILED and run.result == {"error_type": "RuntimeError"}
    assert run_outcome(run, time.time()) is CallOutcome.MAY_HAVE_RUN


async def test_a_large_result_is_not_kept_in_part(adk_store: Store,
                                                  tool_run_ledger: SqlToolRunLedger) -> None:
    """A result over max_result_bytes is marked truncated and not stored at all."""

    async def export(rows: int) -> dict[str, Any]:
        """Exports rows."""
        return {"rows": ["x" * 100] * rows}

    plugin = ToolRunLedgerPlugin(tool_run_ledger, max_result_bytes=1000)
    await _run(adk_store, export, plugin, {"rows": 50})
    service = adk_store.service()
    listed = await service.list_sessions(app_name=APP, user_id=USER)
    await close(service)
    run = _only(await tool_run_ledger.runs(SessionKey(APP, USER, listed.sessions[0].id)))
    assert run.state is RunState.FINISHED and run.result is None and run.result_truncated


async def test_without_the_table_the_tool_does_not_run(adk_store: Store) -> None:
    """No tool-run table: the tool is not run and the model is told so (never a silent run)."""
    ran: list[bool] = []

    async def charge_card(amount: int) -> dict[str, str]:
        """Charges a card."""
        ran.append(True)
        return {"status": "charged"}

    service = adk_store.service()
    await service.list_sessions(app_name=APP, user_id=USER)  # ADK's tables, not ours
    await close(service)
    ledger = SqlToolRunLedger.from_url(adk_store.url)
    try:
        _, contents = await _run(adk_store, charge_card, ToolRunLedgerPlugin(ledger),
                                 {"amount": 5})
    finally:
        await ledger.close()
    assert ran == []
    responses = [p.function_response.response for c in contents for p in c.parts or ()
                 if p.function_response is not None]
    assert responses == [{"error": NOT_RECORDED_ERROR}]


@pytest.mark.slow
@pytest.mark.parametrize("kill_at", ["before_start", "during_tool", "after_finish"])
async def test_a_killed_runner_leaves_a_record_that_tells_what_happened(
        adk_store: Store, tool_run_ledger: SqlToolRunLedger, kill_at: str, tmp_path: Path) -> None:
    """SIGKILL before the tool starts: not_started once the lease runs out; mid-tool:
    may_have_run once it runs out; after the finish record: finished."""
    service = adk_store.service()
    session = await service.create_session(app_name=APP, user_id=USER)
    await close(service)
    await run_until_killed(adk_store.url, session.id, kill_at, tmp_path)
    run = _only(await tool_run_ledger.runs(SessionKey(APP, USER, session.id)))
    if kill_at == "before_start":
        assert run.state is RunState.ANNOUNCED and run.attempt == 0
        assert run_outcome(run, run.lease_until - 0.01) is None  # about to run
        assert run_outcome(run, run.lease_until + 0.01) is CallOutcome.NOT_STARTED
    elif kill_at == "during_tool":
        assert run.state is RunState.STARTED and run.attempt == 1
        assert run_outcome(run, run.lease_until - 0.01) is None  # lease alive: running
        assert run_outcome(run, run.lease_until + 0.01) is CallOutcome.MAY_HAVE_RUN
        assert run_outcome(run, run.lease_until + 0.01, clock_skew=1.0) is None
    else:
        assert run.state is RunState.FINISHED and run.result == {"status": "charged"}
        assert run_outcome(run, time.time()) is CallOutcome.FINISHED_RESULT_LOST


async def test_a_cancelled_tool_stops_its_heartbeat(adk_store: Store,
                                                    tool_run_ledger: SqlToolRunLedger) -> None:
    """An invocation cancelled mid-tool leaves a run that may have run, its lease not renewed."""
    started = asyncio.Event()

    async def slow_report(job: str) -> dict[str, str]:
        """Runs until cancelled."""
        started.set()
        await asyncio.sleep(3600)
        return {"job": job}

    service = adk_store.service()
    session = await service.create_session(app_name=APP, user_id=USER)
    model = ScriptedModel(script=[ScriptedModel.call("slow_report", {"job": "q3"}),
                                  ScriptedModel.say("done")])
    plugin = ToolRunLedgerPlugin(tool_run_ledger, lease_seconds=0.3)
    runner = Runner(app_name=APP, agent=LlmAgent(name="worker", model=model, tools=[slow_report]),
                    session_service=service, plugins=[plugin])

    async def turn() -> None:
        async for _ in runner.run_async(user_id=USER, session_id=session.id,
                                        new_message=types.Content(role="user",
                                                                  parts=[types.Part(text="go")])):
            pass

    task = asyncio.create_task(turn())
    await asyncio.wait_for(started.wait(), 30)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    cancelled_at = time.time()
    await asyncio.sleep(1.0)  # three lease periods: a live heartbeat would have renewed it
    run = _only(await tool_run_ledger.runs(SessionKey(APP, USER, session.id)))
    await close(service)
    # ADK 2.13 reports the cancellation to on_tool_error_callback (failed); where no callback
    # runs, the heartbeat stops with the tool's task and the started lease runs out.
    assert run.state in (RunState.STARTED, RunState.FAILED)
    assert run.lease_until < cancelled_at + 0.3
    assert run_outcome(run, time.time()) is CallOutcome.MAY_HAVE_RUN
    assert plugin._leases.held() == []


async def test_the_heartbeat_stops_when_the_tool_s_task_ends_without_a_callback(
        adk_store: Store, tool_run_ledger: SqlToolRunLedger) -> None:
    """A task that started a run and ended with no after/error callback stops renewing it."""
    context = await _captured_context(adk_store, tool_run_ledger, "orphaned-start")
    plugin = ToolRunLedgerPlugin(tool_run_ledger, lease_seconds=0.3)
    tool: Any = type("Tool", (), {"name": "lookup"})()

    async def start_only() -> None:
        assert await plugin.before_tool_callback(tool=tool, tool_args={},
                                                 tool_context=context) is None

    await asyncio.create_task(start_only())
    assert len(plugin._leases.held()) == 1
    ended_at = time.time()
    await asyncio.sleep(1.0)
    assert plugin._leases.held() == []
    runs = await tool_run_ledger.runs(SessionKey(APP, USER, context.session.id))
    assert runs["orphaned-start"].lease_until < ended_at + 0.3 + 0.1


@pytest.mark.slow
async def test_a_plain_def_tool_holds_its_lease_until_its_process_is_killed(
        adk_store: Store, tool_run_ledger: SqlToolRunLedger, tmp_path: Path) -> None:
    """A plain `def` tool blocking the runner's event loop for 3 leases is never healed by
    another process's wrapper (clock_skew=0); SIGKILLed, its lease runs out: may_have_run."""
    service = adk_store.service()
    session = await service.create_session(app_name=APP, user_id=USER)
    await close(service)
    await watch_then_kill(adk_store.url, session.id, "during_sync_tool", tmp_path,
                          adk_store.service, tool_run_ledger, close)


OTHER_KINDS = [("db_sqlite", at) for at in TOOL_KINDS if at != "during_sync_tool"] + [
    ("postgres", "during_pool_tool"), ("postgres", "during_tool")]
"""Every other kind of tool on SQLite; ADK's thread pool and an async tool on PostgreSQL too."""


@pytest.mark.slow
@pytest.mark.parametrize(("adk_store", "at"), OTHER_KINDS, indirect=["adk_store"])
async def test_every_kind_of_tool_holds_its_lease_until_its_process_is_killed(
        adk_store: Store, tool_run_ledger: SqlToolRunLedger, at: str, tmp_path: Path) -> None:
    """In ADK's thread pool, spinning on the CPU, async, long-running, an AgentTool or a
    generator: a running tool's call is never healed; once its process is killed, it is."""
    service = adk_store.service()
    session = await service.create_session(app_name=APP, user_id=USER)
    await close(service)
    await watch_then_kill(adk_store.url, session.id, at, tmp_path, adk_store.service,
                          tool_run_ledger, close)


SQLITE_ONLY = pytest.mark.parametrize("adk_store", ["db_sqlite"], indirect=True)
"""A test of the plugin's own machinery: one store is enough."""


@SQLITE_ONLY
async def test_a_ledger_no_other_connection_sees_does_not_run_the_tool(adk_store: Store) -> None:
    """An in-memory SQLite ledger cannot be renewed from the heartbeat's thread: the tool is
    not run and the model is told so; a ledger without open_copy is refused up front."""
    ran: list[bool] = []

    async def charge_card(amount: int) -> dict[str, str]:
        """Charges a card."""
        ran.append(True)
        return {"status": "charged"}

    memory = SqlToolRunLedger(create_async_engine("sqlite+aiosqlite://"), owns_engine=True)
    try:
        async with memory.engine.begin() as conn:  # its table: a start could be recorded
            await conn.run_sync(TOOL_RUNS_TABLE.create)
        session_id, contents = await _run(adk_store, charge_card, ToolRunLedgerPlugin(memory),
                                          {"amount": 5})
        run = _only(await memory.runs(SessionKey(APP, USER, session_id)))
        assert run.state is RunState.ANNOUNCED  # no start recorded: nothing says it ran
    finally:
        await memory.close()
    assert ran == []
    responses = [p.function_response.response for c in contents for p in c.parts or ()
                 if p.function_response is not None]
    assert responses == [{"error": NOT_RECORDED_ERROR}]

    class WithoutCopy:
        async def start(self, run: ToolRun) -> int:
            return 1

    with pytest.raises(TypeError, match="open_copy"):
        ToolRunLedgerPlugin(WithoutCopy())  # type: ignore[arg-type]


@SQLITE_ONLY
async def test_the_heartbeat_thread_ends_when_idle_or_closed_and_comes_back_with_a_tool(
        adk_store: Store, tool_run_ledger: SqlToolRunLedger,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The thread starts with the first tool, ends after the idle time with no tool, starts
    again with the next tool, and ends on close() (ADK's Runner.close calls it)."""
    monkeypatch.setattr(tool_leases, "_IDLE_SECONDS", 0.3)
    threads: list[threading.Thread | None] = []
    plugin = ToolRunLedgerPlugin(tool_run_ledger, lease_seconds=0.3)

    async def lookup(q: str) -> dict[str, str]:
        """Looks something up."""
        threads.append(plugin._leases._thread)
        return {"q": q}

    await _run(adk_store, lookup, plugin, {"q": "x"})
    first = threads[0]
    assert first is not None and first.is_alive()
    await asyncio.to_thread(first.join, 30)
    assert not first.is_alive() and plugin._leases._thread is None  # idle: it ended
    await _run(adk_store, lookup, plugin, {"q": "y"})
    second = threads[1]
    assert second is not None and second is not first and second.is_alive()
    await plugin.close()
    assert not second.is_alive() and plugin._leases._thread is None


@SQLITE_ONLY
async def test_a_heartbeat_that_fails_keeps_renewing(
        adk_store: Store, tool_run_ledger: SqlToolRunLedger,
        caplog: pytest.LogCaptureFixture) -> None:
    """A renewal that raises (here the clock, once, in the heartbeat's thread) is logged with
    its traceback; the thread goes on and the lease stays alive."""
    failed: list[bool] = []

    def clock() -> float:
        if threading.current_thread().name == "adk_session_heal_tool_leases" and not failed:
            failed.append(True)
            raise OSError("clock unavailable")
        return time.time()

    alive: list[bool] = []

    async def slow_report(job: str, tool_context: ToolContext) -> dict[str, str]:
        """Runs for several leases."""
        await asyncio.sleep(1.5)
        key = SessionKey(APP, USER, tool_context.session.id)
        run = (await tool_run_ledger.runs(key))[str(tool_context.function_call_id)]
        alive.append(run_outcome(run, time.time()) is None)
        return {"job": job}

    await _run(adk_store, slow_report, ToolRunLedgerPlugin(tool_run_ledger, lease_seconds=0.3,
                                                           clock=clock), {"job": "q3"})
    assert failed == [True] and alive == [True]
    (record,) = [r for r in caplog.records if "could not renew tool leases" in r.getMessage()]
    assert record.exc_info is not None and isinstance(record.exc_info[1], OSError)


@SQLITE_ONLY
async def test_a_forked_child_renews_its_own_leases_not_its_parents(
        adk_store: Store, tool_run_ledger: SqlToolRunLedger, tmp_path: Path) -> None:
    """Forked while a lease is held, a child has no heartbeat thread and no lease of its
    parent's; the leases it takes are renewed by a thread of its own, the parent's by the
    parent's."""
    plugin = ToolRunLedgerPlugin(tool_run_ledger, lease_seconds=0.3)
    keeper = plugin._leases
    now = time.time()
    runs = {name: replace(run, attempt=await tool_run_ledger.start(run)) for name, run in (
        (name, ToolRun(APP, USER, "s-fork", name, "charge_card", "inv", RunState.STARTED, "h",
                       os.getpid(), 0, now, now + 0.3)) for name in ("parent", "child"))}
    keeper.reserve()
    keeper.hold((SessionKey(APP, USER, "s-fork"), "parent"), runs["parent"], None)
    database = adk_store.sqlite_path
    report = tmp_path / "child.txt"

    def lease(call_id: str) -> float:
        with closing(sqlite3.connect(str(database))) as conn:
            row = conn.execute("SELECT lease_until FROM adk_session_heal_tool_runs "
                               "WHERE call_id = ?", (call_id,)).fetchone()
        return float(row[0])

    def in_child() -> str:
        if keeper._thread is not None or keeper.held():
            return "the parent's thread or leases were inherited"
        keeper.reserve()
        keeper.hold((SessionKey(APP, USER, "s-fork"), "child"), runs["child"], None)
        deadline = time.monotonic() + 30
        while lease("child") <= runs["child"].lease_until:
            if time.monotonic() > deadline:
                return "the child's lease was never renewed"
            time.sleep(0.05)
        return "ok"

    def fork() -> int:
        with warnings.catch_warnings():  # Python 3.12+ warns about forking with threads
            warnings.simplefilter("ignore", DeprecationWarning)
            pid = os.fork()
        if pid == 0:  # the child: report, and leave without running the parent's cleanup
            try:
                report.write_text(in_child())
            finally:
                os._exit(0)
        return os.waitpid(pid, 0)[1]

    assert await asyncio.to_thread(fork) == 0
    assert report.read_text() == "ok"
    renewed = lease("parent")
    assert renewed > runs["parent"].lease_until  # the parent's thread still renews its own
    await plugin.close()


async def _first_run(plugin: ToolRunLedgerPlugin, tool: Any, context: ToolContext
                     ) -> tuple[asyncio.Task[None], asyncio.Event]:
    """Starts a run of the call through the plugin's callbacks; returns once it started.

    Returns:
        The run's task, and the event that ends it (its result is ``{"by": "first"}``).
    """
    started, ends = asyncio.Event(), asyncio.Event()

    async def first() -> None:
        assert await plugin.before_tool_callback(tool=tool, tool_args={},
                                                 tool_context=context) is None
        started.set()
        await ends.wait()
        await plugin.after_tool_callback(tool=tool, tool_args={}, tool_context=context,
                                         result={"by": "first"})

    running = asyncio.create_task(first())
    await asyncio.wait_for(started.wait(), 30)
    return running, ends


@SQLITE_ONLY
async def test_a_second_run_of_one_call_id_waits_for_the_first_and_gets_its_result(
        adk_store: Store, tool_run_ledger: SqlToolRunLedger) -> None:
    """One call id run twice at once (a replay while the first run lives): the second waits
    while the first holds its lease (renewed past three leases), then is answered with the
    first's recorded result; the tool's start is recorded once."""
    context = await _captured_context(adk_store, tool_run_ledger, "twice")
    key = SessionKey(APP, USER, context.session.id)
    plugin = ToolRunLedgerPlugin(tool_run_ledger, lease_seconds=0.3, replay_wait=30)
    tool: Any = type("Tool", (), {"name": "lookup"})()
    running, first_ends = await _first_run(plugin, tool, context)
    second = asyncio.create_task(plugin.before_tool_callback(tool=tool, tool_args={},
                                                             tool_context=context))
    await asyncio.sleep(1.0)  # three leases: only the first's heartbeat keeps it alive
    assert not second.done()
    run_now = (await tool_run_ledger.runs(key))["twice"]
    assert run_now.state is RunState.STARTED and run_outcome(run_now, time.time()) is None
    first_ends.set()
    await running
    assert await asyncio.wait_for(second, 30) == {"by": "first"}
    final = (await tool_run_ledger.runs(key))["twice"]
    assert final.state is RunState.FINISHED and final.result == {"by": "first"}
    assert final.attempt == run_now.attempt  # the second never recorded a start
    await plugin.close()


@SQLITE_ONLY
async def test_a_refused_second_run_leaves_the_first_runs_lease_and_record_alone(
        adk_store: Store, tool_run_ledger: SqlToolRunLedger) -> None:
    """A refused second run's after-tool callback ends nothing: the first's lease and end stand."""
    context = await _captured_context(adk_store, tool_run_ledger, "refused")
    key = SessionKey(APP, USER, context.session.id)
    plugin = ToolRunLedgerPlugin(tool_run_ledger, lease_seconds=0.3, replay_wait=0.3)
    tool: Any = type("Tool", (), {"name": "lookup"})()
    async def second() -> dict[str, Any] | None:
        answer = await plugin.before_tool_callback(tool=tool, tool_args={},
                                                   tool_context=context)
        assert answer is not None
        await plugin.after_tool_callback(tool=tool, tool_args={}, tool_context=context,
                                         result=answer)
        return answer

    running, first_ends = await _first_run(plugin, tool, context)
    assert await asyncio.wait_for(second(), 30) == {"error": STILL_RUNNING_ERROR}
    assert len(plugin._leases.held()) == 1  # the first's lease, still renewed
    refused_at = time.time()
    async with asyncio.timeout(30):
        while (await tool_run_ledger.runs(key))["refused"].lease_until < refused_at + 0.2:
            await asyncio.sleep(0.05)  # renewed after the refusal
    assert (await tool_run_ledger.runs(key))["refused"].state is RunState.STARTED
    first_ends.set()
    await running
    final = (await tool_run_ledger.runs(key))["refused"]
    assert (final.state, final.result) == (RunState.FINISHED, {"by": "first"})
    await plugin.close()


@SQLITE_ONLY
async def test_a_call_id_the_model_sends_again_is_answered_not_run_again(
        adk_store: Store, tool_run_ledger: SqlToolRunLedger) -> None:
    """A call id the model repeats in a later turn is answered with its recorded result, once."""
    runs: list[str] = []

    async def lookup(q: str) -> dict[str, str]:
        """Looks something up."""
        runs.append(q)
        return {"found": q}

    service = adk_store.service()
    try:
        session = await service.create_session(app_name=APP, user_id=USER)
        model = ScriptedModel(script=[ScriptedModel.call("lookup", {"q": "x"}, "same-id"),
                                      ScriptedModel.say("found"),
                                      ScriptedModel.call("lookup", {"q": "x"}, "same-id"),
                                      ScriptedModel.say("found again")])
        plugin = ToolRunLedgerPlugin(tool_run_ledger)
        runner = Runner(app_name=APP, agent=LlmAgent(name="worker", model=model, tools=[lookup]),
                        session_service=service, plugins=[plugin])
        for text in ("look x up", "and again"):
            message = types.Content(role="user", parts=[types.Part(text=text)])
            async for _ in runner.run_async(user_id=USER, session_id=session.id,
                                            new_message=message):
                pass
        stored = await service.get_session(app_name=APP, user_id=USER, session_id=session.id)
        assert stored is not None
        answers = [r.response for e in stored.events for r in e.get_function_responses()]
        assert runs == ["x"] and answers == [{"found": "x"}, {"found": "x"}]
        record = (await tool_run_ledger.runs(SessionKey(APP, USER, session.id)))["same-id"]
        assert (record.state, record.attempt) == (RunState.FINISHED, 1)
        await plugin.close()
    finally:
        await close(service)


class _CountingReads(SqlToolRunLedger):
    """The real SQL ledger, counting the reads of run records."""

    reads = 0

    async def runs(self, key: SessionKey, call_ids: Any = None) -> dict[str, ToolRun]:
        """Counts, then reads."""
        type(self).reads += 1
        return await super().runs(key, call_ids)


@SQLITE_ONLY
async def test_a_first_run_costs_no_read_and_a_replay_costs_one(
        adk_store: Store, tool_run_ledger: SqlToolRunLedger) -> None:
    """A call this process announced starts without reading the ledger; a run of a call it did
    not announce (ADK's replay) reads its record once, then runs it."""
    assert adk_store.url is not None
    ledger = _CountingReads.from_url(adk_store.url)
    try:
        context = await _captured_context(adk_store, ledger, "replayed-elsewhere")
        assert _CountingReads.reads == 0
        plugin = ToolRunLedgerPlugin(ledger)
        tool: Any = type("Tool", (), {"name": "lookup"})()
        assert await plugin.before_tool_callback(tool=tool, tool_args={},
                                                 tool_context=context) is None
        assert _CountingReads.reads == 1
        await plugin.after_tool_callback(tool=tool, tool_args={}, tool_context=context,
                                         result={"q": "x"})
        await plugin.close()
    finally:
        await ledger.close()


@SQLITE_ONLY
async def test_a_run_of_a_call_another_process_still_runs_is_refused_after_the_wait(
        adk_store: Store, tool_run_ledger: SqlToolRunLedger) -> None:
    """Another process holds the call's lease past replay_wait: the tool is not run; the
    model is told it still runs elsewhere, and the other process's record is untouched."""
    context = await _captured_context(adk_store, tool_run_ledger, "elsewhere")
    now = time.time()
    other = ToolRun(app_name=APP, user_id=USER, session_id=context.session.id,
                    call_id="elsewhere", tool_name="lookup", invocation_id="e-other",
                    state=RunState.STARTED, host="other-host", pid=4242, attempt=0,
                    started_at=now, lease_until=now + 600)
    attempt = await tool_run_ledger.start(other)
    plugin = ToolRunLedgerPlugin(tool_run_ledger, lease_seconds=0.3, replay_wait=0.5)
    tool: Any = type("Tool", (), {"name": "lookup"})()
    started = time.monotonic()
    answer = await plugin.before_tool_callback(tool=tool, tool_args={}, tool_context=context)
    assert answer == {"error": STILL_RUNNING_ERROR}
    assert time.monotonic() - started >= 0.5
    run = (await tool_run_ledger.runs(SessionKey(APP, USER, context.session.id)))["elsewhere"]
    assert (run.host, run.pid, run.attempt, run.state) == ("other-host", 4242, attempt,
                                                          RunState.STARTED)
    await plugin.close()


@SQLITE_ONLY
async def test_closing_the_plugin_while_a_tool_runs_keeps_its_lease(
        adk_store: Store, tool_run_ledger: SqlToolRunLedger) -> None:
    """close() while a tool runs (a runner shut down, or ADK 1.x's AgentTool closing its
    parent's plugins): the running tool's lease is still renewed and its end recorded; the
    heartbeat's thread ends once it has ended."""
    plugin = ToolRunLedgerPlugin(tool_run_ledger, lease_seconds=0.3)
    seen: list[ToolRun] = []

    async def slow_report(job: str, tool_context: ToolContext) -> dict[str, str]:
        """Runs for several leases; the plugin is closed meanwhile."""
        await plugin.close()
        await asyncio.sleep(1.0)
        key = SessionKey(APP, USER, tool_context.session.id)
        seen.append((await tool_run_ledger.runs(key))[str(tool_context.function_call_id)])
        return {"job": job}

    session_id, _ = await _run(adk_store, slow_report, plugin, {"job": "q3"})
    (during,) = seen
    assert during.state is RunState.STARTED
    assert run_outcome(during, time.time()) is None  # still renewed after close()
    final = _only(await tool_run_ledger.runs(SessionKey(APP, USER, session_id)))
    assert final.state is RunState.FINISHED and final.result == {"job": "q3"}
    thread = plugin._leases._thread
    if thread is not None:  # ends within a beat of the tool's end
        await asyncio.to_thread(thread.join, 30)
        assert not thread.is_alive()
    assert plugin._leases._thread is None


@SQLITE_ONLY
async def test_a_result_that_is_not_a_dict_is_recorded_as_adk_sends_it(
        adk_store: Store, tool_run_ledger: SqlToolRunLedger) -> None:
    """ADK 1.x hands the after-tool callback an AgentTool's text as it is (and sends the model
    {"result": text}): the record holds {"result": text}, which a heal can answer with."""
    context = await _captured_context(adk_store, tool_run_ledger, "text-result")
    plugin = ToolRunLedgerPlugin(tool_run_ledger)
    tool: Any = type("Tool", (), {"name": "helper"})()
    assert await plugin.before_tool_callback(tool=tool, tool_args={}, tool_context=context) is None
    assert await plugin.after_tool_callback(tool=tool, tool_args={}, tool_context=context,
                                            result="helped") is None  # type: ignore[arg-type]
    run = (await tool_run_ledger.runs(SessionKey(APP, USER, context.session.id)))["text-result"]
    assert run.state is RunState.FINISHED and run.result == {"result": "helped"}
    await plugin.close()
