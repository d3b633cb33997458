"""Incremental scans (incremental.py, bulk's ``since``/``incremental``): only what changed.

The property every test checks: an incremental run reports exactly what a
full scan of the same store at the same clock reports (every list, every
count), while reading fewer sessions. Checked on every SQL layout and engine,
after writes through ADK's own services between runs, after time alone turns
an in-flight call stale, with a writer whose clock runs behind, with writes
landing while a run reads (the next run must see them), with generated ugly
histories, and through the CLI (``--incremental``, ``--since`` and their
one-line refusals).
"""

from __future__ import annotations

import asyncio
import datetime
import json
import os
import threading
import time
import uuid
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest
from cli_runner import assert_one_line_error, cli
from google.adk.events.event import Event
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from servers import REDIS_URL, temporary_redis_prefix
from stores import APP, KINDS, USER, Store, close, crashed_histories, fill, make_store
from ugly_histories import UGLY_OPS, Op, build_ugly

from adk_session_heal import ScanOptions, migrate
from adk_session_heal.core.event_access import ADK_EVENTS
from adk_session_heal.core.findings import classify
from adk_session_heal.core.session_key import SessionKey
from adk_session_heal.core.shards import Shard
from adk_session_heal.errors import UnsupportedStoreError
from adk_session_heal.ops.repair import repair
from adk_session_heal.ops.scan import scan
from adk_session_heal.ops.scan_report import ScanReport
from adk_session_heal.ops.undo import undo
from adk_session_heal.store import SessionFilter
from adk_session_heal.store.incremental import (
    Watermark,
    column_seconds,
    column_text,
    parse_since,
    scope_of,
    since_column,
    watermark_of,
)
from adk_session_heal.store.ledger.heal_redis import RedisHealLedger
from adk_session_heal.testing import History

NOW = 1_800_000_000.0
_RUN_ONLY = ("sessions_scanned", "events_scanned", "since", "incremental")


def _findings(report: ScanReport) -> dict[str, Any]:
    """The report's JSON without what depends on how much was read."""
    return {k: v for k, v in report.to_json().items() if k not in _RUN_ONLY}


async def _same_as_full(store: Store, now: float, *, prefilter: Any = "auto",
                        where: SessionFilter | None = None) -> ScanReport:
    """Runs an incremental scan; asserts it finds what a full scan finds; returns it."""
    where = where or SessionFilter()
    incremental = await scan(store.url, ScanOptions(where=where, incremental=True,
                                                    prefilter=prefilter), now=now)
    full = await scan(store.url, ScanOptions(where=where, prefilter="never"), now=now)
    assert _findings(incremental) == _findings(full)
    assert incremental.sessions_scanned <= full.sessions_scanned
    return incremental


async def _append(store: Store, session_id: str, events: list[Event]) -> None:
    """Appends events to a session through the store's real ADK service."""
    service = store.service()
    try:
        session = await service.get_session(app_name=APP, user_id=USER, session_id=session_id)
        if session is None:
            session = await service.create_session(app_name=APP, user_id=USER,
                                                   session_id=session_id)
        for event in events:
            await service.append_event(session, event)
    finally:
        await close(service)


def _dead_call(start: float, tag: str) -> list[Event]:
    """A user turn, a call and a next user turn (the call superseded), ids unique by ``tag``."""
    history = History(start=start)
    history.user("and now?")
    history.call("lookup", {"q": tag})
    history.user("anyone?")
    for event in history.events:
        event.id = f"{tag}-{event.id}"
    return history.events


def _answer(start: float, tag: str, call_id: str, name: str) -> list[Event]:
    """A response to ``call_id`` (events' ids unique by ``tag``)."""
    history = History(start=start)
    history.respond((call_id, name))
    for event in history.events:
        event.id = f"{tag}-{event.id}"
    return history.events


