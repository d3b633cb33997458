"""The streaming scan over every ADK SQL layout, built through ADK's own services."""

from __future__ import annotations

import time
import tracemalloc
from pathlib import Path

import pytest
from google.adk.sessions import InMemorySessionService
from servers import temporary_database
from stores import (
    APP,
    KINDS,
    USER,
    Store,
    adk_store_fixture,  # noqa: F401  (the adk_store fixture)
    bulk_fill,
    bulk_histories,
    crashed_histories,
    fill,
    make_store,
    snapshot,
    unhealable_histories,
)

from adk_session_heal import HealPolicy, ScanOptions
from adk_session_heal.core.event_access import ADK_EVENTS
from adk_session_heal.core.findings import classify
from adk_session_heal.core.session_key import SessionKey
from adk_session_heal.ops.scan import scan, scan_service
from adk_session_heal.ops.scan_report import CallEntry
from adk_session_heal.store import Layout, SessionFilter, open_store
from adk_session_heal.testing import History

NOW = 1_700_100_000.0  # a day and a bit after the histories' clock


def _ids(entries: list[CallEntry]) -> list[tuple[str, str | None, str]]:
    return sorted((e.session_id, e.call_id, e.status) for e in entries)


async def test_scan_reports_every_kind_of_finding(adk_store: Store) -> None:
    """Dead (superseded, stale), pending, id-less and orphaned are each reported, per session."""
    await fill(adk_store, crashed_histories())
    report = await scan(adk_store.url, now=NOW)
    assert report.layout == ("adk_sqlite" if adk_store.kind == "adk_sqlite" else "database")
    assert report.sessions_scanned == 8
    assert report.events_scanned == sum(len(h.events) for h in crashed_histories().values())
    assert _ids(report.dead_calls) == [
        ("dead", "call-1", "superseded"),
        ("parallel", "call-2", "superseded"),
        ("stale", "call-1", "stale"),
    ]
    assert report.sessions_needing_healing == 3
    assert _ids(report.pending_calls) == [("long", "call-1", "pending")]
    assert report.pending_calls[0].pending_reason == "long_running"
    assert _ids(report.id_less_calls) == [("idless", None, "id_less")]
    assert [(r.session_id, r.call_id) for r in report.orphaned_responses] == [
        ("orphan", "ghost-1")]
    assert report.needs_healing


async def test_scan_matches_classifying_what_adk_reads(adk_store: Store) -> None:
    """The stored-JSON scan agrees with classify() over the Events ADK's get_session returns."""
    histories = crashed_histories()
    await fill(adk_store, histories)
    report = await scan(adk_store.url, ScanOptions(policy=HealPolicy(stale_after=3600)), now=NOW)
    service = adk_store.service()
    expected = []
    try:
        for session_id in histories:
            session = await service.get_session(app_name=APP, user_id=USER,
                                                session_id=session_id)
            assert session is not None
            for finding in classify(session.events, ADK_EVENTS, now=NOW, stale_after=3600).dead:
                expected.append(CallEntry.of(SessionKey(APP, USER, session_id), finding))
    finally:
        closer = getattr(service, "close", None)
        if closer:
            await closer()
    assert sorted(report.dead_calls, key=repr) == sorted(expected, key=repr)


async def test_scan_reports_calls_a_heal_would_make_worse_and_repair_leaves_them(
        adk_store: Store) -> None:
    """Nameless, id-sharing and out-of-turn dead calls are listed apart, with why, and repair
    heals only the call beside them."""
    from adk_session_heal.ops.repair import repair
    from adk_session_heal.policy import HealPolicy

    await fill(adk_store, unhealable_histories())
    report = await scan(adk_store.url, now=NOW)
    assert _ids(report.unhealable_calls) == [
        ("late", "call-1", "out_of_turn"), ("nameless", "n1", "malformed"),
        ("shared", "x", "malformed"), ("shared", "x", "malformed")]
    assert _ids(report.dead_calls) == [("fine", "call-1", "superseded")]
    assert report.counts()["unhealable_calls"] == 4
    assert "4 unanswered calls never healed (a heal would break ADK's request)" in (
        report.summary_line())
    assert {r["kind"] for r in report.records()} >= {"unhealable_call", "dead_call"}
    whys = {e.status: e.to_json(NOW)["why"] for e in report.unhealable_calls}
    assert "never healed" in whys["malformed"] and "Gemini" in whys["out_of_turn"]

    repaired = await repair(adk_store.url, ScanOptions(policy=HealPolicy(clock_skew=0)),
                            now=NOW, ledger=False)
    assert [(h.record.session_id, tuple(h.record.call_ids)) for h in repaired.heals] == [
        ("fine", ("call-1",))]
    again = await scan(adk_store.url, now=NOW)
    assert _ids(again.unhealable_calls) == _ids(report.unhealable_calls)
    assert again.dead_calls == []


async def test_scan_is_read_only(adk_store: Store) -> None:
    """Scanning leaves every table byte-identical (the whole file, for SQLite)."""
    await fill(adk_store, crashed_histories())
    before = await snapshot(adk_store)
    await scan(adk_store.url, now=NOW)
    assert await snapshot(adk_store) == before


