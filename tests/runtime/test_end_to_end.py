"""End to end: a real ADK Runner crashed mid-tool in a child process, resumed elsewhere."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import time
from pathlib import Path

import pytest
from google.adk.sessions import DatabaseSessionService
from paths import CHILDREN
from service_histories import store_crashed, synthetic

from adk_session_heal.core.findings import CallStatus, classify
from adk_session_heal.policy import DEFAULT_PAYLOAD
from adk_session_heal.testing import APP_NAME, CRASH_EXIT_CODE, USER_ID, History, spawn_crash


async def crashed_session(db_url: str) -> str:
    """Runs the demo agent's turn in a child process whose tool calls os._exit."""
    service = DatabaseSessionService(db_url)
    session = await service.create_session(app_name=APP_NAME, user_id=USER_ID)
    await service.close()
    code = await asyncio.to_thread(spawn_crash, db_url, session.id)
    assert code == CRASH_EXIT_CODE
    return session.id


def resume_in_fresh_process(db_url: str, session_id: str, *, healing: bool) -> dict:
    """Resumes the session in another Python process and returns its JSON report."""
    mode = "resume" if healing else "resume-bare"
    completed = subprocess.run(
        [sys.executable, "-m", "adk_session_heal.cli.demo", mode, db_url, session_id],
        capture_output=True, text=True, timeout=120, check=True,
    )
    return json.loads(completed.stdout.strip().splitlines()[-1])


async def test_crash_leaves_an_unanswered_call(tmp_path: Path) -> None:
    """After os._exit mid-tool, storage holds a function call and no response."""
    url = f"sqlite+aiosqlite:///{tmp_path / 's.db'}"
    session_id = await crashed_session(url)
    service = DatabaseSessionService(url)
    session = await service.get_session(app_name=APP_NAME, user_id=USER_ID, session_id=session_id)
    await service.close()
    assert session is not None
    (finding,) = classify(session.events, now=time.time()).calls
    assert finding.name == "get_weather" and finding.status is CallStatus.IN_FLIGHT


@pytest.mark.slow
async def test_fresh_process_resume_heals_and_model_sees_the_failure(tmp_path: Path) -> None:
    """A fresh process heals at the new turn; the model's request holds the synthetic
    response, and the request passes the strict provider check."""
    url = f"sqlite+aiosqlite:///{tmp_path / 's.db'}"
    session_id = await crashed_session(url)
    report = resume_in_fresh_process(url, session_id, healing=True)

    assert report["heals"] == 1
    assert report["request_calls"] == ["get_weather"]
    assert report["request_responses"] == [dict(DEFAULT_PAYLOAD)]
    shape = [(e["author"], e["synthetic"], e["calls"]) for e in report["events"]]
    assert shape == [
        ("user", False, []),
        ("weather_agent", False, ["get_weather"]),
        ("weather_agent", True, []),
        ("user", False, []),
        ("weather_agent", False, []),
    ]
    again = resume_in_fresh_process(url, session_id, healing=True)
    assert again["heals"] == 0
    assert sum(e["synthetic"] for e in again["events"]) == 1


@pytest.mark.slow
async def test_without_healing_adk_drops_the_call_and_storage_stays_broken(
    tmp_path: Path,
) -> None:
    """The baseline we fix: ADK silently drops the dead call and never repairs storage."""
    url = f"sqlite+aiosqlite:///{tmp_path / 's.db'}"
    session_id = await crashed_session(url)
    report = resume_in_fresh_process(url, session_id, healing=False)
    assert report["request_calls"] == [] and report["request_responses"] == []
    assert not any(e["synthetic"] for e in report["events"])
    service = DatabaseSessionService(url)
    session = await service.get_session(app_name=APP_NAME, user_id=USER_ID, session_id=session_id)
    await service.close()
    assert session is not None
    assert classify(session.events, now=time.time()).needs_healing


@pytest.mark.slow
async def test_processes_racing_on_postgres_write_one_heal(postgres_url: str) -> None:
    """Several processes healing the same session at once on PostgreSQL store one row."""
    inner = DatabaseSessionService(postgres_url)
    history = History(start=time.time() - 60)
    history.user("weather?")
    history.call("get_weather")
    history.user("hello?")
    session = await store_crashed(inner, history)
    await inner.close()

    start_at = time.time() + 3.0
    processes = [
        await asyncio.create_subprocess_exec(
            sys.executable, str(CHILDREN / "heal_reader.py"), postgres_url, session.id,
            str(start_at), stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        )
        for _ in range(4)
    ]
    outputs = [await p.communicate() for p in processes]
    assert all(p.returncode == 0 for p in processes), [o[1][-500:] for o in outputs]
    written = [int(out.decode().strip().splitlines()[-1]) for out, _ in outputs]
    assert sum(written) == 1

    reader = DatabaseSessionService(postgres_url)
    stored = await reader.get_session(app_name="app", user_id="user", session_id=session.id)
    await reader.close()
    assert stored is not None
    assert [e.id for e in stored.events] == ["e-0001", "e-0002", "e-0002-heal", "e-0003"]
    assert len(synthetic(stored.events)) == 1
