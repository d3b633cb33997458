"""What a scan found and what a repair wrote, as plain data with a stable JSON form.

The JSON documents (``scan --json``, ``repair --json``, ``history --json``)
carry ``"format": 1``; fields are only ever added under that number.

``scan``::

    {"format": 1, "command": "scan", "url": "<redacted>", "layout": "database",
     "scanned_at": 1700000000.0, "stale_after_seconds": 86400.0,
     "sessions_scanned": 2, "events_scanned": 9, "sessions_needing_healing": 1,
     "needs_healing": true,
     "dead_calls": [CALL, ...], "pending_calls": [CALL, ...],
     "id_less_calls": [CALL, ...], "orphaned_responses": [RESPONSE, ...],
     "damaged_sessions": 1, "damaged_rows": [DAMAGED, ...]}

    CALL = {"app_name", "user_id", "session_id", "call_event_id", "call_id",
            "tool_name", "invocation_id", "timestamp", "age_seconds",
            "status", "pending_reason"}
    RESPONSE = {"app_name", "user_id", "session_id", "event_id", "call_id",
                "tool_name"}
    DAMAGED = {"app_name", "user_id", "session_id", "event_id", "problem"}

``damaged_rows`` lists every stored event that could not be read (not JSON,
truncated, not an object, NULL columns, a field of the wrong JSON type);
``event_id`` is ``null`` when even the id is unknown (a whole Redis value),
``problem`` one short line that never quotes the row. A session holding one is
skipped whole: none of its calls is reported, counted or healed
(``damaged_sessions`` counts them), since the unreadable row may hold the
response to a call that looks dead. ``events_scanned`` counts damaged rows too.

``repair`` adds ``"dry_run"``, ``"ledger"`` (recorded or not), ``"healed"``
(rows written by this run), ``"already_present"``, ``"skipped"`` (the
session changed or was deleted between plan and write) and ``"heals"``: one entry
per synthetic event, ``{"app_name", "user_id", "session_id", "call_event_id",
"synthetic_event_id", "invocation_id", "call_ids", "tool_names", "reason",
"written", "outcome", "event_data"}``, where ``event_data`` is exactly the stored JSON
(``written`` is ``null`` in a dry run).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from google.adk.events.event import Event

from .adk_compat import readable_event_data
from .findings import CallFinding, CallStatus, SessionFindings
from .heal_record import HealRecord
from .healing import Heal
from .session_key import SessionKey
from .store.base import DamagedRow, WriteOutcome, WriteResult

__all__ = [
    "JSON_FORMAT",
    "CallEntry",
    "DamagedEntry",
    "HealEntry",
    "RepairReport",
    "ResponseEntry",
    "ScanReport",
    "history_json",
    "record_json",
]

JSON_FORMAT = 1
"""Version of the JSON documents; bumped only for incompatible changes."""


@dataclass(frozen=True, slots=True)
class CallEntry:
    """One reported call occurrence, located in its session."""

    app_name: str
    user_id: str
    session_id: str
    call_event_id: str
    call_id: str | None
    tool_name: str
    invocation_id: str
    timestamp: float
    status: str
    pending_reason: str | None

    @classmethod
    def of(cls, key: SessionKey, finding: CallFinding) -> CallEntry:
        """Builds the entry of one call finding in session ``key``."""
        return cls(
            key.app_name, key.user_id, key.session_id,
            call_event_id=finding.event_id,
            call_id=finding.call_id,
            tool_name=finding.name,
            invocation_id=finding.invocation_id,
            timestamp=finding.timestamp,
            status=finding.status.value,
            pending_reason=finding.pending_reason.value if finding.pending_reason else None,
        )

    def to_json(self, now: float) -> dict[str, Any]:
        """Returns the entry's JSON object (``age_seconds`` relative to ``now``)."""
        return {
            "app_name": self.app_name,
            "user_id": self.user_id,
            "session_id": self.session_id,
            "call_event_id": self.call_event_id,
            "call_id": self.call_id,
            "tool_name": self.tool_name,
            "invocation_id": self.invocation_id,
            "timestamp": self.timestamp,
            "age_seconds": round(now - self.timestamp, 3),
            "status": self.status,
            "pending_reason": self.pending_reason,
        }


@dataclass(frozen=True, slots=True)
class ResponseEntry:
    """One orphaned response, located in its session."""

    app_name: str
    user_id: str
    session_id: str
    event_id: str
    call_id: str | None
    tool_name: str

    def to_json(self) -> dict[str, Any]:
        """Returns the entry's JSON object."""
        return {
            "app_name": self.app_name,
            "user_id": self.user_id,
            "session_id": self.session_id,
            "event_id": self.event_id,
            "call_id": self.call_id,
            "tool_name": self.tool_name,
        }


@dataclass(frozen=True, slots=True)
class DamagedEntry:
    """One stored event that could not be read; its whole session was skipped."""

    app_name: str
    user_id: str
    session_id: str
    event_id: str | None
    problem: str

    def to_json(self) -> dict[str, Any]:
        """Returns the entry's JSON object (its fields, in order)."""
        return asdict(self)


