"""Damaged rows: each reported (session, event id, problem), its session skipped, never the run.

Stores are built through ADK's own services; the damage is then written with
plain SQL, as a crashed disk, a hand edit, another tool or an encrypting
service would leave it. In every damaged session the damaged row is the one
holding the *response* to a call, so the call looks dead: healing it would add
a second answer. A session with a damaged row is therefore skipped whole.
"""

from __future__ import annotations

import base64
import json
import os
import sqlite3
import time
from collections.abc import AsyncIterator, Callable
from contextlib import closing
from pathlib import Path
from typing import Any

import pytest
import redis.asyncio as redis_asyncio
from cli_runner import assert_one_line_error, cli
from conftest import close_redis
from damage_histories import answered_then_superseded, dead
from google.adk.integrations.redis import RedisSessionService, RedisSessionServiceConfig
from redis_store import fill as redis_fill
from redis_store import session_key, store_url
from servers import REDIS_URL, temporary_redis_prefix
from sqlalchemy import text
from sqlalchemy.ext.asyncio import create_async_engine
from stores import (
    APP,
    USER,
    Store,
    adk_store_fixture,  # noqa: F401  (the adk_store fixture)
    bulk_fill,
    bulk_histories,
    fill,
    make_store,
)

from adk_session_heal import ScanOptions, migrate
from adk_session_heal.errors import StoreError
from adk_session_heal.ops.apply import apply_plan
from adk_session_heal.ops.repair import repair
from adk_session_heal.ops.scan import plan_repair, scan
from adk_session_heal.ops.scan_report import ScanReport
from adk_session_heal.policy import HealPolicy

NOW = 1_700_100_000.0
POLICY = HealPolicy(stale_after=3600)

Edit = Callable[[dict[str, Any]], Any]
"""Turns a response event's stored JSON into the damaged ``event_data`` value."""


def _content(value: Any) -> Edit:
    return lambda data: json.dumps({**data, "content": value})


def _call_part(value: Any) -> Edit:
    return lambda data: json.dumps({**data, "content": {"role": "user", "parts": [value]}})


JSON_SHAPES: dict[str, tuple[Edit, str]] = {
    "json_list": (lambda _: "[1, 2]", "event_data is a list, not an object"),
    "json_string": (lambda _: '"hello"', "event_data is a string, not an object"),
    "json_number": (lambda _: "42", "event_data is a number, not an object"),
    "json_null": (lambda _: "null", "event_data is null, not an object"),
    "content_string": (_content("hi"), "content is a string, not an object"),
    "parts_not_list": (_content({"parts": "abc"}), "content.parts is a string, not a list"),
    "part_not_object": (_content({"parts": ["x"]}), "content.parts[0] is a string"),
    "call_not_object": (_call_part({"function_call": "x"}),
                        "content.parts[0].function_call is a string, not an object"),
    "call_id_number": (_call_part({"function_response": {"id": 5, "name": "t"}}),
                       "content.parts[0].function_response.id is a number"),
    "call_name_number": (_call_part({"function_response": {"id": "c", "name": 7}}),
                         "content.parts[0].function_response.name is a number"),
    # Only the call's one response is damaged, so the session still looks healthy: the
    # report's shortcut for all-answered sessions must find these as the call findings do.
    "metadata_list": (lambda data: json.dumps({**data, "custom_metadata": [1]}),
                      "custom_metadata is a list, not an object"),
    "confirmations_number": (
        lambda data: json.dumps({**data, "actions": {"requested_tool_confirmations": 5}}),
        "actions.requested_tool_confirmations is a number, not an object"),
}
"""Damage that is still valid JSON, so any backend's JSON column can hold it."""

TEXT_SHAPES: dict[str, tuple[Edit, str]] = {
    "not_json": (lambda _: "hello, not json", "event_data is not JSON"),
    "truncated": (lambda data: json.dumps(data)[:40], "event_data is truncated JSON"),
    "nested_too_deep": (lambda _: "[" * 100_000 + "]" * 100_000, "nested too deeply"),
    "binary": (lambda _: os.urandom(64) + b"\xff\xfe", "event_data is binary"),
    "encrypted": (lambda _: base64.urlsafe_b64encode(b"\x80" + os.urandom(90)).decode(),
                  "event_data is not JSON"),
    "null_event_data": (lambda _: None, "event_data is NULL"),
}
"""Damage only a SQLite TEXT column can hold."""


