"""RedisToolRunLedger on real Redis: its records; a killed Runner healed by wrapper and repair."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from dataclasses import replace
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest
import redis.asyncio as redis_asyncio
from conftest import close_redis
from google.adk.integrations.redis import RedisSessionService, RedisSessionServiceConfig
from servers import REDIS_URL, temporary_redis_prefix
from stores import APP, USER
from tool_run_kill import run_until_killed, watch_then_kill

from adk_session_heal import HealingSessionService, HealPolicy, ScanOptions
from adk_session_heal.core.event_access import HEAL_METADATA_KEY
from adk_session_heal.core.session_key import SessionKey
from adk_session_heal.core.tool_runs import RunState, ToolRun, run_outcome
from adk_session_heal.ops.repair import repair
from adk_session_heal.policy import LEDGER_ERRORS, CallOutcome
from adk_session_heal.store import open_store
from adk_session_heal.store.ledger.tool_run_redis import RedisToolRunLedger

MAY_HAVE_RUN = {"error": LEDGER_ERRORS[CallOutcome.MAY_HAVE_RUN], "outcome": "may_have_run",
                "safe_to_retry": False}


@pytest.fixture
async def prefix() -> AsyncIterator[str]:
    """A fresh ADK key prefix on the real Redis, deleted after the test (tool runs too)."""
    async with temporary_redis_prefix() as fresh:
        yield fresh


@pytest.fixture
async def ledger(prefix: str) -> AsyncIterator[RedisToolRunLedger]:
    """The tool-run ledger of the test's prefix, over a client of its own."""
    runs = RedisToolRunLedger.from_url(f"{REDIS_URL}?key_prefix={quote(prefix, safe='')}")
    yield runs
    await runs.close()


def _run(call_id: str, attempt: int = 0) -> ToolRun:
    now = time.time()
    return ToolRun(app_name=APP, user_id=USER, session_id="s-1", call_id=call_id,
                   tool_name="charge_card", invocation_id="inv-1", state=RunState.STARTED,
                   host="h", pid=1, attempt=attempt, started_at=now, lease_until=now + 30)


async def test_records_count_attempts_and_refuse_stale_writers(
        ledger: RedisToolRunLedger, prefix: str) -> None:
    """Announce keeps records, returns new ids; starts count attempts; old attempts can't write."""
    key = SessionKey(APP, USER, "s-1")
    assert await ledger.announce([replace(_run("c-1"), state=RunState.ANNOUNCED)]) == {"c-1"}
    assert await ledger.announce([replace(_run("c-1"), state=RunState.ANNOUNCED, host="other"),
                                  replace(_run("c-2"), state=RunState.ANNOUNCED)]) == {"c-2"}
    announced = (await ledger.runs(key))["c-1"]
    assert announced.state is RunState.ANNOUNCED and announced.host == "h"
    first = replace(_run("c-1"), attempt=await ledger.start(_run("c-1")))
    second = replace(_run("c-1"), attempt=await ledger.start(_run("c-1")))
    assert (first.attempt, second.attempt) == (1, 2)
    assert not await ledger.renew(first, time.time() + 99)
    assert not await ledger.finish(first, RunState.FINISHED, time.time(), '{"a": 1}', False)
    assert await ledger.renew(second, time.time() + 60)
    assert await ledger.finish(second, RunState.FINISHED, time.time(), '{"a": 2}', False)
    assert not await ledger.renew(second, time.time() + 99)  # a late heartbeat: no lease left
    stored = (await ledger.runs(key, ["c-1", "nope"]))
    assert list(stored) == ["c-1"] and stored["c-1"].result == {"a": 2}
    attempts = await asyncio.gather(*(ledger.start(_run("same")) for _ in range(5)))
    assert sorted(attempts) == [1, 2, 3, 4, 5]  # WATCH/MULTI: no attempt lost
    client = redis_asyncio.from_url(REDIS_URL, decode_responses=True)
    try:
        ttl = await client.ttl(ledger.hash_key(key))
    finally:
        await client.aclose()
    assert 0 < ttl <= 7 * 24 * 3600
    assert ledger.hash_key(key).startswith(f"adk_session_heal:tool_runs:{prefix}")


async def test_a_redis_store_reads_the_tool_runs_beside_its_sessions(
        ledger: RedisToolRunLedger, prefix: str) -> None:
    """A Redis store opened by URL reads the runs recorded under its own key prefix only."""
    await ledger.start(_run("c-1"))
    key = SessionKey(APP, USER, "s-1")
    for url, found in ((f"{REDIS_URL}?key_prefix={quote(prefix, safe='')}", {"c-1"}),
                       (f"{REDIS_URL}?key_prefix={quote(prefix + 'other:', safe='')}", set())):
        store = await open_store(url)
        try:
            async with store.tool_runs() as runs:
                assert isinstance(runs, RedisToolRunLedger)
                assert set(await runs.runs(key)) == found
        finally:
            await store.close()


