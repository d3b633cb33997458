"""Scanning and repairing a whole session database: plan, then apply.

:func:`scan` streams ADK's events table once, in session order, and feeds each
session's stored JSON to the pure classifier (no pydantic ``Event`` is built
for any stored event); memory is bounded by the largest session plus what is
reported. :func:`plan_repair` runs the same scan and plans heals with the
same :func:`~adk_session_heal.core.healing.plan_heals` and
:func:`~adk_session_heal.core.healing.build_heals` as the wrapper (so the same
deterministic ids and the same rows) into an immutable :class:`RepairPlan`;
:func:`apply_plan` writes that plan through the store layout's one writer
(the one the wrapper uses), in batched transactions that re-check each
session, skip existing keys and carry their ledger rows. :func:`repair` is
the two in one. That gives:

* **idempotence**: a second run finds every call answered and heals 0;
* **interruption safety** (SIGKILL included): a batch commits whole or not at
  all, and a rerun plans the same ids, so it finishes the job without
  duplicates;
* **what was planned is what is written**: a session whose events changed
  between plan and write is skipped and reported, never healed from a stale
  view;
* **no revision bump**: ``sessions`` is never written, so a runner in the
  middle of a turn never fails with ``StaleSessionError``;
* **a run id**: each plan has one (:func:`~adk_session_heal.store.ledger.repair_runs.new_run_id`);
  a run that writes anything is recorded in the ledger's runs table as it
  starts and ends (one with nothing to write records nothing), and each heal
  and removal row it writes carries its id, so ``repair --undo``
  (:mod:`~adk_session_heal.ops.undo`) can take the run back.

:func:`scan_service` is the fallback for session services without SQL
storage (in-memory, Vertex AI): ``list_sessions`` + ``get_session``.
"""

from __future__ import annotations

import contextlib
import gc
import logging
import time
from collections import Counter
from collections.abc import AsyncGenerator, AsyncIterator, Callable, Iterator, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, Literal, Protocol

from ..core.event_access import ADK_EVENTS, STORED_JSON, stored_event_problem
from ..core.findings import SessionFindings, classify, with_tool_runs
from ..core.heal_record import HealRecord, HealTrigger
from ..core.healing import Heal, SessionHeals, plan_session
from ..core.late_results import late_results
from ..core.session_key import SessionKey
from ..core.tool_runs import ToolRunReader
from ..errors import LedgerError, StoreError
from ..observe import report_heal, report_removal, report_repair_run
from ..policy import DEFAULT_CLOCK_SKEW, HealPolicy
from ..store import DamagedRow, Layout, SessionFilter, SessionStore, open_store
from ..store.base import Removal, RemovalReason, RemoveOutcome, StoredSession
from ..store.collector import fewer_collections as _fewer_collections
from ..store.engines import TimeoutArg
from ..store.incremental import (
    Since,
    Watermark,
    check_request,
    scope_of,
    since_column,
    watermark_of,
)
from ..store.ledger.heal_ledger import SqlHealLedger, missing_ledger_message, open_heal_ledger
from ..store.ledger.heal_table import (
    INCREMENTAL_REVISIONS,
    REMOVALS_REVISIONS,
    RUNS_REVISIONS,
    TOOL_RUNS_REVISIONS,
)
from ..store.ledger.repair_runs import RepairRun, RunKind, new_run_id, this_host
from ..store.ledger.tool_run_redis import RedisToolRunLedger
from ..store.ledger.tool_run_sql import SqlToolRunLedger
from ..store.urls import StoreUrl
from .scan_report import HealEntry, RepairReport, ScanReport, SupersededEntry

if TYPE_CHECKING:  # scan_service's annotation: a scan by URL loads no ADK
    from google.adk.sessions import BaseSessionService

__all__ = [
    "DEFAULT_BATCH_SIZE",
    "DEFAULT_OLDER_THAN",
    "PrefilterMode",
    "RepairPlan",
    "ScanProgress",
    "SessionFilter",
    "apply_plan",
    "check_repairable",
    "classify_stored",
    "plan_repair",
    "repair",
    "scan",
    "scan_service",
    "tool_runs_of",
]