def test_parse_since_durations_and_times() -> None:
    """--since takes durations (also combined) and ISO times; anything else is one clear error."""
    assert parse_since("90s", 1000.0) == 910.0
    assert parse_since("2h", 10_000.0) == 2_800.0
    assert parse_since("1h30m", 10_000.0) == 4_600.0
    assert parse_since("1d", 100_000.0) == 13_600.0
    assert parse_since("2026-11-26T09:00:00+00:00", 0.0) == datetime.datetime(
        2026, 11, 26, 9, tzinfo=datetime.UTC).timestamp()
    for bad in ("", "soon", "2x", "h"):
        with pytest.raises(ValueError, match="duration"):
            parse_since(bad, 0.0)


def test_column_seconds_reads_every_driver_form() -> None:
    """Naive datetimes read as UTC, aware ones as they are, SQLite text and numbers too."""
    naive = datetime.datetime(2026, 11, 26, 9, 0, 0, 123456)
    utc = naive.replace(tzinfo=datetime.UTC).timestamp()
    assert column_seconds(naive) == pytest.approx(utc)
    assert column_seconds(naive.replace(tzinfo=datetime.timezone(
        datetime.timedelta(hours=2)))) == pytest.approx(utc - 7200)
    assert column_seconds("2026-11-26 09:00:00.123456") == pytest.approx(utc)
    assert column_seconds(1_700_000_000) == 1_700_000_000.0
    assert column_seconds(None) is None and column_seconds("junk") is None
    assert column_seconds(True) is None
    assert column_text(utc) == "2026-11-26 09:00:00.123456"


def test_watermark_never_passes_the_clock() -> None:
    """The watermark is the newest update time, never later than the run's clock, and nothing
    (read everything next time) for a scope without sessions."""
    assert watermark_of(100.0, 200.0) == 100.0
    assert watermark_of(300.0, 200.0) == 200.0
    assert watermark_of(None, 200.0) == 0.0  # no session yet: the next run reads all


def test_since_on_naive_columns_takes_the_earlier_reading(monkeypatch: pytest.MonkeyPatch) -> None:
    """West of UTC, a naive column may hold local time: --since reaches back by the offset."""
    monkeypatch.setenv("TZ", "America/New_York")
    time.tzset()
    try:
        moment = datetime.datetime(2026, 11, 26, 12, tzinfo=datetime.UTC).timestamp()
        assert since_column(moment, naive=True) == moment - 5 * 3600
        assert since_column(moment, naive=False) == moment
        monkeypatch.setenv("TZ", "Asia/Tokyo")
        time.tzset()
        assert since_column(moment, naive=True) == moment
    finally:
        monkeypatch.delenv("TZ")
        time.tzset()


def test_scope_names_filters_and_refuses_one_session() -> None:
    """Each app/user/shard filter is its own scope; a one-session scan cannot be incremental."""
    scopes = {scope_of(SessionFilter()), scope_of(SessionFilter(app_name="a")),
              scope_of(SessionFilter(user_id="a")), scope_of(SessionFilter(shard=Shard(1, 2))),
              scope_of(SessionFilter(shard=Shard(2, 2)))}
    assert len(scopes) == 5
    with pytest.raises(ValueError, match="--session"):
        scope_of(SessionFilter(session_id="s"))


def test_only_answered_sessions_are_settled() -> None:
    """Every kind of finding but an answered call keeps a session unsettled: the sessions a
    report lists are the ones an incremental run reads again."""
    expected = {"dead": False, "stale": False, "parallel": False, "ok": True, "long": False,
                "idless": False, "orphan": False, "empty": True}
    report = ScanReport("test", "database", NOW, 3600.0)
    for name, history in crashed_histories().items():
        findings = classify(history.events, ADK_EVENTS, now=NOW, stale_after=3600.0)
        report.add(SessionKey(APP, USER, name), len(history.events), findings)
    unsettled = {key.session_id for key in report.unsettled_sessions()}
    for name in expected:
        assert (name not in unsettled) is expected[name], name


