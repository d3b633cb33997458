"""``repair --undo RUN_ID``: take back exactly the heals one repair run wrote.

:func:`plan_undo` (pure) turns the run's heal-ledger rows into
:class:`~adk_session_heal.store.base.Removal` objects, each carrying the digest
(:func:`~adk_session_heal.core.healing.event_digest`) of the row the run stored, and
leaves out the heals an earlier undo of that run already took out.
:func:`undo` reads the ledger, records the undo as a run of its own, and
applies the removals in batches through the layout's one remover
(:meth:`~adk_session_heal.store.SessionStore.remove`), each removal's ledger
row (reason ``undo``, naming the undone run) in the removal's transaction. The
remover takes a row out only while it is still, byte for byte as JSON, what
the run stored; any other row (changed since, or not ours) is kept and
reported. So:

* an undo killed midway (SIGKILL included) is finished by running it again,
  which takes out only what is left;
* a second undo of the same run writes nothing;
* the calls are dead again, and a later ``repair`` heals them again, as a new
  run (the heal ledger is unique per heal and run).
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..core.heal_record import HealRecord
from ..core.session_key import SessionKey
from ..errors import LedgerError
from ..store import SessionStore, open_store
from ..store.base import Removal, RemovalReason, RemoveOutcome
from ..store.engines import TimeoutArg
from ..store.ledger.repair_runs import RepairRun, RunKind, new_run_id, this_host
from ..store.ledger.revisions import Feature
from ..store.urls import StoreUrl
from .json_version import JSON_FORMAT
from .text_output import counted

UNDO_COLUMNS = ("kind", "app_name", "user_id", "session_id", "call_event_id",
                "synthetic_event_id", "call_ids", "outcome")
"""``repair --undo --format tsv`` columns."""


def plan_undo(
    heals: Iterable[tuple[HealRecord, str | None]],
    undone: Iterable[tuple[SessionKey, str]],
    *,
    undoes: str,
    run_id: str,
    at: float,
    by: str,
) -> list[Removal]:
    """Plans the removal of each heal a run wrote that no undo has taken out yet.

    Args:
        heals: The run's heal-ledger rows, each with the digest of the row it
            stored (``None``: not known, so the row is never taken out).
        undone: The heals of that run undo runs already took out: (session,
            synthetic event id).
        undoes: The undone run's id.
        run_id: The undo run's id.
        at: When (POSIX seconds).
        by: Who.

    Returns:
        One removal per heal to take out, in the order given.
    """
    done = set(undone)
    return [
        Removal(record.key, record.synthetic_event_id, record.call_event_id, record.call_ids,
                RemovalReason.UNDO, at, by, (undoes,), digest=digest or "", run_id=run_id)
        for record, digest in heals
        if (record.key, record.synthetic_event_id) not in done
    ]


@dataclass
class UndoReport:
    """What ``repair --undo`` did (or, in a dry run, would do).

    Attributes:
        url: The store (redacted).
        run: The undone run, as the ledger had it before this undo.
        undo_run_id: This undo's run id (``None``: nothing was recorded).
        dry_run: Nothing was written.
        removals: The heals to take out, each with what the remover did
            (``None`` in a dry run).
        already_undone: The run's heals an earlier undo took out.
    """

    url: str
    run: RepairRun
    undo_run_id: str | None
    dry_run: bool
    removals: list[tuple[Removal, RemoveOutcome | None]] = field(default_factory=list)
    already_undone: int = 0

    def count(self, outcome: RemoveOutcome) -> int:
        """How many removals ended so."""
        return sum(1 for _, o in self.removals if o is outcome)

    def records(self) -> Iterator[dict[str, Any]]:
        """One ``undo`` record per heal to take out (the tsv/jsonl rows)."""
        for removal, outcome in self.removals:
            yield {"kind": "undo", "app_name": removal.key.app_name,
                   "user_id": removal.key.user_id, "session_id": removal.key.session_id,
                   "call_event_id": removal.call_event_id,
                   "synthetic_event_id": removal.event_id, "call_ids": list(removal.call_ids),
                   "outcome": None if outcome is None else outcome.value}

    def summary_line(self) -> str:
        """The one-line summary."""
        run = self.run.run_id
        if self.dry_run:
            return (f"Dry run: heals of run {run} that would be taken out: "
                    f"{len(self.removals)} ({self.already_undone} already undone); "
                    "nothing was written.")
        if not self.removals:
            return (f"Run {run} is already undone ({counted(self.already_undone, 'heal')} "
                    "taken out before); nothing was written.")
        kept = self.count(RemoveOutcome.KEPT)
        return (f"Undid run {run}: heals taken out: {self.count(RemoveOutcome.REMOVED)}, "
                f"kept (changed since the run, or not ours): {kept}, already gone: "
                f"{self.count(RemoveOutcome.ABSENT)}; recorded as run {self.undo_run_id}.")

    def to_json(self) -> dict[str, Any]:
        """The ``repair --undo --json`` document."""
        return {"version": JSON_FORMAT, "format": JSON_FORMAT, "command": "repair --undo",
                "url": self.url, "run_id": self.run.run_id, "undo_run_id": self.undo_run_id,
                "dry_run": self.dry_run, "removed": self.count(RemoveOutcome.REMOVED),
                "kept": self.count(RemoveOutcome.KEPT),
                "absent": self.count(RemoveOutcome.ABSENT),
                "already_undone": self.already_undone,
                "removals": [{k: v for k, v in r.items() if k != "kind"}
                             for r in self.records()]}

    def summary_json(self) -> dict[str, Any]:
        """The document without its list (the jsonl summary line)."""
        return {k: v for k, v in self.to_json().items() if not isinstance(v, list)}


async def undo(
    url: str | StoreUrl,
    run_id: str,
    *,
    dry_run: bool = False,
    batch_size: int = 500,
    by: str | None = None,
    now: float | None = None,
    timeout: TimeoutArg = None,
) -> UndoReport:
    """Takes back the heals one repair run wrote (see the module docstring).

    Args:
        url: The store.
        run_id: The repair run (``history --runs`` lists them).
        dry_run: Report what would be taken out; write nothing.
        batch_size: Removals per transaction.
        by: Who undoes (default: ``user@host``).
        now: The clock (default: now).
        timeout: How long to wait for a database server.

    Returns:
        The report.

    Raises:
        LedgerError: The ledger is below revision ``0004``, or has no repair
            run of that id.
        StoreError: The store cannot be used.
    """
    from .operator_review import default_reviewer

    clock = time.time() if now is None else now
    store = await open_store(url, writable=not dry_run, timeout=timeout, needs=(Feature.RUNS,))
    try:
        ledger = store.heal_ledger(timeout)
        try:
            found = await ledger.runs(run_id=run_id)
            if not found:
                raise LedgerError(f"no run {run_id!r} in the ledger of {store}: "
                                  f"`adk-session-heal history {store} --runs` lists them")
            (run,) = found
            if run.kind is not RunKind.REPAIR:
                raise LedgerError(f"run {run_id!r} is an undo (of run {run.undoes}): "
                                  "only repair runs can be undone")
            heals = await ledger.run_heals(run_id)
            undo_id = new_run_id()
            removals = plan_undo(heals, await ledger.undone_heals(run_id), undoes=run_id,
                                 run_id=undo_id, at=clock, by=by or default_reviewer())
            already = len(heals) - len(removals)
            if dry_run or not removals:
                return UndoReport(str(store), run, None, dry_run,
                                  [(r, None) for r in removals], already)
            await ledger.start_run(RepairRun(undo_id, RunKind.UNDO, this_host(), clock,
                                             undoes=run_id))
            outcomes = await _remove(store, removals, max(1, batch_size))
            await ledger.finish_run(undo_id, time.time(),
                                    kept=outcomes.count(RemoveOutcome.KEPT))
        finally:
            await ledger.close()
    finally:
        await store.close()
    return UndoReport(str(store), run, undo_id, False,
                      list(zip(removals, outcomes, strict=True)), already)


async def _remove(
    store: SessionStore, removals: Sequence[Removal], batch_size: int
) -> list[RemoveOutcome]:
    """Applies the removals through the store's remover, one transaction per batch."""
    outcomes: list[RemoveOutcome] = []
    for start in range(0, len(removals), batch_size):
        outcomes.extend(await store.remove(removals[start:start + batch_size], ledger=True))
    return outcomes