DEFAULT_OLDER_THAN = 24 * 3600.0
"""Default age (seconds) after which a call of a session's newest invocation is healed.

A day: far longer than any tool or human-in-the-loop wait should take without
ADK marking the call long-running, so ``stale`` calls are dead, not slow.
Superseded calls are healed whatever their age.
"""

_log = logging.getLogger("adk_session_heal")

PrefilterMode = Literal["auto", "always", "never"]
"""When scans let the database pick the sessions to classify (see :func:`scan`)."""

DEFAULT_BATCH_SIZE = 500
"""Synthetic events inserted per transaction."""


class ScanProgress(Protocol):
    """Receives a scan's progress (e.g. a progress bar)."""

    def start(self, total_sessions: int) -> None:
        """Called once, before the first session, with the number to scan."""
        ...

    def advance(self, sessions: int) -> None:
        """Called as sessions are scanned."""
        ...


@dataclass(frozen=True, slots=True)
class RepairPlan:
    """What a repair will write, made once and applied as it is.

    The CLI shows it, asks, and applies this same plan; ``--dry-run`` prints
    it. Applying re-checks each session in the write transaction and skips a
    session whose events changed since (see
    :class:`~adk_session_heal.store.WriteOutcome`).

    Attributes:
        url: The store planned from (password redacted when printed).
        scan: What the scan found.
        sessions: The heals, by session, in scan order.
        planned_at: The clock the plan was made with (the heals' ``healed_at``).
        run_id: The run applying it: its heals' records carry it.
    """

    url: StoreUrl
    scan: ScanReport
    sessions: tuple[SessionHeals, ...]
    planned_at: float
    run_id: str = field(default_factory=new_run_id)

    @property
    def heals(self) -> tuple[Heal, ...]:
        """Every planned heal, in order."""
        return tuple(heal for planned in self.sessions for heal in planned.heals)

    def __repr__(self) -> str:
        """A short form: a plan may hold hundreds of thousands of events."""
        return (f"RepairPlan(url={str(self.url)!r}, sessions={len(self.sessions)}, "
                f"heals={sum(len(s.heals) for s in self.sessions)})")


async def _plan(
    store: SessionStore,
    where: SessionFilter,
    policy: HealPolicy | None,
    *,
    now: float,
    stale_after: float | None,
    clock_skew: float,
    progress: ScanProgress | None,
    tool_runs: ToolRunReader | None = None,
    prefilter: PrefilterMode = "auto",
    run_id: str | None = None,
    since: float | None = None,
    incremental: bool = False,
) -> tuple[ScanReport, list[SessionHeals]]:
    """Scans ``store``; with a ``policy``, also plans the heals of every session.

    With ``tool_runs`` (the store's tool-run ledger), the unanswered calls of a
    session are corrected by their records (:func:`~adk_session_heal.core.findings.with_tool_runs`):
    one read per session holding such calls. The database picks the sessions to
    classify as ``prefilter`` says (see :func:`_sessions`). With ``since`` or
    ``incremental``, only the sessions that changed (and, incremental, those
    left unsettled) are read (:func:`_changes`); an incremental report carries
    the state to save once the run is complete.
    """
    where, mark = await _changes(store, where, since=since, incremental=incremental,
                                 clock_skew=clock_skew, now=now)
    report = ScanReport(str(store), store.layout.value, now, stale_after, clock_skew=clock_skew,
                        since=None if where.since is None else where.since.after,
                        incremental=mark)
    report.sessions_scanned = await store.count_sessions(where)
    if progress is not None:
        progress.start(report.sessions_scanned)
    planned: list[SessionHeals] = []
    streamed = _Streamed()
    # Fewer garbage collections while rows are decoded (see adk_session_heal.store.collector).
    with _fewer_collections():
        # Closed as soon as the loop ends, also on an error: a stream left open holds its
        # database connection until the garbage collector finds it.
        async with contextlib.aclosing(
                _sessions(store, where, prefilter=prefilter, streamed=streamed)) as sessions:
            async for stored in sessions:
                key = stored.key
                rows = len(stored.events) + len(stored.damaged)
                streamed.sessions += 1
                streamed.events += rows
                heals: SessionHeals | None = None
                damaged = stored.damaged
                if not damaged:
                    try:
                        findings = await classify_stored(
                            stored, tool_runs, now=now, stale_after=stale_after,
                            clock_skew=clock_skew)
                        if policy is not None and findings.needs_healing:
                            heals = plan_session(
                                stored.events, findings, key, policy, trigger=HealTrigger.REPAIR,
                                healed_at=now, seen_events=len(stored.events), access=STORED_JSON,
                                run_id=run_id,
                            )
                        report.add(key, rows, findings)
                        if any(d.involves_heal for d in findings.duplicate_responses):
                            report.superseded_heals.extend(
                                SupersededEntry.of(key, late)
                                for late in late_results(stored.events, STORED_JSON))
                    except (TypeError, AttributeError, ValueError) as exc:
                        damaged = _malformed_rows(stored.events, exc)
                if damaged:
                    report.add_damaged(key, rows, damaged)
                elif heals is not None:
                    planned.append(heals)
                if progress is not None:
                    progress.advance(1)
    if streamed.total_events is not None:  # the clean sessions the prefilter passed over
        report.events_scanned += max(0, streamed.total_events - streamed.events)
        if progress is not None:
            progress.advance(max(0, report.sessions_scanned - streamed.sessions))
    if report.damaged_rows and len(report.damaged_rows) == report.events_scanned:
        raise StoreError(_unreadable_message(store, report))
    return report, planned


