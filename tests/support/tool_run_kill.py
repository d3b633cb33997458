"""A real Runner with the tool-run ledger, to be killed: ``tool_run_kill.py URL SESSION MARKER AT``.

URL is a SQL store's or a ``redis://`` one (``?key_prefix=``: ADK's Redis sessions).

AT is ``before_start`` (a plugin listed before the ledger's touches MARKER in
its ``before_tool_callback``, once the call event is stored and announced,
then sleeps: the tool never starts), ``during_tool`` (the tool touches MARKER,
then sleeps) or ``after_finish`` (a later plugin's ``after_tool_callback`` touches MARKER once
the ledger recorded the finish, before the response event is stored, then
sleeps). The test SIGKILLs the process once MARKER exists.

The other ``during_*`` points (:data:`TOOL_KINDS`) run ``charge_card`` as
another kind of tool, which touches MARKER and then runs until killed: a plain
``def`` that sleeps on the event loop (``during_sync_tool``), the same in ADK's
tool thread pool (``during_pool_tool``, ``RunConfig.tool_thread_pool_config``),
a plain ``def`` spinning on the CPU, holding the GIL (``during_busy_tool``), a
``LongRunningFunctionTool`` over the sleeping ``def``
(``during_long_running_tool``), an ``AgentTool`` whose agent calls the sleeping
``def`` (``during_agent_tool``: the call the session holds is the agent's), and
a plain generator that sleeps after its first item (``during_stream_tool``: ADK
2.x runs a generator tool as a workflow node). ``during_parallel_tools`` has the
model call ``lookup`` (returns at once) and the async ``charge_card`` in one event:
ADK stores both answers in one event once both end, so ``lookup`` is finished
and unanswered while ``charge_card`` runs. :func:`watch_then_kill` reads the
session through the wrapper while such a tool runs, then kills the runner.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable, Generator
from pathlib import Path
from typing import Any

from google.adk.agents import LlmAgent
from google.adk.agents.run_config import RunConfig, ToolThreadPoolConfig
from google.adk.integrations.redis import RedisSessionService, RedisSessionServiceConfig
from google.adk.models.llm_response import LlmResponse
from google.adk.plugins.base_plugin import BasePlugin
from google.adk.runners import Runner
from google.adk.sessions import BaseSessionService
from google.adk.tools.agent_tool import AgentTool
from google.adk.tools.long_running_tool import LongRunningFunctionTool
from google.genai import types
from stores import APP, USER, Store

from adk_session_heal import HealingSessionService, HealPolicy
from adk_session_heal.core.event_access import HEAL_METADATA_KEY
from adk_session_heal.core.session_key import SessionKey
from adk_session_heal.core.tool_runs import RunState, ToolRun, ToolRunReader, run_outcome
from adk_session_heal.policy import LEDGER_ERRORS, CallOutcome
from adk_session_heal.runtime.tool_run_plugin import ToolRunLedgerPlugin
from adk_session_heal.store.ledger.tool_run_redis import RedisToolRunLedger
from adk_session_heal.store.ledger.tool_run_sql import SqlToolRunLedger
from adk_session_heal.store.urls import parse_store_url
from adk_session_heal.testing import ScriptedModel

TOOL_KINDS = ("during_tool", "during_sync_tool", "during_pool_tool", "during_busy_tool",
              "during_long_running_tool", "during_agent_tool", "during_stream_tool",
              "during_parallel_tools")
"""Kill points inside a running tool, one per kind of tool (``during_tool``: an async one)."""

LEASE_SECONDS = 2.0
"""The ledger plugin's lease in the runner."""


class _Stop(BasePlugin):
    """Touches the marker at its kill point, then hangs until killed.

    ``before_start``: in ``before_tool_callback``, listed before the ledger's
    plugin (the call is announced, its start never recorded); ``after_finish``:
    in ``after_tool_callback``, listed after it (the finish is recorded, the
    response event not yet stored).
    """

    def __init__(self, marker: Path, at: str) -> None:
        super().__init__(f"stop_{at}")
        self.marker, self.at = marker, at

    async def _stop(self, at: str) -> None:
        if self.at == at:
            self.marker.touch()
            await asyncio.sleep(3600)

    async def before_tool_callback(self, **_: Any) -> None:
        await self._stop("before_start")

    async def after_tool_callback(self, **_: Any) -> None:
        await self._stop("after_finish")