@dataclass
class ScanReport:
    """Everything a scan found, over all scanned sessions.

    Attributes:
        url: The scanned store (redacted URL, or a service's class name).
        layout: The store's layout (``database``, ``adk_sqlite`` or ``service``).
        scanned_at: The scan's clock (POSIX seconds).
        stale_after: Age after which a call of the newest invocation is stale.
        sessions_scanned: Sessions matching the filters (with or without events).
        events_scanned: Events read.
        sessions_needing_healing: Sessions with at least one dead call.
        dead_calls: Superseded and stale calls (what repair heals).
        pending_calls: Long-running calls and calls awaiting a confirmation, a
            credential or the client (never healed).
        id_less_calls: Calls without an id (never healed).
        orphaned_responses: Responses with no call (never healed).
        damaged_sessions: Sessions skipped whole because a row could not be read.
        damaged_rows: Every unreadable row of those sessions.
    """

    url: str
    layout: str
    scanned_at: float
    stale_after: float | None
    sessions_scanned: int = 0
    events_scanned: int = 0
    sessions_needing_healing: int = 0
    dead_calls: list[CallEntry] = field(default_factory=list)
    pending_calls: list[CallEntry] = field(default_factory=list)
    id_less_calls: list[CallEntry] = field(default_factory=list)
    orphaned_responses: list[ResponseEntry] = field(default_factory=list)
    damaged_sessions: int = 0
    damaged_rows: list[DamagedEntry] = field(default_factory=list)

    @property
    def needs_healing(self) -> bool:
        """Whether any call would be healed."""
        return bool(self.dead_calls)

    def add(self, key: SessionKey, events: int, findings: SessionFindings) -> None:
        """Adds one session's findings.

        The findings' calls are built before anything is counted, so a
        malformed row that makes building them raise leaves the report as it was.
        """
        calls = findings.calls
        self.events_scanned += events
        dead = False
        for finding in calls:
            status = finding.status
            if status in (CallStatus.SUPERSEDED, CallStatus.STALE):
                self.dead_calls.append(CallEntry.of(key, finding))
                dead = True
            elif status is CallStatus.PENDING:
                self.pending_calls.append(CallEntry.of(key, finding))
            elif status is CallStatus.ID_LESS:
                self.id_less_calls.append(CallEntry.of(key, finding))
        for orphan in findings.orphaned_responses:
            self.orphaned_responses.append(
                ResponseEntry(key.app_name, key.user_id, key.session_id, orphan.event_id,
                              orphan.call_id, orphan.name)
            )
        if dead:
            self.sessions_needing_healing += 1

    def add_damaged(self, key: SessionKey, events: int, damaged: Sequence[DamagedRow]) -> None:
        """Adds a session skipped whole for its unreadable rows.

        Args:
            key: The session.
            events: All its rows, readable or not.
            damaged: The unreadable ones.
        """
        self.events_scanned += events
        self.damaged_sessions += 1
        self.damaged_rows.extend(
            DamagedEntry(key.app_name, key.user_id, key.session_id, row.event_id, row.problem)
            for row in damaged)

    def to_json(self) -> dict[str, Any]:
        """Returns the scan's JSON document (see the module docstring)."""
        now = self.scanned_at
        return {
            "format": JSON_FORMAT,
            "command": "scan",
            "url": self.url,
            "layout": self.layout,
            "scanned_at": now,
            "stale_after_seconds": self.stale_after,
            "sessions_scanned": self.sessions_scanned,
            "events_scanned": self.events_scanned,
            "sessions_needing_healing": self.sessions_needing_healing,
            "needs_healing": self.needs_healing,
            "dead_calls": [c.to_json(now) for c in self.dead_calls],
            "pending_calls": [c.to_json(now) for c in self.pending_calls],
            "id_less_calls": [c.to_json(now) for c in self.id_less_calls],
            "orphaned_responses": [r.to_json() for r in self.orphaned_responses],
            "damaged_sessions": self.damaged_sessions,
            "damaged_rows": [d.to_json() for d in self.damaged_rows],
        }


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
    """

    scan: ScanReport
    heals: list[HealEntry]
    dry_run: bool
    ledger: bool

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

    @classmethod
    def dry(cls, scan: ScanReport, heals: Sequence[Heal]) -> RepairReport:
        """Returns the report of a dry run: every planned heal, nothing written."""
        return cls(scan, [HealEntry(h.record, h.data, None) for h in heals],
                   dry_run=True, ledger=False)

    def __repr__(self) -> str:
        """A short form: a report may hold hundreds of thousands of events."""
        return (f"RepairReport(healed={self.healed}, already_present={self.already_present}, "
                f"skipped={self.skipped}, planned={len(self.heals)}, dry_run={self.dry_run})")

    def to_json(self) -> dict[str, Any]:
        """Returns the repair's JSON document (see the module docstring)."""
        document = self.scan.to_json()
        document.update(
            command="repair",
            dry_run=self.dry_run,
            ledger=self.ledger,
            healed=self.healed,
            already_present=self.already_present,
            skipped=self.skipped,
            heals=[h.to_json() for h in self.heals],
        )
        return document


def record_json(record: HealRecord, *, with_trigger: bool = True) -> dict[str, Any]:
    """Returns a heal record as a JSON object."""
    document: dict[str, Any] = {
        "app_name": record.app_name,
        "user_id": record.user_id,
        "session_id": record.session_id,
        "call_event_id": record.call_event_id,
        "synthetic_event_id": record.synthetic_event_id,
        "invocation_id": record.invocation_id,
        "call_ids": list(record.call_ids),
        "tool_names": list(record.tool_names),
        "reason": record.reason,
    }
    if with_trigger:
        document["trigger"] = record.trigger.value
        document["healed_at"] = record.healed_at
    return document


def history_json(url: str, records: list[HealRecord]) -> dict[str, Any]:
    """Returns the ``history --json`` document."""
    return {
        "format": JSON_FORMAT,
        "command": "history",
        "url": url,
        "heals": [record_json(r) for r in records],
    }
