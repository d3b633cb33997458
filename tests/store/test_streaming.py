"""Streaming reads: a MariaDB store opened through aiomysql is read through asyncmy."""

from __future__ import annotations

from typing import Any

import pytest
from servers import temporary_database
from stores import Store, crashed_histories, fill

from adk_session_heal.ops.scan import scan
from adk_session_heal.store import streaming

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
