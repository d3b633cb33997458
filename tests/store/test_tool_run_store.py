"""SqlToolRunLedger on every SQL layout: attempts, stale heartbeats and finishes, reads, copies."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Coroutine
from dataclasses import replace
from pathlib import Path
from typing import Any, TypeVar

import pytest
from servers import temporary_database
from sqlalchemy import text
from sqlalchemy.ext.asyncio import create_async_engine
from stores import (  # noqa: F401
    APP,
    KINDS,
    USER,
    Store,
    adk_store_fixture,
    close,
    make_store,
    tool_run_ledger_fixture,
)

from adk_session_heal import migrate
from adk_session_heal.core.session_key import SessionKey
from adk_session_heal.core.tool_runs import RunState, ToolRun
from adk_session_heal.ledger import SqlToolRunLedger
from adk_session_heal.store import open_store

KEY = SessionKey("app", "user", "s-1")
_T = TypeVar("_T")


def _run(call_id: str, attempt: int = 0, now: float | None = None) -> ToolRun:
    now = time.time() if now is None else now
    return ToolRun(app_name=KEY.app_name, user_id=KEY.user_id, session_id=KEY.session_id,
                   call_id=call_id, tool_name="charge_card", invocation_id="inv-1",
                   state=RunState.STARTED, host="h", pid=1, attempt=attempt,
                   started_at=now, lease_until=now + 30)


async def test_a_restarted_call_is_a_new_attempt_and_the_old_one_cannot_overwrite_it(
        adk_store: Store, tool_run_ledger: SqlToolRunLedger) -> None:
    """A call id started again clears its result; the old attempt's heartbeat and end fail."""
    ledger = tool_run_ledger
    first = _run("c-1", attempt=await ledger.start(_run("c-1")))
    assert first.attempt == 1
    assert await ledger.finish(first, RunState.FINISHED, time.time(), '{"ok": 1}', False)
    second = _run("c-1", attempt=await ledger.start(_run("c-1")))
    assert second.attempt == 2
    stored = (await ledger.runs(KEY))["c-1"]
    assert stored.state is RunState.STARTED and stored.result is None and stored.attempt == 2
    assert not await ledger.renew(first, time.time() + 99)
    assert not await ledger.finish(first, RunState.FAILED, time.time(), None, False)
    assert await ledger.renew(second, stored.lease_until + 5)
    assert (await ledger.runs(KEY))["c-1"].lease_until == stored.lease_until + 5
    assert await ledger.finish(second, RunState.FINISHED, time.time(), '{"ok": 2}', False)
    assert not await ledger.renew(second, time.time() + 99)  # finished: no lease to renew
    assert (await ledger.runs(KEY))["c-1"].result == {"ok": 2}


async def test_concurrent_first_starts_of_many_calls_each_get_one_row(
        adk_store: Store, tool_run_ledger: SqlToolRunLedger) -> None:
    """Parallel calls start at once: one row each; two starts of one id are attempts 1 and 2."""
    ledger = tool_run_ledger
    attempts = await asyncio.gather(*(ledger.start(_run(f"c-{i}")) for i in range(8)),
                                    ledger.start(_run("same")), ledger.start(_run("same")))
    assert attempts[:8] == [1] * 8 and sorted(attempts[8:]) == [1, 2]
    runs = await ledger.runs(KEY)
    assert sorted(runs) == sorted([f"c-{i}" for i in range(8)] + ["same"])
    assert await ledger.runs(KEY, ["c-1", "nope"]) == {"c-1": runs["c-1"]}
    assert await ledger.runs(KEY, []) == {}
    assert await ledger.runs(SessionKey("app", "user", "other")) == {}


async def test_an_announcement_never_overwrites_a_record(
        adk_store: Store, tool_run_ledger: SqlToolRunLedger) -> None:
    """Announcements keep records and return only the ids they recorded; starts count from 1."""
    ledger = tool_run_ledger
    announced = [replace(_run(f"c-{i}"), state=RunState.ANNOUNCED) for i in range(3)]
    assert await ledger.announce(announced) == {"c-0", "c-1", "c-2"}
    assert await ledger.announce(announced[:1]) == set()  # the same event seen twice
    runs = await ledger.runs(KEY)
    assert {r.state for r in runs.values()} == {RunState.ANNOUNCED}
    assert {r.attempt for r in runs.values()} == {0}
    assert await ledger.start(_run("c-0")) == 1
    more = replace(_run("c-3"), state=RunState.ANNOUNCED)
    assert await ledger.announce([*announced, more]) == {"c-3"}
    after = await ledger.runs(KEY)
    assert after["c-0"].state is RunState.STARTED and after["c-0"].attempt == 1
    assert after["c-1"] == runs["c-1"]


