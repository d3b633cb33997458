"""ADK version differences: heal rows every reader accepts, placed by the call row's own clock.

ADK up to 2.6 stores ``events.timestamp`` as naive local time of the writing
process; 2.7 and later store naive UTC. These tests write stores the way each
convention does, under one time zone, then heal them under another (``TZ`` is
switched in-process with ``time.tzset``), and check the column order every
reader uses.
"""

from __future__ import annotations

import datetime
import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from google.adk.events.event import Event
from google.adk.sessions import DatabaseSessionService
from google.adk.sessions.schemas.v1 import StorageSession
from sqlalchemy import insert, select
from sqlalchemy.ext.asyncio import create_async_engine
from stores import ADK_EVENTS_TABLE, APP, USER, Store, close, crashed_histories, make_store

from adk_session_heal import HealingSessionService, HealPolicy, ScanOptions, migrate
from adk_session_heal.core.adk_compat import (
    ADK_VERSION,
    EVENT_FIELDS,
    PORTABLE_EVENT_FIELDS,
    STORES_LOCAL_TIME,
    column_to_timestamp,
    live_runs_plugin_tool_callbacks,
    readable_event_data,
    resume_replays_calls,
    timestamp_to_column,
)
from adk_session_heal.core.event_access import ADK_EVENTS
from adk_session_heal.core.findings import classify
from adk_session_heal.core.heal_plan import HEAL_ID_SUFFIX
from adk_session_heal.core.healing import heal_event_data, plan_heals
from adk_session_heal.ops.repair import repair
from adk_session_heal.testing import History

NOW = 1_700_100_000.0
POLICY = HealPolicy(stale_after=3600)
ZONES = ["UTC", "Asia/Tokyo", "America/Los_Angeles"]
SERVER_KINDS = ["db_sqlite", "postgres", "mariadb"]


@pytest.fixture
def zone() -> Iterator[Any]:
    """Switches this process's local time zone; restores it after the test."""
    saved = os.environ.get("TZ")

    def switch(name: str) -> None:
        os.environ["TZ"] = name
        time.tzset()

    yield switch
    if saved is None:
        os.environ.pop("TZ", None)
    else:
        os.environ["TZ"] = saved
    time.tzset()


def _column(timestamp: float, convention: str) -> datetime.datetime:
    """The ``events.timestamp`` value ADK of one convention writes in this process's zone."""
    if convention == "local":  # ADK <= 2.6: datetime.fromtimestamp(ts)
        return datetime.datetime.fromtimestamp(timestamp)
    return datetime.datetime.fromtimestamp(timestamp, tz=datetime.UTC).replace(
        tzinfo=None)


async def _write_as_adk(store: Store, histories: dict[str, History], convention: str) -> None:
    """Writes the histories with the rows an ADK of ``convention`` stores."""
    service = DatabaseSessionService(store.url)
    try:  # ADK's own service creates the schema
        await service.create_session(app_name=APP, user_id=USER, session_id="seed")
    finally:
        await close(service)
    engine = create_async_engine(store.url)
    try:
        async with engine.begin() as conn:
            for session_id, history in histories.items():
                stamp = _column(history.events[-1].timestamp if history.events else NOW,
                                convention)
                await conn.execute(insert(StorageSession.__table__), [{
                    "app_name": APP, "user_id": USER, "id": session_id, "state": {},
                    "create_time": stamp, "update_time": stamp}])
                rows = [{
                    "id": e.id, "app_name": APP, "user_id": USER, "session_id": session_id,
                    "invocation_id": e.invocation_id,
                    "timestamp": _column(e.timestamp, convention),
                    "event_data": _one_x_event_data(e),
                } for e in history.events]
                if rows:
                    await conn.execute(insert(ADK_EVENTS_TABLE), rows)
    finally:
        await engine.dispose()


def _one_x_event_data(event: Event) -> dict[str, Any]:
    """An event's JSON as ADK 1.x dumps it (no 2.x-only fields)."""
    data = event.model_dump(exclude_none=True, mode="json")
    return {k: v for k, v in data.items() if k not in ("node_info", "isolation_scope", "output")}


async def _rows_in_column_order(store: Store) -> dict[str, list[tuple[str, datetime.datetime]]]:
    """Each session's ``(id, timestamp column)`` ordered as every ADK orders them."""
    engine = create_async_engine(store.url)
    table = ADK_EVENTS_TABLE
    try:
        async with engine.connect() as conn:
            rows = (await conn.execute(
                select(table.c.session_id, table.c.id, table.c.timestamp)
                .order_by(table.c.session_id, table.c.timestamp, table.c.id))).all()
    finally:
        await engine.dispose()
    sessions: dict[str, list[tuple[str, datetime.datetime]]] = {}
    for session_id, event_id, column in rows:
        sessions.setdefault(session_id, []).append((event_id, column))
    return sessions


def _assert_heals_right_after_calls(
    sessions: dict[str, list[tuple[str, datetime.datetime]]], expected: int
) -> None:
    """Every heal row sorts right after its call row, strictly by the column alone."""
    heals = 0
    for rows in sessions.values():
        for index, (event_id, column) in enumerate(rows):
            if not event_id.endswith(HEAL_ID_SUFFIX):
                continue
            heals += 1
            call_id, call_column = rows[index - 1]
            assert event_id == f"{call_id}{HEAL_ID_SUFFIX}", rows
            assert call_column < column, (call_column, column)  # not by the id tie-break
            if index + 1 < len(rows):
                assert column < rows[index + 1][1], rows
    assert heals == expected


