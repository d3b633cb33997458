"""What the installed ADK's live mode does with a streaming tool, with the ledger plugin or not.

``python live_check.py`` (with adk-session-heal installed beside that ADK) runs
that ADK's real ``Runner.run_live`` offline, over the package's scripted live
model (``adk_session_heal.testing.ScriptedLiveModel``), on a SQLite session
database and tool-run ledger. The app and the live-run driver are the test
suite's own (``tests/children/live_stream.py``, ``tests/support/live_runs.py``):
the model calls ``watch_price`` (call id ``live-1``), an async generator
function, which ADK answers "pending" and streams in a task of its own. Steps:

* ``lease``: while the stream runs past three leases, the call's record is
  ``started`` with a live lease (the stream's task holds it), never
  ``finished`` with "pending"; once the stream ends, the call reads
  ``may_have_run``;
* ``again``: the model sends the call again, same id, while it streams: the
  plugin answers "still running elsewhere" after ``replay_wait``, and the
  stream ran once; without the plugin, that ADK starts a second stream of the
  call (the contrast: the check fails if that ADK stops doing so);
* ``pool``: a plain ``def`` tool in ADK's tool thread pool (live mode runs sync
  tools there on 1.x too, with ``RunConfig.tool_thread_pool_config``) keeps its
  lease while it blocks four leases, and its result is recorded (skipped on an
  ADK without ``ToolThreadPoolConfig``).

ADK 1.22 to 1.26 run no plugin tool callback in live mode
(``LIVE_TOOL_PLUGIN_CALLBACKS`` is false): there the plugin cannot see a live
tool run, so it records nothing for a live call (no record: ``unknown``, never
an announcement that would read "did not start"), and a call sent again is
streamed twice, with the plugin as without it (``"live_tool_callbacks":
false`` in the JSON line).

Prints one JSON line (that ADK's version and what each step saw); exits 1 if
anything differs.
"""

from __future__ import annotations

import asyncio
import json
import sqlite3
import sys
import tempfile
import time
from contextlib import closing
from pathlib import Path
from typing import Any

TESTS = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(TESTS / "support"), str(TESTS / "children")]

import live_stream  # noqa: E402
from google.adk.agents import LlmAgent, run_config  # noqa: E402
from google.adk.models.llm_response import LlmResponse  # noqa: E402
from google.adk.runners import Runner  # noqa: E402
from google.adk.sessions import DatabaseSessionService  # noqa: E402
from google.genai import types  # noqa: E402
from live_runs import USER, LiveRun  # noqa: E402

from adk_session_heal.core.adk_compat import (  # noqa: E402
    ADK_VERSION,
    LIVE_TOOL_PLUGIN_CALLBACKS,
)
from adk_session_heal.core.session_key import SessionKey  # noqa: E402
from adk_session_heal.core.tool_runs import ToolRun, run_outcome  # noqa: E402
from adk_session_heal.ledger import SqlToolRunLedger  # noqa: E402
from adk_session_heal.migrate import upgrade  # noqa: E402
from adk_session_heal.plugins import ToolRunLedgerPlugin  # noqa: E402
from adk_session_heal.runtime.tool_run_plugin import STILL_RUNNING_ERROR  # noqa: E402
from adk_session_heal.testing import LiveSent, ScriptedLiveModel  # noqa: E402

APP = live_stream.APP
LEASE = 0.5


class _Database:
    """A SQLite session database with the tool-run table, and one session in it."""

    def __init__(self, folder: Path) -> None:
        self.path = folder / "live.db"
        self.url = f"sqlite+aiosqlite:///{self.path}"
        self.service = DatabaseSessionService(self.url)
        self.effects = folder / "effects"
        self.effects.touch()
        self.session_id = ""
        self.ledger: SqlToolRunLedger | None = None

    async def open(self) -> _Database:
        self.session_id = (await self.service.create_session(app_name=APP, user_id=USER)).id
        await upgrade(self.url)
        self.ledger = SqlToolRunLedger.from_url(self.url)
        return self

    def plugin(self) -> ToolRunLedgerPlugin:
        assert self.ledger is not None
        return ToolRunLedgerPlugin(self.ledger, lease_seconds=LEASE, replay_wait=2 * LEASE)

    async def record(self, call_id: str = live_stream.CALL_ID) -> ToolRun | None:
        assert self.ledger is not None
        return (await self.ledger.runs(SessionKey(APP, USER, self.session_id))).get(call_id)

    async def close(self) -> None:
        if self.ledger is not None:
            await self.ledger.close()
        await self.service.close()


def _answers(model: ScriptedLiveModel, call_id: str = live_stream.CALL_ID) -> list[Any]:
    """What the model was sent for the call: ADK's answers, and the stream's values."""
    return [response.response for connection in model.connections for sent in connection.sent
            for response in sent.function_responses if response.id == call_id]


async def _wait(condition: Any) -> None:
    """Waits (at most two minutes) until the coroutine function ``condition`` returns true."""
    async with asyncio.timeout(120):
        while not await condition():
            await asyncio.sleep(0.05)