async def test_a_redis_ledger_keeps_no_incremental_state() -> None:
    """Redis keeps no update time: its heal ledger refuses to read or save an incremental run's
    state, in one line naming the stores that have one (a scan refuses such a run first)."""
    ledger = RedisHealLedger.from_url(REDIS_URL)
    try:
        with pytest.raises(UnsupportedStoreError, match="--incremental needs ADK's SQL storage"):
            await ledger.watermark(scope_of(SessionFilter()))
        with pytest.raises(UnsupportedStoreError, match="--incremental needs ADK's SQL storage"):
            await ledger.save_watermark(Watermark(scope_of(SessionFilter()), None, NOW), NOW)
    finally:
        await ledger.close()


@pytest.mark.parametrize("prefilter", ["always", "never"])
@pytest.mark.parametrize("kind", KINDS)
async def test_incremental_runs_find_what_full_scans_find(kind: str, prefilter: Any,
                                                          tmp_path: Path) -> None:
    """Across writes through ADK and the passing of time, each incremental run (prefiltered or
    not) reports what a full scan reports, reading only changed and unsettled sessions."""
    async for store in make_store(kind, tmp_path):
        histories = crashed_histories()
        fresh = History(start=NOW - 60)  # answered soon enough to be in flight at NOW
        fresh.user("slow tool")
        fresh.call("slow")
        histories["fresh"] = fresh
        await fill(store, histories)
        await migrate.upgrade(store.url)
        first = await _same_as_full(store, NOW, prefilter=prefilter)
        assert first.incremental is not None and first.incremental.previous is None
        assert first.sessions_scanned == len(histories) and first.since is None
        unsettled = {k.session_id for k in first.unsettled_sessions()}
        assert unsettled == {"dead", "stale", "parallel", "long", "idless", "orphan", "fresh"}
        # The state the run saved: what its complete scan left unsettled, once each.
        assert first.incremental.unsettled == tuple(first.unsettled_sessions())

        # Nothing changed: the unsettled only ("fresh" is also the newest).
        again = await _same_as_full(store, NOW, prefilter=prefilter)
        assert again.sessions_scanned == len(unsettled)
        assert {c.session_id for c in again.in_flight_calls} == {"fresh"}

        later = NOW + 10 * 86400  # no write, yet "fresh" goes stale: it is rechecked
        await _append(store, "ok", _dead_call(NOW + 10, "w1"))
        await _append(store, "new", _dead_call(NOW + 20, "w2"))
        after = await _same_as_full(store, later, prefilter=prefilter)
        assert {"ok", "new", "fresh"} <= {c.session_id for c in after.dead_calls}
        assert after.sessions_scanned < len(histories) + 1


@pytest.mark.parametrize("kind", KINDS)
async def test_a_write_during_a_run_is_read_by_the_next(kind: str, tmp_path: Path) -> None:
    """A dead call written while a run reads (from a clock 2 s behind) is found by the next run."""
    async for store in make_store(kind, tmp_path):
        await fill(store, crashed_histories())
        await migrate.upgrade(store.url)
        first = await _same_as_full(store, NOW)
        assert first.incremental is not None
        newest = first.incremental.value  # the empty session's creation: the clock, as stored
        moments = ["start"] + (["advance"] if kind in ("postgres", "mariadb") else [])
        for n, moment in enumerate(moments):
            writer = _WriteDuring(store, moment, f"ok{n}",
                                  _dead_call(newest - 2 + n, f"during{n}"))
            await scan(store.url, ScanOptions(incremental=True), now=NOW, progress=writer)
            assert writer.written
            found = await _same_as_full(store, NOW)
            assert f"ok{n}" in {c.session_id for c in found.dead_calls}, moment


