"""Data a database refuses is one line about the data, never a mangled row or a URL hint.

The URL's host, port, user, password and database are worth checking only when
connecting fails; a statement the database refuses is reported in its own
words (PostgreSQL's DETAIL included), cut between words when very long.

A heal MariaDB cannot store exactly is an error, never a silently mangled row.

The case: one model turn that fanned out 1,700 parallel tool calls with ADK's
own call ids (``adk-<uuid>``), all dead. ADK stores the event fine
(``event_data`` is ``LONGTEXT``), but the heal ledger's ``call_ids`` column is
``TEXT``, 65,535 bytes on MySQL/MariaDB, and the ids take about 75,000.
``INSERT IGNORE`` used to turn the error into a warning and store the list cut
short (invalid JSON, reported as recorded); now the write fails as a whole,
nothing is stored, and the message says which column.
"""

from __future__ import annotations

import asyncio
import sqlite3
import subprocess
import sys
import uuid
from collections.abc import AsyncIterator
from contextlib import closing
from pathlib import Path

import pytest
from google.adk.sessions import DatabaseSessionService
from sqlalchemy import text
from sqlalchemy.exc import DBAPIError
from sqlalchemy.ext.asyncio import create_async_engine
from stores import APP, USER, Store, close, fill, make_store, snapshot

from adk_session_heal import migrate
from adk_session_heal.errors import HealWriteError, StoreError
from adk_session_heal.ledger import SqlHealLedger
from adk_session_heal.ops.repair import repair
from adk_session_heal.policy import HealPolicy
from adk_session_heal.runtime.service import HealingSessionService
from adk_session_heal.store import open_store
from adk_session_heal.store.driver_errors import translate_error
from adk_session_heal.store.urls import parse_store_url
from adk_session_heal.testing import History

PARALLEL_CALLS = 1_700


@pytest.fixture
async def fan_out_store(tmp_path: Path) -> AsyncIterator[Store]:
    """A MariaDB store, ledger installed, whose one session has 1,700 dead parallel calls."""
    history = History()
    history.user("look everything up")
    history.calls(*["lookup"] * PARALLEL_CALLS,
                  ids=[f"adk-{uuid.uuid4()}" for _ in range(PARALLEL_CALLS)])
    history.user("hello?")
    async for store in make_store("mariadb", tmp_path):
        await fill(store, {"dead": history})
        await migrate.upgrade(store.url)
        yield store


@pytest.mark.mariadb  # fan_out_store is a MariaDB store
def test_cli_repair_refuses_a_list_too_long_for_the_ledger(fan_out_store: Store) -> None:
    """repair exits 2 with one line naming the data error, and writes nothing."""
    before = asyncio.run(snapshot(fan_out_store))
    child = subprocess.run(
        [sys.executable, "-m", "adk_session_heal", "repair", fan_out_store.url, "--yes"],
        capture_output=True, text=True, timeout=120, check=False)
    assert child.returncode == 2, child.stdout + child.stderr
    assert child.stderr.count("\n") == 1 and "Traceback" not in child.stderr, child.stderr
    assert "cannot write to" in child.stderr and "too long" in child.stderr, child.stderr
    assert "check the URL" not in child.stderr, child.stderr  # the data, not the connection
    assert asyncio.run(snapshot(fan_out_store)) == before


@pytest.mark.mariadb  # fan_out_store is a MariaDB store
async def test_api_repair_raises_store_error_and_writes_nothing(fan_out_store: Store) -> None:
    """repair() raises StoreError and leaves every table as it was; --no-ledger heals."""
    before = await snapshot(fan_out_store)
    with pytest.raises(StoreError, match="too long"):
        await repair(fan_out_store.url)
    assert await snapshot(fan_out_store) == before
    assert (await repair(fan_out_store.url, ledger=False)).healed == 1


@pytest.mark.mariadb  # fan_out_store is a MariaDB store
async def test_wrapper_raises_heal_write_error_and_writes_nothing(fan_out_store: Store) -> None:
    """The wrapper recording in that ledger raises HealWriteError when told to."""
    before = await snapshot(fan_out_store)
    ledger = SqlHealLedger.from_url(fan_out_store.url)
    service = HealingSessionService(DatabaseSessionService(fan_out_store.url),
                                    HealPolicy(raise_errors=True), ledger=ledger)
    try:
        with pytest.raises(HealWriteError):
            await service.get_session(app_name=APP, user_id=USER, session_id="dead")
    finally:
        await close(service)
        await ledger.close()
    assert await snapshot(fan_out_store) == before


async def test_a_nul_postgresql_refuses_is_one_line_about_the_data(tmp_path: Path) -> None:
    """PostgreSQL refusing a NUL (jsonb and text alike) becomes one line with its own DETAIL
    and no hint about the URL; connecting to a port nothing listens on keeps the hint."""
    async for store in make_store("postgres", tmp_path):
        url = parse_store_url(store.url)
        engine = create_async_engine(store.url)
        try:
            for statement, value, words in (
                    ("SELECT CAST(:value AS jsonb)", '{"n": "a\\u0000b"}',
                     "unsupported Unicode escape sequence (\\u0000 cannot be converted to text"),
                    ("SELECT CAST(:value AS text)", "a\x00b", "0x00")):
                with pytest.raises(DBAPIError) as raised:
                    async with engine.connect() as conn:
                        await conn.execute(text(statement), {"value": value})
                message = str(translate_error(raised.value, url, "write to"))
                assert message.startswith(f"cannot write to {url}: ") and "\n" not in message
                assert words in message and "check" not in message, message
        finally:
            await engine.dispose()
    with pytest.raises(StoreError) as refused:
        await open_store("postgresql+asyncpg://postgres:hunter2@127.0.0.1:1/x")
    assert "check that the server is running" in str(refused.value)
    assert "hunter2" not in str(refused.value)


def test_a_long_driver_message_is_cut_between_names(tmp_path: Path) -> None:
    """A UNIQUE failure naming many long columns (SQLite lists them all) is cut between two
    names, marked ``...``, never inside one, and stays one line."""
    columns = [f"a_rather_long_column_name_number_{i:02d}" for i in range(12)]
    path = tmp_path / "long.db"
    with closing(sqlite3.connect(path)) as db, db:
        db.execute(f"CREATE TABLE t ({', '.join(columns)}, UNIQUE ({', '.join(columns)}))")
        db.execute(f"INSERT INTO t VALUES ({', '.join('1' * len(columns))})")
    url = parse_store_url(f"sqlite+aiosqlite:///{path}")
    with closing(sqlite3.connect(path)) as db, pytest.raises(sqlite3.IntegrityError) as raised:
        db.execute(f"INSERT INTO t VALUES ({', '.join('1' * len(columns))})")
    assert len(str(raised.value)) > 400
    message = str(translate_error(raised.value, url, "write to"))
    assert message.endswith(" ...") and "\n" not in message and "check" not in message
    shown = message.removeprefix(f"cannot write to {url}: ").removesuffix(" ...")
    assert shown.startswith("UNIQUE constraint failed: ")
    named = shown.removeprefix("UNIQUE constraint failed: ").split(", ")
    assert 1 < len(named) < len(columns)
    assert named == [f"t.{column}" for column in columns[:len(named)]]
