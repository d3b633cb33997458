"""ToolRunLedgerPlugin on ADK's replays, for every kind of tool ADK 2.x runs: generators, a
``LongRunningFunctionTool``, an ``AgentTool`` and a single-turn sub-agent, an MCP tool, and a
tool that runs for several leases while another process resumes its invocation. Each is
killed for real in a child process (tests/children/replay_guard.py) and resumed here; its side
effects are counted by the file it appends to, with its idempotency key."""

from __future__ import annotations

import asyncio
import os
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from google.adk.sessions import DatabaseSessionService
from google.genai import types
from paths import CHILDREN

from adk_session_heal.core import idempotency
from adk_session_heal.core.session_key import SessionKey
from adk_session_heal.core.tool_runs import RunState, ToolRun
from adk_session_heal.ledger import SqlToolRunLedger
from adk_session_heal.migrate import upgrade
from adk_session_heal.plugins import ToolRunLedgerPlugin
from adk_session_heal.policy import LEDGER_ERRORS, CallOutcome
from adk_session_heal.runtime.tool_run_plugin import STILL_RUNNING_ERROR

sys.path.insert(0, str(CHILDREN))
import replay_guard  # noqa: E402

pytestmark = pytest.mark.skipif(not hasattr(__import__("google.adk.apps", fromlist=["x"]),
                                            "ResumabilityConfig"),
                                reason="this ADK has no resumable apps")

SENT = {"status": "sent"}
MAY_HAVE_RUN = {"error": LEDGER_ERRORS[CallOutcome.MAY_HAVE_RUN], "outcome": "may_have_run",
                "safe_to_retry": False}
MCP_SENT = {"content": [{"text": "sent 5", "type": "text"}], "isError": False,
            "structuredContent": {"result": "sent 5"}}
LONG = 4 * replay_guard.LEASE_SECONDS
"""How long the long tool runs after its side effect: four leases (twelve renewals)."""


def _needs(kind: str) -> None:
    """Skips a kind this environment cannot run."""
    if kind == "mcp":
        pytest.importorskip("mcp", reason="the MCP SDK (dev extra: mcp) is not installed")
    if kind == "def_pool":
        from google.adk.agents import run_config
        if not hasattr(run_config, "ToolThreadPoolConfig"):
            pytest.skip("this ADK has no tool thread pool")


class _Turn:
    """A session with one turn killed in a child process, resumed from this one.

    Args:
        tmp_path: Where the session database and the effects file live.
        kind: The child's ``$REPLAY_KIND``.
    """

    def __init__(self, tmp_path: Path, kind: str) -> None:
        _needs(kind)
        self.kind = kind
        self.url = f"sqlite+aiosqlite:///{tmp_path / 'sessions.db'}"
        self.effects = tmp_path / "effects"
        self.effects.touch()
        self.service = DatabaseSessionService(self.url)
        self.session_id = ""

    async def start(self, point: str, *, long: float = 0.0) -> asyncio.subprocess.Process:
        """Creates the session and starts the child's turn, to die at ``point``."""
        session = await self.service.create_session(app_name=replay_guard.APP,
                                                    user_id=replay_guard.USER)
        self.session_id = session.id
        await upgrade(self.url)
        return await asyncio.create_subprocess_exec(
            sys.executable, str(CHILDREN / "replay_guard.py"), self.url, session.id,
            env={**os.environ, "REPLAY_CRASH": point, "REPLAY_EFFECTS": str(self.effects),
                 "REPLAY_KIND": self.kind, "REPLAY_BATCH": "0", "REPLAY_LONG": str(long)},
            stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.PIPE)

    async def killed(self, point: str) -> None:
        """Runs the child's turn until it dies at ``point``; waits out its lease."""
        child = await self.start(point)
        _, stderr = await asyncio.wait_for(child.communicate(), 120)
        assert child.returncode == 17, stderr.decode()[-2000:]
        await asyncio.sleep(replay_guard.LEASE_SECONDS + 0.5)  # the dead process's lease ends

    async def resume(self, *, guarded: bool = True, replay_wait: float | None = None,
                     message: types.Content | None = None) -> dict[str, dict[str, Any]]:
        """Resumes the turn's invocation here (with ``message``: answers it); the answers.

        Returns:
            Each call's answer in the stored session, by call id.
        """
        os.environ.update(REPLAY_EFFECTS=str(self.effects), REPLAY_KIND=self.kind,
                          REPLAY_BATCH="0", REPLAY_LONG="0")
        ledger = SqlToolRunLedger.from_url(self.url)
        plugins: list[Any] = ([ToolRunLedgerPlugin(ledger,
                                                   lease_seconds=replay_guard.LEASE_SECONDS,
                                                   replay_wait=replay_wait)]
                              if guarded else [])
        stored = await self._stored()
        runner = replay_guard.runner(self.service, plugins, first_turn=False)
        try:
            async for _ in runner.run_async(
                    user_id=replay_guard.USER, session_id=self.session_id,
                    invocation_id=None if message else stored.events[-1].invocation_id,
                    new_message=message, run_config=replay_guard.run_config()):
                pass
        finally:
            await runner.close()
            await ledger.close()
        return {str(response.id): dict(response.response or {})
                for event in (await self._stored()).events
                for response in event.get_function_responses()}

    async def _stored(self) -> Any:
        stored = await self.service.get_session(app_name=replay_guard.APP,
                                                user_id=replay_guard.USER,
                                                session_id=self.session_id)
        assert stored is not None
        return stored

    async def call_id(self) -> str:
        """The id of the model's transfer call."""
        return next(str(call.id) for event in (await self._stored()).events
                    for call in event.get_function_calls())

    async def answered_at(self) -> float:
        """When the answer of the model's transfer call was made (epoch seconds)."""
        call_id = await self.call_id()
        return next(event.timestamp for event in (await self._stored()).events
                    if any(response.id == call_id
                           for response in event.get_function_responses()))

    async def key(self) -> str:
        """The idempotency key of the model's transfer call."""
        call_id = await self.call_id()
        invocation_id = next(event.invocation_id for event in (await self._stored()).events
                             if any(call.id == call_id for call in event.get_function_calls()))
        return idempotency.idempotency_key(
            SessionKey(replay_guard.APP, replay_guard.USER, self.session_id), invocation_id,
            call_id)

    async def run(self) -> ToolRun:
        """The transfer call's record in the ledger."""
        ledger = SqlToolRunLedger.from_url(self.url)
        try:
            key = SessionKey(replay_guard.APP, replay_guard.USER, self.session_id)
            return (await ledger.runs(key))[await self.call_id()]
        finally:
            await ledger.close()

    async def texts(self) -> list[str]:
        """The texts of the stored session's events."""
        return [part.text for event in (await self._stored()).events if event.content
                for part in event.content.parts or () if part.text]

    def transfers(self) -> list[str]:
        """The transfers made: one line each, ``transfer AMOUNT KEY``."""
        return self.effects.read_text().splitlines()

    async def close(self) -> None:
        await self.service.close()


