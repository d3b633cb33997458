"""The CLI driven for real: crashed ADK runs, every bad input, exit codes, JSON, no secrets."""

from __future__ import annotations

import datetime
import json
import os
import pickle
import pty
import select
import sqlite3
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import closing
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result
from google.adk.events.event import Event
from google.adk.sessions import DatabaseSessionService
from google.adk.sessions.schemas.v0 import Base as BaseV0
from google.adk.sessions.sqlite_session_service import SqliteSessionService
from google.genai import types
from sqlalchemy import LargeBinary, String, bindparam, text
from sqlalchemy.ext.asyncio import create_async_engine
from stores import (
    APP,
    USER,
    Store,
    close,
    crashed_histories,
    fill,
    make_store,
    snapshot,
    table_names,
)

from adk_session_heal import demo
from adk_session_heal.cli import main, parse_duration
from adk_session_heal.findings import classify
from adk_session_heal.testing import ScriptedModel

HERE = Path(__file__).parent


def cli(*args: str) -> Result:
    """Runs the CLI in-process (stdin is not a terminal).

    In a thread of its own, since the CLI runs its own event loop and async
    tests already have one.
    """
    with ThreadPoolExecutor(1) as pool:
        return pool.submit(CliRunner().invoke, main, list(args), catch_exceptions=False).result()


def assert_one_line_error(result: Result, *words: str) -> None:
    """Exit 2 with one line on stderr containing ``words`` and no password."""
    assert result.exit_code == 2, result.output
    message = result.stderr.strip()
    assert message.count("\n") == 0, message
    for word in words:
        assert word in message, message
    assert "hunter2" not in result.output


async def crash(store: Store) -> str:
    """Builds a session through a real ADK Runner whose tool crashes its process, then
    runs the user's next turn with a bare runner, so the dead call is superseded."""
    service = store.service()
    try:
        session = await service.create_session(app_name=demo.APP_NAME, user_id=demo.USER_ID)
    finally:
        await close(service)
    kind = "adk_sqlite" if store.kind == "adk_sqlite" else "database"
    target = str(store.sqlite_path) if kind == "adk_sqlite" else store.url
    child = subprocess.run(
        [sys.executable, str(HERE / "crash_run.py"), kind, target, session.id],
        capture_output=True, text=True, timeout=120, check=False)
    assert child.returncode == demo.CRASH_EXIT_CODE, child.stderr
    service = store.service()
    try:
        runner = demo.build_runner(service, ScriptedModel(script=[ScriptedModel.say("Hi!")]))
        message = types.Content(role="user", parts=[types.Part(text="hello?")])
        async for _ in runner.run_async(user_id=demo.USER_ID, session_id=session.id,
                                        new_message=message):
            pass
    finally:
        await close(service)
    return session.id


