"""Scanning a whole session database, read-only: every session through the one decision.

:func:`scan` streams ADK's events table once, in session order, and hands each
session's stored JSON to :func:`~adk_session_heal.core.session_decision.decide`
(no pydantic ``Event`` is built for any stored event), corrected by the
store's tool-run ledger when it has one; memory is bounded by the largest
session plus what is reported. :func:`scan_sessions` is that loop, which
:func:`plan_repair` runs too, planning as it
goes, so a scan and a repair never judge a session differently:
:func:`plan_repair` is this module's scan, planning, into a :class:`RepairPlan`
(which :func:`~adk_session_heal.ops.apply.apply_plan` writes). The options
of a run travel as one value, :class:`ScanOptions`.

:func:`scan_service` is the fallback for session services without SQL
storage (in-memory, Vertex AI): ``list_sessions`` + ``get_session``.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import AsyncGenerator, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, Literal, Protocol

from ..core.event_access import ADK_EVENTS, STORED_JSON, stored_event_problem
from ..core.findings import NO_FINDINGS
from ..core.heal_record import HealTrigger
from ..core.healing import Heal, SessionHeals
from ..core.session_decision import SessionView, decide
from ..core.session_key import SessionKey
from ..errors import StoreError
from ..policy import DEFAULT_CLOCK_SKEW, DEFAULT_OLDER_THAN, HealPolicy
from ..store import DamagedRow, Layout, SessionFilter, SessionStore, open_store
from ..store.base import StoredSession
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
from ..store.ledger.repair_runs import new_run_id
from ..store.ledger.revisions import Feature
from ..store.reconcile_hooks import HookReconciler
from ..store.urls import StoreUrl
from .scan_report import ScanReport, SupersededEntry

if TYPE_CHECKING:  # scan_service's annotation: a scan by URL loads no ADK
    from google.adk.sessions import BaseSessionService

_log = logging.getLogger("adk_session_heal")

PrefilterMode = Literal["auto", "always", "never"]
"""When scans let the database pick the sessions to classify (see :func:`scan`)."""


class ScanProgress(Protocol):
    """Receives a scan's progress (e.g. a progress bar)."""

    def start(self, total_sessions: int) -> None:
        """Called once, before the first session, with the number to scan."""
        ...

    def advance(self, sessions: int) -> None:
        """Called as sessions are scanned."""
        ...


@dataclass(frozen=True, slots=True, kw_only=True)
class ScanOptions:
    """What a scan or a repair reads and how it judges it: the options of one run, as one value.

    ``scan(url, ScanOptions(where=SessionFilter(app_name="support"), since=...))``;
    ``repair`` and ``plan_repair`` take the same value.

    Attributes:
        where: Restrict to an app, user, session or shard (default: everything).
        policy: Which calls are dead (``stale_after``, default
            :data:`~adk_session_heal.policy.DEFAULT_OLDER_THAN`, and ``clock_skew``,
            default :data:`~adk_session_heal.policy.DEFAULT_CLOCK_SKEW`) and,
            for a repair, the payload of each heal. ``stale_after=None``: only
            superseded calls are dead.
        prefilter: Whether the database picks the sessions that can hold a
            finding first (:mod:`~adk_session_heal.store.prefilter`): ``"auto"``
            where that pays (PostgreSQL), ``"always"`` wherever the engine has
            one (SQLite and MySQL/MariaDB too, where it measured slower than
            classifying everything), ``"never"`` (classify every session).
        since: Read only the sessions updated from this time (POSIX seconds)
            on, less ``clock_skew`` (SQL stores; see
            :mod:`~adk_session_heal.store.incremental`).
        incremental: Read only what changed since this scope's last incremental
            run, and what it left unsettled; the first run reads everything.
            The state is saved once the run is complete (the ledger must be at
            revision ``0005``).
        timeout: How long to wait for a database server: seconds, or a
            :class:`~adk_session_heal.store.engines.Timeouts` (default: 10 s
            to connect, 60 s per statement).
    """

    where: SessionFilter = SessionFilter()
    policy: HealPolicy = HealPolicy(stale_after=DEFAULT_OLDER_THAN)
    prefilter: PrefilterMode = "auto"
    since: float | None = None
    incremental: bool = False
    timeout: TimeoutArg = None

    def __post_init__(self) -> None:
        """Refuses what cannot be read, before anything is opened.

        Raises:
            ValueError: An unknown ``prefilter``; both ``since`` and
                ``incremental``; ``incremental`` for one session.
        """
        if self.prefilter not in ("auto", "always", "never"):
            raise ValueError(f"prefilter={self.prefilter!r}: use 'auto', 'always' or 'never'")
        check_request(self.where, since=self.since is not None, incremental=self.incremental)

    def needs(self, *, writing: bool = False, ledger: bool = False) -> tuple[Feature, ...]:
        """What the run will use of the heal ledger (checked when the store is opened).

        Args:
            writing: The run writes heals (a repair applying its plan).
            ledger: With ``writing``: it records its run and heals in the
                ledger (runs: revision ``0004``).
        """
        return ((Feature.INCREMENTAL,) if self.incremental else ()) + (
            (Feature.RUNS,) if writing and ledger else ())


