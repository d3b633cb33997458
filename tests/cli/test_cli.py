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
from contextlib import closing
from pathlib import Path
from typing import Any

import click
import pytest
from cli_runner import assert_one_line_error, cli, without_packages
from click.testing import CliRunner
from google.adk.events.event import Event
from google.adk.sessions import DatabaseSessionService
from google.adk.sessions.schemas.v0 import Base as BaseV0
from google.adk.sessions.sqlite_session_service import SqliteSessionService
from google.genai import types
from paths import CHILDREN, ROOT, SUPPORT
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
    unhealable_histories,
)

from adk_session_heal import testing
from adk_session_heal.cli import URL_ENV, _Cli, _debug_option
from adk_session_heal.core.findings import classify
from adk_session_heal.ops.text_output import (
    HISTORY_COLUMNS,
    REPAIR_COLUMNS,
    SCAN_COLUMNS,
    tsv_field,
)
from adk_session_heal.testing import History, ScriptedModel


async def crash(store: Store) -> str:
    """Builds a session through a real ADK Runner whose tool crashes its process, then
    runs the user's next turn with a bare runner, so the dead call is superseded."""
    service = store.service()
    try:
        session = await service.create_session(app_name=testing.APP_NAME, user_id=testing.USER_ID)
    finally:
        await close(service)
    kind = "adk_sqlite" if store.kind == "adk_sqlite" else "database"
    target = str(store.sqlite_path) if kind == "adk_sqlite" else store.url
    child = subprocess.run(
        [sys.executable, str(CHILDREN / "crash_run.py"), kind, target, session.id],
        capture_output=True, text=True, timeout=120, check=False)
    assert child.returncode == testing.CRASH_EXIT_CODE, child.stderr
    service = store.service()
    try:
        runner = testing.build_runner(service, ScriptedModel(script=[ScriptedModel.say("Hi!")]))
        message = types.Content(role="user", parts=[types.Part(text="hello?")])
        async for _ in runner.run_async(user_id=testing.USER_ID, session_id=session.id,
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


@pytest.mark.slow
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

    dry = cli("repair", store.url, "--dry-run", "--format", "table")
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
        session = await service.get_session(app_name=testing.APP_NAME, user_id=testing.USER_ID,
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


@pytest.mark.postgres
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


async def test_scan_prints_the_calls_a_heal_would_make_worse_with_why(tmp_path: Path) -> None:
    """scan lists nameless, id-sharing and out-of-turn dead calls in their own table, saying
    why they are never healed, and counts them in the summary line."""
    async for store in make_store("db_sqlite", tmp_path):
        await fill(store, unhealable_histories())
        result = cli("scan", store.url, "--format", "table")
        assert result.exit_code == 1, result.output  # the plain dead call needs healing
        assert "Unanswered calls a heal would make worse (never healed)" in result.stdout
        assert "4 unanswered calls never healed (a heal would break ADK's request)" in (
            result.stdout.replace("\n", " "))
        document = json.loads(cli("scan", store.url, "--json").stdout)
        assert sorted(c["status"] for c in document["unhealable_calls"]) == [
            "malformed", "malformed", "malformed", "out_of_turn"]
        assert document["counts"]["unhealable_calls"] == 4


async def test_history_without_ledger_and_db_current(tmp_path: Path) -> None:
    """history says how to install the ledger; db current reports none, then the head."""
    async for store in make_store("adk_sqlite", tmp_path):
        await fill(store, crashed_histories())
        assert_one_line_error(cli("history", store.url), "db upgrade")
        assert "revision none" in cli("db", "current", store.url).stdout
        assert "revision 0006" in cli("db", "upgrade", store.url).stdout
        assert "revision 0006" in cli("db", "current", store.url).stdout
        # ADK's SqliteSessionService still reads the file with our table beside its own.
        service = SqliteSessionService(str(store.sqlite_path))
        assert await service.get_session(app_name="app", user_id="user", session_id="ok")


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
        stdin=follower, stdout=follower, stderr=follower, cwd=ROOT)
    os.close(follower)
    try:
        shown = _read_until(leader, b"[y/N]")
        assert b"Write 3 synthetic events" in shown, shown.decode(errors="replace")
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


# --- Output for pipes, the listing of in-flight calls, the URL from the environment, --debug.

LONG_ID = "session-" + "0123456789abcdef" * 8
"""A session id far wider than a terminal (rich cut such ids with "…" at 80 columns)."""
ANSI = "\x1b["


def _histories_with_a_long_id() -> dict[str, History]:
    """crashed_histories() plus a superseded dead call in a session with a 136-character id."""
    long = History()
    long.user("weather in Rome?")
    long.call("get_weather", {"city": "Rome"})
    long.user("hello?")
    long.text("Hi!")
    return {**crashed_histories(), LONG_ID: long}


@pytest.fixture
async def filled(tmp_path: Path) -> AsyncIterator[Store]:
    """A SQLite store built through ADK's DatabaseSessionService with every kind of finding."""
    async for store in make_store("db_sqlite", tmp_path):
        await fill(store, _histories_with_a_long_id())
        yield store


def _tsv(text: str) -> list[dict[str, str]]:
    """Parses TSV output (header line first) into one dict per row."""
    header, *rows = [line.split("\t") for line in text.splitlines()]
    assert all(len(row) == len(header) for row in rows), text
    return [dict(zip(header, row, strict=True)) for row in rows]


def test_piped_output_is_full_and_plain(filled: Store) -> None:
    """Piped, scan writes TSV by default and even --format table keeps whole ids, no colour."""
    default = cli("scan", filled.url)
    assert default.exit_code == 1, default.output
    assert default.stdout.splitlines()[0].split("\t") == list(SCAN_COLUMNS)
    rows = _tsv(default.stdout)
    assert LONG_ID in {r["session_id"] for r in rows if r["kind"] == "dead_call"}
    table = cli("scan", filled.url, "--format", "table")
    assert table.exit_code == 1
    for out in (default.stdout, default.stderr, table.stdout, table.stderr):
        assert ANSI not in out and "…" not in out
    assert f"app/user/{LONG_ID}" in table.stdout  # one cell, not folded or cut


def test_formats_carry_the_same_records(filled: Store) -> None:
    """json, jsonl and tsv carry the same records with "version": 1; jsonl ends in a summary."""
    document = json.loads(cli("scan", filled.url, "--format", "json").stdout)
    assert document["version"] == 1 and document["format"] == 1
    lines = [json.loads(line) for line in
             cli("scan", filled.url, "--format", "jsonl").stdout.splitlines()]
    assert {line["version"] for line in lines} == {1}
    *records, summary = lines
    assert summary["kind"] == "summary" and "dead_calls" not in summary
    assert summary["counts"] == document["counts"] == {
        "dead_calls": 4, "in_flight_calls": 0, "pending_calls": 1, "id_less_calls": 1,
        "orphaned_responses": 1, "damaged_rows": 0, "superseded_heals": 0,
        "unhealable_calls": 0}
    for kind, key in (("dead_call", "dead_calls"), ("pending_call", "pending_calls"),
                      ("orphaned_response", "orphaned_responses")):
        listed = [{k: v for k, v in r.items() if k not in ("kind", "version", "age_seconds")}
                  for r in records if r["kind"] == kind]
        assert listed == [{k: v for k, v in r.items() if k != "age_seconds"}
                          for r in document[key]]
    rows = _tsv(cli("scan", filled.url, "--format", "tsv").stdout)
    assert len(rows) == len(records)
    for row, record in zip(rows, records, strict=True):
        assert all(row[k] == tsv_field(v) for k, v in record.items()
                   if k not in ("version", "age_seconds")), (row, record)


def test_json_is_json_flag_and_not_with_another_format(filled: Store) -> None:
    """--json is --format json (its summary line on stderr); asking for both json and
    another format is a usage error."""
    document = cli("scan", filled.url, "--json")
    assert json.loads(document.stdout)["command"] == "scan"
    assert document.stderr.startswith("Scanned 9 sessions")
    clash = cli("scan", filled.url, "--json", "--format", "tsv")
    assert clash.exit_code == 2 and "--json" in clash.stderr


def test_in_flight_and_pending_calls_are_listed_with_age_tool_and_why(filled: Store) -> None:
    """A newest-invocation call younger than --older-than is listed in flight, with the age
    at which it would be healed; pending calls say why they never are; a summary counts all."""
    patient = json.loads(cli("scan", filled.url, "--older-than", "520w", "--json").stdout)
    (in_flight,) = patient["in_flight_calls"]
    assert (in_flight["session_id"], in_flight["tool_name"], in_flight["status"]) == (
        "stale", "book", "in_flight")
    assert in_flight["age_seconds"] > 86400
    assert "younger than 3640d5m" in in_flight["why"] and "healed once older" in in_flight["why"]
    (pending,) = patient["pending_calls"]
    assert pending["pending_reason"] == "long_running" and "never healed" in pending["why"]
    assert {c["session_id"] for c in patient["dead_calls"]} == {"dead", "parallel", LONG_ID}

    table = cli("scan", filled.url, "--older-than", "520w", "--format", "table")
    said = table.stdout
    assert "In-flight calls (not healed: dead once older than 3640d5m)" in said
    assert "app/user/stale" in said and "book" in said and "may still be running" in said
    assert "Pending calls (never healed)" in said and "long-running tool" in said
    assert ("3 dead calls in 3 sessions (repair heals them), 1 in flight, 1 pending, "
            "1 without an id, 1 orphaned response, 0 damaged rows") in said

    tsv = cli("scan", filled.url, "--older-than", "520w")
    row = next(r for r in _tsv(tsv.stdout) if r["kind"] == "in_flight_call")
    assert (row["session_id"], row["tool_name"], row["status"]) == ("stale", "book", "in_flight")
    assert "1 in flight, 1 pending" in tsv.stderr  # the summary line, beside the data

    hasty = json.loads(cli("scan", filled.url, "--json").stdout)
    assert hasty["in_flight_calls"] == []
    assert "stale" in {c["session_id"] for c in hasty["dead_calls"]}


async def test_repair_and_history_formats(filled: Store) -> None:
    """repair and history print TSV or JSONL records on stdout, their summaries on stderr."""
    dry = cli("repair", filled.url, "--dry-run", "--format", "jsonl")
    assert dry.exit_code == 0, dry.output
    *records, summary = [json.loads(line) for line in dry.stdout.splitlines()]
    assert summary["dry_run"] is True and summary["command"] == "repair"
    heals = [r for r in records if r["kind"] == "heal"]
    assert len(heals) == 4 and {h["written"] for h in heals} == {None}
    assert "nothing was written" in dry.stderr

    assert cli("db", "upgrade", filled.url).exit_code == 0
    done = cli("repair", filled.url, "--yes", "--debug")
    assert done.exit_code == 0, done.output
    rows = _tsv(done.stdout)
    assert done.stdout.splitlines()[0].split("\t") == list(REPAIR_COLUMNS)
    written = [r for r in rows if r["kind"] == "heal"]
    assert len(written) == 4 and {r["outcome"] for r in written} == {"written"}
    assert all(json.loads(r["event_data"])["id"] == r["synthetic_event_id"] for r in written)
    assert "Synthetic events written: 4" in done.stderr
    assert "DEBUG adk_session_heal" in done.stderr  # logs: stderr only

    history = cli("history", filled.url)
    assert history.stdout.splitlines()[0].split("\t") == list(HISTORY_COLUMNS)
    assert LONG_ID in {r["session_id"] for r in _tsv(history.stdout)}
    assert "Heals recorded in" in history.stderr
    *entries, total = [json.loads(line) for line in
                       cli("history", filled.url, "--format", "jsonl").stdout.splitlines()]
    assert total == {"version": 1, "kind": "summary", "command": "history", "url": filled.url,
                     "heals_recorded": 4}
    assert {e["trigger"] for e in entries} == {"repair"}
    assert json.loads(cli("history", filled.url, "--json").stdout)["version"] == 1


@pytest.mark.parametrize("command", [["scan"], ["repair", "--dry-run"], ["history"],
                                     ["db", "current"], ["db", "upgrade"]])
def test_url_from_the_environment(command: list[str], filled: Store, tmp_path: Path) -> None:
    """Every command reads ADK_SESSION_HEAL_URL when URL is omitted; a URL given wins."""
    if command == ["history"]:
        assert cli("db", "upgrade", filled.url).exit_code == 0
    from_env = cli(*command, env={URL_ENV: filled.url})
    assert from_env.exit_code in (0, 1), from_env.output
    assert from_env.stdout
    elsewhere = f"sqlite+aiosqlite:///{tmp_path / 'not-there.db'}"
    given = cli(*command, filled.url, env={URL_ENV: elsewhere})
    assert given.exit_code in (0, 1), given.output
    assert_one_line_error(cli(*command, env={URL_ENV: elsewhere}), "no SQLite file")


def test_missing_url_says_what_to_do() -> None:
    """No URL and no ADK_SESSION_HEAL_URL: one line naming both, exit 2; --help names it."""
    for command in (["scan"], ["repair", "--yes"], ["history"], ["db", "upgrade"],
                    ["db", "current"]):
        assert_one_line_error(cli(*command), "pass URL", "ADK_SESSION_HEAL_URL")
        assert "URL omitted: ADK_SESSION_HEAL_URL is used." in cli(*command[:2], "--help").stdout
    assert_one_line_error(cli("scan", env={URL_ENV: ""}), "ADK_SESSION_HEAL_URL")


def test_environment_url_is_masked_and_named_in_errors(filled: Store) -> None:
    """Errors about an environment URL show it with its password as ***; hints name the
    URL given (redacted), or none when it came from the environment, never a placeholder."""
    secret = "postgresql+asyncpg://postgres:hunter2@127.0.0.1:1/x"
    refused = cli("scan", env={URL_ENV: secret})
    assert_one_line_error(refused, "cannot connect to", "postgres:***@127.0.0.1:1/x")

    no_ledger = cli("repair", "--yes", env={URL_ENV: filled.url})
    assert_one_line_error(no_ledger, f"db upgrade {filled.url}`")
    assert "URL`" not in no_ledger.stderr

    typed = cli("scan", filled.url)
    assert f"Run `adk-session-heal repair {filled.url}` to heal them" in typed.stderr
    from_env = cli("scan", env={URL_ENV: filled.url})
    assert "Run `adk-session-heal repair` to heal them" in from_env.stderr


@pytest.mark.parametrize("where", ["before", "after"])
def test_debug_shows_the_traceback(where: str, tmp_path: Path) -> None:
    """A bad input is one line; with --debug (before or after the command) the traceback
    comes first, and the exit code is still 2."""
    url = f"sqlite+aiosqlite:///{tmp_path / 'missing.db'}"
    assert_one_line_error(cli("scan", url), "no SQLite file")
    args = ["--debug", "scan", url] if where == "before" else ["scan", url, "--debug"]
    debug = cli(*args)
    assert debug.exit_code == 2 and debug.stdout == ""
    assert debug.stderr.startswith("Traceback (most recent call last):")
    assert "UnsupportedStoreError" in debug.stderr
    assert debug.stderr.splitlines()[-1].startswith("Error: no SQLite file")


@pytest.mark.slow
def test_prompt_and_plan_go_to_stderr(tmp_path: Path) -> None:
    """On a terminal repair shows its plan and asks on stderr; piped stdout gets only TSV,
    without colour or progress bars."""
    import asyncio

    store = Store("db_sqlite", f"sqlite+aiosqlite:///{tmp_path / 'db.db'}")
    asyncio.run(fill(store, crashed_histories()))
    assert cli("db", "upgrade", store.url).exit_code == 0
    leader, follower = pty.openpty()
    child = subprocess.Popen(
        [sys.executable, "-m", "adk_session_heal", "repair", store.url],
        stdin=follower, stdout=subprocess.PIPE, stderr=follower, cwd=ROOT,
        env={**os.environ, "PYTHONPATH": f"{ROOT}{os.pathsep}{SUPPORT}"})
    os.close(follower)
    try:
        asked = _read_until(leader, b"[y/N]")
        os.write(leader, b"y\n")
        assert child.stdout is not None
        stdout = child.stdout.read().decode()
        rest = _read_until(leader, b"heal ledger", timeout=10)
    finally:
        os.close(leader)
        child.wait(timeout=60)
        if child.stdout is not None:
            child.stdout.close()
    assert child.returncode == 0
    assert b"Write 3 synthetic events" in asked and b"Synthetic responses" in asked
    assert b"Synthetic events written: 3" in rest
    assert stdout.splitlines()[0].split("\t") == list(REPAIR_COLUMNS)
    assert "Write 3 synthetic" not in stdout and ANSI not in stdout
    assert [r["outcome"] for r in _tsv(stdout) if r["kind"] == "heal"] == ["written"] * 3

    piped = subprocess.run(
        [sys.executable, "-m", "adk_session_heal", "scan", store.url, "--older-than", "520w"],
        capture_output=True, text=True, timeout=60, check=False, cwd=ROOT)
    assert piped.returncode == 0, piped.stderr
    assert piped.stderr.splitlines() == [
        line for line in piped.stderr.splitlines() if line.startswith("Scanned ")]
    assert ANSI not in piped.stdout + piped.stderr


def test_the_one_handler_hides_unexpected_errors_unless_debug() -> None:
    """A bug's text (which could hold a password) is not printed: one line naming its type,
    exit 2; --debug shows the traceback; Ctrl-C exits 130."""

    @click.group(cls=_Cli)
    @_debug_option
    def group() -> None:
        """A group with the CLI's handler."""

    @group.command()
    def bug() -> None:
        """Fails the way a bug would."""
        raise ValueError("postgres:hunter2@db")

    @group.command()
    def interrupted() -> None:
        """Stops the way Ctrl-C does."""
        raise KeyboardInterrupt

    plain = CliRunner().invoke(group, ["bug"])
    assert_one_line_error(plain, "unexpected ValueError", "--debug")
    debug = CliRunner().invoke(group, ["--debug", "bug"])
    assert debug.exit_code == 2 and "Traceback" in debug.stderr
    assert "ValueError: postgres:hunter2@db" in debug.stderr  # the user asked for it
    stopped = CliRunner().invoke(group, ["interrupted"])
    assert stopped.exit_code == 130 and stopped.stderr == "Interrupted.\n"


_HEAVY = ("google.adk", "google.genai", "alembic", "rich", "sqlalchemy")


@pytest.mark.parametrize("command", [[], ["scan"], ["repair"], ["history"], ["db", "upgrade"]])
def test_help_loads_no_adk_rich_alembic_or_sqlalchemy(command: list[str]) -> None:
    """`adk-session-heal [COMMAND] --help` imports none of the heavy packages (issue 13)."""
    probe = (
        "import sys\n"
        "from adk_session_heal.cli import main\n"
        f"try:\n    main([*{command!r}, '--help'])\n"
        "except SystemExit as exit:\n    assert exit.code == 0, exit.code\n"
        f"print(sorted(m for m in sys.modules if m.startswith({_HEAVY!r})))\n"
    )
    ran = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                         check=False, cwd=ROOT, timeout=60,
                         env={**os.environ, "PYTHONPATH": f"{ROOT}{os.pathsep}{SUPPORT}"})
    assert ran.returncode == 0, ran.stderr
    assert ran.stdout.strip().splitlines()[-1] == "[]"
    assert "Usage:" in ran.stdout


