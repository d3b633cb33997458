"""The SQL prefilter (store/prefilter.py): prefiltered scans find exactly what full scans find.

Differential tests on every engine with a prefilter (ADK's SQLite file, and
``DatabaseSessionService`` on SQLite, PostgreSQL and MariaDB): a store of ugly
shapes is scanned twice, with and without the prefilter, and the two reports
must be identical (every list, every count). The shapes are the ones a
prefilter could misread: rows spoiled natively after ADK wrote them (not JSON,
truncated, non-object JSON, encrypted-looking blobs, duplicate keys, camelCase
keys, wrong JSON types, empty or numeric ids, partial events, long-running
ids, rewinds) on the call's or on the response's row, and generated histories
(responses in separate events, reused and shared ids, id-less calls, ties and
backwards clocks, orphans, long-running and confirmation calls; four examples
of six sessions per engine by default, ``PREFILTER_EXAMPLES=200`` for a long
hunt).
"""

from __future__ import annotations

import json
import os
import sqlite3
import uuid
from collections.abc import Callable
from contextlib import closing
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sqlalchemy import text
from sqlalchemy.ext.asyncio import create_async_engine
from stores import Store, fill, make_store
from ugly_histories import UGLY_OPS, Op, build_ugly

from adk_session_heal import ScanOptions
from adk_session_heal.ops.repair import repair
from adk_session_heal.ops.scan import scan
from adk_session_heal.store import SessionFilter, open_store
from adk_session_heal.testing import History

KINDS = ["adk_sqlite", "db_sqlite", "postgres", "mariadb"]
NOW = 1_800_000_000.0

Spoil = Callable[[dict[str, Any]], str]


def _dup_content(event: dict[str, Any]) -> str:
    body = json.dumps({k: v for k, v in event.items() if k != "content"})
    return body[:-1] + ', "content": null, "content": ' + json.dumps(event["content"]) + "}"


def _set(path: tuple[str | int, ...], value: Any) -> Spoil:
    def spoil(event: dict[str, Any]) -> str:
        node: Any = event
        for key in path[:-1]:
            node = node[key]
        node[path[-1]] = value
        return json.dumps(event)
    return spoil


def _camel(event: dict[str, Any]) -> str:
    return json.dumps(event).replace('"function_call"', '"functionCall"').replace(
        '"function_response"', '"functionResponse"')


def _both(event: dict[str, Any]) -> str:
    part = event["content"]["parts"][0]
    part["function_call"] = part.get("function_call") or {"id": "x", "name": "lookup"}
    part["function_response"] = part.get("function_response") or {"id": "x", "name": "lookup"}
    return json.dumps(event)