async def scan_sessions(
    store: SessionStore,
    options: ScanOptions,
    *,
    now: float,
    progress: ScanProgress | None,
    planning: bool,
    run_id: str | None = None,
) -> tuple[ScanReport, list[SessionHeals]]:
    """Scans ``store``; ``planning``, also plans the heals of every session.

    Each session goes through the one decision every healer makes
    (:func:`~adk_session_heal.core.session_decision.decide`), corrected by the
    store's tool-run ledger when it has one. The database picks the sessions
    to classify as ``options.prefilter`` says (see :func:`_sessions`). With
    ``since`` or ``incremental``, only the sessions that changed (and,
    incremental, those left unsettled) are read (:func:`_changes`); an
    incremental report carries the state to save once the run is complete.
    """
    policy = options.policy
    clock_skew = policy.clock_skew_seconds
    where, mark = await _changes(store, options, now=now)
    report = ScanReport(str(store), store.layout.value, now, policy.stale_after_seconds,
                        clock_skew=clock_skew,
                        since=None if where.since is None else where.since.after,
                        incremental=mark)
    report.sessions_scanned = await store.count_sessions(where)
    if progress is not None:
        progress.start(report.sessions_scanned)
    planned: list[SessionHeals] = []
    streamed = _Streamed()
    reconciler = HookReconciler(policy) if policy.reconcile else None
    # Fewer garbage collections while rows are decoded (see adk_session_heal.store.collector).
    with _fewer_collections():
        # Closed as soon as the loop ends, also on an error: a stream left open holds its
        # database connection until the garbage collector finds it.
        async with store.tool_runs(options.timeout) as tool_runs, contextlib.aclosing(
                _sessions(store, where, prefilter=options.prefilter,
                          streamed=streamed)) as sessions:
            async for stored in sessions:
                key = stored.key
                rows = len(stored.events) + len(stored.damaged)
                streamed.sessions += 1
                streamed.events += rows
                if stored.clean:  # all_answered, found by the store: decide finds nothing
                    report.add(key, rows, NO_FINDINGS)
                    if progress is not None:
                        progress.advance(1)
                    continue
                damaged = stored.damaged
                decision = None
                if not damaged:
                    try:
                        decision = await decide(
                            SessionView(key, stored.events, STORED_JSON,
                                        seen_events=len(stored.events)),
                            policy, now=now, trigger=HealTrigger.REPAIR, tool_runs=tool_runs,
                            plan=planning, run_id=run_id, reconciler=reconciler)
                        report.add(key, rows, decision.findings)
                    except (TypeError, AttributeError, ValueError) as exc:
                        damaged = _malformed_rows(stored.events, exc)
                if damaged:
                    report.add_damaged(key, rows, damaged)
                elif decision is not None:
                    report.superseded_heals.extend(
                        SupersededEntry.of(key, late) for late in decision.superseded)
                    if decision.heals is not None:
                        planned.append(decision.heals)
                if progress is not None:
                    progress.advance(1)
    if streamed.total_events is not None:  # the clean sessions the prefilter passed over
        report.events_scanned += max(0, streamed.total_events - streamed.events)
        if progress is not None:
            progress.advance(max(0, report.sessions_scanned - streamed.sessions))
    if report.damaged_rows and len(report.damaged_rows) == report.events_scanned:
        raise StoreError(_unreadable_message(store, report))
    if report.incremental is not None:  # complete: the state to save once the run is
        report.incremental = replace(report.incremental,
                                     unsettled=tuple(report.unsettled_sessions()))
    return report, planned


async def _changes(
    store: SessionStore, options: ScanOptions, *, now: float
) -> tuple[SessionFilter, Watermark | None]:
    """Restricts ``where`` to what changed: ``since`` a time, or since the last incremental run.

    The watermark is read before any session (see :mod:`~adk_session_heal.store.incremental`);
    both bounds are moved ``clock_skew`` earlier. The store was opened with
    what an incremental run needs of the ledger (:meth:`ScanOptions.needs`).

    Raises:
        UnsupportedStoreError: The layout keeps no update time to filter on.
    """
    where, since, clock_skew = options.where, options.since, options.policy.clock_skew_seconds
    if since is None and not options.incremental:
        return where, None
    if options.incremental:
        scope = scope_of(where)
        newest = await store.newest_update(where)
        ledger = store.heal_ledger(options.timeout)
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


