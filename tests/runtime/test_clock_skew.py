"""Clock skew between hosts: a call is stale only past ``stale_after`` plus ``clock_skew``.

ADK stamps an event with its writer's clock; a healer on another host reads
its age on its own clock. :attr:`HealPolicy.clock_skew` (5 minutes by default)
is added to every age rule, a call stamped in the healer's future is never
stale, and ``superseded`` needs no clock at all. The last tests run a real
``Runner`` with a slow tool in one process while another process, its clock
5 minutes ahead or behind, reads the session through the wrapper.
"""

from __future__ import annotations

import asyncio
import json
import sys
import time
from datetime import timedelta
from pathlib import Path

import pytest
from append_services import AppendingDatabaseService, database_service
from click.testing import CliRunner
from google.adk.sessions import BaseSessionService, DatabaseSessionService
from paths import CHILDREN, SUPPORT
from service_histories import APP, USER, store_crashed, synthetic
from slow_tool_run import FINAL_TEXT

from adk_session_heal import HealingSessionService, HealPolicy, ScanOptions
from adk_session_heal.cli import main as cli_main
from adk_session_heal.core.findings import CallStatus, classify
from adk_session_heal.ops.scan import scan
from adk_session_heal.policy import DEFAULT_CLOCK_SKEW
from adk_session_heal.testing import History

NOW = 1_800_000_000.0
SKEW = DEFAULT_CLOCK_SKEW


def newest_call(age: float) -> History:
    """A session whose newest invocation holds one unanswered call stamped ``age`` s before NOW."""
    history = History(start=NOW - age - 1)
    history.user("run the report")
    history.call("report")
    return history


def status(history: History, **rule: float) -> CallStatus:
    (finding,) = classify(history.events, now=NOW, **rule).calls
    return finding.status


def test_default_skew_is_five_minutes() -> None:
    """HealPolicy tolerates 5 minutes between hosts unless told otherwise; seconds or timedelta."""
    assert SKEW == 300.0
    assert HealPolicy().clock_skew_seconds == 300.0
    assert HealPolicy(clock_skew=timedelta(minutes=2)).clock_skew_seconds == 120.0
    with pytest.raises(ValueError, match="clock_skew must not be negative"):
        HealPolicy(clock_skew=-1)


@pytest.mark.parametrize("age", [0.0, 9.0, SKEW, SKEW + 10.0])
def test_a_call_younger_than_stale_after_plus_skew_is_in_flight(age: float) -> None:
    """Stale only when now - call time > stale_after + clock_skew (boundary included)."""
    assert status(newest_call(age), stale_after=10, clock_skew=SKEW) is CallStatus.IN_FLIGHT


def test_a_call_older_than_stale_after_plus_skew_is_stale() -> None:
    """Just past stale_after + clock_skew the call is stale; without a skew, past stale_after."""
    assert status(newest_call(SKEW + 11.0), stale_after=10, clock_skew=SKEW) is CallStatus.STALE
    assert status(newest_call(11.0), stale_after=10) is CallStatus.STALE


@pytest.mark.parametrize("ahead", [1.0, SKEW, 10 * SKEW])
def test_a_call_stamped_in_the_future_is_never_stale(ahead: float) -> None:
    """A writer whose clock runs ahead stamps calls in our future: never stale, even at 0 s."""
    assert status(newest_call(-ahead), stale_after=0, clock_skew=0) is CallStatus.IN_FLIGHT


def test_superseded_does_not_depend_on_clocks() -> None:
    """A call a later invocation supersedes is dead whatever its stamp (future included)."""
    history = History(start=NOW + 10 * SKEW)
    history.user("run the report")
    history.call("report")
    history.user("hello?")
    assert status(history, stale_after=10, clock_skew=SKEW) is CallStatus.SUPERSEDED
    assert status(history) is CallStatus.SUPERSEDED


async def test_append_path_quiet_after_waits_for_the_skew_too(tmp_path: Path) -> None:
    """get_session on the append path heals only after quiet_after + clock_skew of idleness."""
    inner = AppendingDatabaseService(f"sqlite+aiosqlite:///{tmp_path / 's.db'}")
    try:
        history = History(start=time.time() - 120)  # stale by age, idle for about 2 minutes
        history.user("run the report")
        history.call("report")
        session = await store_crashed(inner, history)
        policy = HealPolicy(stale_after=1, quiet_after=60, clock_skew=300)
        assert policy.is_quiet(history.events[-1].timestamp, now=time.time() + 300)
        assert not policy.is_quiet(history.events[-1].timestamp, now=time.time())

        patient = HealingSessionService(inner, HealPolicy(stale_after=1, quiet_after=60))
        await patient.get_session(app_name=APP, user_id=USER, session_id=session.id)
        bare = await inner.get_session(app_name=APP, user_id=USER, session_id=session.id)
        assert bare is not None and synthetic(bare.events) == []

        same_host = HealPolicy(stale_after=1, quiet_after=60, clock_skew=0)
        await HealingSessionService(inner, same_host).get_session(
            app_name=APP, user_id=USER, session_id=session.id)
        bare = await inner.get_session(app_name=APP, user_id=USER, session_id=session.id)
        assert bare is not None and len(synthetic(bare.events)) == 1
    finally:
        await inner.close()