class _WriteDuring:
    """A scan's progress receiver that appends events (in another thread) mid-run."""

    def __init__(self, store: Store, moment: str, session_id: str, events: list[Event]) -> None:
        self.store, self.moment, self.session_id, self.events = store, moment, session_id, events
        self.written = False

    def start(self, total_sessions: int) -> None:
        """Writes before the first session is read, after the watermark was."""
        if self.moment == "start":
            self._write()

    def advance(self, sessions: int) -> None:
        """Writes while the sessions stream (server engines: readers do not block writers)."""
        if self.moment == "advance" and not self.written:
            self._write()

    def _write(self) -> None:
        failures: list[BaseException] = []

        def run() -> None:
            try:
                asyncio.run(_append(self.store, self.session_id, self.events))
            except BaseException as exc:  # noqa: BLE001 - re-raised in the test's thread
                failures.append(exc)

        thread = threading.Thread(target=run)
        thread.start()
        thread.join()
        if failures:
            raise failures[0]
        self.written = True


@pytest.mark.parametrize("kind", KINDS)
async def test_incremental_repair_heals_then_reads_little(kind: str, tmp_path: Path) -> None:
    """repair --incremental heals as a full repair does; later runs read the unsettled only."""
    async for store in make_store(kind, tmp_path):
        histories = crashed_histories()
        await fill(store, histories)
        await migrate.upgrade(store.url)
        first = await repair(store.url, ScanOptions(incremental=True), now=NOW)
        assert first.healed == 3  # dead, stale, parallel's "b"
        second = await repair(store.url, ScanOptions(incremental=True), now=NOW)
        assert second.healed == 0
        # The healed three once more, the three kept (long, idless, orphan), and "empty":
        # created at the clock (no event moved its update time back), within the margin.
        assert second.scan.sessions_scanned == 7
        third = await repair(store.url, ScanOptions(incremental=True), now=NOW)
        assert third.healed == 0 and third.scan.sessions_scanned == 4
        assert _findings(third.scan) == _findings(await scan(store.url, now=NOW))
        dry = await repair(store.url, ScanOptions(incremental=True), now=NOW, dry_run=True)
        assert dry.scan.sessions_scanned == 4