async def _changes(
    store: SessionStore, where: SessionFilter, *, since: float | None, incremental: bool,
    clock_skew: float, now: float,
) -> tuple[SessionFilter, Watermark | None]:
    """Restricts ``where`` to what changed: ``since`` a time, or since the last incremental run.

    The watermark is read before any session (see :mod:`~adk_session_heal.store.incremental`);
    both bounds are moved ``clock_skew`` earlier.

    Raises:
        ValueError: Both are asked for, or ``incremental`` with a session filter.
        UnsupportedStoreError: The layout keeps no update time to filter on.
        LedgerError: ``incremental`` and the ledger is below revision ``0005``.
    """
    check_request(where, since=since is not None, incremental=incremental)
    if since is None and not incremental:
        return where, None
    if incremental:
        scope = scope_of(where)
        newest = await store.newest_update(where)
        if (revision := await store.ledger_revision()) not in INCREMENTAL_REVISIONS:
            raise LedgerError(missing_ledger_message(store, revision), missing=True)
        assert store.url is not None
        ledger = SqlHealLedger.from_url(store.url, engine=store.server_engine())
        try:
            previous = await ledger.watermark(scope)
        finally:
            await ledger.close()
        mark = Watermark(scope, previous, watermark_of(newest, now))
        if previous is None:
            return where, mark
        return replace(where, since=Since(previous - clock_skew, recheck=scope)), mark
    assert since is not None
    await store.newest_update(where)  # the same one line where there is no update time
    after = since_column(since, naive=store.layout is Layout.DATABASE) - clock_skew
    return replace(where, since=Since(after)), None


async def _save_watermark(store: SessionStore, report: ScanReport, now: float,
                          timeout: TimeoutArg) -> None:
    """Records an incremental run's state (the sessions its report lists), once complete."""
    assert report.incremental is not None and store.url is not None
    ledger = SqlHealLedger.from_url(store.url, timeout=timeout, engine=store.server_engine())
    try:
        await ledger.save_watermark(report.incremental, report.unsettled_sessions(), now)
    finally:
        await ledger.close()


@dataclass(slots=True)
class _Streamed:
    """What a scan read: sessions and rows streamed, and all rows when prefiltered."""

    sessions: int = 0
    events: int = 0
    total_events: int | None = None


