"""What a repair wrote, as plain data with a stable JSON form: :class:`RepairReport`.

The ``repair`` document is the ``scan`` one (:mod:`~adk_session_heal.ops.scan_report`,
whose docstring says how documents are versioned) with ``"command": "repair"``.
``repair`` adds ``"dry_run"``, ``"ledger"`` (recorded or not), ``"healed"``
(rows written by this run), ``"already_present"``, ``"skipped"`` (the
session changed or was deleted between plan and write), ``"deleted"`` (those of
the skipped whose session was deleted: ``"outcome": "session_deleted"``) and ``"heals"``: one entry
per synthetic event, ``{"app_name", "user_id", "session_id", "call_event_id",
"synthetic_event_id", "invocation_id", "call_ids", "tool_names", "reason",
"written", "outcome", "event_data"}``, where ``event_data`` is exactly the stored JSON
(``written`` is ``null`` in a dry run); ``"taken_back"`` (superseded heals this
run removed) and ``"removals"``: one entry per superseded heal, its SUPERSEDED
object plus ``"outcome"`` (``removed``, ``absent``, ``kept``; ``null`` in a
dry run); ``"run_id"``: the run's id in the ledger (``null`` when nothing was
recorded: a dry run, ``--no-ledger``, or nothing to write), what
``repair --undo`` takes. (``repair --undo``'s own document is
:meth:`~adk_session_heal.ops.undo.UndoReport.to_json`.)
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ..core.adk_compat import readable_event_data
from ..core.heal_record import HealRecord
from ..core.healing import Heal
from ..store.base import RemoveOutcome, WriteOutcome, WriteResult
from .ledger_documents import record_json
from .scan_report import ScanReport, SupersededEntry
from .text_output import counted

if TYPE_CHECKING:  # imported where an Event is built: a report holds stored JSON
    from google.adk.events.event import Event


@dataclass(frozen=True, slots=True)
class HealEntry:
    """One synthetic event a repair wrote (or would write, or skipped).

    Attributes:
        record: The heal's record (what the ledger stores).
        event_data: The synthetic event's JSON object, exactly as stored.
        written: Whether this run inserted it (``False``: already present or
            skipped); ``None`` in a dry run.
        outcome: What the writer did (``None`` in a dry run).
    """

    record: HealRecord
    event_data: dict[str, Any]
    written: bool | None
    outcome: WriteOutcome | None = None

    @property
    def event(self) -> Event:
        """The synthetic event as an ``Event`` of the installed ADK (built on each call)."""
        from google.adk.events.event import Event

        return Event.model_validate(readable_event_data(self.event_data))

    @classmethod
    def of(cls, result: WriteResult) -> HealEntry:
        """Returns the entry of one write result."""
        heal = result.heal
        return cls(heal.record, heal.data, result.written, result.outcome)

    def to_json(self) -> dict[str, Any]:
        """Returns the entry's JSON object, with the event as stored."""
        return {
            **record_json(self.record, with_trigger=False),
            "written": self.written,
            "outcome": self.outcome.value if self.outcome is not None else None,
            "event_data": self.event_data,
        }