async def _two_minute_old_call(url: str) -> None:
    """Stores a session whose newest invocation holds a call made two minutes ago."""
    inner = DatabaseSessionService(url)
    history = History(start=time.time() - 120)
    history.user("run the report")
    history.call("report")
    await store_crashed(inner, history)
    await inner.close()


def test_scan_and_cli_add_the_skew_to_older_than(tmp_path: Path) -> None:
    """scan/repair --older-than X: a call counts as stale past X + --clock-skew (default 5m)."""
    url = f"sqlite+aiosqlite:///{tmp_path / 's.db'}"
    asyncio.run(_two_minute_old_call(url))

    assert not asyncio.run(scan(url, ScanOptions(policy=HealPolicy(stale_after=1)))).needs_healing
    no_skew = ScanOptions(policy=HealPolicy(stale_after=1, clock_skew=0))
    assert asyncio.run(scan(url, no_skew)).needs_healing
    runner = CliRunner()
    assert runner.invoke(cli_main, ["scan", url, "--older-than", "1s"]).exit_code == 0
    assert runner.invoke(cli_main, ["scan", url, "--older-than", "1s",
                                    "--clock-skew", "0s"]).exit_code == 1
    help_text = runner.invoke(cli_main, ["repair", "--help"], terminal_width=200).output
    assert "--clock-skew TEXT" in help_text and "added to --older-than" in help_text


# -- two processes: a running tool, a reader whose clock is off ----------------------


async def _skewed_run(kind: str, offset: float, tmp_path: Path) -> tuple[dict[str, int], str]:
    """Runs slow_tool_run.py while skewed_reader.py polls; returns the reader's report."""
    url = f"sqlite+aiosqlite:///{tmp_path / 'shared.db'}"
    service: BaseSessionService = database_service(kind, url)
    session = await service.create_session(app_name=APP, user_id=USER)
    await service.close()  # type: ignore[attr-defined]
    stop = tmp_path / "stop"
    reader = await asyncio.create_subprocess_exec(
        sys.executable, str(CHILDREN / "skewed_reader.py"), str(offset), kind, url, session.id,
        str(stop), "10", stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    ready = tmp_path / "stop.ready"
    for _ in range(600):
        if ready.exists() or reader.returncode is not None:
            break
        await asyncio.sleep(0.1)
    runner = await asyncio.create_subprocess_exec(
        sys.executable, str(SUPPORT / "slow_tool_run.py"), kind, url, session.id,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    _out, runner_err = await asyncio.wait_for(runner.communicate(), 120)
    stop.touch()
    reader_out, reader_err = await asyncio.wait_for(reader.communicate(), 60)
    assert reader.returncode == 0, reader_err.decode()[-2000:]
    assert runner.returncode == 0, runner_err.decode()[-2000:]  # no StaleSessionError
    return json.loads(reader_out.decode().strip().splitlines()[-1]), session.id


@pytest.mark.slow
@pytest.mark.parametrize("offset", [300.0, -300.0], ids=["reader+5min", "reader-5min"])
@pytest.mark.parametrize("kind", ["direct", "append"])
async def test_a_reader_five_minutes_off_never_heals_a_running_tool(
    kind: str, offset: float, tmp_path: Path
) -> None:
    """A reader 5 min ahead/behind (stale_after=10 s, tool 3 s) writes no heal; the run ends well.

    Without the skew rule the +5 min reader sees the running call 300 s old and
    heals it as stale (the tool's own answer then lands after the heal, or, on
    the append path, the runner's next append fails with StaleSessionError).
    """
    report, session_id = await _skewed_run(kind, offset, tmp_path)
    assert report["heals"] == 0
    assert report["unanswered_reads"] >= 3, report  # it did watch the tool run

    bare = DatabaseSessionService(f"sqlite+aiosqlite:///{tmp_path / 'shared.db'}")
    stored = await bare.get_session(app_name=APP, user_id=USER, session_id=session_id)
    await bare.close()
    assert stored is not None
    assert synthetic(stored.events) == []
    (response,) = [r for e in stored.events for r in e.get_function_responses()]
    assert response.response == {"job": "report", "status": "done"}
    assert stored.events[-1].content is not None
    assert stored.events[-1].content.parts is not None
    assert stored.events[-1].content.parts[0].text == FINAL_TEXT