SPOILS: dict[str, tuple[Spoil, bool]] = {
    # name: (spoil, storable as jsonb)
    "not_json": (lambda e: "not json {", False),
    "truncated": (lambda e: json.dumps(e)[:40], False),
    "encrypted_blob": (lambda e: "gAAAAABlZ0x2c3VwZXJzZWNyZXQ=", False),
    "encrypted_json": (lambda e: json.dumps("gAAAAABlZ0x2c3VwZXJzZWNyZXQ="), True),
    "array": (lambda e: "[1, 2]", True),
    "json_null": (lambda e: "null", True),
    "duplicate_content": (_dup_content, True),
    "camel_case": (_camel, True),
    "content_list": (_set(("content",), []), True),
    "parts_object": (_set(("content", "parts"), {}), True),
    "part_string": (_set(("content", "parts", 0), "text"), True),
    "numeric_id": (lambda e: _set(("content", "parts", 0, _fn(e), "id"), 5)(e), True),
    "empty_id": (lambda e: _set(("content", "parts", 0, _fn(e), "id"), "")(e), True),
    "id_case": (lambda e: _set(("content", "parts", 0, _fn(e), "id"),
                               _part(e)["id"].upper())(e), True),
    "id_trailing_space": (lambda e: _set(("content", "parts", 0, _fn(e), "id"),
                                         _part(e)["id"] + " ")(e), True),
    "numeric_name": (lambda e: _set(("content", "parts", 0, _fn(e), "name"), 7)(e), True),
    "empty_function": (lambda e: _set(("content", "parts", 0, _fn(e)), {})(e), True),
    "call_and_response": (_both, True),
    "partial": (_set(("partial",), True), True),
    "not_partial": (_set(("partial",), False), True),
    "long_running": (lambda e: _set(("long_running_tool_ids",),
                                    [_part(e)["id"]])(e), True),
    "awaiting_confirmation": (lambda e: _set(("actions", "requested_tool_confirmations"),
                                             {_part(e)["id"]: {"hint": "ok?"}})(e), True),
    "awaiting_credential": (lambda e: _set(("actions", "requested_auth_configs"),
                                           {_part(e)["id"]: {}})(e), True),
    "rewind": (_set(("actions",), {"rewind_before_invocation_id": "inv-0"}), True),
    "actions_string": (_set(("actions",), "x"), True),
    # Read by classification in every session, clean ones included: a wrong type is damage.
    "timestamp_text": (_set(("timestamp",), "noon"), True),
    "timestamp_numeric_text": (_set(("timestamp",), "1700000000.5"), True),
    "timestamp_object": (_set(("timestamp",), {}), True),
    "metadata_list": (_set(("custom_metadata",), [1]), True),
    "camel_metadata_string": (_set(("customMetadata",), "x"), True),
    "confirmations_number": (_set(("actions", "requested_tool_confirmations"), 5), True),
    "args_mention": (lambda e: _set(("content", "parts", 0, _fn(e), "args"),
                                    {"q": '"function_call"'})(e) if _fn(e) == "function_call"
                     else json.dumps(e), True),
}
"""Row spoilers: each rewrites one stored event's ``event_data`` (native write)."""


def _fn(event: dict[str, Any]) -> str:
    return "function_call" if "function_call" in event["content"]["parts"][0] \
        else "function_response"


def _part(event: dict[str, Any]) -> dict[str, Any]:
    part: dict[str, Any] = event["content"]["parts"][0][_fn(event)]
    return part


def _answered() -> History:
    history = History(start=1_700_000_000.0)
    history.user("weather?")
    call_id = history.call("lookup", {"q": 1})
    history.respond((call_id, "lookup", {"answer": 1}))
    history.text("sunny")
    return history


async def _rewrite(store: Store, session_id: str, event_id: str, value: str) -> None:
    """Stores ``value`` as the row's ``event_data``, natively."""
    if store.sqlite_path is not None:
        with closing(sqlite3.connect(store.sqlite_path)) as db, db:
            db.execute("UPDATE events SET event_data = ? WHERE session_id = ? AND id = ?",
                       (value, session_id, event_id))
        return
    cast = "CAST(:v AS jsonb)" if store.kind == "postgres" else ":v"
    engine = create_async_engine(store.url)
    try:
        async with engine.begin() as conn:
            await conn.execute(text(f"UPDATE events SET event_data = {cast} "
                                    "WHERE session_id = :s AND id = :i"),
                               {"v": value, "s": session_id, "i": event_id})
    finally:
        await engine.dispose()


async def _candidates(store: Store) -> list[str]:
    opened = await open_store(store.url)
    try:
        found = await opened.candidates(SessionFilter(), everywhere=True)
        assert found is not None, f"{store.kind} has no prefilter"
        return [s.key.session_id async for s in found[1]]
    finally:
        await opened.close()


async def _same_reports(store: Store) -> dict[str, Any]:
    pre = (await scan(store.url, ScanOptions(prefilter="always"), now=NOW)).to_json()
    full = (await scan(store.url, ScanOptions(prefilter="never"), now=NOW)).to_json()
    assert pre == full
    return pre