@pytest.mark.slow
@pytest.mark.parametrize("kind", KINDS)
@settings(max_examples=int(os.environ.get("INCREMENTAL_EXAMPLES", "3")), deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(before=st.lists(UGLY_OPS, min_size=3, max_size=3),
       after=st.lists(UGLY_OPS, min_size=2, max_size=2),
       late=st.floats(min_value=0, max_value=2 * 86400),
       prefilter=st.sampled_from(["auto", "always", "never"]))
async def test_ugly_histories_incrementally(kind: str, tmp_path: Path, before: list[list[Op]],
                                            after: list[list[Op]], late: float,
                                            prefilter: str) -> None:
    """Generated ugly sessions, then more written between runs (and time passing): each run,
    prefiltered or not, matches a full scan."""
    directory = tmp_path / uuid.uuid4().hex
    directory.mkdir()
    async for store in make_store(kind, directory):
        start = 1_700_000_000.0
        await fill(store, {f"s{i}": _ugly(ops, start + i) for i, ops in enumerate(before)})
        await migrate.upgrade(store.url)
        await _same_as_full(store, start + 3600, prefilter=prefilter)
        for i, ops in enumerate(after):
            await _append(store, f"s{i}", _ugly(ops, start + 100 + i, tag=f"more{i}").events)
        await _append(store, "new", _ugly(after[0], start + 200).events)
        await _same_as_full(store, start + 3600 + late, prefilter=prefilter)


def _ugly(ops: list[Op], start: float, *, tag: str = "") -> History:
    """A history of generated ugly events (ids prefixed by ``tag``)."""
    history = History(start=start)
    history.events.extend(build_ugly(ops, start=start))
    for event in history.events:
        event.id = f"{tag}{event.id}"
    return history


async def test_cli_incremental_and_since(tmp_path: Path) -> None:
    """scan --incremental says what it read; --since reads what changed; refusals are one line."""
    async for store in make_store("db_sqlite", tmp_path):
        await fill(store, crashed_histories())
        below = cli("scan", store.url, "--incremental")
        assert below.exit_code == 2 and "db upgrade" in below.stderr
        await migrate.upgrade(store.url)
        first = cli("scan", store.url, "--incremental", "--json")
        assert first.exit_code == 1, first.output
        document = json.loads(first.stdout)
        assert document["incremental"]["previous"] is None
        assert document["incremental"]["unsettled_sessions"] == 6
        assert "first run of this scope" in cli("scan", store.url, "--app", APP,
                                                  "--incremental").stderr
        second = cli("scan", store.url, "--incremental")
        assert "and those the last run left unsettled" in second.stderr
        since = json.loads(cli("scan", store.url, "--since", "1h", "--json").stdout)
        assert since["sessions_scanned"] == 1 and "since" in since  # "empty": the rest is 2023
        for args, words in (
                (("--since", "1h", "--incremental"), ("pass one",)),
                (("--incremental", "--session", "dead"), ("--session",)),
                (("--since", "soon"), ("duration",))):
            assert_one_line_error(cli("scan", store.url, *args), *words)
        assert_one_line_error(cli("repair", store.url, "--undo", "x", "--incremental", "--yes"),
                              "--undo")


async def test_cli_incremental_refuses_redis_in_one_line() -> None:
    """Redis keeps no update time a query can filter on: --incremental and --since, one line."""
    async with temporary_redis_prefix() as prefix:
        url = f"{REDIS_URL}?key_prefix={quote(prefix, safe='')}"
        assert_one_line_error(cli("scan", url, "--incremental"), "scan it whole")
        assert_one_line_error(cli("repair", url, "--since", "1h", "--yes"), "scan it whole")


class _Stopped(Exception):
    """The run was stopped midway (a crash, a lost connection)."""


class _FailMidway:
    """A scan's progress receiver that fails after the first session (an interrupted run)."""

    def start(self, total_sessions: int) -> None:
        """Lets the run start."""

    def advance(self, sessions: int) -> None:
        """Stops the run."""
        raise _Stopped


@pytest.mark.parametrize("kind", ["db_sqlite", "postgres"])
async def test_an_interrupted_run_keeps_the_previous_state(kind: str, tmp_path: Path) -> None:
    """A run stopped midway saves nothing: the next run reads from the previous watermark."""
    async for store in make_store(kind, tmp_path):
        await fill(store, crashed_histories())
        await migrate.upgrade(store.url)
        first = await _same_as_full(store, NOW)
        await _append(store, "ok", _dead_call(time.time(), "w1"))
        with pytest.raises(_Stopped):
            await scan(store.url, ScanOptions(incremental=True), now=NOW, progress=_FailMidway())
        after = await _same_as_full(store, NOW)
        assert after.incremental is not None and first.incremental is not None
        assert after.incremental.previous == first.incremental.value
        assert "ok" in {c.session_id for c in after.dead_calls}


@pytest.mark.parametrize("kind", KINDS)
async def test_an_undone_repair_is_read_again(kind: str, tmp_path: Path) -> None:
    """repair --undo reopens calls without a dated write: every scope reads those sessions again."""
    async for store in make_store(kind, tmp_path):
        await fill(store, crashed_histories())
        await migrate.upgrade(store.url)
        await _same_as_full(store, NOW, where=SessionFilter(app_name=APP))  # a second scope
        healed = await repair(store.url, ScanOptions(incremental=True), now=NOW)
        assert healed.healed == 3 and healed.run_id is not None
        await _same_as_full(store, NOW)
        settled_run = await _same_as_full(store, NOW)
        assert not settled_run.dead_calls
        undone = await undo(store.url, healed.run_id)
        assert len(undone.removals) == 3
        for where in (SessionFilter(), SessionFilter(app_name=APP)):
            again = await _same_as_full(store, NOW, where=where)
            assert len(again.dead_calls) == 3
