"""Writing a repair plan: :func:`apply_plan`.

A :class:`~adk_session_heal.ops.scan.RepairPlan` is written through the store
layout's one writer (the one the wrapper uses), in batched transactions that
re-check each session, skip existing keys and carry their ledger rows; the
heals a late result superseded are then taken back through the layout's
remover. A run that writes anything is recorded in the ledger's runs table as
it starts and ends, and each heal and removal row carries its id
(:mod:`~adk_session_heal.ops.repair` says what that guarantees).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import Counter
from collections.abc import Callable, Iterator, Sequence

from ..core.heal_record import HealRecord
from ..core.healing import SessionHeals
from ..observe import report_heal, report_removal, report_repair_run
from ..policy import DEFAULT_BATCH_SIZE
from ..store import SessionStore, open_store
from ..store.base import Removal, RemovalReason, RemoveOutcome, WriteResult
from ..store.collector import frozen_heap
from ..store.ledger.repair_runs import RepairRun, RunKind, this_host
from .repair_report import HealEntry, RepairReport
from .scan import RepairPlan
from .scan_report import SupersededEntry


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
        plan: From :func:`~adk_session_heal.ops.scan.plan_repair`.
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
    size = max(1, batch_size)
    # The plan's transactions, decided before any I/O: whole sessions, about `size` heals each.
    batches = list(_batches(plan.sessions, size))
    superseded = plan.scan.superseded_heals
    removals = [_removals(superseded[start:start + size], plan)
                for start in range(0, len(superseded), size)]
    store = await open_store(plan.url, writable=True, timeout=plan.options.timeout,
                             needs=plan.options.needs(writing=True, ledger=ledger))
    try:
        # The plan and the scan report are long-lived by now (see frozen_heap).
        with frozen_heap():
            return await _apply(store, plan, batches, removals, ledger=ledger, on_heal=on_heal)
    finally:
        await store.close()


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


def _removals(
    entries: Sequence[SupersededEntry], plan: RepairPlan
) -> list[tuple[SupersededEntry, Removal]]:
    """The removals taking back superseded heals, each beside the scan's entry for it."""
    return [(e, Removal(e.key, e.synthetic_event_id, e.call_event_id, e.call_ids,
                        RemovalReason.LATE_RESULT, plan.planned_at, "repair",
                        e.response_event_ids, run_id=plan.run_id))
            for e in entries]


_BUILT_BETWEEN_YIELDS = 10
"""Heals built before :func:`_build` lets the loop run the write it overlaps."""


async def _build(batch: Sequence[SessionHeals]) -> None:
    """Builds each heal's event and record (each kept on its heal), letting the loop run between.

    A heal that cannot be built (a payload function that raises, say) stops
    the build and is left to its own batch's write, which builds it again
    and fails there: the batch being written meanwhile is reported as written.
    """
    for count, heal in enumerate((heal for planned in batch for heal in planned.heals), start=1):
        try:
            heal.data, heal.record_json  # noqa: B018  (cached: built now, read by the write)
        except Exception:  # noqa: BLE001  (raised again, in its place, by the write)
            return
        if count % _BUILT_BETWEEN_YIELDS == 0:
            await asyncio.sleep(0)


async def _write_building(
    store: SessionStore, batch: Sequence[SessionHeals], following: Sequence[SessionHeals],
    *, ledger: bool,
) -> list[WriteResult]:
    """Writes one batch while the next batch's heals are built.

    A write spends much of its time waiting for the database (on PostgreSQL
    0.77 s of the writes' 2.0 s in a repair of 10,000 heals, measured);
    building the next batch's events (pure work: the same objects the write
    would build) fills that wait.
    """
    building = asyncio.ensure_future(_build(following))
    try:
        results = await store.write(batch, ledger=ledger)
    except BaseException:
        building.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await building
        raise
    await building
    return results


async def _apply(
    store: SessionStore,
    plan: RepairPlan,
    batches: Sequence[Sequence[SessionHeals]],
    removals: Sequence[Sequence[tuple[SupersededEntry, Removal]]],
    *,
    ledger: bool,
    on_heal: Callable[[HealRecord], object] | None,
) -> RepairReport:
    """Writes the batches, then takes back the superseded heals; records the run in the ledger.

    The heal ledger is opened once: for the run's record (a run with nothing
    to write records nothing: a second repair writes no row at all) and, for
    an incremental run, the state it saves once complete.
    """
    entries: list[HealEntry] = []
    taken_back: list[tuple[SupersededEntry, RemoveOutcome | None]] = []
    written_by_reason: Counter[str] = Counter()
    outcomes: Counter[str] = Counter()
    recording = ledger and (bool(removals) or any(s.heals for s in plan.sessions))
    heal_ledger = (store.heal_ledger(plan.options.timeout)
                   if recording or plan.scan.incremental is not None else None)
    taking_back = False
    try:
        if recording and heal_ledger is not None:
            await heal_ledger.start_run(
                RepairRun(plan.run_id, RunKind.REPAIR, this_host(), time.time()))
        for index, batch in enumerate(batches):
            following = batches[index + 1] if index + 1 < len(batches) else ()
            for result in await _write_building(store, batch, following, ledger=ledger):
                entries.append(HealEntry.of(result))
                outcomes[result.outcome.value] += 1
                if result.written:
                    written_by_reason[result.heal.record.reason] += 1
                    report_heal(result.heal.record, on_heal, data=result.heal.record_json,
                                level=logging.DEBUG)
        taking_back = True
        for pairs in removals:
            results = await store.remove([removal for _, removal in pairs], ledger=ledger)
            for (entry, removal), outcome in zip(pairs, results, strict=True):
                taken_back.append((entry, outcome))
                if outcome is RemoveOutcome.REMOVED:
                    report_removal(removal, dict(zip(entry.call_ids, entry.tool_names,
                                                     strict=True)), level=logging.DEBUG)
        if recording and heal_ledger is not None:
            await heal_ledger.finish_run(plan.run_id, time.time())
        if plan.scan.incremental is not None and heal_ledger is not None:
            await heal_ledger.save_watermark(plan.scan.incremental, time.time())
    except BaseException:
        # A run that failed before it wrote a row leaves no trace (no partial write);
        # one that wrote some keeps its record, unfinished, so `--undo` can take them back.
        if recording and heal_ledger is not None and not written_by_reason and not taking_back:
            with contextlib.suppress(Exception):  # the first error is the one to report
                await heal_ledger.forget_run(plan.run_id)
        raise
    finally:
        if heal_ledger is not None:
            await heal_ledger.close()
        report_repair_run(str(plan.url), written_by_reason, outcomes)
    return RepairReport(plan.scan, entries, dry_run=False, ledger=ledger, removals=taken_back,
                        run_id=plan.run_id if recording else None)