async def _killed_then_resumed(tmp_path: Path, kind: str, point: str, *,
                               guarded: bool = True) -> tuple[int, dict[str, Any]]:
    """Kills a turn at ``point`` in a child, resumes it here: (transfers made, the answer)."""
    turn = _Turn(tmp_path, kind)
    try:
        await turn.killed(point)
        answer = (await turn.resume(guarded=guarded))[await turn.call_id()]
        transfers = turn.transfers()
        if kind not in ("agent_tool", "single_turn"):  # an agent's inner calls have keys of
            # their own: the transfer's key is its call's, in every run of it
            assert {line.split()[2] for line in transfers} == {await turn.key()}
        assert "Sent." in await turn.texts()  # the model got the answer and went on
        return len(transfers), answer
    finally:
        await turn.close()


@pytest.mark.parametrize(("kind", "point", "expected"), [
    ("async_gen", "after_effect", (1, MAY_HAVE_RUN)),
    ("async_gen", "after_finish", (1, SENT)),
    pytest.param("async_gen", "before_start", (1, SENT), marks=pytest.mark.slow),
    ("gen", "after_effect", (1, MAY_HAVE_RUN)),
    pytest.param("gen", "after_finish", (1, SENT), marks=pytest.mark.slow),
])
async def test_a_generator_tool_is_guarded_like_any_other(
        tmp_path: Path, kind: str, point: str, expected: tuple[int, dict[str, Any]]) -> None:
    """A generator tool (ADK runs it as a node, its progress stored): one transfer, keyed."""
    assert await _killed_then_resumed(tmp_path, kind, point) == expected


@pytest.mark.parametrize(("kind", "point", "expected"), [
    ("agent_tool", "after_effect", (1, MAY_HAVE_RUN)),
    ("agent_tool", "after_finish", (1, {"result": "Sent 5."})),
    pytest.param("agent_tool", "before_start", (1, {"result": "Sent 5."}),
                 marks=pytest.mark.slow),
    ("single_turn", "after_effect", (1, MAY_HAVE_RUN)),
    pytest.param("single_turn", "after_finish", (1, {"result": "Sent 5."}),
                 marks=pytest.mark.slow),
    ("mcp", "after_effect", (1, MAY_HAVE_RUN)),
    pytest.param("mcp", "after_finish", (1, MCP_SENT), marks=pytest.mark.slow),
    pytest.param("mcp", "before_start", (1, MCP_SENT), marks=pytest.mark.slow),
])
async def test_agent_tools_and_an_mcp_tool_are_guarded_by_call_id(
        tmp_path: Path, kind: str, point: str, expected: tuple[int, dict[str, Any]]) -> None:
    """An ``AgentTool`` (its agent's tool makes the transfer, in the agent's own session), a
    single-turn sub-agent (the same, in the caller's session) and a real MCP server's tool:
    killed, resumed, one transfer; the model gets the recorded result or "may have run"."""
    assert await _killed_then_resumed(tmp_path, kind, point) == expected


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["async_gen", "agent_tool", "single_turn", "mcp"])
async def test_without_the_plugin_adk_replays_these_kinds_too(tmp_path: Path,
                                                             kind: str) -> None:
    """The contrast: ADK's replay alone makes a finished transfer of each kind again."""
    transfers, _ = await _killed_then_resumed(tmp_path, kind, "after_finish", guarded=False)
    assert transfers == 2


