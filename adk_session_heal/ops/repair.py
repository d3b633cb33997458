"""Repairing a whole session database: :func:`repair`, a plan and its application.

:func:`~adk_session_heal.ops.scan.plan_repair` runs the scan's loop
(:func:`~adk_session_heal.ops.scan.scan_sessions`) planning every session's
heals with the one decision the wrapper makes
(:func:`~adk_session_heal.core.session_decision.decide`: the same
deterministic ids and the same rows) into an immutable
:class:`~adk_session_heal.ops.scan.RepairPlan`;
:func:`~adk_session_heal.ops.apply.apply_plan` writes that plan through the
store layout's one writer (the one the wrapper uses), in batched transactions
that re-check each session, skip existing keys and carry their ledger rows.
:func:`repair` calls the two, and so does the command line. That gives:

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

from collections.abc import Callable

from ..core.heal_record import HealRecord
from ..policy import DEFAULT_BATCH_SIZE
from ..store.urls import StoreUrl
from .apply import apply_plan
from .repair_report import RepairReport
from .scan import ScanOptions, ScanProgress, plan_repair


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
    """Heals every dead call in a session database: ``plan_repair`` + ``apply_plan``.

    Args:
        url: The database.
        options: What to read and how to judge it, as for
            :func:`~adk_session_heal.ops.scan.plan_repair`.
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