def _blocking_tool(path: Path, at: str) -> Callable[..., Any]:
    """``charge_card`` as a plain ``def`` that touches ``path``, then never ends."""
    if at == "during_stream_tool":
        return _stream_tool(path)

    def charge_card(amount: int) -> dict[str, str]:
        """Charges a card."""
        path.touch()
        if at == "during_busy_tool":
            while True:  # holds the GIL but for the interpreter's thread switches
                pass
        time.sleep(3600)
        return {"status": "charged"}

    return charge_card


def _stream_tool(path: Path) -> Callable[..., Any]:
    """``charge_card`` as a plain generator: one progress item, then it touches ``path`` and
    never ends."""

    def charge_card(amount: int) -> Generator[dict[str, str], None, None]:
        """Charges a card, reporting progress."""
        yield {"status": "charging"}
        path.touch()
        time.sleep(3600)
        yield {"status": "charged"}

    return charge_card


async def main(url: str, session_id: str, marker: str, at: str) -> None:
    path = Path(marker)

    async def charge_card(amount: int) -> dict[str, str]:
        """Charges a card."""
        if at in ("during_tool", "during_parallel_tools"):
            path.touch()
            await asyncio.sleep(3600)
        return {"status": "charged"}

    async def lookup(q: str) -> dict[str, str]:
        """Looks something up."""
        return {"q": q}

    service: BaseSessionService
    ledger: SqlToolRunLedger | RedisToolRunLedger
    if url.startswith("redis"):
        parsed = parse_store_url(url)
        service = RedisSessionService(RedisSessionServiceConfig(
            uri=parsed.redis_url(), key_prefix=parsed.redis_key_prefix))
        ledger = RedisToolRunLedger.from_url(url)
    else:
        service = Store("adk_sqlite" if url.startswith("sqlite:///") else "other", url).service()
        ledger = SqlToolRunLedger.from_url(url)
    recorder, stop = ToolRunLedgerPlugin(ledger, lease_seconds=LEASE_SECONDS), _Stop(path, at)
    plugins: list[BasePlugin] = [stop, recorder] if at == "before_start" else [recorder, stop]

    def second_reply(_: Any) -> Any:
        if at == "after_response":
            path.touch()
            time.sleep(3600)
        return ScriptedModel.say("done")

    tool: Any = charge_card
    if at in TOOL_KINDS[1:]:
        tool = _blocking_tool(path, at)
    if at == "during_long_running_tool":
        tool = LongRunningFunctionTool(tool)
    elif at == "during_agent_tool":
        billing = ScriptedModel(script=[ScriptedModel.call("charge_card", {"amount": 5})])
        tool = AgentTool(LlmAgent(name="billing", description="Bills customers.",
                                  model=billing, tools=[tool]))
    run_config = RunConfig(tool_thread_pool_config=ToolThreadPoolConfig(max_workers=2)
                           ) if at == "during_pool_tool" else None
    name = "billing" if at == "during_agent_tool" else "charge_card"
    args = {"request": "charge 5"} if at == "during_agent_tool" else {"amount": 5}
    first_reply = ScriptedModel.call(name, args)
    tools = [tool]
    if at == "during_parallel_tools":
        tools.append(lookup)
        first_reply = LlmResponse(content=types.Content(role="model", parts=[
            types.Part(function_call=types.FunctionCall(id=f"adk-{name}-{key}", name=name,
                                                        args=value))
            for key, (name, value) in enumerate([("lookup", {"q": "report"}), (name, args)])]))
    model = ScriptedModel(script=[first_reply, second_reply])
    runner = Runner(app_name=APP, agent=LlmAgent(name="worker", model=model, tools=tools),
                    session_service=service, plugins=plugins)
    message = types.Content(role="user", parts=[types.Part(text="go")])
    async for _ in runner.run_async(user_id=USER, session_id=session_id, new_message=message,
                                    run_config=run_config):
        pass