async def damage(store: Store, session_id: str, value: Any, **columns: Any) -> str:
    """Overwrites the response row of ``session_id`` with ``value``; returns its event id."""
    event_id = answered_then_superseded().events[2].id
    where = "app_name = :a AND user_id = :u AND session_id = :s AND id = :i"
    keys = {"a": APP, "u": USER, "s": session_id, "i": event_id}
    if store.sqlite_path is not None:
        with closing(sqlite3.connect(store.sqlite_path)) as db, db:
            (stored,) = db.execute(f"SELECT event_data FROM events WHERE {where}", keys).fetchone()
            new = value(json.loads(stored)) if callable(value) else value
            sets = ", ".join(f"{c} = :{c}" for c in ("event_data", *columns))
            db.execute(f"UPDATE events SET {sets} WHERE {where}",
                       {**keys, "event_data": new, **columns})
        return event_id
    engine = create_async_engine(store.url)
    try:
        async with engine.begin() as conn:
            stored = (await conn.execute(
                text(f"SELECT event_data FROM events WHERE {where}"), keys)).scalar_one()
            data = stored if isinstance(stored, dict) else json.loads(stored)
            cast = "CAST(:v AS JSONB)" if store.kind == "postgres" else ":v"
            await conn.execute(text(f"UPDATE events SET event_data = {cast} WHERE {where}"),
                               {**keys, "v": value(data)})
    finally:
        await engine.dispose()
    return event_id


def allow_null_columns(path: Path) -> None:
    """Drops NOT NULL from ``invocation_id`` and ``timestamp`` (ADK's schema has them), as
    a table created or altered by another tool would be."""
    with closing(sqlite3.connect(path)) as db, db:
        (sql,) = db.execute("SELECT sql FROM sqlite_master WHERE name = 'events'").fetchone()
        loose = sql.replace("VARCHAR(256) NOT NULL", "VARCHAR(256)").replace(
            "DATETIME NOT NULL", "DATETIME")
        db.execute("PRAGMA writable_schema = ON")
        db.execute("UPDATE sqlite_master SET sql = ? WHERE name = 'events'", (loose,))
    with closing(sqlite3.connect(path)) as db:
        assert db.execute("PRAGMA integrity_check").fetchone() == ("ok",)


def damaged_of(report: ScanReport) -> dict[str, tuple[str | None, str]]:
    """The report's damaged rows by session."""
    return {d.session_id: (d.event_id, d.problem) for d in report.damaged_rows}


async def build(store: Store, shapes: dict[str, tuple[Edit, str]]) -> dict[str, str]:
    """One session per damage shape plus a healthy dead one; returns each shape's event id."""
    await fill(store, {"healthy": dead(), **{s: answered_then_superseded() for s in shapes}})
    return {shape: await damage(store, shape, edit) for shape, (edit, _) in shapes.items()}


async def test_json_shapes_are_reported_and_skipped_on_every_backend(adk_store: Store) -> None:
    """Valid JSON of the wrong shape, in any backend's column, is reported with its event id
    and problem; its session is never healed; every other session is."""
    ids = await build(adk_store, JSON_SHAPES)
    report = await scan(adk_store.url, ScanOptions(policy=HealPolicy(stale_after=3600)), now=NOW)
    found = damaged_of(report)
    assert set(found) == set(JSON_SHAPES)
    for shape, (_, problem) in JSON_SHAPES.items():
        assert found[shape][0] == ids[shape] and problem in found[shape][1], found[shape]
    assert report.damaged_sessions == len(JSON_SHAPES)
    assert [c.session_id for c in report.dead_calls] == ["healthy"]
    assert report.events_scanned == 3 + 5 * len(JSON_SHAPES)
    await migrate.upgrade(adk_store.url)
    healed = await repair(adk_store.url, ScanOptions(policy=POLICY), now=NOW)
    assert [(h.record.session_id, h.written) for h in healed.heals] == [("healthy", True)]
    assert damaged_of(healed.scan) == found


