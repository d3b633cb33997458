"""What a scan found, as plain data with a stable JSON form: :class:`ScanReport` and its entries.

The JSON documents (``scan --json``, ``repair --json``, ``history --json``,
``db ... --json``) carry ``"version": 1`` (and, as before, the same number as
``"format"``); fields are only ever added under that number. The ``scan``
document is below; ``repair`` adds its own keys to it
(:mod:`~adk_session_heal.ops.repair_report`), the ``history`` documents are in
:mod:`~adk_session_heal.ops.ledger_documents`, and the line formats
(``--format jsonl`` and ``--format tsv``, their columns) in
:mod:`~adk_session_heal.ops.text_output`.

``scan``::

    {"version": 1, "format": 1, "command": "scan", "url": "<redacted>",
     "layout": "database", "scanned_at": 1700000000.0, "stale_after_seconds": 86400.0,
     "clock_skew_seconds": 300.0,
     "sessions_scanned": 2, "events_scanned": 9, "sessions_needing_healing": 1,
     "needs_healing": true,
     "counts": {"dead_calls": 1, "in_flight_calls": 0, "pending_calls": 0,
                "id_less_calls": 0, "orphaned_responses": 0, "damaged_rows": 1,
                "superseded_heals": 0, "unhealable_calls": 0},
     "dead_calls": [CALL, ...], "in_flight_calls": [CALL, ...], "pending_calls": [CALL, ...],
     "id_less_calls": [CALL, ...], "orphaned_responses": [RESPONSE, ...],
     "damaged_sessions": 1, "damaged_rows": [DAMAGED, ...],
     "superseded_heals": [SUPERSEDED, ...], "unhealable_calls": [CALL, ...]}

    CALL = {"app_name", "user_id", "session_id", "call_event_id", "call_id",
            "tool_name", "invocation_id", "timestamp", "age_seconds",
            "status", "pending_reason", "why", "run_outcome", "lease_holder"}
    RESPONSE = {"app_name", "user_id", "session_id", "event_id", "call_id",
                "tool_name"}
    DAMAGED = {"app_name", "user_id", "session_id", "event_id", "problem"}
    SUPERSEDED = {"app_name", "user_id", "session_id", "synthetic_event_id",
                  "call_event_id", "call_ids", "tool_names", "response_event_ids"}

``superseded_heals`` are heals of ours whose every call got its real response
after all (``response_event_ids``; see :mod:`~adk_session_heal.core.late_results`):
``repair`` takes them back out of storage.

``status`` is ``superseded``, ``stale`` or ``abandoned`` (dead calls), ``in_flight``,
``pending`` (``pending_reason``: ``long_running``,
``awaiting_confirmation_or_credential``, ``client_call``), ``id_less``, or
``malformed`` or ``out_of_turn`` (``unhealable_calls``: unanswered calls a heal
would make worse for some ADK's request, see :mod:`~adk_session_heal.core.unhealable`);
``why`` is one line saying why the call is or is not healed (for in-flight
calls, the age at which it would be: pick ``--older-than`` from it).
``run_outcome`` and ``lease_holder`` come from the tool-run ledger, when the
store has one: what its record says of the call's run (``unknown`` without a
record) and, for a call kept in flight by a live lease, its ``host/pid``.
``dead_calls``, ``in_flight_calls`` and ``unhealable_calls`` together are every
unanswered call of a session's newest invocation or of an invocation
superseded since.

A scan that read only what changed adds ``"since"`` (the earliest
``update_time`` read, as a naive ``YYYY-MM-DD HH:MM:SS.ffffff`` in the column's
terms) and, when incremental, ``"incremental"``: ``{"scope", "previous",
"watermark", "unsettled_sessions"}`` (``previous`` ``null`` on a scope's first
run, which reads everything; see :mod:`~adk_session_heal.store.incremental`).
``sessions_scanned`` and ``events_scanned`` then count what was read.

``damaged_rows`` lists every stored event that could not be read (not JSON,
truncated, not an object, NULL columns, a field of the wrong JSON type);
``event_id`` is ``null`` when even the id is unknown (a whole Redis value),
``problem`` one short line that never quotes the row. A session holding one is
skipped whole: none of its calls is reported, counted or healed
(``damaged_sessions`` counts them), since the unreadable row may hold the
response to a call that looks dead. ``events_scanned`` counts damaged rows too.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from ..core.findings import HEALABLE, CallFinding, CallStatus, SessionFindings
from ..core.late_results import LateResult
from ..core.session_key import SessionKey
from ..store.base import DamagedRow
from ..store.incremental import Watermark, column_text
from .json_version import JSON_FORMAT
from .text_output import call_why, counted

_UNHEALABLE = frozenset({CallStatus.MALFORMED, CallStatus.OUT_OF_TURN})
"""Statuses listed in :attr:`ScanReport.unhealable_calls`."""


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
    run_outcome: str = "unknown"
    lease_holder: str | None = None

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
            run_outcome=finding.outcome.value,
            lease_holder=finding.lease_holder,
        )

    def to_json(self, now: float, dead_after: float | None = None) -> dict[str, Any]:
        """Returns the entry's JSON object.

        Args:
            now: The scan's clock (``age_seconds`` is relative to it).
            dead_after: The age after which a call of a newest invocation is
                stale (``--older-than`` plus ``--clock-skew``; ``None``: never),
                quoted in ``why``.
        """
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
            "why": call_why(self.status, self.pending_reason, dead_after, self.run_outcome,
                            self.lease_holder),
            "run_outcome": self.run_outcome,
            "lease_holder": self.lease_holder,
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


@dataclass(frozen=True, slots=True)
class SupersededEntry:
    """One heal of ours a late result superseded (repair takes it back out)."""

    app_name: str
    user_id: str
    session_id: str
    synthetic_event_id: str
    call_event_id: str
    call_ids: tuple[str, ...]
    tool_names: tuple[str, ...]
    response_event_ids: tuple[str, ...]

    @classmethod
    def of(cls, key: SessionKey, late: LateResult) -> SupersededEntry:
        """Returns the entry of one late result found in a session."""
        return cls(key.app_name, key.user_id, key.session_id, late.heal_event_id,
                   late.call_event_id, late.call_ids, late.tool_names, late.response_event_ids)

    @property
    def key(self) -> SessionKey:
        """The session."""
        return SessionKey(self.app_name, self.user_id, self.session_id)

    def to_json(self) -> dict[str, Any]:
        """Returns the entry's JSON object (its fields, in order; tuples as lists)."""
        return {name: list(value) if isinstance(value, tuple) else value
                for name, value in asdict(self).items()}


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
        in_flight_calls: Unanswered calls of a session's newest invocation not
            yet older than ``stale_after`` plus ``clock_skew`` (they may still
            be running; healed once older).
        pending_calls: Long-running calls and calls awaiting a confirmation, a
            credential or the client (never healed).
        id_less_calls: Calls without an id (never healed).
        orphaned_responses: Responses with no call (never healed).
        damaged_sessions: Sessions skipped whole because a row could not be read.
        damaged_rows: Every unreadable row of those sessions.
        clock_skew: Seconds added to ``stale_after`` for other hosts' clocks.
        superseded_heals: Heals of ours a late real response superseded
            (repair takes them back out).
        unhealable_calls: Unanswered calls a heal would make worse for some
            ADK's request (``malformed``, ``out_of_turn``; never healed).
        since: The earliest ``update_time`` read (column seconds, see
            :mod:`~adk_session_heal.store.incremental`); ``None``: every session.
        incremental: The incremental run's state (``None``: not incremental).
    """

    url: str
    layout: str
    scanned_at: float
    stale_after: float | None
    sessions_scanned: int = 0
    events_scanned: int = 0
    sessions_needing_healing: int = 0
    dead_calls: list[CallEntry] = field(default_factory=list)
    in_flight_calls: list[CallEntry] = field(default_factory=list)
    pending_calls: list[CallEntry] = field(default_factory=list)
    id_less_calls: list[CallEntry] = field(default_factory=list)
    orphaned_responses: list[ResponseEntry] = field(default_factory=list)
    damaged_sessions: int = 0
    damaged_rows: list[DamagedEntry] = field(default_factory=list)
    clock_skew: float = 0.0
    superseded_heals: list[SupersededEntry] = field(default_factory=list)
    since: float | None = None
    incremental: Watermark | None = None
    unhealable_calls: list[CallEntry] = field(default_factory=list)

    @property
    def needs_healing(self) -> bool:
        """Whether repair would write anything (heal a call, or take a superseded heal back)."""
        return bool(self.dead_calls or self.superseded_heals)

    @property
    def dead_after(self) -> float | None:
        """Age after which a newest invocation's call is stale (``None``: never)."""
        return None if self.stale_after is None else self.stale_after + self.clock_skew

    def unsettled_sessions(self) -> list[SessionKey]:
        """Returns the sessions this report lists, once each, in order.

        Only their findings can change without a write (an in-flight call goes
        stale as time passes); every other session scanned has every call
        answered. An incremental run reads them again (:mod:`~adk_session_heal.store.incremental`).
        """
        entries: list[Iterable[Any]] = [self.dead_calls, self.in_flight_calls,
                                        self.pending_calls, self.id_less_calls,
                                        self.orphaned_responses, self.damaged_rows,
                                        self.superseded_heals, self.unhealable_calls]
        return list(dict.fromkeys(SessionKey(e.app_name, e.user_id, e.session_id)
                                  for listed in entries for e in listed))

    def counts(self) -> dict[str, int]:
        """Returns how many entries each list holds (the ``counts`` JSON object)."""
        return {
            "dead_calls": len(self.dead_calls),
            "in_flight_calls": len(self.in_flight_calls),
            "pending_calls": len(self.pending_calls),
            "id_less_calls": len(self.id_less_calls),
            "orphaned_responses": len(self.orphaned_responses),
            "damaged_rows": len(self.damaged_rows),
            "superseded_heals": len(self.superseded_heals),
            "unhealable_calls": len(self.unhealable_calls),
        }

    def __repr__(self) -> str:
        """A short form, counts only: a report may list hundreds of thousands of calls.

        (``asyncio.run`` formats the value it returns; a full repr of a large
        store's report ran to tens of megabytes.)
        """
        counts = ", ".join(f"{name}={count}" for name, count in self.counts().items())
        return (f"ScanReport(url={self.url!r}, layout={self.layout!r}, "
                f"sessions_scanned={self.sessions_scanned}, "
                f"events_scanned={self.events_scanned}, {counts})")

    def summary_line(self) -> str:
        """Returns the one-line summary the CLI prints (counts, never ids)."""
        c = self.counts()
        return (
            f"Scanned {counted(self.sessions_scanned, 'session')} "
            f"({counted(self.events_scanned, 'event')}) in {self.url}: "
            f"{counted(c['dead_calls'], 'dead call')} in "
            f"{counted(self.sessions_needing_healing, 'session')} (repair heals them), "
            f"{c['in_flight_calls']} in flight, {c['pending_calls']} pending, "
            f"{c['id_less_calls']} without an id, "
            f"{counted(c['orphaned_responses'], 'orphaned response')}, "
            f"{counted(c['damaged_rows'], 'damaged row')} "
            f"({counted(self.damaged_sessions, 'session')} skipped whole)"
            + (f", {counted(c['superseded_heals'], 'heal')} superseded by a late result "
               "(repair takes them back)" if c["superseded_heals"] else "")
            + (f", {counted(c['unhealable_calls'], 'unanswered call')} never healed (a heal "
               "would break ADK's request)" if c["unhealable_calls"] else "")
            + self._changed_only()
        )

    def _changed_only(self) -> str:
        """The summary's note on an incremental or ``--since`` scan (``""`` for a full one)."""
        if self.incremental is not None and self.since is None:
            return "; incremental: first run of this scope, every session read"
        if self.since is None:
            return ""
        since = f"only sessions updated from {column_text(self.since)} on (as stored)"
        if self.incremental is None:
            return f"; {since}"
        return f"; incremental: {since} and those the last run left unsettled"

    def records(self) -> Iterator[dict[str, Any]]:
        """Yields one JSON object per listed entry, its list named in ``kind``.

        (See :mod:`~adk_session_heal.ops.text_output` for the line formats.)
        """
        now, dead_after = self.scanned_at, self.dead_after
        for kind, calls in (("dead_call", self.dead_calls),
                            ("in_flight_call", self.in_flight_calls),
                            ("pending_call", self.pending_calls),
                            ("id_less_call", self.id_less_calls)):
            for call in calls:
                yield {"kind": kind, **call.to_json(now, dead_after)}
        for response in self.orphaned_responses:
            yield {"kind": "orphaned_response", **response.to_json()}
        for damaged in self.damaged_rows:
            yield {"kind": "damaged_row", **damaged.to_json()}
        for superseded in self.superseded_heals:
            yield {"kind": "superseded_heal", **superseded.to_json()}
        for call in self.unhealable_calls:
            yield {"kind": "unhealable_call", **call.to_json(now, dead_after)}

    def summary_json(self) -> dict[str, Any]:
        """Returns the JSON document without its lists (the ``jsonl`` summary line)."""
        return {key: value for key, value in self.to_json().items()
                if not isinstance(value, list)}

    def add(self, key: SessionKey, events: int, findings: SessionFindings) -> None:
        """Adds one session's findings.

        The findings' calls are built before anything is counted, so a
        malformed row that makes building them raise leaves the report as it was.
        """
        if findings.all_answered:  # nothing to list: the call findings are not built
            self.events_scanned += events
            return
        calls = findings.calls
        self.events_scanned += events
        dead = False
        for finding in calls:
            status = finding.status
            if status in HEALABLE:
                self.dead_calls.append(CallEntry.of(key, finding))
                dead = True
            elif status is CallStatus.IN_FLIGHT:
                self.in_flight_calls.append(CallEntry.of(key, finding))
            elif status is CallStatus.PENDING:
                self.pending_calls.append(CallEntry.of(key, finding))
            elif status is CallStatus.ID_LESS:
                self.id_less_calls.append(CallEntry.of(key, finding))
            elif status in _UNHEALABLE:
                self.unhealable_calls.append(CallEntry.of(key, finding))
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
        now, dead_after = self.scanned_at, self.dead_after
        return {
            "version": JSON_FORMAT,
            "format": JSON_FORMAT,
            "command": "scan",
            "url": self.url,
            "layout": self.layout,
            "scanned_at": now,
            "stale_after_seconds": self.stale_after,
            "clock_skew_seconds": self.clock_skew,
            "sessions_scanned": self.sessions_scanned,
            "events_scanned": self.events_scanned,
            "sessions_needing_healing": self.sessions_needing_healing,
            "needs_healing": self.needs_healing,
            "counts": self.counts(),
            "dead_calls": [c.to_json(now, dead_after) for c in self.dead_calls],
            "in_flight_calls": [c.to_json(now, dead_after) for c in self.in_flight_calls],
            "pending_calls": [c.to_json(now, dead_after) for c in self.pending_calls],
            "id_less_calls": [c.to_json(now, dead_after) for c in self.id_less_calls],
            "orphaned_responses": [r.to_json() for r in self.orphaned_responses],
            "damaged_sessions": self.damaged_sessions,
            "damaged_rows": [d.to_json() for d in self.damaged_rows],
            "superseded_heals": [h.to_json() for h in self.superseded_heals],
            "unhealable_calls": [c.to_json(now, dead_after) for c in self.unhealable_calls],
            **({} if self.since is None else {"since": column_text(self.since)}),
            **({} if self.incremental is None else {"incremental": {
                **self.incremental.to_json(),
                "unsettled_sessions": len(self.unsettled_sessions())}}),
        }