async def test_a_runner_killed_mid_tool_is_healed_from_redis_records(
        prefix: str, ledger: RedisToolRunLedger, tmp_path: Path) -> None:
    """SIGKILL during charge_card on ADK's Redis sessions: alive lease, no heal; expired, the
    wrapper heals at once as may_have_run; repair then finds nothing left to heal."""
    url = f"{REDIS_URL}?key_prefix={quote(prefix, safe='')}"

    def service() -> RedisSessionService:
        return RedisSessionService(RedisSessionServiceConfig(uri=REDIS_URL, key_prefix=prefix))

    adk = service()
    session = await adk.create_session(app_name=APP, user_id=USER)
    await close_redis(adk)
    await run_until_killed(url, session.id, "during_tool", tmp_path)
    (run,) = (await ledger.runs(SessionKey(APP, USER, session.id))).values()
    assert run.state is RunState.STARTED and run_outcome(run, run.lease_until + 1) is (
        CallOutcome.MAY_HAVE_RUN)

    async def read(now: float, policy: HealPolicy) -> list[Any]:
        inner = service()
        wrapper = HealingSessionService(inner, policy, tool_runs=ledger, clock=lambda: now)
        got = await wrapper.get_session(app_name=APP, user_id=USER, session_id=session.id)
        await close_redis(inner)
        assert got is not None
        return [r.response for e in got.events if (e.custom_metadata or {}).get(HEAL_METADATA_KEY)
                for r in e.get_function_responses()]

    beside = service()  # the README's form: the ledger over a RedisSessionService's own client
    assert await RedisToolRunLedger.from_service(beside).runs(SessionKey(APP, USER, session.id)) \
        == {run.call_id: run}
    await close_redis(beside)
    assert await read(run.lease_until - 0.5, HealPolicy(stale_after=0, clock_skew=0)) == []
    alive = await repair(url, ScanOptions(policy=HealPolicy(stale_after=0, clock_skew=0)),
                         now=run.lease_until - 0.5, ledger=False)
    assert alive.heals == [] and alive.scan.in_flight_calls[0].lease_holder
    assert await read(run.lease_until + 0.5, HealPolicy(clock_skew=0)) == [MAY_HAVE_RUN]
    after = await repair(url, ScanOptions(policy=HealPolicy(stale_after=0, clock_skew=0)),
                         now=run.lease_until + 0.5, ledger=False)
    assert after.heals == []


@pytest.mark.slow
async def test_a_plain_def_tool_holds_its_redis_lease_until_its_process_is_killed(
        prefix: str, ledger: RedisToolRunLedger, tmp_path: Path) -> None:
    """A plain `def` tool blocking the runner's loop for 3 leases on ADK's Redis sessions is
    never healed by another process's wrapper (clock_skew=0); SIGKILLed, it is: may_have_run."""

    def service() -> RedisSessionService:
        return RedisSessionService(RedisSessionServiceConfig(uri=REDIS_URL, key_prefix=prefix))

    adk = service()
    session = await adk.create_session(app_name=APP, user_id=USER)
    await close_redis(adk)
    await watch_then_kill(f"{REDIS_URL}?key_prefix={quote(prefix, safe='')}", session.id,
                          "during_sync_tool", tmp_path, service, ledger, close_redis)


async def test_a_copy_renews_from_another_thread_s_event_loop(prefix: str) -> None:
    """open_copy over a RedisSessionService's own client: a client and pool of its own with
    the same settings (database, decoding), used from another thread's loop; closing it
    leaves the service's client open."""
    adk = RedisSessionService(RedisSessionServiceConfig(uri=f"{REDIS_URL[:-2]}/3",
                                                        key_prefix=prefix))
    ledger = RedisToolRunLedger.from_service(adk)
    try:
        run = replace(_run("c-1"), attempt=await ledger.start(_run("c-1")))
        copy = ledger.open_copy()
        assert copy._client is not ledger._client and copy.key_prefix == prefix

        async def renew_then_close() -> tuple[bool, dict[str, ToolRun]]:
            try:
                return (await copy.renew(run, run.lease_until + 5),
                        await copy.runs(SessionKey(APP, USER, "s-1")))
            finally:
                await copy.close()

        renewed, seen = await asyncio.to_thread(asyncio.run, renew_then_close())
        assert renewed and seen["c-1"].lease_until == run.lease_until + 5
        assert (await ledger.runs(SessionKey(APP, USER, "s-1")))["c-1"] == seen["c-1"]
        assert await ledger.renew(run, run.lease_until + 6)  # the service's client: still open
    finally:
        await adk._get_redis().delete(ledger.hash_key(SessionKey(APP, USER, "s-1")))
        await close_redis(adk)