@pytest.mark.parametrize("kind", ["adk_sqlite", "db_sqlite"])
async def test_every_damaged_shape_in_sqlite_through_the_cli(kind: str, tmp_path: Path) -> None:
    """Every shape (text, binary, NULL columns too) is listed by scan and repair, in the table
    and in JSON; scan exits 1 for the healthy dead call, repair 3, the rescan 3."""
    shapes = {**JSON_SHAPES, **TEXT_SHAPES}
    if kind == "adk_sqlite":  # SqliteSessionService's event_data is NOT NULL
        shapes.pop("null_event_data")
    async for store in make_store(kind, tmp_path):
        ids = await build(store, shapes)
        if kind == "db_sqlite":
            assert store.sqlite_path is not None
            await fill(store, {"null_invocation": answered_then_superseded(),
                               "null_timestamp": answered_then_superseded()})
            allow_null_columns(store.sqlite_path)
            ids["null_invocation"] = await damage(store, "null_invocation", json.dumps,
                                                  invocation_id=None)
            ids["null_timestamp"] = await damage(store, "null_timestamp", json.dumps,
                                                 timestamp=None)
            shapes["null_invocation"] = (json.dumps, "the invocation_id column is NULL")
            shapes["null_timestamp"] = (json.dumps, "the timestamp column is NULL")

        found = cli("scan", store.url, "--json", "--older-than", "1h")
        assert found.exit_code == 1, found.output
        document = json.loads(found.stdout)
        rows = {d["session_id"]: d for d in document["damaged_rows"]}
        assert set(rows) == set(shapes)
        for shape, (_, problem) in shapes.items():
            assert rows[shape]["event_id"] == ids[shape], rows[shape]
            assert problem in rows[shape]["problem"], rows[shape]
            assert len(rows[shape]["problem"]) < 200
        assert document["damaged_sessions"] == len(shapes)
        assert [c["session_id"] for c in document["dead_calls"]] == ["healthy"]

        human = cli("scan", store.url, "--older-than", "1h", "--format", "table")
        assert human.exit_code == 1
        assert "Damaged rows" in human.stdout and ids["not_json"] in human.stdout

        assert cli("db", "upgrade", store.url).exit_code == 0
        healed = cli("repair", store.url, "--yes", "--json", "--older-than", "1h")
        assert healed.exit_code == 3, healed.output
        repaired = json.loads(healed.stdout)
        assert repaired["healed"] == 1 and len(repaired["damaged_rows"]) == len(shapes)
        again = cli("scan", store.url, "--older-than", "1h")
        assert again.exit_code == 3, again.output
        assert "skipped whole" in again.stderr  # the summary line, beside the TSV


async def test_a_wrong_typed_call_time_in_a_healthy_session_is_reported(tmp_path: Path) -> None:
    """A call row whose JSON timestamp is text, in a session where every call is answered, is
    reported with its event id and problem, as in a session with a dead call."""
    async for store in make_store("db_sqlite", tmp_path):
        await fill(store, {"healthy": answered_then_superseded(), "dead": dead()})
        assert store.sqlite_path is not None
        call_id = answered_then_superseded().events[1].id
        with closing(sqlite3.connect(store.sqlite_path)) as db, db:
            for session in ("healthy", "dead"):
                where = "session_id = ? AND event_data LIKE '%function_call%'"
                (data,) = db.execute(f"SELECT event_data FROM events WHERE {where}",
                                     (session,)).fetchone()
                db.execute(f"UPDATE events SET event_data = ? WHERE {where}",
                           (json.dumps({**json.loads(data), "timestamp": "noon"}), session))
        report = await scan(store.url, ScanOptions(policy=HealPolicy(stale_after=3600)), now=NOW)
        problem = "timestamp is a string, not a number"
        assert damaged_of(report)["healthy"] == (call_id, problem)
        assert damaged_of(report)["dead"][1] == problem
        assert report.events_scanned == 5 + 3 and not report.dead_calls


async def test_plan_and_apply_report_damaged_rows(tmp_path: Path) -> None:
    """plan_repair / apply_plan carry the damaged rows on their reports and heal the rest."""
    async for store in make_store("db_sqlite", tmp_path):
        ids = await build(store, {"not_json": TEXT_SHAPES["not_json"]})
        await migrate.upgrade(store.url)
        plan = await plan_repair(store.url, ScanOptions(policy=POLICY), now=NOW)
        assert damaged_of(plan.scan) == {
            "not_json": (ids["not_json"],
                         "event_data is not JSON (Expecting value at char 0 of 15)")}
        assert [s.key.session_id for s in plan.sessions] == ["healthy"]
        report = await apply_plan(plan)
        assert report.healed == 1 and report.scan.damaged_sessions == 1
        assert report.to_json()["damaged_rows"][0]["event_id"] == ids["not_json"]


async def test_unknown_part_kinds_and_a_huge_row_are_read(tmp_path: Path) -> None:
    """A part kind this genai does not know is carried unread, a 20 MB row is read: neither
    is damage, and the dead call beside them is healed."""
    async for store in make_store("adk_sqlite", tmp_path):
        history = dead()
        history.text("x" * 20_000_000)
        await fill(store, {"huge": history, "unknown": answered_then_superseded()})
        assert store.sqlite_path is not None
        with closing(sqlite3.connect(store.sqlite_path)) as db, db:
            (data,) = db.execute("SELECT event_data FROM events WHERE session_id='unknown' "
                                 "AND event_data LIKE '%function_response%'").fetchone()
            event = json.loads(data)
            event["content"]["parts"].append({"mystery_kind": {"x": 1}})
            db.execute("UPDATE events SET event_data = ? WHERE session_id='unknown' AND "
                       "event_data LIKE '%function_response%'", (json.dumps(event),))
        report = await scan(store.url, ScanOptions(policy=HealPolicy(stale_after=3600)), now=NOW)
        assert report.damaged_rows == []
        assert [c.session_id for c in report.dead_calls] == ["huge"]