@dataclass
class RepairReport:
    """What a repair found and wrote.

    Attributes:
        scan: The scan the repair planned from.
        heals: One entry per synthetic event, in scan order.
        dry_run: Nothing was written.
        ledger: The heals written were recorded in the ledger.
        removals: Each superseded heal of the scan and what the remover did
            with it (``None`` in a dry run).
        run_id: The run's id in the ledger (``None``: not recorded), what
            ``repair --undo`` takes.
    """

    scan: ScanReport
    heals: list[HealEntry]
    dry_run: bool
    ledger: bool
    removals: list[tuple[SupersededEntry, RemoveOutcome | None]] = field(default_factory=list)
    run_id: str | None = None

    @property
    def taken_back(self) -> int:
        """How many superseded heals this run took back out of storage."""
        return sum(1 for _, outcome in self.removals if outcome is RemoveOutcome.REMOVED)

    @property
    def kept_back(self) -> int:
        """How many superseded heals the remover kept: changed since written, or not ours."""
        return sum(1 for _, outcome in self.removals if outcome is RemoveOutcome.KEPT)

    @property
    def healed(self) -> int:
        """How many synthetic events this run wrote."""
        return sum(1 for h in self.heals if h.written)

    @property
    def already_present(self) -> int:
        """How many planned events were already stored (written by another healer)."""
        return sum(1 for h in self.heals if h.outcome is WriteOutcome.PRESENT)

    @property
    def skipped(self) -> int:
        """How many planned events were skipped: their session changed or was deleted."""
        return sum(
            1 for h in self.heals if h.outcome in (WriteOutcome.CHANGED, WriteOutcome.GONE)
        )

    @property
    def deleted(self) -> int:
        """How many of the skipped events were skipped because their session was deleted."""
        return sum(1 for h in self.heals if h.outcome is WriteOutcome.GONE)

    @classmethod
    def dry(cls, scan: ScanReport, heals: Sequence[Heal]) -> RepairReport:
        """Returns the report of a dry run: every planned heal, nothing written."""
        return cls(scan, [HealEntry(h.record, h.data, None) for h in heals],
                   dry_run=True, ledger=False,
                   removals=[(entry, None) for entry in scan.superseded_heals])

    def __repr__(self) -> str:
        """A short form: a report may hold hundreds of thousands of events."""
        return (f"RepairReport(healed={self.healed}, already_present={self.already_present}, "
                f"skipped={self.skipped}, planned={len(self.heals)}, "
                f"taken_back={self.taken_back}, dry_run={self.dry_run}, scan={self.scan!r})")

    def records(self) -> Iterator[dict[str, Any]]:
        """Yields the scan's records, then one ``heal`` record per synthetic event."""
        yield from self.scan.records()
        for heal in self.heals:
            yield {"kind": "heal", **heal.to_json()}
        for entry, outcome in self.removals:
            yield {"kind": "removal", **entry.to_json(),
                   "outcome": outcome.value if outcome is not None else None}

    def summary_json(self) -> dict[str, Any]:
        """Returns the JSON document without its lists (the ``jsonl`` summary line)."""
        return {key: value for key, value in self.to_json().items()
                if not isinstance(value, list)}

    def summary_line(self) -> str:
        """Returns the one line saying what was (or would be) written."""
        back = len(self.removals)
        if self.dry_run:
            taking = f"; superseded heals that would be taken back: {back}" if back else ""
            return (f"Dry run: synthetic events that would be written: {len(self.heals)}"
                    f"{taking}; nothing was written.")
        ledger = "recorded in the heal ledger" if self.ledger else "not recorded (--no-ledger)"
        changed = self.skipped - self.deleted
        why = ("changed" if not self.deleted else "was deleted" if not changed
               else f"changed ({changed}) or was deleted ({self.deleted})")
        skipped = (f", {self.skipped} skipped: their session {why} since the scan"
                   if self.skipped else "")
        if self.scan.damaged_sessions:
            skipped += (f"; {counted(self.scan.damaged_sessions, 'session')} with damaged rows "
                        "skipped whole")
        taken = (f"; superseded heals taken back: {self.taken_back} of {back}"
                 if back else "")
        if self.kept_back:
            taken += f" ({self.kept_back} kept: changed since written, or not ours)"
        return (f"Synthetic events written: {self.healed} "
                f"({self.already_present} already present{skipped}){taken}; {ledger}.")

    def to_json(self) -> dict[str, Any]:
        """Returns the repair's JSON document (see the module docstring)."""
        document = self.scan.to_json()
        document.update(
            command="repair",
            dry_run=self.dry_run,
            ledger=self.ledger,
            run_id=self.run_id,
            healed=self.healed,
            already_present=self.already_present,
            skipped=self.skipped,
            deleted=self.deleted,
            heals=[h.to_json() for h in self.heals],
            taken_back=self.taken_back,
            removals=[{**entry.to_json(),
                       "outcome": outcome.value if outcome is not None else None}
                      for entry, outcome in self.removals],
        )
        return document
