"""Repair runs: each ``repair`` and ``repair --undo`` run, as the ledger keeps it.

A run has an id (:func:`new_run_id`), a kind, the host it ran on and when it
started and finished. Its heal rows and removal rows carry its id and commit
with the rows they record, so what a run wrote, took out and had undone is
counted from them (:func:`with_counts`), never from a total written at the end
that a killed run would not have written. Pure: no I/O.
"""

from __future__ import annotations

import enum
import json
import socket
import uuid
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from typing import Any


class RunKind(str, enum.Enum):
    """What a run did."""

    REPAIR = "repair"
    """Wrote heals (and took back superseded ones)."""
    UNDO = "undo"
    """Took back the heals of an earlier repair run."""


def new_run_id() -> str:
    """Returns a new run id: 32 hex digits (a random UUID)."""
    return uuid.uuid4().hex


def this_host() -> str:
    """The host name recorded with a run."""
    return socket.gethostname()[:256]


@dataclass(frozen=True, slots=True)
class RepairRun:
    """One run, and what its ledger rows say it did.

    Attributes:
        run_id: The run's id.
        kind: Repair or undo.
        host: Where it ran.
        started_at: When it started (POSIX seconds).
        finished_at: When it ended; ``None`` while running, or if it was killed.
        undoes: For an undo: the repair run it takes back.
        kept: For a finished undo: the rows it left in place (changed since).
        written: Heal rows the run wrote (still recorded).
        removed: Heal rows the run took out (superseded ones, or, for an undo,
            the undone run's).
        undone: For a repair run: its heals taken back by undo runs.
    """

    run_id: str
    kind: RunKind
    host: str
    started_at: float
    finished_at: float | None = None
    undoes: str | None = None
    kept: int | None = None
    written: int = 0
    removed: int = 0
    undone: int = 0

    def to_json(self) -> dict[str, Any]:
        """The run as a ``history --runs`` record's fields (after ``kind``)."""
        return {"run_id": self.run_id, "run_kind": self.kind.value, "undoes": self.undoes,
                "host": self.host, "started_at": self.started_at,
                "finished_at": self.finished_at, "heals_written": self.written,
                "heals_removed": self.removed, "heals_undone": self.undone,
                "heals_kept": self.kept}


def run_row(run: RepairRun) -> dict[str, Any]:
    """Returns the runs-table row of a run (the counts are not stored: see the module)."""
    return {"run_id": run.run_id, "kind": run.kind.value, "undoes": run.undoes,
            "host": run.host, "started_at": run.started_at, "finished_at": run.finished_at,
            "kept": run.kept}


def run_from_row(row: Any) -> RepairRun:
    """Returns the run a runs-table row (or a Redis JSON object of it) holds, uncounted."""
    finished = row.finished_at
    return RepairRun(
        run_id=row.run_id, kind=RunKind(row.kind), host=row.host,
        started_at=float(row.started_at),
        finished_at=None if finished is None else float(finished),
        undoes=row.undoes or None, kept=None if row.kept is None else int(row.kept),
    )


def undone_run(reason: str, detail: str) -> str | None:
    """The run an undo's removal row names (``None``: not an undo's row).

    Args:
        reason: The removal row's reason.
        detail: Its ``detail`` column (a JSON list: the undone run's id).
    """
    if reason != "undo":
        return None
    ids = json.loads(detail)
    return str(ids[0]) if ids else None


def with_counts(
    runs: Iterable[RepairRun],
    written: Mapping[str, int],
    removed: Mapping[str, int],
    undone: Mapping[str, int],
) -> list[RepairRun]:
    """Returns the runs, oldest first, each with its counts.

    Args:
        runs: The runs, uncounted.
        written: Heal rows per run id.
        removed: Removal rows per run id (the run that took them out).
        undone: Undo removal rows per undone run id.
    """
    return sorted(
        (replace(run, written=written.get(run.run_id, 0), removed=removed.get(run.run_id, 0),
                 undone=undone.get(run.run_id, 0)) for run in runs),
        key=lambda run: (run.started_at, run.run_id))


def count_ids(ids: Iterable[str | None]) -> Counter[str]:
    """Counts the run ids given, skipping ``None``."""
    return Counter(i for i in ids if i)
