"""HealingSessionService never returns a dead call that a race kept it from healing.

The wrapper reads a session, plans its heals and writes them; the writer
re-counts the session's events in its transaction and skips a session that
moved since the read. Here the session moves at that exact moment (deterministic
tests, over every inner service), and then for real: eight reader processes, a
live ADK runner whose tool crashes, and three CLI repairs, all on the same
sessions, on PostgreSQL, MariaDB and SQLite. Every session ``get_session``
returns is checked with the core's ``classify``.
"""

from __future__ import annotations

import asyncio
import json
import logging
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
from conftest import ServiceFactory
from google.adk.events.event import Event
from google.adk.sessions import (
    BaseSessionService,
    DatabaseSessionService,
    InMemorySessionService,
)
from google.genai import types
from paths import CHILDREN
from servers import temporary_database
from service_histories import APP, USER, crashed_history, store_crashed, stored_events, synthetic

from adk_session_heal import migrate
from adk_session_heal.core.event_access import HEAL_METADATA_KEY
from adk_session_heal.core.findings import classify
from adk_session_heal.runtime.service import HealingSessionService


def _after_first_read(inner: BaseSessionService, act: Callable[[], Awaitable[None]],
                      *, times: int = 1) -> None:
    """Makes ``inner``'s next ``times`` reads (``get_session``) each run ``act`` after reading.

    The read returned is the one made before ``act``: what a reader holds when
    another process writes between its read and its heal. ``act``'s own reads
    (through the same service) are left alone.
    """
    read = inner.get_session
    left = times
    acting = False

    async def get_session(**kwargs: Any) -> Any:
        nonlocal left, acting
        session = await read(**kwargs)
        if left and not acting:
            left -= 1
            acting = True
            try:
                await act()
            finally:
                acting = False
        return session

    inner.get_session = get_session  # type: ignore[method-assign]


async def _append_text(service: BaseSessionService, session_id: str) -> None:
    """The runner's next event in the newest invocation, appended through ADK."""
    session = await service.get_session(app_name=APP, user_id=USER, session_id=session_id)
    assert session is not None
    await service.append_event(session, Event(
        invocation_id=session.events[-1].invocation_id, author="assistant",
        content=types.Content(role="model", parts=[types.Part(text="Still there?")])))


async def test_a_heal_skipped_for_an_append_is_read_again_and_healed(
    store_factory: ServiceFactory,
) -> None:
    """An event appended between the read and the write: the session is read again, healed,
    and returned as storage holds it."""
    session = await store_crashed(await store_factory(), crashed_history())
    inner = await store_factory()
    runner = await store_factory()
    _after_first_read(inner, lambda: _append_text(runner, session.id))

    healed = await HealingSessionService(inner).get_session(
        app_name=APP, user_id=USER, session_id=session.id)

    assert healed is not None
    assert not classify(healed.events, now=time.time()).needs_healing
    stored = await stored_events(store_factory, session.id)
    assert [e.id for e in healed.events] == [e.id for e in stored]
    assert len(stored) == 5 and len(synthetic(stored)) == 1


async def test_a_heal_skipped_for_another_healer_returns_the_stored_heal(
    store_factory: ServiceFactory,
) -> None:
    """Another healer heals and the runner appends between the read and the write: the
    stored heal (the winner's, with its own marker) is what comes back."""
    session = await store_crashed(await store_factory(), crashed_history())
    inner = await store_factory()
    runner = await store_factory()
    winner = HealingSessionService(await store_factory(), clock=lambda: 1_000_000_000.0)

    async def heal_and_append() -> None:
        await winner.get_session(app_name=APP, user_id=USER, session_id=session.id)
        await _append_text(runner, session.id)

    _after_first_read(inner, heal_and_append)
    healed = await HealingSessionService(inner).get_session(
        app_name=APP, user_id=USER, session_id=session.id)

    assert healed is not None
    assert not classify(healed.events, now=time.time()).needs_healing
    (heal,) = synthetic(healed.events)
    assert heal.custom_metadata is not None
    assert heal.custom_metadata[HEAL_METADATA_KEY]["healed_at"] == 1_000_000_000.0
    stored = await stored_events(store_factory, session.id)
    assert [e.id for e in healed.events] == [e.id for e in stored]


async def test_a_session_deleted_between_the_read_and_the_write_is_returned_as_gone(
    store_factory: ServiceFactory,
) -> None:
    """The application deletes the session while the wrapper heals it: get_session
    returns None, as storage now says, not the dead call it read."""
    session = await store_crashed(await store_factory(), crashed_history())
    inner = await store_factory()
    app = await store_factory()

    async def delete() -> None:
        await app.delete_session(app_name=APP, user_id=USER, session_id=session.id)

    _after_first_read(inner, delete)
    assert await HealingSessionService(inner).get_session(
        app_name=APP, user_id=USER, session_id=session.id) is None


