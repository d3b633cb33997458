"""What a scan found and what a repair wrote, as plain data with a stable JSON form.

The JSON documents (``scan --json``, ``repair --json``, ``history --json``,
``db ... --json``) carry ``"version": 1`` (and, as before, the same number as
``"format"``); fields are only ever added under that number.

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

``history``::

    {"version": 1, "format": 1, "command": "history", "url": "<redacted>",
     "heals": [{"app_name", "user_id", "session_id", "call_event_id",
                "synthetic_event_id", "invocation_id", "call_ids", "tool_names",
                "reason", "trigger", "healed_at"}, ...]}

``history --runs``::

    {"version": 1, "format": 1, "command": "history --runs", "url": "<redacted>",
     "runs": [{"run_id", "run_kind" ("repair" or "undo"), "undoes", "host",
               "started_at", "finished_at" (null: running or killed),
               "heals_written", "heals_removed", "heals_undone", "heals_kept"}, ...]}

Line formats (``--format jsonl`` and ``--format tsv``) carry the same
objects, one per line, from one place (:meth:`ScanReport.records`,
:meth:`RepairReport.records`, :func:`history_records`): each entry of the
lists above, with ``"kind"`` naming its list in the singular (``dead_call``,
``in_flight_call``, ``pending_call``, ``id_less_call``, ``orphaned_response``,
``damaged_row``, ``superseded_heal``, ``unhealable_call``, ``heal``, ``removal``,
``run``). JSONL adds
``"version": 1`` to every line and ends with one ``"kind": "summary"`` line:
the document without its lists (for ``history``: ``version``, ``command``,
``url``, ``heals_recorded``). TSV starts
with a header line (:data:`SCAN_COLUMNS`, :data:`REPAIR_COLUMNS`,
:data:`HISTORY_COLUMNS`, :data:`RUNS_COLUMNS`: the union of the records' keys, ``kind`` first; a key
a record lacks is an empty field) and writes fields as :func:`tsv_field` says.
Columns and keys are only ever added, at the end.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

from ..core.adk_compat import readable_event_data
from ..core.findings import HEALABLE, CallFinding, CallStatus, SessionFindings
from ..core.heal_record import HealRecord
from ..core.healing import Heal
from ..core.late_results import LateResult
from ..core.session_key import SessionKey
from ..store.base import DamagedRow, RemoveOutcome, WriteOutcome, WriteResult
from ..store.incremental import Watermark, column_text
from ..store.ledger.repair_runs import RepairRun
from .json_version import JSON_FORMAT

if TYPE_CHECKING:  # imported where an Event is built: a report holds stored JSON
    from google.adk.events.event import Event

__all__ = [
    "HISTORY_COLUMNS",
    "JSON_FORMAT",
    "REPAIR_COLUMNS",
    "RUNS_COLUMNS",
    "SCAN_COLUMNS",
    "CallEntry",
    "DamagedEntry",
    "HealEntry",
    "RepairReport",
    "ResponseEntry",
    "ScanReport",
    "SupersededEntry",
    "call_why",
    "counted",
    "format_duration",
    "history_json",
    "history_records",
    "record_json",
    "runs_json",
    "runs_records",
    "tsv_field",
    "tsv_lines",
]


_UNHEALABLE = frozenset({CallStatus.MALFORMED, CallStatus.OUT_OF_TURN})
"""Statuses listed in :attr:`ScanReport.unhealable_calls`."""

_PENDING_WHY = {
    "long_running": "long-running tool: its answer comes later (never healed)",
    "awaiting_confirmation_or_credential":
        "waits for a tool confirmation or a credential (never healed)",
    "client_call": "a call the client answers (never healed)",
}


def counted(count: int, noun: str, plural: str | None = None) -> str:
    """Returns ``"1 session"`` or ``"2 sessions"``: a count and its noun, in the right number.

    Args:
        count: How many.
        noun: The singular (``"dead call"``).
        plural: The plural when it is not ``noun + "s"`` (``"calls to check"``).
    """
    if count == 1:
        return f"{count} {noun}"
    return f"{count} {plural if plural is not None else noun + 's'}"


def format_duration(seconds: float, *, exact: bool = True) -> str:
    """Returns ``seconds`` in the units ``--older-than`` takes: ``45s``, ``24h5m``, ``1d2h``.

    Args:
        seconds: The duration (negative counts as 0; fractions are dropped).
        exact: Every non-zero unit (``90061`` is ``1d1h1m1s``); ``False``: the
            largest unit and, if not zero, the next one (``1d1h``), for ages.
    """
    rest = max(0, int(seconds))
    parts: list[str] = []
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60), ("s", 1)):
        count, rest = divmod(rest, size)
        if count:
            parts.append(f"{count}{unit}")
        if parts and not exact and (len(parts) == 2 or not count):
            break
    return "".join(parts) or "0s"


def call_why(status: str, pending_reason: str | None, dead_after: float | None,
             run_outcome: str = "unknown", lease_holder: str | None = None) -> str:
    """Returns one line saying why a reported call is (or is not) healed.

    Args:
        status: The call's :class:`~adk_session_heal.core.findings.CallStatus` value.
        pending_reason: Its pending reason, for ``pending`` calls.
        dead_after: ``--older-than`` plus ``--clock-skew`` in seconds (``None``: never stale).
        run_outcome: What the tool-run ledger says of the run.
        lease_holder: The live lease's ``host/pid`` keeping the call in flight.
    """
    limit = "never" if dead_after is None else format_duration(dead_after)
    if lease_holder is not None:
        return f"its tool-run lease is alive ({lease_holder}): still running, not healed"
    if status == CallStatus.ABANDONED.value:
        return f"the tool-run ledger shows nobody runs it ({run_outcome}): dead at once"
    if status == CallStatus.SUPERSEDED.value:
        return "a later invocation started: nothing will answer it"
    if status == CallStatus.STALE.value:
        return f"unanswered in the newest invocation for over {limit} (--older-than + --clock-skew)"
    if status == CallStatus.IN_FLIGHT.value:
        if dead_after is None:
            return "newest invocation, no age limit: may still be running (never healed)"
        return (f"newest invocation, younger than {limit} (--older-than + --clock-skew): "
                "may still be running; healed once older")
    if status == CallStatus.PENDING.value:
        return _PENDING_WHY.get(pending_reason or "", f"pending: {pending_reason} (never healed)")
    if status == CallStatus.ID_LESS.value:
        return "no call id: no response can be paired with it (never healed)"
    if status == CallStatus.MALFORMED.value:
        return ("a heal would break the request some ADK builds (no name, an id its event "
                "repeats or shares with another call event, or such a call's id); ADK 2.10+ "
                "leaves it out while unanswered (never healed)")
    if status == CallStatus.OUT_OF_TURN.value:
        return ("Gemini refuses its turn where it stands (after another turn of its agent); "
                "ADK 2.10+ leaves it out while unanswered (never healed)")
    return status


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
        """Yields one JSON object per listed entry, its list named in ``kind`` (see above)."""
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
        "version": JSON_FORMAT,
        "format": JSON_FORMAT,
        "command": "history",
        "url": url,
        "heals": [record_json(r) for r in records],
    }


def history_records(records: Iterable[HealRecord]) -> Iterator[dict[str, Any]]:
    """Yields one ``heal`` record per ledger row (the ``history`` JSONL/TSV rows)."""
    for record in records:
        yield {"kind": "heal", **record_json(record)}


def runs_json(url: str, runs: list[RepairRun]) -> dict[str, Any]:
    """Returns the ``history --runs --json`` document."""
    return {"version": JSON_FORMAT, "format": JSON_FORMAT, "command": "history --runs",
            "url": url, "runs": [run.to_json() for run in runs]}


def runs_records(runs: Iterable[RepairRun]) -> Iterator[dict[str, Any]]:
    """Yields one ``run`` record per run (the ``history --runs`` JSONL/TSV rows)."""
    for run in runs:
        yield {"kind": "run", **run.to_json()}


_CALL_KEYS = ("app_name", "user_id", "session_id", "call_event_id", "call_id", "tool_name",
              "invocation_id", "timestamp", "age_seconds", "status", "pending_reason", "why")
_LEDGER_KEYS = ("run_outcome", "lease_holder")  # added later: columns only ever go at the end
_SUPERSEDED_KEYS = ("response_event_ids",)  # added later: columns only ever go at the end
SCAN_COLUMNS = ("kind", *_CALL_KEYS, "event_id", "problem", *_LEDGER_KEYS,
                "synthetic_event_id", "call_ids", "tool_names", *_SUPERSEDED_KEYS)
"""``scan --format tsv`` columns: every key of every ``scan`` record, ``kind`` first."""
REPAIR_COLUMNS = ("kind", *_CALL_KEYS, "event_id", "problem", "synthetic_event_id", "call_ids",
                  "tool_names", "reason", "written", "outcome", "event_data", *_LEDGER_KEYS,
                  *_SUPERSEDED_KEYS)
"""``repair --format tsv`` columns: the scan's, then the ``heal`` records' own."""
HISTORY_COLUMNS = ("kind", "app_name", "user_id", "session_id", "call_event_id",
                   "synthetic_event_id", "invocation_id", "call_ids", "tool_names", "reason",
                   "trigger", "healed_at")
"""``history --format tsv`` columns."""
RUNS_COLUMNS = ("kind", "run_id", "run_kind", "undoes", "host", "started_at", "finished_at",
                "heals_written", "heals_removed", "heals_undone", "heals_kept")
"""``history --runs --format tsv`` columns."""

_TSV_ESCAPES = str.maketrans({"\\": "\\\\", "\t": "\\t", "\n": "\\n", "\r": "\\r"})


def tsv_field(value: Any) -> str:
    """Returns one TSV field: ``null`` empty, booleans ``true``/``false``, lists
    comma-joined, objects as compact JSON; tab, newline, CR and backslash escaped
    as ``\\t``, ``\\n``, ``\\r``, ``\\\\``.
    """
    if value is None:
        return ""
    if type(value) is str:  # most fields: ids, names, times
        text = value
    elif isinstance(value, bool):
        return "true" if value else "false"
    elif isinstance(value, list):
        text = ",".join(str(item) for item in value)
    elif isinstance(value, dict):
        text = json.dumps(value, separators=(",", ":"), ensure_ascii=False)
    else:
        text = str(value)
    return _tsv_escaped(text)


def _tsv_escaped(text: str) -> str:
    """Escapes tab, newline, CR and backslash as :func:`tsv_field` says.

    Four scans in C cost less than ``translate`` over a text that holds none
    of them, as almost every field does (a 10,000-heal repair prints 500,000).
    """
    if "\\" in text or "\t" in text or "\n" in text or "\r" in text:
        return text.translate(_TSV_ESCAPES)
    return text


def tsv_lines(records: Iterable[dict[str, Any]], columns: Sequence[str]) -> Iterator[str]:
    """Yields the header line, then one line per record (a key it lacks is empty).

    Raises:
        ValueError: A record has a key that is not a column (it would be lost).
    """
    yield "\t".join(columns)
    known = set(columns)
    field = tsv_field
    for record in records:
        if not known.issuperset(record):
            raise ValueError(f"record keys {sorted(record.keys() - known)} have no TSV column")
        get = record.get
        yield "\t".join([field(get(column)) for column in columns])