async def _sessions(
    store: SessionStore, where: SessionFilter, *, prefilter: PrefilterMode, streamed: _Streamed
) -> AsyncGenerator[StoredSession, None]:
    """Yields the sessions to classify: the prefilter's candidates, or every session.

    The prefilter (:meth:`SessionStore.candidates`) is used as ``prefilter``
    says (``"auto"`` skips it when ``where.since`` keeps only changed
    sessions); a prefilter query the database refuses before its first
    session (an engine without the JSON functions it needs) falls back to the
    full scan, with a warning.
    """
    if prefilter not in ("auto", "always", "never"):
        raise ValueError(f"prefilter={prefilter!r}: use 'auto', 'always' or 'never'")
    if prefilter == "auto" and where.since is not None:
        # Few sessions changed: reading them whole beat the prefilter's query over
        # them (SQLite, 100k events, 91 sessions: 0.11 s against 0.24 s).
        prefilter = "never"
    found = None if prefilter == "never" else await store.candidates(
        where, everywhere=prefilter == "always", all_if_most=True)
    if found is not None:
        total, candidates = found
        try:
            first = await anext(candidates, None)
        except StoreError as exc:
            _log.warning("the SQL prefilter failed on %s (%s): scanning every session instead",
                         store, exc)
        else:
            streamed.total_events = total
            if first is not None:
                yield first
                async with contextlib.aclosing(candidates) as rest:
                    async for stored in rest:
                        yield stored
            return
    async with contextlib.aclosing(store.stream_sessions(where)) as stream:
        async for stored in stream:
            yield stored


async def classify_stored(
    stored: StoredSession,
    tool_runs: ToolRunReader | None,
    *,
    now: float,
    stale_after: float | None,
    clock_skew: float,
) -> SessionFindings:
    """Classifies one stored session, corrected by its tool runs when there is a ledger.

    Raises:
        TypeError, AttributeError, ValueError: A row holds JSON of the wrong shape.
    """
    findings = classify(stored.events, STORED_JSON, now=now, stale_after=stale_after,
                        clock_skew=clock_skew)
    if tool_runs is not None and (ids := findings.open_call_ids):
        findings = with_tool_runs(findings, await tool_runs.runs(stored.key, ids), now=now,
                                  clock_skew=clock_skew)
    return findings


@asynccontextmanager
async def tool_runs_of(store: SessionStore,
                        timeout: TimeoutArg) -> AsyncIterator[ToolRunReader | None]:
    """The store's tool-run ledger: a SQL store's table (revision 0002 or later), Redis's hashes.

    ``None`` when there is none, or when the SQL table holds no run at all (the
    plugin is not in use): then no session needs a read of its own. A record
    written after this check is of a tool that started after it, whose call
    cannot have been dead by then (measured: a 3,000-heal repair spent 70 %
    of its time on those per-session reads).
    """
    runs: SqlToolRunLedger | RedisToolRunLedger
    if store.url is not None and store.layout is Layout.REDIS:
        runs = RedisToolRunLedger.from_url(store.url)
    elif store.url is not None and store.layout in (Layout.DATABASE, Layout.ADK_SQLITE) and (
            await store.ledger_revision() in TOOL_RUNS_REVISIONS):
        runs = SqlToolRunLedger.from_url(store.url, writable=False, timeout=timeout,
                                         engine=store.server_engine())
        if await runs.empty():
            await runs.close()
            yield None
            return
    else:
        yield None
        return
    try:
        yield runs
    finally:
        await runs.close()


def _malformed_rows(events: Sequence[dict[str, Any]], exc: Exception) -> tuple[DamagedRow, ...]:
    """Names the rows whose wrong JSON types made classifying their session raise ``exc``.

    Raises:
        Exception: ``exc`` itself when no row is malformed (a bug, not damage).
    """
    found = tuple(
        DamagedRow(str(event.get("id")), problem)
        for event in events if (problem := stored_event_problem(event)) is not None
    )
    if not found:
        raise exc
    return found


def _unreadable_message(store: SessionStore, report: ScanReport) -> str:
    """The one line for a store none of whose rows could be read."""
    first = report.damaged_rows[0]
    return (
        f"none of the {report.events_scanned:,} stored events in {store} could be read "
        f"(e.g. event {first.event_id} of session {first.app_name}/{first.user_id}/"
        f"{first.session_id}: {first.problem}): the rows are not stored as ADK writes them, "
        "as when a custom session service encrypts or compresses them; heal such sessions "
        "through the Python API, wrapping that service: HealingSessionService(YourService(...))"
    )


def _batches(
    sessions: Sequence[SessionHeals], batch_size: int
) -> Iterator[list[SessionHeals]]:
    """Groups whole sessions into batches of about ``batch_size`` heals."""
    batch: list[SessionHeals] = []
    size = 0
    for planned in sessions:
        if batch and size + len(planned.heals) > batch_size:
            yield batch
            batch, size = [], 0
        batch.append(planned)
        size += len(planned.heals)
    if batch:
        yield batch


