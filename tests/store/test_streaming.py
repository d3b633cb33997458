"""Streaming reads: a MariaDB store opened through aiomysql is read through asyncmy; a SQLite
session passed clean by the clean pass (``pass_clean``) is one classify finds clean, and any
other is read exactly as without it."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from servers import temporary_database
from sqlalchemy import text
from sqlalchemy.ext.asyncio import create_async_engine
from stores import Store, crashed_histories, fill, make_store

from adk_session_heal.core.event_access import STORED_JSON
from adk_session_heal.core.findings import classify
from adk_session_heal.core.shards import Shard
from adk_session_heal.ops.scan import scan
from adk_session_heal.store import SessionFilter, open_store, streaming
from adk_session_heal.testing import History

NOW = 1_700_100_000.0  # a day and a bit after the histories' clock


def _recording_readers(monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    """Records each asyncmy reader a stream opens (``None``: it read through aiomysql)."""
    opened: list[Any] = []
    reader = streaming._asyncmy_reader

    async def recording(conn: Any) -> Any:
        connection = await reader(conn)
        opened.append(connection)
        return connection

    monkeypatch.setattr(streaming, "_asyncmy_reader", recording)
    return opened


async def test_mariadb_aiomysql_store_streams_through_asyncmy(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A ``mysql+aiomysql://`` scan reads its rows through an asyncmy connection of its own,
    and finds exactly what the same scan finds reading through aiomysql."""
    opened = _recording_readers(monkeypatch)
    async with temporary_database("mariadb") as url:
        assert url.startswith("mysql+aiomysql://")
        await fill(Store("mariadb", url), crashed_histories())
        through_asyncmy = await scan(url, now=NOW)
        assert opened and all(connection is not None for connection in opened)

        async def none(conn: Any) -> None:
            return None

        monkeypatch.setattr(streaming, "_asyncmy_reader", none)
        through_aiomysql = await scan(url, now=NOW)
    assert through_asyncmy.to_json() == through_aiomysql.to_json()
    assert through_asyncmy.events_scanned == through_aiomysql.events_scanned > 0
    assert len(through_asyncmy.dead_calls) == 3


async def test_mariadb_url_with_options_keeps_aiomysql(monkeypatch: pytest.MonkeyPatch) -> None:
    """A URL with query options (TLS, a socket, a charset) is read through the engine's own
    driver: the two drivers spell those options differently."""
    opened = _recording_readers(monkeypatch)
    async with temporary_database("mariadb") as url:
        await fill(Store("mariadb", url), crashed_histories())
        report = await scan(f"{url}?charset=utf8mb4", now=NOW)
    assert opened and all(connection is None for connection in opened)
    assert len(report.dead_calls) == 3


def _answered(start: float) -> History:
    """A user turn, one call and its response, a text: clean."""
    history = History(start=start)
    history.user("weather?")
    call_id = history.call("lookup", {"q": 1})
    history.respond((call_id, "lookup", {"answer": 1}))
    history.text("sunny")
    return history


def _spoiled(row: dict[str, Any], name: str) -> str:
    """One ``event_data`` text rewritten at an edge of the partial decoding (``_SPOILS``)."""
    text = json.dumps(row)
    part = row.get("content", {}).get("parts", [{}])[0]
    function = "function_call" if "function_call" in part else "function_response"
    if name == "nameless_function" and function in part:
        part[function] = {"id": part[function]["id"], "args": {}}
    elif name == "function_without_known_keys" and function in part:
        part[function] = {"args": {"q": 1}}
    elif name == "content_without_parts_rewinds":
        row["content"] = {"role": "user"}
        row["actions"] = {"rewind_before_invocation_id": "inv-0"}
    elif name == "actions_without_known_keys":
        row["actions"] = {"state_delta": {"k": 1}}
    elif name == "duplicate_content":
        return text[:-1] + ', "content": null}'
    elif name == "nan_in_skipped_field":
        return text[:-1] + ', "usage_metadata": {"x": NaN}}'
    elif name == "huge_number_in_skipped_field":
        return text[:-1] + ', "usage_metadata": {"x": 1e400}}'
    elif name == "bad_escape_in_skipped_field":
        return text[:-1] + ', "usage_metadata": "\\x"}'
    elif name == "lone_surrogate_in_skipped_field":
        return text[:-1] + ', "usage_metadata": "\\ud800"}'
    elif name == "no_json_timestamp":
        row.pop("timestamp", None)
    elif name == "text_timestamp":
        row["timestamp"] = "noon"
    elif name == "not_json":
        return text[:-2]
    return json.dumps(row)


_SPOILS = ("none", "nameless_function", "function_without_known_keys",
           "content_without_parts_rewinds", "actions_without_known_keys", "duplicate_content",
           "nan_in_skipped_field", "huge_number_in_skipped_field", "bad_escape_in_skipped_field",
           "lone_surrogate_in_skipped_field", "no_json_timestamp", "text_timestamp", "not_json")
"""How one row of a session is rewritten: each at an edge of what the partial decoding keeps."""


@pytest.mark.parametrize("where", [SessionFilter(), SessionFilter(shard=Shard(1, 2))])
async def test_sessions_passed_clean_are_those_classify_finds_all_answered(
        where: SessionFilter, tmp_path: Path) -> None:
    """With ``pass_clean``, a session passed clean is one classify, decoded whole, finds with
    every call answered once and nothing else; every other session is read as before."""
    histories = {f"{name}-{row}": _answered(1_700_000_000.0 + 100 * index)
                 for index, (name, row) in enumerate((n, r) for n in _SPOILS for r in range(4))}
    async for store in make_store("db_sqlite", tmp_path):
        await fill(store, histories)
        engine = create_async_engine(store.url)
        try:
            async with engine.begin() as conn:
                for session_id in histories:
                    name, row = session_id.rsplit("-", 1)
                    found = (await conn.execute(text(
                        "SELECT id, event_data FROM events WHERE session_id = :s "
                        "ORDER BY timestamp, id"), {"s": session_id})).all()[int(row)]
                    await conn.execute(text("UPDATE events SET event_data = :v "
                                            "WHERE session_id = :s AND id = :i"),
                                       {"v": _spoiled(json.loads(found[1]), name),
                                        "s": session_id, "i": found[0]})
        finally:
            await engine.dispose()
        opened = await open_store(store.url)
        try:
            whole = [s async for s in opened.stream_sessions(where)]
            passed = [s async for s in opened.stream_sessions(where, pass_clean=True)]
        finally:
            await opened.close()
    assert [s.key for s in passed] == [s.key for s in whole]
    clean = set()
    for read, was in zip(passed, whole, strict=True):
        if read.clean:
            clean.add(read.key.session_id)
            assert not was.damaged and len(read.events) == len(was.events)
            assert classify(was.events, STORED_JSON, now=NOW).all_answered
        else:
            assert read == was
    assert passed and clean
    assert {s.rsplit("-", 1)[0] for s in clean} >= ({
        "none", "actions_without_known_keys", "huge_number_in_skipped_field"}
        if where.shard is None else set())
    assert not {s for s in clean if s.startswith(("nameless_function-1", "not_json",
                                                   "function_without_known_keys-1"))}