@pytest.fixture(params=["db_sqlite", "adk_sqlite", "postgres", "mariadb"])
async def crashed(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[
        tuple[Store, str]]:
    """A store holding one session whose real ADK run crashed mid-tool."""
    async for store in make_store(request.param, tmp_path):
        yield store, await crash(store)


async def test_cli_heals_a_real_crashed_run(crashed: tuple[Store, str]) -> None:
    """scan exits 1 and lists the dead call; repair heals it once; scan then exits 0."""
    store, session_id = crashed
    found = cli("scan", store.url, "--json")
    assert found.exit_code == 1, found.output
    report = json.loads(found.stdout)
    assert report["format"] == 1 and report["needs_healing"]
    (dead,) = report["dead_calls"]
    assert (dead["session_id"], dead["tool_name"], dead["status"]) == (
        session_id, "get_weather", "superseded")

    human = cli("scan", store.url)
    assert human.exit_code == 1 and "get_weather" in human.stdout

    dry = cli("repair", store.url, "--dry-run")
    assert dry.exit_code == 0, dry.output
    assert "would insert event" in dry.stdout
    assert "Tool execution was interrupted; it may have completed." in dry.stdout

    assert cli("db", "upgrade", store.url).exit_code == 0
    healed = cli("repair", store.url, "--yes", "--json")
    assert healed.exit_code == 0, healed.output
    document = json.loads(healed.stdout)
    assert document["healed"] == 1
    assert document["heals"][0]["event_data"]["content"]["parts"][0]["function_response"][
        "id"] == dead["call_id"]

    assert cli("scan", store.url).exit_code == 0
    again = json.loads(cli("repair", store.url, "--yes", "--json").stdout)
    assert again["healed"] == 0 and again["heals"] == []

    history = json.loads(cli("history", store.url, "--json").stdout)
    assert [(h["session_id"], h["trigger"], h["tool_names"]) for h in history["heals"]] == [
        (session_id, "repair", ["get_weather"])]

    service = store.service()
    try:
        session = await service.get_session(app_name=demo.APP_NAME, user_id=demo.USER_ID,
                                            session_id=session_id)
    finally:
        await close(service)
    assert session is not None
    assert not classify(session.events, now=0.0).dead


def test_python_dash_m_runs_the_same_cli(tmp_path: Path) -> None:
    """``python -m adk_session_heal`` is the CLI (exit 2 and one line for a missing file)."""
    child = subprocess.run(
        [sys.executable, "-m", "adk_session_heal", "scan", f"sqlite:///{tmp_path}/nope.db"],
        capture_output=True, text=True, timeout=60, check=False)
    assert child.returncode == 2
    assert "no SQLite file" in child.stderr and child.stderr.count("\n") == 1
    assert not (tmp_path / "nope.db").exists()


@pytest.mark.parametrize("command", [["scan"], ["repair", "--yes"], ["history"],
                                     ["db", "upgrade"], ["db", "current"],
                                     ["db", "upgrade", "--sql"], ["db", "downgrade", "base"],
                                     ["db", "downgrade", "base", "--sql"], ["db", "history"]])
def test_missing_file_is_an_error_and_is_not_created(command: list[str], tmp_path: Path) -> None:
    """Every command refuses a missing SQLite file in one line and never creates it."""
    url = f"sqlite+aiosqlite:///{tmp_path / 'missing.db'}"
    assert_one_line_error(cli(*command[:1], *command[1:2], url, *command[2:])
                          if command[0] == "db" else cli(command[0], url, *command[1:]),
                          "no SQLite file")
    assert not (tmp_path / "missing.db").exists()


@pytest.mark.parametrize("url", ["postgresql://postgres:hunter2@127.0.0.1/x",
                                 "mysql+pymysql://root:hunter2@127.0.0.1/x"])
def test_sync_driver_url(url: str) -> None:
    """A synchronous-driver URL is refused with the async form to use."""
    assert_one_line_error(cli("scan", url), "async")


def test_refused_connection_hides_the_password() -> None:
    """A server that refuses connections gives one line, without the password."""
    result = cli("scan", "postgresql+asyncpg://postgres:hunter2@127.0.0.1:1/x")
    assert_one_line_error(result, "cannot connect to", "postgres:***@127.0.0.1:1/x")


async def test_database_without_adk_tables(postgres_url: str, tmp_path: Path) -> None:
    """An empty PostgreSQL database or an unrelated SQLite file is refused and left untouched."""
    store = Store("postgres", postgres_url)
    assert_one_line_error(cli("repair", postgres_url, "--yes"), "no ADK session tables")
    assert_one_line_error(cli("db", "upgrade", postgres_url), "no ADK session tables")
    assert await table_names(store) == set()
    other = tmp_path / "other.db"
    with closing(sqlite3.connect(other)) as db, db:
        db.execute("CREATE TABLE notes (body TEXT)")
    before = other.read_bytes()
    assert_one_line_error(cli("scan", f"sqlite:///{other}"), "no ADK session tables")
    assert other.read_bytes() == before


class _Tripwire:
    """Unpickling this creates a file: proof that a pickled row was (or was not) loaded."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self) -> tuple[Any, ...]:
        return (open, (str(self.marker), "w"))


@pytest.mark.parametrize("kind", ["db_sqlite", "postgres", "mariadb"])
async def test_legacy_v0_schema(kind: str, tmp_path: Path) -> None:
    """A v0 (pickled) store: scan and repair say so in one line (exit 2); nothing is unpickled."""
    marker = tmp_path / "unpickled"
    async for store in make_store(kind, tmp_path):
        async_engine = create_async_engine(store.url)
        try:
            async with async_engine.begin() as conn:
                await conn.run_sync(BaseV0.metadata.create_all)
                # SQLite gets text: Python 3.12 deprecates sqlite3's datetime adapter.
                now: Any = datetime.datetime(2023, 11, 14, 22, 13, 20)
                if kind == "db_sqlite":
                    now = now.isoformat(" ")
                pickled = pickle.dumps(_Tripwire(marker), protocol=0)
                await conn.execute(text(
                    "INSERT INTO sessions (app_name, user_id, id, state, create_time, "
                    "update_time) VALUES ('app', 'user', 's', '{}', :now, :now)"), {"now": now})
                await conn.execute(text(
                    "INSERT INTO events (id, app_name, user_id, session_id, invocation_id, "
                    "author, actions, timestamp, content) VALUES ('e1', 'app', 'user', 's', "
                    "'inv', 'assistant', :actions, :now, :content)").bindparams(
                        bindparam("actions", type_=String if kind == "mariadb" else LargeBinary)
                    ), {
                        # Protocol 0 is ASCII; aiomysql cannot bind bytes here.
                        "actions": pickled.decode() if kind == "mariadb" else pickled,
                        "now": now,
                        "content": json.dumps({"role": "model", "parts": [
                            {"function_call": {"id": "c1", "name": "t", "args": {}}}]}),
                    })
        finally:
            await async_engine.dispose()
        before = await snapshot(store)
        assert_one_line_error(cli("scan", store.url), "legacy v0", "adk migrate session")
        assert_one_line_error(cli("repair", store.url, "--yes"), "legacy v0", "adk migrate")
        assert_one_line_error(cli("db", "upgrade", store.url), "legacy v0")
        assert await snapshot(store) == before
        assert not marker.exists()


async def test_unknown_schema_version(tmp_path: Path) -> None:
    """A schema version other than "1" is refused, naming both versions; nothing written."""
    async for store in make_store("db_sqlite", tmp_path):
        await fill(store, crashed_histories())
        assert store.sqlite_path is not None
        with closing(sqlite3.connect(store.sqlite_path)) as db, db:
            db.execute("UPDATE adk_internal_metadata SET value = '2' WHERE key = 'schema_version'")
        before = await snapshot(store)
        assert_one_line_error(cli("repair", store.url, "--yes", "--no-ledger"),
                              "schema version '2'", "'1'")
        assert await snapshot(store) == before


async def test_read_only_database(tmp_path: Path) -> None:
    """Repair on a database that refuses writes exits 2 in one line; nothing is written."""
    async for store in make_store("postgres", tmp_path):
        await fill(store, crashed_histories())
        database = store.url.rsplit("/", 1)[1]
        admin = create_async_engine(store.url, isolation_level="AUTOCOMMIT")
        async with admin.connect() as conn:
            await conn.execute(
                text(f"ALTER DATABASE {database} SET default_transaction_read_only = on"))
        await admin.dispose()
        before = await snapshot(store)
        assert_one_line_error(cli("repair", store.url, "--yes", "--no-ledger"), "refuses writes")
        assert await snapshot(store) == before
        assert cli("scan", store.url).exit_code == 1


async def test_repair_needs_yes_when_not_interactive(tmp_path: Path) -> None:
    """Without a terminal, repair refuses to write unless --yes (or --dry-run) is given."""
    async for store in make_store("db_sqlite", tmp_path):
        await fill(store, crashed_histories())
        before = await snapshot(store)
        assert_one_line_error(cli("repair", store.url), "--yes")
        assert_one_line_error(cli("repair", store.url, "--yes"), "db upgrade", "--no-ledger")
        assert await snapshot(store) == before


async def test_scan_filters_and_older_than(tmp_path: Path) -> None:
    """scan honours --session and --older-than; a bad duration is a usage error (exit 2)."""
    async for store in make_store("db_sqlite", tmp_path):
        await fill(store, crashed_histories())
        ok_only = cli("scan", store.url, "--session", "ok", "--json")
        assert ok_only.exit_code == 0 and json.loads(ok_only.stdout)["sessions_scanned"] == 1
        patient = json.loads(cli("scan", store.url, "--older-than", "520w", "--json").stdout)
        assert {c["status"] for c in patient["dead_calls"]} == {"superseded"}
        assert cli("scan", store.url, "--older-than", "soon").exit_code == 2


async def test_history_without_ledger_and_db_current(tmp_path: Path) -> None:
    """history says how to install the ledger; db current reports none, then the head."""
    async for store in make_store("adk_sqlite", tmp_path):
        await fill(store, crashed_histories())
        assert_one_line_error(cli("history", store.url), "db upgrade")
        assert "revision none" in cli("db", "current", store.url).stdout
        assert "revision 0001" in cli("db", "upgrade", store.url).stdout
        assert "revision 0001" in cli("db", "current", store.url).stdout
        # ADK's SqliteSessionService still reads the file with our table beside its own.
        service = SqliteSessionService(str(store.sqlite_path))
        assert await service.get_session(app_name="app", user_id="user", session_id="ok")


def test_parse_duration() -> None:
    """Durations: plain seconds, s/m/h/d/w units, and combinations."""
    assert parse_duration("90") == 90
    assert parse_duration("1h30m") == 5400
    assert parse_duration("7d") == 7 * 86400
    with pytest.raises(ValueError):
        parse_duration("1x")


def test_database_service_is_untouched_by_sqlite_detection(tmp_path: Path) -> None:
    """Opening a SqliteSessionService file never adds DatabaseSessionService's tables."""
    path = tmp_path / "adk.db"
    import asyncio

    async def build() -> None:
        await fill(Store("adk_sqlite", f"sqlite:///{path}"), crashed_histories())

    asyncio.run(build())
    cli("scan", f"sqlite+aiosqlite:///{path}")
    cli("repair", f"sqlite+aiosqlite:///{path}", "--yes", "--no-ledger")
    with closing(sqlite3.connect(path)) as db, db:
        tables = {r[0] for r in db.execute("SELECT name FROM sqlite_master")}
    assert "adk_internal_metadata" not in tables
    assert not [t for t in tables if t.startswith("idx_")]
    _ = DatabaseSessionService


def _read_until(fd: int, marker: bytes, timeout: float = 60) -> bytes:
    """Reads a pty until ``marker`` appears (or the child closes it)."""
    seen = b""
    deadline = time.monotonic() + timeout
    while marker not in seen and time.monotonic() < deadline:
        ready, _, _ = select.select([fd], [], [], 0.5)
        if ready:
            try:
                chunk = os.read(fd, 4096)
            except OSError:  # the child closed its side
                break
            if not chunk:
                break
            seen += chunk
    return seen


async def test_repair_on_a_terminal_applies_the_plan_it_showed(tmp_path: Path) -> None:
    """repair shows its plan and asks; a session that moved before the answer is skipped: exit 3."""
    store = Store("db_sqlite", f"sqlite+aiosqlite:///{tmp_path / 'db.db'}")
    await fill(store, crashed_histories())
    assert cli("db", "upgrade", store.url).exit_code == 0
    leader, follower = pty.openpty()
    child = subprocess.Popen(
        [sys.executable, "-m", "adk_session_heal", "repair", store.url, "--older-than", "1h"],
        stdin=follower, stdout=follower, stderr=follower, cwd=HERE.parent)
    os.close(follower)
    try:
        shown = _read_until(leader, b"[y/N]")
        assert b"Write these 3 synthetic events" in shown, shown.decode(errors="replace")
        # The operator looks at the plan; meanwhile the "dead" session gets a turn.
        service = store.service()
        try:
            session = await service.get_session(app_name=APP, user_id=USER, session_id="dead")
            assert session is not None
            await service.append_event(session, Event(
                invocation_id="inv-late", author="user",
                content=types.Content(role="user", parts=[types.Part(text="still there?")])))
        finally:
            await close(service)
        os.write(leader, b"y\n")
        rest = _read_until(leader, b"recorded in the heal ledger").decode(errors="replace")
    finally:
        os.close(leader)
        child.wait(timeout=60)
    assert child.returncode == 3, rest  # done, but a session was skipped
    said = " ".join(rest.split())  # rich wraps lines at the terminal's width
    assert "Synthetic events written: 2 (0 already present, 1 skipped: their session changed " \
        "since the scan)" in said
