"""A heal MariaDB cannot store exactly is an error, never a silently mangled row.

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
import subprocess
import sys
import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from google.adk.sessions import DatabaseSessionService
from stores import APP, USER, Store, close, fill, make_store, snapshot

from adk_session_heal import migrate
from adk_session_heal.bulk import repair
from adk_session_heal.errors import HealWriteError, StoreError
from adk_session_heal.ledger import SqlHealLedger
from adk_session_heal.policy import HealPolicy
from adk_session_heal.service import HealingSessionService
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


def test_cli_repair_refuses_a_list_too_long_for_the_ledger(fan_out_store: Store) -> None:
    """repair exits 2 with one line naming the data error, and writes nothing."""
    before = asyncio.run(snapshot(fan_out_store))
    child = subprocess.run(
        [sys.executable, "-m", "adk_session_heal", "repair", fan_out_store.url, "--yes"],
        capture_output=True, text=True, timeout=120, check=False)
    assert child.returncode == 2, child.stdout + child.stderr
    assert child.stderr.count("\n") == 1 and "Traceback" not in child.stderr, child.stderr
    assert "cannot write to" in child.stderr and "too long" in child.stderr, child.stderr
    assert asyncio.run(snapshot(fan_out_store)) == before


async def test_api_repair_raises_store_error_and_writes_nothing(fan_out_store: Store) -> None:
    """repair() raises StoreError and leaves every table as it was; --no-ledger heals."""
    before = await snapshot(fan_out_store)
    with pytest.raises(StoreError, match="too long"):
        await repair(fan_out_store.url)
    assert await snapshot(fan_out_store) == before
    assert (await repair(fan_out_store.url, ledger=False)).healed == 1


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