async def run_until_killed(url: str, session_id: str, kill_at: str, folder: Path, *,
                           before_kill: Callable[[], Awaitable[None]] | None = None) -> None:
    """Runs this script on the session in a child process and SIGKILLs it at ``kill_at``.

    The tests' one harness for a runner dying at a chosen point: it waits (60 s
    at most) for the child to touch its marker in ``folder``, kills it, and
    reaps it. A child that exits first fails the test with its stderr.

    Args:
        url: The store.
        session_id: The session the runner runs a turn on.
        kill_at: Where the runner stops (see the module docstring).
        folder: Where the marker file goes.
        before_kill: Awaited once the marker exists; the child must still be
            running after it (its tool never ends by itself), then it is killed.
    """
    here = Path(__file__).resolve()
    marker = folder / f"marker-{kill_at}"
    process = subprocess.Popen(
        [sys.executable, str(here), url, session_id, str(marker), kill_at],
        cwd=here.parent, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        env={**os.environ, "PYTHONPATH": f"{here.parents[2]}{os.pathsep}{here.parent}"})
    try:
        deadline = time.time() + 60
        while not marker.exists():
            assert process.poll() is None, process.communicate()[1].decode()[-2000:]
            assert time.time() < deadline, "the runner never reached its kill point"
            await asyncio.sleep(0.05)
        if before_kill is not None:
            await before_kill()
            assert process.poll() is None, process.communicate()[1].decode()[-2000:]
        process.send_signal(signal.SIGKILL)
    finally:
        if process.poll() is None:
            process.kill()
        process.communicate(timeout=30)  # reaps it and closes its pipes


MAY_HAVE_RUN = {"error": LEDGER_ERRORS[CallOutcome.MAY_HAVE_RUN], "outcome": "may_have_run",
                "safe_to_retry": False}
"""The heal of a call whose tool started and whose runner died (charge_card: side effects)."""


async def watch_then_kill(url: str, session_id: str, at: str, folder: Path,
                          service: Callable[[], BaseSessionService], ledger: ToolRunReader,
                          close: Callable[[BaseSessionService], Awaitable[None]]) -> None:
    """Runs ``tool_run_kill.py`` at ``at``, reads its session through the wrapper while the tool
    runs 3 leases (no heal, the lease alive), SIGKILLs it, then reads until the call is healed.

    The reader is another process's wrapper with ``clock_skew=0``: a lease not renewed in
    time is healed as soon as it runs out. A long-running call is never healed (it is
    pending by design): its record is read instead. Beside parallel calls, ``lookup``
    finishes at once and stays unanswered: it is not healed while its sibling runs, then
    healed with its recorded result.
    """
    key = SessionKey(APP, USER, session_id)
    policy = HealPolicy(clock_skew=0)
    long_running = at == "during_long_running_tool"
    expected = [MAY_HAVE_RUN]
    if at == "during_parallel_tools":
        expected.insert(0, {"q": "report"})  # lookup's result, recovered from its record

    async def read() -> tuple[list[Any], list[ToolRun]]:
        """The heals the wrapper returns, and the runs of the session's calls in order."""
        inner = service()
        try:
            session = await HealingSessionService(inner, policy, tool_runs=ledger).get_session(
                app_name=APP, user_id=USER, session_id=session_id)
        finally:
            await close(inner)
        assert session is not None
        heals = [r.response for e in session.events
                 if (e.custom_metadata or {}).get(HEAL_METADATA_KEY)
                 for r in e.get_function_responses()]
        calls = [c for e in session.events for c in e.get_function_calls()]
        assert len(calls) == len(expected), calls  # only the calls the runner made
        runs = await ledger.runs(key)
        return heals, [runs[str(call.id)] for call in calls]

    async def tool_runs_three_leases() -> None:
        reads = 0
        deadline = time.monotonic() + 3 * LEASE_SECONDS
        while time.monotonic() < deadline:
            heals, runs = await read()
            assert heals == [], f"a live call was healed after {reads} reads: {heals}"
            assert runs[-1].state is RunState.STARTED
            assert run_outcome(runs[-1], time.time()) is None, "a running tool's lease ran out"
            reads += 1
            await asyncio.sleep(0.2)
        assert reads >= 5
        assert [run.state for run in runs[:-1]] == [RunState.FINISHED] * (len(runs) - 1)

    await run_until_killed(url, session_id, at, folder, before_kill=tool_runs_three_leases)
    deadline = time.monotonic() + 60
    while True:  # the lease runs out LEASE_SECONDS after the last renewal, at most
        heals, runs = await read()
        if long_running:
            assert heals == []  # pending by design: a long-running call is never healed
            if run_outcome(runs[-1], time.time()) is CallOutcome.MAY_HAVE_RUN:
                return
        elif heals:
            assert heals == expected
            return
        assert time.monotonic() < deadline, "the dead runner's lease never ran out"
        await asyncio.sleep(0.2)


if __name__ == "__main__":
    asyncio.run(main(*sys.argv[1:5]))