@pytest.mark.parametrize(("point", "transfers", "state"), [
    ("before_start", 0, RunState.ANNOUNCED),
    ("after_effect", 1, RunState.STARTED),
    pytest.param("after_finish", 1, RunState.FINISHED, marks=pytest.mark.slow),
])
async def test_a_long_running_call_stays_pending_on_resume(
        tmp_path: Path, point: str, transfers: int, state: RunState) -> None:
    """ADK's resume never replays a long-running call (it waits for its answer): the guard
    leaves it alone, the tool does not run again, and the client's answer then ends it."""
    turn = _Turn(tmp_path, "long_running")
    try:
        await turn.killed(point)
        assert await turn.resume() == {}  # paused: no answer, no rerun
        assert (len(turn.transfers()), (await turn.run()).state) == (transfers, state)
        call_id = await turn.call_id()
        answer = types.Content(role="user", parts=[types.Part(
            function_response=types.FunctionResponse(id=call_id, name="transfer",
                                                     response={"status": "done"}))])
        assert await turn.resume(message=answer) == {call_id: {"status": "done"}}
        assert len(turn.transfers()) == transfers
        assert "Sent." in await turn.texts()
    finally:
        await turn.close()


async def _exit(child: asyncio.subprocess.Process) -> tuple[float, bytes]:
    """Waits for the child to end: when this process saw it end (epoch seconds), its stderr."""
    _, stderr = await child.communicate()
    return time.time(), stderr


async def _long_run_resumed(tmp_path: Path, kind: str, replay_wait: float
                            ) -> tuple[int, dict[str, Any], float, float]:
    """Resumes while the child's transfer runs ``LONG`` seconds after its effect, then dies.

    Returns:
        The transfers made, the answer, how long the resume took, and how long before the
        child was seen to end the answer was made (negative: after).
    """
    turn = _Turn(tmp_path, kind)
    child = await turn.start("after_effect", long=LONG)
    ended = asyncio.create_task(_exit(child))
    try:
        async with asyncio.timeout(120):
            while not turn.transfers():  # the transfer is made; the tool runs on
                await asyncio.sleep(0.05)
        began = time.monotonic()
        answer = (await turn.resume(replay_wait=replay_wait))[await turn.call_id()]
        took = time.monotonic() - began
        died_at, stderr = await asyncio.wait_for(ended, 120)
        assert child.returncode == 17, stderr.decode()[-2000:]
        run = await turn.run()
        assert (run.state, run.attempt) == (RunState.STARTED, 1)  # one start, never a second
        assert run.lease_until - run.started_at >= LONG  # renewed for the whole run
        if kind not in ("agent_tool", "single_turn"):
            assert turn.transfers() == [f"transfer 5 {await turn.key()}"]
        return len(turn.transfers()), answer, took, died_at - await turn.answered_at()
    finally:
        if child.returncode is None:
            child.kill()
        await ended
        await turn.close()


LONG_KINDS = [
    pytest.param("def", marks=pytest.mark.slow),
    pytest.param("def_pool", marks=pytest.mark.slow),
    pytest.param("async", marks=pytest.mark.slow),
    pytest.param("async_gen", marks=pytest.mark.slow),
    pytest.param("gen", marks=pytest.mark.slow),
    pytest.param("agent_tool", marks=pytest.mark.slow),
    pytest.param("single_turn", marks=pytest.mark.slow),
    pytest.param("mcp", marks=pytest.mark.slow),
]
"""Every kind ADK replays (slow: each run lasts four leases and more)."""


@pytest.mark.parametrize("kind", LONG_KINDS)
async def test_a_resume_waits_for_a_long_run_whose_lease_is_renewed(tmp_path: Path,
                                                                    kind: str) -> None:
    """A transfer running four leases when another process resumes its invocation: the resume
    waits while the lease is renewed, never runs it alongside, and once the runner dies is
    answered "may have run"."""
    transfers, answer, took, _ = await _long_run_resumed(tmp_path, kind, replay_wait=60)
    assert (transfers, answer) == (1, MAY_HAVE_RUN)  # the lease ran out: the runner was gone
    assert took > LONG  # it waited for the run (which began before it), not the first lease


@pytest.mark.parametrize("kind", LONG_KINDS)
async def test_a_resume_refuses_a_run_still_holding_its_lease(tmp_path: Path,
                                                              kind: str) -> None:
    """The same, with ``replay_wait`` shorter than the run: refused as still running
    elsewhere while the first run goes on; one transfer."""
    transfers, answer, _, before_exit = await _long_run_resumed(
        tmp_path, kind, replay_wait=replay_guard.LEASE_SECONDS)
    assert (transfers, answer) == (1, {"error": STILL_RUNNING_ERROR})
    assert before_exit > 0  # refused while the first run still ran