@pytest.mark.slow
async def test_one_damaged_row_among_100k_events(tmp_path: Path) -> None:
    """In 100,000 events, the one damaged row costs only its session: every other dead call
    is healed, and the damaged one is listed."""
    async for store in make_store("db_sqlite", tmp_path):
        histories = bulk_histories(2000, 50, 0.05)
        await bulk_fill(store, histories, chunk=500)
        assert store.sqlite_path is not None
        with closing(sqlite3.connect(store.sqlite_path)) as db, db:
            (event_id, data) = db.execute(
                "SELECT id, event_data FROM events WHERE session_id = 's0001000' "
                "ORDER BY timestamp LIMIT 1 OFFSET 7").fetchone()
            db.execute("UPDATE events SET event_data = ? WHERE id = ? AND session_id = "
                       "'s0001000'", (data[:len(data) // 2], event_id))
        started = time.perf_counter()
        report = await scan(store.url, ScanOptions(policy=HealPolicy(stale_after=None)), now=NOW)
        assert report.events_scanned == 100_000
        ((session_id, (damaged_id, problem)),) = damaged_of(report).items()
        assert (session_id, damaged_id) == ("s0001000", event_id)
        assert problem.startswith("event_data is truncated JSON")
        dead_sessions = {c.session_id for c in report.dead_calls}
        await migrate.upgrade(store.url)
        healed = await repair(store.url, ScanOptions(policy=HealPolicy(stale_after=None)), now=NOW)
        assert {h.record.session_id for h in healed.heals if h.written} == dead_sessions
        assert len(dead_sessions) > 50 and "s0001000" not in dead_sessions
        assert time.perf_counter() - started < 60


@pytest.mark.redis
async def test_a_store_whose_rows_are_all_unreadable_fails_in_one_line(tmp_path: Path) -> None:
    """Encrypted rows everywhere (as an encrypting session service stores them): one line
    naming the cause and the Python API over the user's own service, exit 2."""
    async for store in make_store("db_sqlite", tmp_path):
        await fill(store, {"a": dead(), "b": answered_then_superseded()})
        assert store.sqlite_path is not None
        with closing(sqlite3.connect(store.sqlite_path)) as db, db:
            rows = db.execute("SELECT id FROM events").fetchall()
            for (event_id,) in rows:
                token = base64.urlsafe_b64encode(b"\x80" + os.urandom(120)).decode()
                db.execute("UPDATE events SET event_data = ? WHERE id = ?", (token, event_id))
        assert_one_line_error(cli("scan", store.url), "could be read", "encrypts",
                              "HealingSessionService")
        assert_one_line_error(cli("repair", store.url, "--dry-run"), "HealingSessionService")
        with pytest.raises(StoreError, match="none of the 8 stored events"):
            await scan(store.url, now=NOW)


@pytest.fixture
async def prefix() -> AsyncIterator[str]:
    """A fresh ADK key prefix on the real Redis, deleted after the test."""
    async with temporary_redis_prefix() as fresh:
        yield fresh


async def test_damaged_redis_values_are_reported_and_skipped(prefix: str) -> None:
    """Redis: a value that is not JSON, a binary one, an event that is not an object and an
    event of the wrong shape are each reported and their sessions skipped; the rest heal."""
    config = RedisSessionServiceConfig(uri=REDIS_URL, key_prefix=prefix)
    service = RedisSessionService(config)
    try:
        await redis_fill(service)
    finally:
        await close_redis(service)
    client = redis_asyncio.from_url(REDIS_URL)
    try:
        await client.set(session_key(prefix, "ok"), "gAAAAABl-not-json")
        await client.set(session_key(prefix, "long"), os.urandom(40) + b"\xff")
        for session_id, event in (("idless", "a string"), ("orphan", None)):
            value = json.loads(await client.get(session_key(prefix, session_id)))
            if event is None:
                value["events"][1]["content"] = "hi"
            else:
                value["events"][1] = event
            await client.set(session_key(prefix, session_id), json.dumps(value),
                             keepttl=True)
    finally:
        await client.aclose()
    url = store_url(prefix)
    found = cli("scan", url, "--json")
    assert found.exit_code == 1, found.output
    document = json.loads(found.stdout)
    rows = {d["session_id"]: (d["event_id"], d["problem"]) for d in document["damaged_rows"]}
    assert rows == {
        "ok": (None, "the value is not JSON (Expecting value: line 1 column 1 (char 0))"),
        "long": (None, "the value is binary (41 bytes, not UTF-8 text)"),
        "idless": (None, "events[1] is not a JSON object"),
        "orphan": ("e-0002", "content is a string, not an object"),
    }
    assert {c["session_id"] for c in document["dead_calls"]} == {"dead", "stale", "parallel"}
    healed = cli("repair", url, "--yes", "--json")
    assert healed.exit_code == 3, healed.output
    assert json.loads(healed.stdout)["healed"] == 3
