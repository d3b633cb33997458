"""The package's twin of ADK's ``events`` table, held to the installed ADK's own model.

The writers use :func:`events_table` instead of loading ADK's model (which imports
ADK's events, models and ``google.genai``); these tests show that nothing a reader
sees differs: the DDL on every dialect, and the bytes stored and the values read
back on SQLite, PostgreSQL and MariaDB.
"""

from __future__ import annotations

import datetime
import subprocess
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
from google.adk.sessions import DatabaseSessionService
from servers import temporary_database
from sqlalchemy import Table, insert, select, text
from sqlalchemy.dialects import mysql, postgresql, sqlite
from sqlalchemy.engine import Dialect
from sqlalchemy.ext.asyncio import create_async_engine
from sqlalchemy.schema import CreateIndex, CreateTable
from stores import ADK_EVENTS_TABLE

from adk_session_heal.core.adk_compat import timestamp_to_column
from adk_session_heal.store.layouts.sql_event_rows import events_table

APP, USER, SESSION = "app", "user", "s1"

_DIALECTS: dict[str, Dialect] = {
    "sqlite": sqlite.dialect(),
    "postgresql": postgresql.dialect(),
    "mysql": mysql.dialect(),
}

_UGLY_DATA: dict[str, Any] = {
    "id": "e-1",
    "invocation_id": "inv-1",
    "author": "assistant",
    "timestamp": 1_700_000_000.123457,
    "content": {"role": "user", "parts": [{"function_response": {
        "id": "call-1", "name": "wétter_☂", "response": {
            "error": "tool 'wétter_☂' did not finish \"in time\"\n\t\\",
            "nested": {"none": None, "list": [1, 2.5, 1e16, -0.0, True, None, "日本"]},
            "emoji": "🛠️", "empty": ""}}}]},
    "custom_metadata": {"adk_session_heal": {"synthetic": True, "healed_at": 1.5e9}},
}


def _ddl(table: Table, dialect: Dialect) -> list[str]:
    """The table's ``CREATE TABLE`` and ``CREATE INDEX`` statements for a dialect."""
    return [str(CreateTable(table).compile(dialect=dialect)).strip(),
            *sorted(str(CreateIndex(index).compile(dialect=dialect)).strip()
                    for index in table.indexes)]


@pytest.mark.parametrize("dialect", sorted(_DIALECTS))
def test_the_twin_has_adk_s_own_ddl_on_every_dialect(dialect: str) -> None:
    """Columns, types, lengths, nullability, key, foreign key and index compile as ADK's do."""
    assert _ddl(events_table(), _DIALECTS[dialect]) == _ddl(ADK_EVENTS_TABLE, _DIALECTS[dialect])


def test_the_twin_binds_values_as_adk_s_own_column_types_do() -> None:
    """Each column's bind processor gives what ADK's gives, on every dialect (reading back is
    held to ADK's by the stored-row test below)."""
    ours, theirs = events_table(), ADK_EVENTS_TABLE
    column = datetime.datetime(2026, 12, 2, 4, 5, 6, 789012)
    for dialect in _DIALECTS.values():
        for name, value in (("event_data", _UGLY_DATA), ("timestamp", column)):
            ours_type, theirs_type = ours.c[name].type, theirs.c[name].type
            bind_ours = ours_type.bind_processor(dialect)
            bind_theirs = theirs_type.bind_processor(dialect)
            bound_ours = bind_ours(value) if bind_ours else value
            bound_theirs = bind_theirs(value) if bind_theirs else value
            assert bound_ours == bound_theirs, (dialect.name, name)
            assert type(bound_ours) is type(bound_theirs), (dialect.name, name)