# ---- environment errors in one true line (issue 28, point 7) ----


@pytest.mark.slow
@pytest.mark.parametrize(("url", "driver", "extra"), [
    ("postgresql+asyncpg://postgres:hunter2@127.0.0.1:5432/postgres", "asyncpg", "postgres"),
    ("mysql+aiomysql://root:hunter2@127.0.0.1:3306/mysql", "aiomysql", "mysql"),
    ("mariadb+asyncmy://root:hunter2@127.0.0.1:3306/mysql", "asyncmy", "mysql"),
    ("redis://:hunter2@127.0.0.1:6379/0", "redis", "redis"),
], ids=["asyncpg", "aiomysql", "asyncmy", "redis"])
@pytest.mark.parametrize("command", [["scan"], ["repair", "--yes"], ["db", "current"]],
                         ids=" ".join)
def test_a_driver_not_installed_names_the_extra_to_install(
        url: str, driver: str, extra: str, command: list[str], tmp_path: Path) -> None:
    """Without a URL's driver (as in a base install), every command says in one line which
    extra installs it, exit 2, password masked: the same rule for every driver."""
    env = without_packages(tmp_path, driver)
    child = subprocess.run([sys.executable, "-m", "adk_session_heal", *command, url], env=env,
                           capture_output=True, text=True, timeout=120, check=False)
    assert child.returncode == 2, child.stdout + child.stderr
    line = child.stderr.strip()
    assert "\n" not in line and "Traceback" not in line, line
    assert f"needs the {driver} driver" in line and f"adk-session-heal[{extra}]" in line, line
    assert "hunter2" not in child.stdout + child.stderr