async def _check_ledger(store: SessionStore) -> None:
    """Raises unless the ledger records runs (revision ``0004``): a repair is a run."""
    revision = await store.ledger_revision()
    if revision not in RUNS_REVISIONS:
        raise LedgerError(missing_ledger_message(store, revision), missing=True)


async def _apply(
    store: SessionStore,
    plan: RepairPlan,
    *,
    ledger: bool,
    batch_size: int,
    on_heal: Callable[[HealRecord], object] | None,
) -> RepairReport:
    superseded = plan.scan.superseded_heals
    if ledger and superseded and (
            revision := await store.ledger_revision()) not in REMOVALS_REVISIONS:
        raise LedgerError(missing_ledger_message(store, revision), missing=True)
    entries: list[HealEntry] = []
    written_by_reason: Counter[str] = Counter()
    outcomes: Counter[str] = Counter()
    # The plan and the scan report are long-lived by now: keep the collector from
    # walking them on every collection the writes trigger (measured on PostgreSQL:
    # 1,480 -> 1,624 heals/s, against 1,647 for the repair that held no plan).
    gc.freeze()
    # A run with nothing to write records nothing: a second repair writes no row at all.
    runs = (open_heal_ledger(plan.url)
            if ledger and (superseded or any(s.heals for s in plan.sessions)) else None)
    taking_back = False
    try:
        if runs is not None:
            await runs.start_run(RepairRun(plan.run_id, RunKind.REPAIR, this_host(), time.time()))
        for batch in _batches(plan.sessions, max(1, batch_size)):
            for result in await store.write(batch, ledger=ledger):
                entries.append(HealEntry.of(result))
                outcomes[result.outcome.value] += 1
                if result.written:
                    written_by_reason[result.heal.record.reason] += 1
                    report_heal(result.heal.record, on_heal, level=logging.DEBUG)
        taking_back = True
        removals = await _take_back(store, superseded, ledger=ledger, now=plan.planned_at,
                                    batch_size=max(1, batch_size), run_id=plan.run_id)
        if runs is not None:
            await runs.finish_run(plan.run_id, time.time())
    except BaseException:
        # A run that failed before it wrote a row leaves no trace (no partial write);
        # one that wrote some keeps its record, unfinished, so `--undo` can take them back.
        if runs is not None and not written_by_reason and not taking_back:
            with contextlib.suppress(Exception):  # the first error is the one to report
                await runs.forget_run(plan.run_id)
        raise
    finally:
        gc.unfreeze()
        if runs is not None:
            await runs.close()
        report_repair_run(str(plan.url), written_by_reason, outcomes)
    return RepairReport(plan.scan, entries, dry_run=False, ledger=ledger, removals=removals,
                        run_id=plan.run_id if runs is not None else None)


async def _take_back(
    store: SessionStore,
    superseded: Sequence[SupersededEntry],
    *,
    ledger: bool,
    now: float,
    batch_size: int,
    run_id: str,
) -> list[tuple[SupersededEntry, RemoveOutcome | None]]:
    """Takes the superseded heals back out through the store's remover, in batches."""
    done: list[tuple[SupersededEntry, RemoveOutcome | None]] = []
    for start in range(0, len(superseded), batch_size):
        entries = superseded[start:start + batch_size]
        removals = [Removal(e.key, e.synthetic_event_id, e.call_event_id, e.call_ids,
                            RemovalReason.LATE_RESULT, now, "repair", e.response_event_ids,
                            run_id=run_id)
                    for e in entries]
        results = await store.remove(removals, ledger=ledger)
        for entry, removal, outcome in zip(entries, removals, results, strict=True):
            done.append((entry, outcome))
            if outcome is RemoveOutcome.REMOVED:
                report_removal(removal, dict(zip(entry.call_ids, entry.tool_names, strict=True)),
                               level=logging.DEBUG)
    return done