async def save_watermark(store: SessionStore, mark: Watermark, now: float,
                          timeout: TimeoutArg) -> None:
    """Records an incremental run's state (:attr:`ScanReport.incremental`), once complete."""
    ledger = store.heal_ledger(timeout)
    try:
        await ledger.save_watermark(mark, now)
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
    async with contextlib.aclosing(store.stream_sessions(where, pass_clean=True)) as stream:
        async for stored in stream:
            yield stored


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


async def scan(
    url: str | StoreUrl,
    options: ScanOptions | None = None,
    *,
    now: float | None = None,
    progress: ScanProgress | None = None,
) -> ScanReport:
    """Scans an ADK session database, read-only.

    Args:
        url: The database (any form :func:`~adk_session_heal.store.urls.parse_store_url`
            accepts).
        options: What to read and how to judge it (default: every session,
            calls dead after :data:`~adk_session_heal.policy.DEFAULT_OLDER_THAN`).
        now: The clock (default: the current time).
        progress: Receives progress.

    Returns:
        The report.

    Raises:
        StoreError: The URL or database cannot be used (one-line message), or,
            ``incremental``, refuses the write of the run's state.
    """
    options = options or ScanOptions()
    # An incremental scan records where it stopped: a store that refuses writes says so first.
    store = await open_store(url, timeout=options.timeout, writable=options.incremental,
                             needs=options.needs())
    try:
        clock = time.time() if now is None else now
        report, _ = await scan_sessions(store, options, now=clock, progress=progress,
                                        planning=False)
        if report.incremental is not None:
            await save_watermark(store, report.incremental, clock, options.timeout)
        return report
    finally:
        await store.close()


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
        options: What was read, and how (applying uses its ``timeout``).
    """

    url: StoreUrl
    scan: ScanReport
    sessions: tuple[SessionHeals, ...]
    planned_at: float
    run_id: str = field(default_factory=new_run_id)
    options: ScanOptions = ScanOptions()

    @property
    def heals(self) -> tuple[Heal, ...]:
        """Every planned heal, in order."""
        return tuple(heal for planned in self.sessions for heal in planned.heals)

    def __repr__(self) -> str:
        """A short form: a plan may hold hundreds of thousands of events."""
        return (f"RepairPlan(url={str(self.url)!r}, sessions={len(self.sessions)}, "
                f"heals={sum(len(s.heals) for s in self.sessions)})")


async def plan_repair(
    url: str | StoreUrl,
    options: ScanOptions | None = None,
    *,
    now: float | None = None,
    progress: ScanProgress | None = None,
    writing: bool = False,
    ledger: bool = True,
) -> RepairPlan:
    """Scans a session database and plans the heal of every dead call; writes nothing.

    Args:
        url: The database.
        options: What to read and how to judge it, as for :func:`scan`; its
            ``policy`` also gives each heal's payload.
        now: The clock, also the heals' ``healed_at`` (default: now).
        progress: Receives the scan's progress.
        writing: The plan will be applied: first check what :func:`apply_plan`
            checks before it writes (the store takes writes; with ``ledger``,
            the ledger records runs), so a refusal is one line before any
            scan.
        ledger: With ``writing``: the plan will be applied with the ledger.

    Returns:
        The plan, to print or to pass to :func:`~adk_session_heal.ops.apply.apply_plan`.

    Raises:
        StoreError: The URL or database cannot be used (``writing``: or refuses writes).
        LedgerError: ``writing`` and ``ledger``, and the ledger is missing or outdated.
    """
    options = options or ScanOptions()
    clock = time.time() if now is None else now
    run_id = new_run_id()
    store = await open_store(url, timeout=options.timeout, writable=writing,
                             needs=options.needs(writing=writing, ledger=ledger))
    try:
        report, sessions = await scan_sessions(store, options, now=clock, progress=progress,
                                               planning=True, run_id=run_id)
    finally:
        await store.close()
    assert store.url is not None
    return RepairPlan(store.url, report, tuple(sessions), clock, run_id, options)


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
    policy = HealPolicy(stale_after=stale_after, clock_skew=clock_skew)
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
        key = SessionKey.of(session)
        decision = await decide(SessionView(key, session.events, ADK_EVENTS,
                                            seen_events=len(session.events)),
                                policy, now=clock, trigger=HealTrigger.REPAIR, plan=False)
        report.add(key, len(session.events), decision.findings)
    return report