async def _in_a_thread_loop(work: Callable[[], Coroutine[Any, Any, _T]]) -> _T:
    """Runs ``work()`` on a new event loop in another thread (as the lease heartbeat does)."""
    return await asyncio.to_thread(asyncio.run, work())


async def test_a_copy_renews_from_another_thread_s_event_loop(
        adk_store: Store, tool_run_ledger: SqlToolRunLedger) -> None:
    """open_copy: the same table over an engine of its own, used from another thread's loop
    while the original is in use; closing the copy leaves the original open."""
    ledger = tool_run_ledger
    run = _run("c-1", attempt=await ledger.start(_run("c-1")))
    copy = ledger.open_copy()
    assert copy.engine is not ledger.engine and copy.engine.url == ledger.engine.url

    async def renew_then_close() -> list[bool]:
        try:
            return [await copy.renew(run, run.lease_until + step) for step in (1, 2)]
        finally:
            await copy.close()

    assert await _in_a_thread_loop(renew_then_close) == [True, True]
    assert (await ledger.runs(KEY))["c-1"].lease_until == run.lease_until + 2
    assert await ledger.renew(run, run.lease_until + 3)  # the original still works


@pytest.mark.postgres
async def test_a_copy_connects_as_the_engine_it_was_given() -> None:
    """A ledger over an engine with its own connect arguments (a session service's): the
    copy's connections are made with them too (PostgreSQL's application_name here)."""
    async with temporary_database("postgres") as url:
        engine = create_async_engine(url, connect_args={
            "server_settings": {"application_name": "adk-lease-copy"}})
        copy = SqlToolRunLedger(engine).open_copy()

        async def application_name() -> str:
            try:
                async with copy.engine.connect() as conn:
                    return str((await conn.execute(
                        text("SELECT current_setting('application_name')"))).scalar_one())
            finally:
                await copy.close()

        try:
            assert await _in_a_thread_loop(application_name) == "adk-lease-copy"
        finally:
            await engine.dispose()


@pytest.mark.parametrize(("kept", "read"), [
    ('"a plain text"', {"result": "a plain text"}),  # an older record of a 1.x AgentTool
    ("[1, 2]", {"result": [1, 2]}),
    ("not json {", None),  # a damaged record: never sent to the model as a result
])
async def test_a_kept_result_is_read_back_as_the_response_adk_sends(
        adk_store: Store, tool_run_ledger: SqlToolRunLedger, kept: str,
        read: dict[str, Any] | None) -> None:
    """A kept result that is no JSON object reads back as ADK sends it; bad JSON as no result."""
    run = _run("c-1", attempt=await tool_run_ledger.start(_run("c-1")))
    assert await tool_run_ledger.finish(run, RunState.FINISHED, time.time(), kept, False)
    assert (await tool_run_ledger.runs(KEY))["c-1"].result == read


@pytest.mark.parametrize("kind", KINDS)
async def test_a_scan_reads_the_tool_run_table_only_once_it_holds_a_run(
        kind: str, tmp_path: Path) -> None:
    """A SQL store opened by URL has no tool-run ledger to read before `db upgrade` adds the
    table, nor while the table is empty; once a run is recorded, it reads that run."""
    async for adk_store in make_store(kind, tmp_path):
        service = adk_store.service()
        await service.list_sessions(app_name=APP, user_id=USER)  # ADK creates its tables
        await close(service)
        store = await open_store(adk_store.url)
        try:
            async with store.tool_runs() as runs:
                assert runs is None
            await migrate.upgrade(adk_store.url)
            async with store.tool_runs() as runs:
                assert runs is None
            writer = SqlToolRunLedger.from_url(adk_store.url)
            try:
                await writer.start(_run("c-1"))
            finally:
                await writer.close()
            async with store.tool_runs() as runs:
                assert runs is not None
                assert set(await runs.runs(KEY)) == {"c-1"}
        finally:
            await store.close()