async def scan(
    url: str | StoreUrl,
    *,
    where: SessionFilter | None = None,
    stale_after: float | None = DEFAULT_OLDER_THAN,
    clock_skew: float = DEFAULT_CLOCK_SKEW,
    now: float | None = None,
    progress: ScanProgress | None = None,
    timeout: TimeoutArg = None,
    prefilter: PrefilterMode = "auto",
    since: float | None = None,
    incremental: bool = False,
) -> ScanReport:
    """Scans an ADK session database, read-only.

    Args:
        url: The database (any form :func:`~adk_session_heal.store.urls.parse_store_url`
            accepts).
        where: Restrict to an app, user or session.
        stale_after: Age (seconds) after which a call of the newest invocation
            counts as stale (dead); ``None``: only superseded calls are dead.
        clock_skew: Seconds added to ``stale_after`` for clocks that differ
            between the hosts that wrote the sessions and this one (as
            :attr:`HealPolicy.clock_skew`; default 5 minutes).
        now: The clock (default: the current time).
        progress: Receives progress.
        timeout: How long to wait for a database server: seconds, or a
            :class:`~adk_session_heal.store.engines.Timeouts` (default: 10 s
            to connect, 60 s per statement).
        prefilter: Whether the database picks the sessions that can hold a
            finding first (:mod:`~adk_session_heal.store.prefilter`): ``"auto"``
            where that pays (PostgreSQL), ``"always"`` wherever the engine has
            one (SQLite and MySQL/MariaDB too, where it measured slower than
            classifying everything), ``"never"`` (classify every session).
        since: Read only the sessions updated from this time (POSIX seconds)
            on, less ``clock_skew`` (SQL stores; see :mod:`~adk_session_heal.store.incremental`).
        incremental: Read only what changed since this scope's last
            incremental run, and what it left unsettled; the first run reads
            everything. The state is saved once the run is complete (the
            ledger must be at revision ``0005``).

    Returns:
        The report.

    Raises:
        StoreError: The URL or database cannot be used (one-line message), or,
            ``incremental``, refuses the write of the run's state.
    """
    # An incremental scan records where it stopped: a store that refuses writes says so first.
    store = await open_store(url, timeout=timeout, writable=incremental)
    try:
        async with tool_runs_of(store, timeout) as tool_runs:
            clock = time.time() if now is None else now
            report, _ = await _plan(
                store, where or SessionFilter(), None, now=clock,
                stale_after=stale_after, clock_skew=clock_skew, progress=progress,
                tool_runs=tool_runs, prefilter=prefilter, since=since, incremental=incremental,
            )
        if report.incremental is not None:
            await _save_watermark(store, report, clock, timeout)
        return report
    finally:
        await store.close()


async def plan_repair(
    url: str | StoreUrl,
    *,
    where: SessionFilter | None = None,
    policy: HealPolicy | None = None,
    now: float | None = None,
    progress: ScanProgress | None = None,
    timeout: TimeoutArg = None,
    prefilter: PrefilterMode = "auto",
    since: float | None = None,
    incremental: bool = False,
    writing: bool = False,
) -> RepairPlan:
    """Scans a session database and plans the heal of every dead call; writes nothing.

    Args:
        url: The database.
        where: Restrict to an app, user or session.
        policy: Which calls are dead (``stale_after``, default
            :data:`DEFAULT_OLDER_THAN`, plus ``clock_skew``) and the synthetic
            payload.
        now: The clock, also the heals' ``healed_at`` (default: now).
        progress: Receives the scan's progress.
        timeout: How long to wait for a database server: seconds, or a
            :class:`~adk_session_heal.store.engines.Timeouts` (default: 10 s
            to connect, 60 s per statement).
        prefilter: Whether the database picks the sessions that can hold a
            finding first (:mod:`~adk_session_heal.store.prefilter`): ``"auto"``
            where that pays (PostgreSQL), ``"always"`` wherever the engine has
            one (SQLite and MySQL/MariaDB too, where it measured slower than
            classifying everything), ``"never"`` (classify every session).
        since: Read only the sessions updated from this time (POSIX seconds)
            on, less ``clock_skew`` (SQL stores; see :mod:`~adk_session_heal.store.incremental`).
        incremental: Read only what changed since this scope's last
            incremental run, and what it left unsettled; the first run reads
            everything. The state is saved once the run is complete (the
            ledger must be at revision ``0005``).
        writing: The plan will be applied: the store's writer loads what it
            needs in the background while the scan runs
            (:meth:`~adk_session_heal.store.SessionStore.preload_writer`).

    Returns:
        The plan, to print or to pass to :func:`apply_plan`.

    Raises:
        StoreError: The URL or database cannot be used.
    """
    policy = policy or HealPolicy(stale_after=DEFAULT_OLDER_THAN)
    clock = time.time() if now is None else now
    run_id = new_run_id()
    store = await open_store(url, timeout=timeout)
    try:
        if writing:
            store.preload_writer()
        async with tool_runs_of(store, timeout) as tool_runs:
            report, sessions = await _plan(
                store, where or SessionFilter(), policy, now=clock,
                stale_after=policy.stale_after_seconds, clock_skew=policy.clock_skew_seconds,
                progress=progress, tool_runs=tool_runs, prefilter=prefilter, run_id=run_id,
                since=since, incremental=incremental,
            )
    finally:
        await store.close()
    assert store.url is not None
    return RepairPlan(store.url, report, tuple(sessions), clock, run_id)