@pytest.mark.slow
@pytest.mark.parametrize("kind", KINDS)
async def test_spoiled_rows_found_alike(kind: str, tmp_path: Path) -> None:
    """Every spoiled row, on the call's or the response's row, gives the full scan's report."""
    async for store in make_store(kind, tmp_path):
        histories = {"clean": _answered()}
        targets: dict[str, tuple[int, Spoil]] = {}
        for name, (spoil, jsonb) in SPOILS.items():
            if kind == "postgres" and not jsonb:
                continue
            for side, index in (("call", 1), ("response", 2)):
                histories[f"{name}-{side}"] = _answered()
                targets[f"{name}-{side}"] = (index, spoil)
        await fill(store, histories)
        for session_id, (index, spoil) in targets.items():
            event = histories[session_id].events[index]
            stored = event.model_dump(exclude_none=True, mode="json")
            await _rewrite(store, session_id, event.id, spoil(stored))
        report = await _same_reports(store)
        candidates = await _candidates(store)
        assert "clean" not in candidates
        assert report["counts"]["dead_calls"] > 0 and report["counts"]["damaged_rows"] > 0
        flagged = {f"{r['session_id']}" for r in report["dead_calls"] + report["damaged_rows"]}
        assert flagged <= set(candidates)


@pytest.mark.parametrize("kind", KINDS)
@settings(max_examples=int(os.environ.get("PREFILTER_EXAMPLES", "4")), deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(sessions=st.lists(UGLY_OPS, min_size=6, max_size=6))
async def test_ugly_histories_found_alike(kind: str, tmp_path: Path,
                                          sessions: list[list[Op]]) -> None:
    """Generated ugly histories (ties, reused ids, split responses) give the full scan's report."""
    directory = tmp_path / uuid.uuid4().hex
    directory.mkdir()
    async for store in make_store(kind, directory):
        histories = {}
        for index, ops in enumerate(sessions):
            history = History(start=1_700_000_000.0 + index)
            history.events.extend(build_ugly(ops, start=1_700_000_000.0 + index))
            histories[f"s{index}"] = history
        await fill(store, histories)
        await _same_reports(store)


@pytest.mark.parametrize("kind", KINDS)
async def test_repair_prefiltered_then_nothing_left(kind: str, tmp_path: Path) -> None:
    """A prefiltered repair heals what the full scan finds; a full scan after it finds nothing."""
    async for store in make_store(kind, tmp_path):
        dead = History(start=1_700_000_000.0)
        dead.user("weather?")
        dead.call("lookup", {"q": 1})
        dead.user("hello?")
        await fill(store, {"clean": _answered(), "dead": dead})
        healed = await repair(store.url, ScanOptions(prefilter="always"), ledger=False, now=NOW)
        assert healed.healed == 1
        after = await scan(store.url, ScanOptions(prefilter="never"), now=NOW)
        assert after.counts()["dead_calls"] == 0 and after.events_scanned == 8


async def test_text_column_on_postgres_falls_back(tmp_path: Path) -> None:
    """A PostgreSQL ``event_data`` that is not ``jsonb`` gets no prefilter: all is scanned."""
    async for store in make_store("postgres", tmp_path):
        await fill(store, {"clean": _answered()})
        engine = create_async_engine(store.url)
        try:
            async with engine.begin() as conn:
                await conn.execute(text("ALTER TABLE events ALTER COLUMN event_data TYPE text"))
        finally:
            await engine.dispose()
        opened = await open_store(store.url)
        try:
            assert await opened.candidates(SessionFilter(), everywhere=True) is None
        finally:
            await opened.close()
        report = await scan(store.url, now=NOW)
        assert report.events_scanned == 4 and report.sessions_scanned == 1


@pytest.mark.postgres
@pytest.mark.mariadb
async def test_where_the_prefilter_is_used_by_default(tmp_path: Path) -> None:
    """By default PostgreSQL prefilters; SQLite and MariaDB scan everything unless told."""
    for kind, used in (("db_sqlite", False), ("adk_sqlite", False), ("postgres", True),
                       ("mariadb", False)):
        directory = tmp_path / kind
        directory.mkdir()
        async for store in make_store(kind, directory):
            await fill(store, {"clean": _answered()})
            opened = await open_store(store.url)
            try:
                assert (await opened.candidates(SessionFilter()) is not None) is used
                assert await opened.candidates(SessionFilter(), everywhere=True) is not None
            finally:
                await opened.close()