async def test_a_session_that_changes_under_every_read_is_read_ten_times(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The re-reads are bounded: a session appended to between every read and its heal is
    read 10 times, then returned as last read, with a WARNING saying so."""
    inner = InMemorySessionService()
    session = await store_crashed(inner, crashed_history())
    reads: list[int] = []

    async def append() -> None:
        reads.append(1)
        await _append_text(inner, session.id)

    _after_first_read(inner, append, times=100)
    caplog.set_level(logging.WARNING, logger="adk_session_heal")
    returned = await HealingSessionService(inner).get_session(
        app_name=APP, user_id=USER, session_id=session.id)

    assert len(reads) == 10
    assert returned is not None and classify(returned.events, now=time.time()).needs_healing
    (warning,) = [r for r in caplog.records if r.name == "adk_session_heal"]
    assert "changed under each of 10 reads" in warning.getMessage()


_SESSIONS = 3
"""Sessions the race test's runner turns and readers read (few: the races meet often)."""
_TURNS = 24
"""Turns the race test's runner runs; a repair starts at the first, at a third and at
two thirds of them."""


async def _race(url: str, tmp_path: Path, *, turns: int = _TURNS) -> int:
    """Runs the runner, 8 readers and 3 CLI repairs on ``url`` and checks what each saw.

    Returns:
        How many sessions the readers were returned.
    """
    inner = DatabaseSessionService(url)
    try:
        for n in range(_SESSIONS):
            await inner.create_session(app_name=APP, user_id=USER, session_id=f"s{n:03d}")
    finally:
        await inner.close()
    await migrate.upgrade(url)
    go, stop = tmp_path / "go", tmp_path / "stop"

    logs: dict[asyncio.subprocess.Process, Path] = {}

    async def child(*args: str) -> asyncio.subprocess.Process:
        # stderr to a file: the runner logs a traceback per crashed tool, and a pipe
        # nobody reads until the end would fill and block it.
        path = tmp_path / f"child-{len(logs)}.log"
        with path.open("wb") as log:
            process = await asyncio.create_subprocess_exec(
                sys.executable, *args, stdout=asyncio.subprocess.PIPE, stderr=log)
        logs[process] = path
        return process

    def log_of(process: asyncio.subprocess.Process) -> str:
        return logs[process].read_text(errors="replace")[-2000:]

    runner = await child(str(CHILDREN / "race_runner.py"), url, str(_SESSIONS), str(turns),
                         str(go))
    readers = [await child(str(CHILDREN / "race_reader.py"), url, str(_SESSIONS), str(go),
                           str(stop)) for _ in range(8)]
    for process in (runner, *readers):
        assert process.stdout is not None
        line = await process.stdout.readline()
        if line.strip() != b"ready":
            await process.wait()
            pytest.fail(log_of(process))
    go.touch()
    repairs: list[asyncio.Task[tuple[int | None, bytes, str]]] = []

    async def repair() -> tuple[int | None, bytes, str]:
        process = await child("-m", "adk_session_heal", "repair", url, "--yes",
                              "--format", "json")
        out, _ = await process.communicate()
        return process.returncode, out, log_of(process)

    assert runner.stdout is not None
    ran_turns = 0
    while line := await runner.stdout.readline():
        if line.strip() != b"turn":
            break
        ran_turns += 1
        if ran_turns in (1, turns // 3, 2 * turns // 3):
            repairs.append(asyncio.create_task(repair()))
    await runner.wait()
    assert runner.returncode == 0, log_of(runner)
    ran = json.loads(line)
    repaired = await asyncio.gather(*repairs)
    stop.touch()
    outputs = [await reader.communicate() for reader in readers]

    assert ran == {"turns": turns, "errors": []}
    for code, out, err in repaired:
        assert code in (0, 3), err  # 3: a session moved under the repair
        assert json.loads(out)["command"] == "repair"
    reads = 0
    for reader, (out, _) in zip(readers, outputs, strict=True):
        assert reader.returncode == 0, log_of(reader)
        seen = json.loads(out.decode().splitlines()[-1])
        assert seen["lost"] == [] and seen["errors"] == [], seen
        reads += seen["reads"]
    assert reads >= 8
    check = DatabaseSessionService(url)
    try:
        for n in range(_SESSIONS):
            healed = await HealingSessionService(check).get_session(
                app_name=APP, user_id=USER, session_id=f"s{n:03d}")
            assert healed is not None
            findings = classify(healed.events, now=time.time())
            assert not findings.needs_healing and not findings.duplicate_responses
    finally:
        await check.close()
    return reads


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["postgres", "mariadb"])
async def test_readers_a_runner_and_repairs_never_return_a_healable_dead_call(
    kind: str, tmp_path: Path
) -> None:
    """8 reader processes, a live runner whose tool crashes and 3 CLI repairs on the same
    sessions: no get_session returns a dead call it should have healed, no write fails,
    the runner never meets a stale session, and every dead call ends up answered once."""
    async with temporary_database(kind) as url:
        await _race(url, tmp_path)


@pytest.mark.slow
async def test_readers_a_runner_and_repairs_on_sqlite(tmp_path: Path) -> None:
    """The same race on one SQLite file (its write lock serialises the writers)."""
    await _race(f"sqlite+aiosqlite:///{tmp_path / 'sessions.db'}", tmp_path)


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["postgres", "mariadb"])
async def test_the_race_at_the_size_it_was_reported(kind: str, tmp_path: Path) -> None:
    """The same race 8 times longer (thousands of get_session results; issue 28 saw 2 of
    about 3,000 hold a dead call): not a single one holds a healable dead call."""
    async with temporary_database(kind) as url:
        await _race(url, tmp_path, turns=8 * _TURNS)