async def check_repairable(
    url: str | StoreUrl, *, ledger: bool = True, timeout: TimeoutArg = None
) -> None:
    """Raises the error :func:`apply_plan` would raise before it writes, without scanning.

    Args:
        url: The database.
        ledger: Also require the ledger (as ``apply_plan(ledger=True)`` does).
        timeout: How long to wait for a database server: seconds, or a
            :class:`~adk_session_heal.store.engines.Timeouts` (default: 10 s
            to connect, 60 s per statement).

    Raises:
        StoreError: The URL or database cannot be used, or refuses writes.
        LedgerError: ``ledger`` is on and the ledger is missing or outdated.
    """
    store = await open_store(url, writable=True, timeout=timeout)
    try:
        if ledger:
            await _check_ledger(store)
    finally:
        await store.close()


async def apply_plan(
    plan: RepairPlan,
    *,
    ledger: bool = True,
    batch_size: int = DEFAULT_BATCH_SIZE,
    on_heal: Callable[[HealRecord], object] | None = None,
    timeout: TimeoutArg = None,
) -> RepairReport:
    """Writes a plan: the heals in batched transactions, with their ledger rows.

    Each session is re-checked in its write transaction; one whose events
    changed since the plan was made (or that was deleted) is skipped and
    reported. Each heal written is reported like the wrapper's (log,
    telemetry, ``on_heal``).

    Args:
        plan: From :func:`plan_repair`.
        ledger: Record the run and each heal in the ledger (each heal in its
            own transaction). The ledger must be at revision ``0004``
            (``db upgrade``) unless this is ``False``.
        batch_size: Synthetic events per transaction (whole sessions).
        on_heal: Called once per heal written, with its record.
        timeout: How long to wait for a database server: seconds, or a
            :class:`~adk_session_heal.store.engines.Timeouts` (default: 10 s
            to connect, 60 s per statement).

    Returns:
        The report, with one entry per planned heal.

    Raises:
        StoreError: The database cannot be used, or refuses writes.
        LedgerError: ``ledger`` is on and the ledger is missing or outdated.
    """
    store = await open_store(plan.url, writable=True, timeout=timeout)
    try:
        if ledger:
            await _check_ledger(store)
        report = await _apply(store, plan, ledger=ledger, batch_size=batch_size, on_heal=on_heal)
        if plan.scan.incremental is not None:
            await _save_watermark(store, plan.scan, time.time(), timeout)
        return report
    finally:
        await store.close()