async def _lease(folder: Path) -> dict[str, Any]:
    db = await _Database(folder).open()
    stop = asyncio.Event()
    plugin = db.plugin()
    seen: dict[str, Any] = {}
    try:
        live_runner = live_stream.runner(db.service, [plugin], db.effects, stop)
        async with LiveRun(live_runner, db.session_id) as live:
            live.say(live_stream.ASK)

            async def renewed() -> bool:
                run = await db.record()
                return run is not None and run.lease_until - run.started_at > 3 * LEASE

            await _wait(renewed)
            run = await db.record()
            assert run is not None
            seen["streaming"] = {"state": run.state.value,
                                 "alive": run_outcome(run, time.time()) is None}
            stop.set()

            async def lapsed() -> bool:
                run = await db.record()
                return run is not None and run_outcome(run, time.time()) is not None

            await _wait(lapsed)
        run = await db.record()
        assert run is not None
        outcome = run_outcome(run, time.time())
        seen["ended"] = {"state": run.state.value, "outcome": outcome and outcome.value}
        seen["watches"] = len(db.effects.read_text().splitlines())
        return seen
    finally:
        await plugin.close()
        await db.close()


async def _again(folder: Path, guarded: bool) -> dict[str, Any]:
    db = await _Database(folder).open()
    plugin = db.plugin()
    try:
        live_runner = live_stream.runner(db.service, [plugin] if guarded else [], db.effects)
        model = live_stream.model_of(live_runner)
        async with LiveRun(live_runner, db.session_id) as live:
            live.say(live_stream.ASK)
            await live.until(lambda: bool(db.effects.read_text()))  # streaming
            live.say(live_stream.ASK_AGAIN)
            if guarded and LIVE_TOOL_PLUGIN_CALLBACKS:
                await live.until(lambda: {"error": STILL_RUNNING_ERROR} in _answers(model))
            else:
                await live.until(lambda: len(db.effects.read_text().splitlines()) == 2)
            # Counted before the run ends: ADK before 1.27 reconnects when the queue closes,
            # and this model sends the call again on a new connection.
            seen = {"watches": len(db.effects.read_text().splitlines()),
                    "refused": {"error": STILL_RUNNING_ERROR} in _answers(model),
                    "recorded": await db.record() is not None}
        return seen
    finally:
        await plugin.close()
        await db.close()


async def _pool(folder: Path) -> dict[str, Any]:
    db = await _Database(folder).open()
    plugin = db.plugin()

    def lookup(city: str) -> dict[str, Any]:
        """Looks up a city, slowly."""
        time.sleep(4 * LEASE)
        with closing(sqlite3.connect(db.path)) as conn:
            (lease_until,) = conn.execute(
                "SELECT lease_until FROM adk_session_heal_tool_runs WHERE call_id = 'p-1'"
            ).fetchone()
        return {"city": city, "lease_alive": lease_until > time.time()}

    def model_side(sent: LiveSent) -> list[LlmResponse]:
        if sent.text == "look Paris up":
            return [ScriptedLiveModel.call("lookup", {"city": "Paris"}, call_id="p-1")]
        return []

    try:
        model = ScriptedLiveModel(script=model_side)
        live_runner = Runner(app_name=APP, agent=LlmAgent(name="watcher", model=model,
                                                          tools=[lookup]),
                             session_service=db.service, plugins=[plugin])
        config = run_config.RunConfig(response_modalities=[types.Modality.TEXT],
                                      tool_thread_pool_config=run_config.ToolThreadPoolConfig())
        async with LiveRun(live_runner, db.session_id, config) as live:
            live.say("look Paris up")
            await live.until(lambda: bool(_answers(model, "p-1")))
        run = await db.record("p-1")
        assert run is not None
        return {"state": run.state.value, "result": run.result}
    finally:
        await plugin.close()
        await db.close()


def _problems(seen: dict[str, Any]) -> list[str]:
    problems = []
    alone = seen["again"]["adk_alone"]
    if alone["watches"] != 2:
        problems.append("without the plugin this ADK no longer streams a call sent again")
    if not seen["live_tool_callbacks"]:
        if seen["again"]["plugin"] != {"watches": 2, "refused": False, "recorded": False}:
            problems.append("a live call must leave no record where the plugin cannot see it")
        return problems
    if seen["lease"]["streaming"] != {"state": "started", "alive": True}:
        problems.append("a stream must hold its call's lease while it streams")
    if seen["lease"]["ended"] != {"state": "started", "outcome": "may_have_run"}:
        problems.append("an ended stream's call must read may_have_run")
    if seen["again"]["plugin"] != {"watches": 1, "refused": True, "recorded": True}:
        problems.append("a call sent again while its stream runs must be refused, not streamed")
    if seen.get("pool", {"state": "finished", "result": {"city": "Paris", "lease_alive": True}}
                ) != {"state": "finished", "result": {"city": "Paris", "lease_alive": True}}:
        problems.append("a pool tool must keep its lease and record its result")
    return problems


async def main() -> int:
    """Runs every step; prints what it saw as one JSON line."""
    seen: dict[str, Any] = {"adk": ADK_VERSION, "live_tool_callbacks": LIVE_TOOL_PLUGIN_CALLBACKS}
    with tempfile.TemporaryDirectory() as scratch:
        folders = {name: Path(scratch) / name for name in ("lease", "plugin", "alone", "pool")}
        for folder in folders.values():
            folder.mkdir()
        seen["again"] = {"plugin": await _again(folders["plugin"], guarded=True),
                         "adk_alone": await _again(folders["alone"], guarded=False)}
        if LIVE_TOOL_PLUGIN_CALLBACKS:
            seen["lease"] = await _lease(folders["lease"])
            if hasattr(run_config, "ToolThreadPoolConfig"):
                seen["pool"] = await _pool(folders["pool"])
    print(json.dumps(seen, sort_keys=True))
    problems = _problems(seen)
    for problem in problems:
        print(f"FAIL: {problem}: {json.dumps(seen, sort_keys=True)}", file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
