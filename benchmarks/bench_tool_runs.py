"""Benchmark: what ToolRunLedgerPlugin adds to each tool call (not a test).

A real ``Runner`` runs one tool call to capture a real ``ToolContext``; then,
per sample, a fresh function-call id goes through exactly what the runner does
around a tool with the plugin installed: ``on_event_callback`` on the model's
call event (commit the ``announced`` record), ``before_tool_callback`` (commit
the ``started`` record, start the heartbeat), the tool (a no-op), then
``after_tool_callback`` (commit ``finished`` with the result). The baseline, in
the same run and alternating with it, is the same no-op tool call with no
plugin. A third run per sample is a *replayed* call: one this plugin did not
announce (ADK's resume replaying it), which reads the call's record once
before its start (issue 30, point 6). Reported: median and p99 of the added
time per call, and the replayed call's median, on SQLite
(``DatabaseSessionService``'s file, aiosqlite) and PostgreSQL (asyncpg, local
server). Goal (issue 15): at most 2 ms median on PostgreSQL here.

Run: ``python benchmarks/bench_tool_runs.py`` (``--calls N``; the PostgreSQL
row needs the server of ``tests/support/servers.py``).
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from google.adk.agents import LlmAgent
from google.adk.events.event import Event
from google.adk.runners import Runner
from google.adk.sessions import DatabaseSessionService
from google.adk.tools.tool_context import ToolContext
from google.genai import types

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "support"))

from servers import temporary_database  # noqa: E402

from adk_session_heal import ToolRunLedgerPlugin, migrate  # noqa: E402
from adk_session_heal.ledger import SqlToolRunLedger  # noqa: E402
from adk_session_heal.testing import ScriptedModel  # noqa: E402


async def _captured_context(url: str) -> tuple[ToolContext, Any]:
    """Runs one real tool call and returns the ToolContext and tool ADK gave it."""
    captured: list[ToolContext] = []

    async def lookup(q: str, tool_context: ToolContext) -> dict[str, str]:
        """Looks something up."""
        captured.append(tool_context)
        return {"q": q}

    service = DatabaseSessionService(url)
    session = await service.create_session(app_name="bench", user_id="u")
    model = ScriptedModel(script=[ScriptedModel.call("lookup", {"q": "x"}),
                                  ScriptedModel.say("done")])
    agent = LlmAgent(name="bench", model=model, tools=[lookup])
    runner = Runner(app_name="bench", agent=agent, session_service=service)
    async for _ in runner.run_async(user_id="u", session_id=session.id,
                                    new_message=types.Content(role="user",
                                                              parts=[types.Part(text="go")])):
        pass
    await service.close()
    return captured[0], agent.tools[0]


async def measure(url: str, calls: int) -> tuple[float, float, float, float, float]:
    """Returns (baseline median, added median, added p99, baseline p99, replayed median), ms."""
    service = DatabaseSessionService(url)
    await service.list_sessions(app_name="bench", user_id="u")
    await service.close()
    await migrate.upgrade(url)
    context, _ = await _captured_context(url)
    ledger = SqlToolRunLedger.from_url(url)
    plugin = ToolRunLedgerPlugin(ledger)

    class _Tool:
        name = "lookup"

    tool: Any = _Tool()

    async def no_op(q: str) -> dict[str, str]:
        return {"q": q}

    baseline: list[float] = []
    added: list[float] = []
    replayed: list[float] = []
    for index in range(calls + 20):
        call_id = f"bench-{index}"
        context.function_call_id = call_id
        event = Event(invocation_id=context.invocation_id, author="bench", content=types.Content(
            role="model", parts=[types.Part(function_call=types.FunctionCall(
                id=call_id, name="lookup", args={"q": "x"}))]))
        start = time.perf_counter()
        result = await no_op("x")
        bare = time.perf_counter() - start
        start = time.perf_counter()
        await plugin.on_event_callback(invocation_context=context._invocation_context,
                                       event=event)
        await plugin.before_tool_callback(tool=tool, tool_args={"q": "x"}, tool_context=context)
        result = await no_op("x")
        await plugin.after_tool_callback(tool=tool, tool_args={"q": "x"}, tool_context=context,
                                         result=result)
        with_plugin = time.perf_counter() - start
        context.function_call_id = f"replayed-{index}"  # not announced here: read, then run
        start = time.perf_counter()
        await plugin.before_tool_callback(tool=tool, tool_args={"q": "x"}, tool_context=context)
        result = await no_op("x")
        await plugin.after_tool_callback(tool=tool, tool_args={"q": "x"}, tool_context=context,
                                         result=result)
        replay = time.perf_counter() - start
        if index >= 20:  # warm-up: connections, statement caches
            baseline.append(bare * 1000)
            added.append((with_plugin - bare) * 1000)
            replayed.append((replay - bare) * 1000)
    await ledger.close()
    cuts = statistics.quantiles(added, n=100)
    base_cuts = statistics.quantiles(baseline, n=100)
    return (statistics.median(baseline), statistics.median(added), cuts[98], base_cuts[98],
            statistics.median(replayed))


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=500)
    calls = parser.parse_args().calls
    print(f"{calls} tool calls per store; added = with the plugin minus the bare tool call")
    print("| store | bare call (median) | added, median | added, p99 | replayed call, median |")
    print("|---|---:|---:|---:|---:|")
    with tempfile.TemporaryDirectory() as folder:
        url = f"sqlite+aiosqlite:///{Path(folder) / 'sessions.db'}"
        base, median, p99, _, replay = await measure(url, calls)
        print(f"| SQLite (aiosqlite) | {base:.4f} ms | {median:.2f} ms | {p99:.2f} ms "
              f"| {replay:.2f} ms |")
    async with temporary_database("postgres") as url:
        base, median, p99, _, replay = await measure(url, calls)
        print(f"| PostgreSQL (asyncpg) | {base:.4f} ms | {median:.2f} ms | {p99:.2f} ms "
              f"| {replay:.2f} ms |")


if __name__ == "__main__":
    asyncio.run(main())