async def repair(
    url: str | StoreUrl,
    *,
    where: SessionFilter | None = None,
    policy: HealPolicy | None = None,
    dry_run: bool = False,
    ledger: bool = True,
    batch_size: int = DEFAULT_BATCH_SIZE,
    now: float | None = None,
    progress: ScanProgress | None = None,
    on_heal: Callable[[HealRecord], object] | None = None,
    timeout: TimeoutArg = None,
    prefilter: PrefilterMode = "auto",
    since: float | None = None,
    incremental: bool = False,
) -> RepairReport:
    """Heals every dead call in a session database: :func:`plan_repair` + :func:`apply_plan`.

    Args:
        url: The database.
        where: Restrict to an app, user or session.
        policy: Which calls are dead (``stale_after``, default
            :data:`DEFAULT_OLDER_THAN`, plus ``clock_skew``) and the synthetic
            payload.
        dry_run: Plan and report exactly what would be written; write nothing.
        ledger: Record each heal in the ledger, in the same transaction.
        batch_size: Synthetic events per transaction.
        now: The clock, also the heals' ``healed_at`` (default: now).
        progress: Receives the scan's progress.
        on_heal: Called once per heal written, with its record.
        timeout: How long to wait for a database server: seconds, or a
            :class:`~adk_session_heal.store.engines.Timeouts` (default: 10 s
            to connect, 60 s per statement).
        prefilter: Whether the database picks the sessions that can hold a
            finding first (:mod:`~adk_session_heal.store.prefilter`): ``"auto"``
            where that pays (PostgreSQL), ``"always"`` wherever the engine has
            one (SQLite and MySQL/MariaDB too, where it measured slower than
            classifying everything), ``"never"`` (classify every session).
        since: Read only the sessions updated from this time (POSIX seconds)
            on, less ``clock_skew`` (SQL stores; see :mod:`~adk_session_heal.store.incremental`).
        incremental: Read only what changed since this scope's last
            incremental run, and what it left unsettled; the first run reads
            everything. The state is saved once the run is complete (the
            ledger must be at revision ``0005``).

    Returns:
        The report, with one entry per synthetic event.

    Raises:
        StoreError: The URL or database cannot be used, or refuses writes.
        LedgerError: ``ledger`` is on and the ledger is missing or outdated.
    """
    policy = policy or HealPolicy(stale_after=DEFAULT_OLDER_THAN)
    clock = time.time() if now is None else now
    store = await open_store(url, writable=not dry_run, timeout=timeout)
    try:
        if ledger and not dry_run:
            await _check_ledger(store)
        if not dry_run:
            store.preload_writer()
        run_id = new_run_id()
        async with tool_runs_of(store, timeout) as tool_runs:
            report, sessions = await _plan(
                store, where or SessionFilter(), policy, now=clock,
                stale_after=policy.stale_after_seconds, clock_skew=policy.clock_skew_seconds,
                progress=progress, tool_runs=tool_runs, prefilter=prefilter, run_id=run_id,
                since=since, incremental=incremental,
            )
        assert store.url is not None
        plan = RepairPlan(store.url, report, tuple(sessions), clock, run_id)
        if dry_run:
            return RepairReport.dry(plan.scan, plan.heals)
        repaired = await _apply(store, plan, ledger=ledger, batch_size=batch_size,
                                on_heal=on_heal)
        if report.incremental is not None:
            await _save_watermark(store, report, time.time(), timeout)
        return repaired
    finally:
        await store.close()


async def scan_service(
    service: BaseSessionService,
    *,
    app_name: str,
    user_id: str | None = None,
    session_id: str | None = None,
    stale_after: float | None = DEFAULT_OLDER_THAN,
    clock_skew: float = DEFAULT_CLOCK_SKEW,
    now: float | None = None,
) -> ScanReport:
    """Scans sessions through a session service's API (for stores without SQL).

    One ``list_sessions`` and one ``get_session`` per session: use :func:`scan`
    for ADK's SQL stores, which is many times faster.

    Args:
        service: Any ADK session service (e.g. in-memory, Vertex AI).
        app_name: The app whose sessions to scan (the service API needs it).
        user_id: Only this user's sessions.
        session_id: Only this session.
        stale_after: As for :func:`scan`.
        clock_skew: As for :func:`scan`.
        now: The clock.

    Returns:
        The report (``layout`` is the service's class name).
    """
    clock = time.time() if now is None else now
    report = ScanReport(type(service).__name__, "service", clock, stale_after,
                        clock_skew=clock_skew)
    listed = await service.list_sessions(app_name=app_name, user_id=user_id)
    for listed_session in listed.sessions:
        if session_id is not None and listed_session.id != session_id:
            continue
        session = await service.get_session(
            app_name=app_name, user_id=listed_session.user_id, session_id=listed_session.id
        )
        if session is None:
            continue
        report.sessions_scanned += 1
        findings = classify(session.events, ADK_EVENTS, now=clock, stale_after=stale_after,
                            clock_skew=clock_skew)
        report.add(SessionKey.of(session), len(session.events), findings)
    return report
