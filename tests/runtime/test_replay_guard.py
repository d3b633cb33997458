"""ToolRunLedgerPlugin on ADK's own replays: a resumable app killed at each point of a tool turn
and resumed from another process runs the tool's side effect at most once (a real Runner, a
real SQLite session database and ledger, the process killed for real)."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from google.adk.sessions import DatabaseSessionService
from paths import CHILDREN
from servers import temporary_database

from adk_session_heal import HealingSessionService
from adk_session_heal.ledger import SqlToolRunLedger
from adk_session_heal.migrate import upgrade
from adk_session_heal.plugins import ToolRunLedgerPlugin
from adk_session_heal.policy import (
    LEDGER_ERRORS,
    CallOutcome,
    DoubtfulCall,
    HealPolicy,
    Reconciliation,
    ToolEffect,
    settled,
)

sys.path.insert(0, str(CHILDREN))
import replay_guard  # noqa: E402

pytestmark = pytest.mark.skipif(not hasattr(__import__("google.adk.apps", fromlist=["x"]),
                                            "ResumabilityConfig"),
                                reason="this ADK has no resumable apps")


async def _killed_then_resumed(tmp_path: Path, point: str, *, guarded: bool = True,
                               policy: HealPolicy | None = None, healing: bool = False,
                               undone: bool = False, resumable_app: bool = False,
                               url: str | None = None, kind: str = "async",
                               answers: dict[str, dict[str, Any]] | None = None
                               ) -> tuple[int, dict[str, Any]]:
    """Kills a turn at ``point`` in a child, resumes it here; (side effects, the answer).

    ``healing``: the resume reads through ``HealingSessionService`` given the same ledger.
    ``undone``: the real system rolled the killed run's effect back before the resume.
    ``resumable_app``: the wrapper's policy says the app is resumable.
    ``url``: the session database (default: a SQLite file in ``tmp_path``).
    ``kind``: the kind of tool (``async``, ``def``, ``def_pool``: the child's docstring).
    ``answers``: filled with every call's answer by call id (the ``batch`` point has two);
    the answer returned is then ``{}``.
    """
    url = url or f"sqlite+aiosqlite:///{tmp_path / 'sessions.db'}"
    effects = tmp_path / "effects"
    effects.touch()
    service = DatabaseSessionService(url)
    session = await service.create_session(app_name=replay_guard.APP, user_id=replay_guard.USER)
    await upgrade(url)
    child = await asyncio.to_thread(
        subprocess.run, [sys.executable, str(CHILDREN / "replay_guard.py"), url, session.id],
        env={**os.environ, "REPLAY_CRASH": point, "REPLAY_EFFECTS": str(effects),
             "REPLAY_KIND": kind, "REPLAY_BATCH": "1" if point == "batch" else "0"},
        capture_output=True, text=True, timeout=120, check=False)
    assert child.returncode == 17, child.stderr[-2000:]
    await asyncio.sleep(replay_guard.LEASE_SECONDS + 0.5)  # the dead process's lease runs out
    if undone:
        effects.write_text("")
    os.environ.update(REPLAY_EFFECTS=str(effects), REPLAY_KIND=kind,
                      REPLAY_BATCH="1" if point == "batch" else "0")
    ledger = SqlToolRunLedger.from_url(url)
    plugins: list[Any] = ([ToolRunLedgerPlugin(ledger, lease_seconds=replay_guard.LEASE_SECONDS,
                                               policy=policy)] if guarded else [])
    stored = await service.get_session(app_name=replay_guard.APP, user_id=replay_guard.USER,
                                       session_id=session.id)
    assert stored is not None
    # One host's clock: no skew, so the wrapper reads the dead lease as expired at once (with
    # the default skew it would wait five more minutes, and the resume would run the call).
    wrapper_policy = HealPolicy(clock_skew=0, resumable_app=resumable_app)
    reader: Any = (HealingSessionService(service, wrapper_policy, tool_runs=ledger)
                   if healing else service)
    try:
        async for _ in replay_guard.runner(reader, plugins, first_turn=False).run_async(
                user_id=replay_guard.USER, session_id=session.id,
                invocation_id=stored.events[-1].invocation_id,
                run_config=replay_guard.run_config()):
            pass
        stored = await service.get_session(app_name=replay_guard.APP,
                                           user_id=replay_guard.USER, session_id=session.id)
    finally:
        await ledger.close()
        await service.close()
    assert stored is not None
    found = _answers(stored.events)
    transfers = len(effects.read_text().splitlines())
    if answers is not None:
        answers.update(found)
        return transfers, {}
    (answer,) = found.values()
    return transfers, answer


def _answers(events: list[Any]) -> dict[str, dict[str, Any]]:
    """Each call's answer in the stored session, by call id."""
    return {str(r.id): dict(r.response or {}) for e in events
            for r in e.get_function_responses()}


async def test_a_call_killed_before_its_start_runs_on_resume(tmp_path: Path) -> None:
    """Only announced (never started): the resume runs it, once."""
    assert await _killed_then_resumed(tmp_path, "before_start") == (1, {"status": "sent"})


async def test_a_call_killed_after_it_finished_is_answered_with_its_result(
        tmp_path: Path) -> None:
    """Finished before the crash: the resume answers with the recorded result, not a rerun."""
    assert await _killed_then_resumed(tmp_path, "after_finish") == (1, {"status": "sent"})


async def test_a_call_killed_after_its_side_effect_is_answered_may_have_run(
        tmp_path: Path) -> None:
    """Started, lease expired, undeclared tool: not run again; the model is told it may have."""
    effects, answer = await _killed_then_resumed(tmp_path, "after_effect")
    assert effects == 1
    assert answer["outcome"] == CallOutcome.MAY_HAVE_RUN.value
    assert answer["error"] == LEDGER_ERRORS[CallOutcome.MAY_HAVE_RUN]
    assert answer["safe_to_retry"] is False


async def test_an_idempotent_tool_killed_after_its_effect_runs_again(tmp_path: Path) -> None:
    """Declared idempotent, a second run is harmless: the resume runs it again."""
    policy = HealPolicy(tool_effects={"transfer": ToolEffect.IDEMPOTENT})
    assert await _killed_then_resumed(tmp_path, "after_effect", policy=policy) == (
        2, {"status": "sent"})


@pytest.mark.parametrize("point", ["after_effect", "after_finish"])
async def test_without_the_plugin_the_resume_runs_the_side_effect_again(
        tmp_path: Path, point: str) -> None:
    """The contrast: ADK's replay alone runs a transfer that had happened a second time."""
    effects, _ = await _killed_then_resumed(tmp_path, point, guarded=False)
    assert effects == 2


async def test_a_wrapper_not_told_the_app_is_resumable_heals_the_call_before_the_resume(
        tmp_path: Path) -> None:
    """Without ``resumable_app``, the wrapper reading the session for the resume heals a call
    whose lease ran out (here one that never started), so ADK's resume finds it answered and
    the transfer is never made."""
    effects, answer = await _killed_then_resumed(tmp_path, "before_start", healing=True)
    assert effects == 0
    assert answer["outcome"] == CallOutcome.NOT_STARTED.value


def _transfers_checked(effects: Path) -> HealPolicy:
    """A policy whose reconcile hook looks the transfer up in the effects file by its key."""
    async def transfer_made(call: DoubtfulCall) -> Reconciliation:
        made = call.idempotency_key in effects.read_text()
        return settled({"status": "sent", "checked": True}) if made else settled(happened=False)

    return HealPolicy(reconcile={"transfer": transfer_made})


async def test_a_call_in_doubt_is_answered_by_its_reconcile_hook(tmp_path: Path) -> None:
    """Killed after its side effect: the hook finds the transfer by key; its result answers."""
    effects, answer = await _killed_then_resumed(
        tmp_path, "after_effect", policy=_transfers_checked(tmp_path / "effects"))
    assert (effects, answer) == (1, {"status": "sent", "checked": True})


async def test_a_call_its_hook_says_did_not_happen_runs_again(tmp_path: Path) -> None:
    """The real system undid the killed run's transfer: the hook says so; the resume runs it."""
    effects, answer = await _killed_then_resumed(
        tmp_path, "after_effect", policy=_transfers_checked(tmp_path / "effects"), undone=True)
    assert (effects, answer) == (1, {"status": "sent"})


@pytest.mark.parametrize(("point", "expected"), [
    ("before_start", (1, {"status": "sent"})),
    ("after_finish", (1, {"status": "sent"})),
])
async def test_a_resumable_app_s_wrapper_leaves_the_call_to_the_resume(
        tmp_path: Path, point: str, expected: tuple[int, dict[str, Any]]) -> None:
    """With ``resumable_app``, the wrapper leaves the interrupted call to ADK's resume: one that
    never started runs, one that finished is answered with its result by the plugin."""
    assert await _killed_then_resumed(tmp_path, point, healing=True,
                                      resumable_app=True) == expected


@pytest.mark.postgres
@pytest.mark.parametrize(("point", "expected"), [
    ("after_finish", (1, {"status": "sent"})),
    ("after_effect", (1, {"error": LEDGER_ERRORS[CallOutcome.MAY_HAVE_RUN],
                          "outcome": "may_have_run", "safe_to_retry": False})),
])
async def test_on_postgresql_a_replay_runs_the_side_effect_at_most_once(
        tmp_path: Path, point: str, expected: tuple[int, dict[str, Any]]) -> None:
    """The same kill and resume on PostgreSQL (sessions and ledger in one database)."""
    async with temporary_database("postgres") as url:
        assert await _killed_then_resumed(tmp_path, point, url=url) == expected


@pytest.mark.parametrize("kind", ["def", "def_pool"])
@pytest.mark.parametrize(("point", "expected"), [
    ("after_finish", (1, {"status": "sent"})),
    ("after_effect", (1, {"error": LEDGER_ERRORS[CallOutcome.MAY_HAVE_RUN],
                          "outcome": "may_have_run", "safe_to_retry": False})),
])
async def test_a_plain_def_tool_is_guarded_the_same_way(
        tmp_path: Path, kind: str, point: str, expected: tuple[int, dict[str, Any]]) -> None:
    """A plain def tool, on ADK's loop or in its thread pool: killed and resumed, one transfer."""
    if kind == "def_pool":
        pytest.importorskip("google.adk.agents.run_config", reason="ADK 2.x's tool thread pool")
        from google.adk.agents import run_config
        if not hasattr(run_config, "ToolThreadPoolConfig"):
            pytest.skip("this ADK has no tool thread pool")
    assert await _killed_then_resumed(tmp_path, point, kind=kind) == expected


@pytest.mark.parametrize("guarded", [True, False])
async def test_a_parallel_batch_runs_only_the_call_that_never_started(
        tmp_path: Path, guarded: bool) -> None:
    """Killed when one of two parallel transfers had finished and the other had not started:
    the resume answers the finished one with its result and runs only the other (matched by
    call id); ADK's replay alone makes the finished transfer again."""
    answers: dict[str, dict[str, Any]] = {}
    transfers, _ = await _killed_then_resumed(tmp_path, "batch", guarded=guarded,
                                              answers=answers)
    assert answers == {"t-5": {"status": "sent"}, "t-7": {"status": "sent"}}
    lines = (tmp_path / "effects").read_text().splitlines()
    assert sorted(line.split()[1] for line in lines) == (["5", "7"] if guarded
                                                        else ["5", "5", "7"])
    assert transfers == len(lines)
