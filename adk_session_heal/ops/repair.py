"""Repairing a whole session database: :func:`plan_repair`, then :func:`apply_plan`.

:func:`plan_repair` runs the scan's loop
(:func:`~adk_session_heal.ops.scan.scan_sessions`) planning every session's
heals with the one decision the wrapper makes
(:func:`~adk_session_heal.core.session_decision.decide`: the same
deterministic ids and the same rows) into an immutable :class:`RepairPlan`;
:func:`apply_plan` writes that plan through the store layout's one writer
(the one the wrapper uses), in batched transactions that re-check each
session, skip existing keys and carry their ledger rows. :func:`repair`
calls the two, and so does the command line. That gives:

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
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field

from ..core.heal_record import HealRecord
from ..core.healing import Heal, SessionHeals
from ..observe import report_heal, report_removal, report_repair_run
from ..policy import DEFAULT_BATCH_SIZE
from ..store import SessionStore, open_store
from ..store.base import Removal, RemovalReason, RemoveOutcome
from ..store.collector import frozen_heap
from ..store.ledger.repair_runs import RepairRun, RunKind, new_run_id, this_host
from ..store.ledger.revisions import Feature
from ..store.urls import StoreUrl
from .repair_report import HealEntry, RepairReport
from .scan import ScanOptions, ScanProgress, save_watermark, scan_sessions
from .scan_report import ScanReport, SupersededEntry


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


async def _apply(
    store: SessionStore,
    plan: RepairPlan,
    *,
    ledger: bool,
    batch_size: int,
    on_heal: Callable[[HealRecord], object] | None,
) -> RepairReport:
    superseded = plan.scan.superseded_heals
    entries: list[HealEntry] = []
    written_by_reason: Counter[str] = Counter()
    outcomes: Counter[str] = Counter()
    # The plan and the scan report are long-lived by now (see frozen_heap).
    with frozen_heap():
        # A run with nothing to write records nothing: a second repair writes no row at all.
        runs = (store.heal_ledger(plan.options.timeout)
                if ledger and (superseded or any(s.heals for s in plan.sessions)) else None)
        taking_back = False
        try:
            if runs is not None:
                await runs.start_run(
                    RepairRun(plan.run_id, RunKind.REPAIR, this_host(), time.time()))
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


def _needs(options: ScanOptions, *, writing: bool, ledger: bool) -> tuple[Feature, ...]:
    """What a repair uses of the ledger: runs (revision ``0004``) when it writes with it."""
    return (*options.needs(), *((Feature.RUNS,) if writing and ledger else ()))


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
        options: What to read and how to judge it, as for
            :func:`~adk_session_heal.ops.scan.scan`; its ``policy`` also gives
            each heal's payload.
        now: The clock, also the heals' ``healed_at`` (default: now).
        progress: Receives the scan's progress.
        writing: The plan will be applied: first check what :func:`apply_plan`
            checks before it writes (the store takes writes; with ``ledger``,
            the ledger records runs), so a refusal is one line before any
            scan, and let the store's writer load what it needs in the
            background while the scan runs
            (:meth:`~adk_session_heal.store.SessionStore.preload_writer`).
        ledger: With ``writing``: the plan will be applied with the ledger.

    Returns:
        The plan, to print or to pass to :func:`apply_plan`.

    Raises:
        StoreError: The URL or database cannot be used (``writing``: or refuses writes).
        LedgerError: ``writing`` and ``ledger``, and the ledger is missing or outdated.
    """
    options = options or ScanOptions()
    clock = time.time() if now is None else now
    run_id = new_run_id()
    store = await open_store(url, timeout=options.timeout, writable=writing,
                             needs=_needs(options, writing=writing, ledger=ledger))
    try:
        if writing:
            store.preload_writer()
        report, sessions = await scan_sessions(store, options, now=clock, progress=progress,
                                               planning=True, run_id=run_id)
    finally:
        await store.close()
    assert store.url is not None
    return RepairPlan(store.url, report, tuple(sessions), clock, run_id, options)


async def apply_plan(
    plan: RepairPlan,
    *,
    ledger: bool = True,
    batch_size: int = DEFAULT_BATCH_SIZE,
    on_heal: Callable[[HealRecord], object] | None = None,
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

    Returns:
        The report, with one entry per planned heal.

    Raises:
        StoreError: The database cannot be used, or refuses writes.
        LedgerError: ``ledger`` is on and the ledger is missing or outdated.
    """
    store = await open_store(plan.url, writable=True, timeout=plan.options.timeout,
                             needs=_needs(plan.options, writing=True, ledger=ledger))
    try:
        report = await _apply(store, plan, ledger=ledger, batch_size=batch_size, on_heal=on_heal)
        if plan.scan.incremental is not None:
            await save_watermark(store, plan.scan, time.time(), plan.options.timeout)
        return report
    finally:
        await store.close()


async def repair(
    url: str | StoreUrl,
    options: ScanOptions | None = None,
    *,
    dry_run: bool = False,
    ledger: bool = True,
    batch_size: int = DEFAULT_BATCH_SIZE,
    now: float | None = None,
    progress: ScanProgress | None = None,
    on_heal: Callable[[HealRecord], object] | None = None,
) -> RepairReport:
    """Heals every dead call in a session database: :func:`plan_repair` + :func:`apply_plan`.

    Args:
        url: The database.
        options: What to read and how to judge it, as for :func:`plan_repair`.
        dry_run: Plan and report exactly what would be written; write nothing.
        ledger: Record each heal in the ledger, in the same transaction.
        batch_size: Synthetic events per transaction.
        now: The clock, also the heals' ``healed_at`` (default: now).
        progress: Receives the scan's progress.
        on_heal: Called once per heal written, with its record.

    Returns:
        The report, with one entry per synthetic event.

    Raises:
        StoreError: The URL or database cannot be used, or refuses writes.
        LedgerError: ``ledger`` is on and the ledger is missing or outdated.
    """
    plan = await plan_repair(url, options, now=now, progress=progress, writing=not dry_run,
                             ledger=ledger)
    if dry_run:
        return RepairReport.dry(plan.scan, plan.heals)
    return await apply_plan(plan, ledger=ledger, batch_size=batch_size, on_heal=on_heal)