async def test_stale_needs_age_superseded_does_not(adk_store: Store) -> None:
    """A newest-invocation call is stale only past stale_after; superseded calls always count."""
    await fill(adk_store, crashed_histories())
    young = await scan(adk_store.url, ScanOptions(policy=HealPolicy(stale_after=10 * 365 * 86400)),
                       now=NOW)
    assert {e.status for e in young.dead_calls} == {"superseded"}
    never = await scan(adk_store.url, ScanOptions(policy=HealPolicy(stale_after=None)), now=NOW)
    assert len(never.dead_calls) == 2


async def test_filters_restrict_the_scan(adk_store: Store) -> None:
    """--app/--user/--session filters select sessions in SQL."""
    histories = crashed_histories()
    await fill(adk_store, {"dead": histories["dead"]})
    await fill(adk_store, {"stale": histories["stale"]}, user="other")
    only_other = await scan(adk_store.url, ScanOptions(where=SessionFilter(user_id="other")),
                            now=NOW)
    assert _ids(only_other.dead_calls) == [("stale", "call-1", "stale")]
    assert only_other.sessions_scanned == 1
    one = await scan(adk_store.url, ScanOptions(where=SessionFilter(session_id="dead")), now=NOW)
    assert _ids(one.dead_calls) == [("dead", "call-1", "superseded")]
    none = await scan(adk_store.url, ScanOptions(where=SessionFilter(app_name="nope")), now=NOW)
    assert none.sessions_scanned == 0 and not none.dead_calls


async def test_stream_orders_ties_like_adk(adk_store: Store) -> None:
    """Events with equal timestamps come back in ADK's order ((timestamp, id) or rowid)."""
    history = History(step=0.0)
    history.user("same instant")
    call = history.call("tool")
    history.respond((call, "tool"))
    history.text("done")
    await fill(adk_store, {"tie": history})
    service = adk_store.service()
    try:
        session = await service.get_session(app_name=APP, user_id=USER, session_id="tie")
    finally:
        closer = getattr(service, "close", None)
        if closer:
            await closer()
    assert session is not None
    store = await open_store(adk_store.url)
    try:
        streamed = [s async for s in store.stream_sessions(SessionFilter())]
    finally:
        await store.close()
    assert [e["id"] for e in streamed[0].events] == [e.id for e in session.events]


@pytest.mark.parametrize("kind", ["adk_sqlite", "db_sqlite"])
async def test_layout_is_read_from_the_file(kind: str, tmp_path: Path) -> None:
    """A SqliteSessionService file is recognised whatever scheme names it, and vice versa."""
    async for adk_store in make_store(kind, tmp_path):
        await fill(adk_store, crashed_histories())
        other_scheme = (f"sqlite+aiosqlite:///{adk_store.sqlite_path}" if kind == "adk_sqlite"
                        else f"sqlite:///{adk_store.sqlite_path}")
        store = await open_store(other_scheme)
        await store.close()
        expected = Layout.ADK_SQLITE if kind == "adk_sqlite" else Layout.DATABASE
        assert store.layout is expected


async def test_scan_service_fallback_on_in_memory() -> None:
    """Services without SQL storage are scanned through list_sessions + get_session."""
    service = InMemorySessionService()
    for session_id, history in crashed_histories().items():
        session = await service.create_session(app_name=APP, user_id=USER, session_id=session_id)
        for event in history.events:
            await service.append_event(session, event)
    report = await scan_service(service, app_name=APP, now=NOW)
    assert report.layout == "service"
    assert report.sessions_scanned == 8
    assert _ids(report.dead_calls) == [
        ("dead", "call-1", "superseded"),
        ("parallel", "call-2", "superseded"),
        ("stale", "call-1", "stale"),
    ]
    one = await scan_service(service, app_name=APP, session_id="dead", now=time.time())
    assert one.sessions_scanned == 1


async def _stream_peak(url: str) -> tuple[int, float]:
    """Streams every session; returns (events, traced peak in MB)."""
    store = await open_store(url)
    tracemalloc.start()
    events = 0
    try:
        async for stored in store.stream_sessions(SessionFilter()):
            events += len(stored.events)
        return events, tracemalloc.get_traced_memory()[1] / 1e6
    finally:
        tracemalloc.stop()
        await store.close()


@pytest.mark.slow
@pytest.mark.parametrize("kind", KINDS)
async def test_stream_memory_is_bounded_by_the_largest_session(kind: str, tmp_path: Path) -> None:
    """Streaming 4x the events needs no more memory: rows come from a server-side cursor."""
    peaks = []
    for size in (300, 1200):
        (tmp_path / str(size)).mkdir()
        async for store in make_store(kind, tmp_path / str(size)):
            await bulk_fill(store, bulk_histories(size, 20, 0.05))
            events, peak = await _stream_peak(store.url)
            assert events == size * 20
            peaks.append(peak)
    assert peaks[1] < peaks[0] * 1.5 + 1.0, peaks


async def test_asyncmy_driver_scans_like_aiomysql() -> None:
    """asyncmy URLs stream through asyncmy's unbuffered cursor with the same result.

    (``mysql+asyncmy``: with ``mariadb+asyncmy`` ADK 2.13 itself stores
    timestamps without microseconds and its second append fails as stale.)
    """
    async with temporary_database("mariadb", driver="mysql+asyncmy") as url:
        store = Store("mariadb", url)
        await fill(store, crashed_histories())
        report = await scan(url, now=NOW)
    assert _ids(report.dead_calls) == [
        ("dead", "call-1", "superseded"),
        ("parallel", "call-2", "superseded"),
        ("stale", "call-1", "stale"),
    ]
