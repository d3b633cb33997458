"""What the installed ADK's resume does with a killed tool turn when ToolRunLedgerPlugin is on.

``python replay_check.py`` (with adk-session-heal installed beside that ADK):
for each point where a process can die in a tool turn, a child process runs a
resumable app's turn (``ResumabilityConfig(is_resumable=True)``, a SQLite
session database and tool-run ledger) whose ``transfer`` tool appends a line
to a file (its side effect), and is killed there with ``os._exit``:

* ``before_start``: before the ledger's start record (only announced): the
  resume must run the transfer, once;
* ``after_effect``: inside the tool, after its side effect: the resume must not
  run it again and answers "may have run";
* ``after_finish``: after the ledger recorded the finish, before ADK stored
  the response: the resume answers with the recorded result, not a second run;
* ``batch``: two parallel transfers (5 and 7), the 5 finished and the 7 never
  started: the resume answers the 5 with its result and runs only the 7
  (matched by call id, not by tool name).

This process then resumes the invocation through that ADK's real ``Runner``
(``run_async(invocation_id=...)``) with the plugin, and counts the side
effects and reads the answers. ``after_finish`` and ``batch`` also run without
the plugin (the contrast: ADK's replay alone runs a finished transfer again), so
the check fails if that ADK stops replaying. Prints one JSON line: the ADK version and
per point the transfers made and the answers. Prints ``{"resumable": false}``
and exits 0 on an ADK without resumable apps. Exits 1 on any other outcome.

ADK 2.0 and 2.1 do not replay: their ``run_async(invocation_id=...)`` starts a
new invocation, whose model request holds the dead call unanswered
(``RESUME_REPLAYS_CALLS`` is false there). On those, the resume reads through
``HealingSessionService`` with ``HealPolicy(resumable_app=True)``, which heals
there as usual: the call that never started is answered ``not_started`` and
not made, the finished one with its recorded result, and the new invocation's
request breaks no provider rule (``"replays": false`` in the JSON line).
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from google.adk import apps as adk_apps

if not hasattr(adk_apps, "ResumabilityConfig"):
    from adk_session_heal.core.adk_compat import ADK_VERSION
    print(json.dumps({"adk": ADK_VERSION, "resumable": False}))
    sys.exit(0)

from google.adk.agents import LlmAgent  # noqa: E402
from google.adk.apps import App, ResumabilityConfig  # noqa: E402
from google.adk.models.llm_response import LlmResponse  # noqa: E402
from google.adk.plugins.base_plugin import BasePlugin  # noqa: E402
from google.adk.runners import Runner  # noqa: E402
from google.adk.sessions import DatabaseSessionService  # noqa: E402
from google.adk.tools.base_tool import BaseTool  # noqa: E402
from google.adk.tools.tool_context import ToolContext  # noqa: E402
from google.genai import types  # noqa: E402

from adk_session_heal import HealingSessionService, HealPolicy  # noqa: E402
from adk_session_heal.core.adk_compat import ADK_VERSION, RESUME_REPLAYS_CALLS  # noqa: E402
from adk_session_heal.ledger import SqlToolRunLedger  # noqa: E402
from adk_session_heal.migrate import upgrade  # noqa: E402
from adk_session_heal.plugins import ToolRunLedgerPlugin, idempotency_key  # noqa: E402
from adk_session_heal.testing import ScriptedModel  # noqa: E402

APP, USER = "replay_app", "replay_user"
LEASE_SECONDS = 1.0
POINTS = ("before_start", "after_effect", "after_finish", "batch")
CONTRASTED = ("after_finish", "batch")
"""The points also run without the plugin."""
SENT = {"status": "sent"}


def _dies_at(point: str) -> None:
    if os.environ.get("REPLAY_CRASH") == point:
        os._exit(17)


async def transfer(amount: int, tool_context: ToolContext) -> dict[str, str]:
    """Transfers money (a side effect: each run appends a line with the call's key)."""
    with Path(os.environ["REPLAY_EFFECTS"]).open("a") as effects:
        effects.write(f"transfer {amount} {idempotency_key(tool_context)}\n")
    _dies_at("after_effect")
    return dict(SENT)


class _Before(BasePlugin):
    async def before_tool_callback(self, *, tool: BaseTool, tool_args: dict[str, Any],
                                   tool_context: ToolContext) -> dict[str, Any] | None:
        _dies_at("before_start")
        if os.environ.get("REPLAY_CRASH") == "batch" and tool_args.get("amount") == 7:
            await asyncio.sleep(3600)  # the 7 never starts: the process dies first
        return None


class _After(BasePlugin):
    async def after_tool_callback(self, *, tool: BaseTool, tool_args: dict[str, Any],
                                  tool_context: ToolContext,
                                  result: dict[str, Any]) -> dict[str, Any] | None:
        _dies_at("after_finish")
        if tool_args.get("amount") == 5:
            _dies_at("batch")
        return None


def _first_reply(batch: bool) -> LlmResponse:
    if not batch:
        return ScriptedModel.call("transfer", {"amount": 5})
    return LlmResponse(content=types.Content(role="model", parts=[
        types.Part(function_call=types.FunctionCall(id=f"t-{amount}", name="transfer",
                                                    args={"amount": amount}))
        for amount in (5, 7)]))


def _runner(service: Any, plugins: list[BasePlugin], *, first_turn: bool,
            batch: bool) -> Runner:
    script = [_first_reply(batch)] if first_turn else []
    agent = LlmAgent(name="teller", tools=[transfer],
                     model=ScriptedModel(script=[*script, ScriptedModel.say("Sent.")]))
    app = App(name=APP, root_agent=agent, plugins=plugins,
              resumability_config=ResumabilityConfig(is_resumable=True))
    return Runner(app=app, session_service=service)


async def _first_turn(url: str, session_id: str, batch: bool) -> None:
    """The child: runs the turn until the process is killed at ``$REPLAY_CRASH``."""
    service = DatabaseSessionService(url)
    ledger = SqlToolRunLedger.from_url(url)
    plugins: list[BasePlugin] = [_Before("before"),
                                 ToolRunLedgerPlugin(ledger, lease_seconds=LEASE_SECONDS),
                                 _After("after")]
    message = types.Content(role="user", parts=[types.Part(text="send money")])
    async for _ in _runner(service, plugins, first_turn=True, batch=batch).run_async(
            user_id=USER, session_id=session_id, new_message=message):
        pass


async def _killed_then_resumed(folder: Path, point: str, guarded: bool,
                               healing: bool = False) -> dict[str, Any]:
    """Kills the turn at ``point`` in a child, resumes it here; what happened.

    ``healing``: the resume reads through ``HealingSessionService`` (``resumable_app``).
    """
    url = f"sqlite+aiosqlite:///{folder / 'sessions.db'}"
    effects = folder / "effects"
    effects.touch()
    service = DatabaseSessionService(url)
    session = await service.create_session(app_name=APP, user_id=USER)
    await upgrade(url)
    batch = point == "batch"
    child = subprocess.run(
        [sys.executable, __file__, "child", url, session.id, "1" if batch else "0"],
        env={**os.environ, "REPLAY_CRASH": point, "REPLAY_EFFECTS": str(effects)},
        capture_output=True, text=True, timeout=300, check=False)
    if child.returncode != 17:
        raise SystemExit(f"FAIL: the child was not killed at {point} (exit "
                         f"{child.returncode}): {child.stderr.strip().splitlines()[-1:]}")
    time.sleep(LEASE_SECONDS + 0.5)  # the dead process's lease runs out
    os.environ["REPLAY_EFFECTS"] = str(effects)
    ledger = SqlToolRunLedger.from_url(url)
    plugins: list[BasePlugin] = ([ToolRunLedgerPlugin(ledger, lease_seconds=LEASE_SECONDS)]
                                 if guarded else [])
    try:
        stored = await service.get_session(app_name=APP, user_id=USER, session_id=session.id)
        assert stored is not None
        reader: Any = service
        if healing:
            reader = HealingSessionService(service, HealPolicy(clock_skew=0, resumable_app=True),
                                           tool_runs=ledger)
        async for _ in _runner(reader, plugins, first_turn=False, batch=batch).run_async(
                user_id=USER, session_id=session.id,
                invocation_id=stored.events[-1].invocation_id):
            pass
        stored = await service.get_session(app_name=APP, user_id=USER, session_id=session.id)
    finally:
        await ledger.close()
        await service.close()
    assert stored is not None
    answers = {str(r.id): dict(r.response or {}) for e in stored.events
               for r in e.get_function_responses()}
    made = sorted(line.split()[1] for line in effects.read_text().splitlines())
    return {"transfers": made, "answers": answers}


def _problems(point: str, guarded: dict[str, Any], bare: dict[str, Any]) -> list[str]:
    """What is wrong with one point's outcome, with and without the plugin."""
    problems = []
    answers = list(guarded["answers"].values())
    if point == "before_start":
        if guarded["transfers"] != ["5"] or answers != [SENT]:
            problems.append("an announced call must run once on resume")
    elif point == "after_effect":
        if guarded["transfers"] != ["5"] or [a.get("outcome") for a in answers] != [
                "may_have_run"]:
            problems.append("a call killed after its effect must not run again (may have run)")
    elif point == "after_finish":
        if guarded["transfers"] != ["5"] or answers != [SENT]:
            problems.append("a finished call must be answered with its result, not run again")
        if bare["transfers"] != ["5", "5"]:
            problems.append(f"without the plugin ADK's resume made {bare['transfers']}, not "
                            "a second transfer: this ADK no longer replays")
    elif point == "batch":
        if guarded["transfers"] != ["5", "7"] or guarded["answers"] != {"t-5": SENT,
                                                                          "t-7": SENT}:
            problems.append("a batch must run only its unstarted call, by call id")
        if bare["transfers"] != ["5", "5", "7"]:
            problems.append(f"without the plugin ADK's resume made {bare['transfers']}, not "
                            "the finished transfer again")
    return [f"{point}: {p}: {json.dumps(guarded)}" for p in problems]


async def _without_replay() -> int:
    """ADK 2.0 and 2.1: a finished and an unstarted call, healed by the wrapper on resume."""
    outcome: dict[str, Any] = {"adk": ADK_VERSION, "resumable": True, "replays": False}
    problems = []
    with tempfile.TemporaryDirectory() as scratch:
        for point, transfers, answer in (("before_start", [], "not_started"),
                                         ("after_finish", ["5"], SENT)):
            folder = Path(scratch) / point
            folder.mkdir()
            ran = await _killed_then_resumed(folder, point, guarded=True, healing=True)
            outcome[point] = ran
            (got,) = ran["answers"].values()
            if ran["transfers"] != transfers or (
                    got != answer and got.get("outcome") != answer):
                problems.append(f"{point}: expected {transfers} and {answer}: {json.dumps(ran)}")
    print(json.dumps(outcome, sort_keys=True))
    for problem in problems:
        print(f"FAIL: {problem}", file=sys.stderr)
    return 1 if problems else 0


async def main() -> int:
    """Runs every point with and without the plugin; prints the outcome as one JSON line."""
    if not RESUME_REPLAYS_CALLS:
        return await _without_replay()
    outcome: dict[str, Any] = {"adk": ADK_VERSION, "resumable": True}
    problems: list[str] = []
    with tempfile.TemporaryDirectory() as scratch:
        for point in POINTS:
            runs: dict[bool, dict[str, Any]] = {False: {}}
            # ADK alone: where it makes a transfer twice (the contrast the check relies on).
            for guarded in (True, False) if point in CONTRASTED else (True,):
                folder = Path(scratch) / f"{point}-{guarded}"
                folder.mkdir()
                runs[guarded] = await _killed_then_resumed(folder, point, guarded)
            outcome[point] = {"plugin": runs[True], "adk_alone": runs[False]}
            problems += _problems(point, runs[True], runs[False])
    print(json.dumps(outcome, sort_keys=True))
    for problem in problems:
        print(f"FAIL: {problem}", file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    if sys.argv[1:2] == ["child"]:
        asyncio.run(_first_turn(sys.argv[2], sys.argv[3], sys.argv[4] == "1"))
    else:
        sys.exit(asyncio.run(main()))