def test_a_write_loads_no_adk_model() -> None:
    """Building a heal row and the insert statement imports neither ADK's events nor genai."""
    code = (
        "import sys\n"
        "from sqlalchemy import insert\n"
        "from sqlalchemy.dialects import sqlite\n"
        "from adk_session_heal.store.layouts.sql_event_rows import events_table\n"
        "str(insert(events_table()).compile(dialect=sqlite.dialect()))\n"
        "loaded = sorted(m for m in sys.modules if m.startswith(('google.adk', 'google.genai')))\n"
        "print(' '.join(loaded))\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            check=True, cwd=Path(__file__).parent)
    loaded = result.stdout.split()
    assert "google.adk.events" not in loaded and "google.genai" not in loaded, loaded
    assert not any(name.startswith("google.adk.sessions") for name in loaded), loaded


@asynccontextmanager
async def _store(kind: str, tmp_path: Path) -> AsyncIterator[str]:
    """A store of the kind, its tables made by ADK's own service, one session in it."""
    if kind == "sqlite":
        url = f"sqlite+aiosqlite:///{tmp_path / 'twin.db'}"
        yield url
        return
    async with temporary_database(kind) as url:
        yield url


def _raw(kind: str) -> str:
    """A plain-SQL read of the stored row's bytes (no column type in between)."""
    if kind == "postgres":
        return ("SELECT id, invocation_id, CAST(timestamp AS TEXT), CAST(event_data AS TEXT) "
                "FROM events WHERE id = :id")
    return ("SELECT id, invocation_id, CAST(timestamp AS CHAR), event_data "
            "FROM events WHERE id = :id")


@pytest.mark.parametrize("kind", [
    "sqlite",
    pytest.param("postgres", marks=pytest.mark.postgres),
    pytest.param("mariadb", marks=pytest.mark.mariadb),
])
async def test_a_row_written_through_the_twin_is_stored_byte_for_byte_as_adk_s(
    kind: str, tmp_path: Path
) -> None:
    """Inserted through each table, the same row is stored with the same bytes, reads back
    as the same values through either, and text that is not JSON fails both alike."""
    async with _store(kind, tmp_path) as url:
        service = DatabaseSessionService(url)
        await service.create_session(app_name=APP, user_id=USER, session_id=SESSION)
        await service.close()
        column = timestamp_to_column(_UGLY_DATA["timestamp"])
        engine = create_async_engine(url)
        try:
            async with engine.begin() as conn:
                for table, event_id in ((ADK_EVENTS_TABLE, "adk"), (events_table(), "twin")):
                    await conn.execute(insert(table), [{
                        "id": event_id, "app_name": APP, "user_id": USER,
                        "session_id": SESSION, "invocation_id": "inv-1",
                        "timestamp": column, "event_data": _UGLY_DATA}])
            async with engine.connect() as conn:
                stored = {event_id: (await conn.execute(text(_raw(kind)), {"id": event_id})).one()
                          for event_id in ("adk", "twin")}
                assert stored["twin"][1:] == stored["adk"][1:]
                for table in (ADK_EVENTS_TABLE, events_table()):
                    read = (await conn.execute(select(table.c.timestamp, table.c.event_data)
                                               .order_by(table.c.id))).all()
                    assert [tuple(row) for row in read] == [(column, _UGLY_DATA)] * 2
            if kind != "postgres":  # JSONB holds only JSON; a text column can hold anything
                async with engine.begin() as conn:
                    await conn.execute(text("UPDATE events SET event_data = 'not json'"))
                async with engine.connect() as conn:
                    for table in (ADK_EVENTS_TABLE, events_table()):
                        with pytest.raises(ValueError):
                            (await conn.execute(select(table.c.event_data))).all()
        finally:
            await engine.dispose()


async def test_a_number_in_sqlite_s_timestamp_column_reads_as_adk_reads_it(
    tmp_path: Path
) -> None:
    """A POSIX number another writer left in SQLite's timestamp column reads as ADK 2.x reads
    it: an aware UTC time, through either table."""
    url = f"sqlite+aiosqlite:///{tmp_path / 'number.db'}"
    service = DatabaseSessionService(url)
    await service.create_session(app_name=APP, user_id=USER, session_id=SESSION)
    await service.close()
    engine = create_async_engine(url)
    try:
        async with engine.begin() as conn:
            await conn.execute(text(
                "INSERT INTO events (id, app_name, user_id, session_id, invocation_id, "
                "timestamp, event_data) VALUES ('n', :app, :user, :session, 'inv', "
                "1700000000.5, '{}')"), {"app": APP, "user": USER, "session": SESSION})
        async with engine.connect() as conn:
            read = [(await conn.execute(select(table.c.timestamp))).scalar_one()
                    for table in (ADK_EVENTS_TABLE, events_table())]
        assert read[0] == read[1] == datetime.datetime.fromtimestamp(1_700_000_000.5,
                                                                     datetime.UTC)
    finally:
        await engine.dispose()