def test_heal_rows_carry_only_fields_every_supported_reader_accepts() -> None:
    """A heal of a 1.x call holds only the fields ADK 1.22 reads, and no ``actions``."""
    history = crashed_histories()["dead"]
    findings = classify(history.events, ADK_EVENTS, now=NOW)
    (plan,) = plan_heals(history.events, findings, app_name=APP, user_id=USER, session_id="d")
    data = heal_event_data(plan, POLICY, healed_at=NOW)
    assert set(data) <= PORTABLE_EVENT_FIELDS
    assert PORTABLE_EVENT_FIELDS <= EVENT_FIELDS
    assert Event.model_validate(readable_event_data(data)).id == plan.event_id


def test_a_2x_call_passes_its_scope_and_node_path_to_its_heal() -> None:
    """A call written by ADK 2.x (scope, node path) gets a heal in the same scope and node."""
    history = crashed_histories()["dead"]
    events = [e.model_copy(update={"isolation_scope": "s1",
                                   "node_info": e.node_info.model_copy(update={"path": "a/b"})})
              if "node_info" in EVENT_FIELDS else e for e in history.events]
    findings = classify(events, ADK_EVENTS, now=NOW)
    (plan,) = plan_heals(events, findings, app_name=APP, user_id=USER, session_id="d")
    data = heal_event_data(plan, POLICY, healed_at=NOW)
    if ADK_VERSION >= (2, 0):
        assert data["isolation_scope"] == "s1"
        assert data["node_info"] == {"path": "a/b"}
    assert set(readable_event_data(data)) <= EVENT_FIELDS


@pytest.mark.parametrize("name", ZONES)
def test_column_conversions_round_trip_in_every_zone(zone: Any, name: str) -> None:
    """The installed ADK's column convention reads back the instant it wrote."""
    zone(name)
    for instant in (0.0, 1_700_000_000.123456, 1_719_792_000.5):  # incl. a DST date
        assert column_to_timestamp(timestamp_to_column(instant)) == pytest.approx(instant)
    assert (ADK_VERSION < (2, 7)) == STORES_LOCAL_TIME


@pytest.mark.parametrize("convention", ["local", "utc"])
@pytest.mark.parametrize("writer_zone,healer_zone", list(zip(ZONES, ZONES[1:] + ZONES[:1],
                                                                 strict=True)))
@pytest.mark.parametrize("kind", SERVER_KINDS)
async def test_repair_places_heals_after_calls_whatever_the_writers_zone(
    zone: Any, tmp_path: Path, kind: str, writer_zone: str, healer_zone: str, convention: str
) -> None:
    """Written in one zone and convention, repaired in another: heal right after call, once."""
    async for store in make_store(kind, tmp_path):
        zone(writer_zone)
        histories = crashed_histories()
        await _write_as_adk(store, histories, convention)
        before = await _rows_in_column_order(store)
        zone(healer_zone)
        await migrate.upgrade(store.url)
        first = await repair(store.url, ScanOptions(policy=POLICY), now=NOW)
        assert first.healed == 3
        after = await _rows_in_column_order(store)
        _assert_heals_right_after_calls(after, expected=3)
        assert {s: [r for r in rows if not r[0].endswith(HEAL_ID_SUFFIX)]
                for s, rows in after.items()} == before
        second = await repair(store.url, ScanOptions(policy=POLICY), now=NOW)
        assert second.healed == 0
        assert second.heals == []


@pytest.mark.parametrize("convention", ["local", "utc"])
@pytest.mark.parametrize("kind", SERVER_KINDS)
async def test_wrapper_places_heals_after_calls_in_a_store_of_either_convention(
    zone: Any, tmp_path: Path, kind: str, convention: str
) -> None:
    """The wrapper heals a Tokyo-written store read from Los Angeles: heal right after call."""
    async for store in make_store(kind, tmp_path):
        zone("Asia/Tokyo")
        histories = {"dead": crashed_histories()["dead"]}
        await _write_as_adk(store, histories, convention)
        zone("America/Los_Angeles")
        service = HealingSessionService(DatabaseSessionService(store.url), policy=POLICY)
        try:
            for _ in range(3):
                session = await service.get_session(app_name=APP, user_id=USER,
                                                    session_id="dead")
                assert session is not None
        finally:
            await service.close()
        _assert_heals_right_after_calls(await _rows_in_column_order(store), expected=1)


@pytest.mark.parametrize(("version", "replays"), [
    ((1, 22, 1), True), ((1, 39, 1), True), ((2, 0, 0), False), ((2, 1, 0), False),
    ((2, 2, 0), True), ((2, 13, 0), True),
])
def test_a_resume_replays_calls_on_every_adk_but_2_0_and_2_1(
        version: tuple[int, int, int], replays: bool) -> None:
    """2.0 and 2.1 start a new invocation for run_async(invocation_id=...): no replay there
    (measured on each line by tests/adk_matrix/replay_check.py)."""
    assert resume_replays_calls(version) is replays


@pytest.mark.parametrize(("version", "runs"), [
    ((1, 22, 1), False), ((1, 26, 0), False), ((1, 27, 1), True), ((1, 39, 1), True),
    ((2, 0, 0), True), ((2, 13, 0), True),
])
def test_live_mode_runs_plugin_tool_callbacks_from_1_27(version: tuple[int, int, int],
                                                        runs: bool) -> None:
    """ADK's live flow runs plugins' tool callbacks from 1.27 on (measured by live_check.py)."""
    assert live_runs_plugin_tool_callbacks(version) is runs
