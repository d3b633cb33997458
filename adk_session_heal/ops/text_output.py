"""The reports as text: TSV fields, lines and columns, counts, durations and each call's "why".

Line formats (``--format jsonl`` and ``--format tsv``) carry the same objects
as the JSON documents, one per line, from one place
(:meth:`~adk_session_heal.ops.scan_report.ScanReport.records`,
:meth:`~adk_session_heal.ops.repair_report.RepairReport.records`,
:func:`~adk_session_heal.ops.ledger_documents.history_records`,
:func:`~adk_session_heal.ops.ledger_documents.runs_records`; the schemas are in
those modules' docstrings): each entry of the documents' lists, with ``"kind"``
naming its list in the singular (``dead_call``, ``in_flight_call``,
``pending_call``, ``id_less_call``, ``orphaned_response``, ``damaged_row``,
``superseded_heal``, ``unhealable_call``, ``heal``, ``removal``, ``run``).
JSONL adds ``"version": 1`` to every line and ends with one ``"kind": "summary"``
line: the document without its lists (for ``history``: ``version``, ``command``,
``url``, ``heals_recorded``). TSV starts with a header line (:data:`SCAN_COLUMNS`,
:data:`REPAIR_COLUMNS`, :data:`HISTORY_COLUMNS`, :data:`RUNS_COLUMNS`: the union
of the records' keys, ``kind`` first; a key a record lacks is an empty field) and
writes fields as :func:`tsv_field` says. Columns and keys are only ever added, at
the end.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator, Sequence
from typing import Any

from ..core.durations import format_duration
from ..core.findings import CallStatus

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


_ABANDONED, _SUPERSEDED, _STALE, _IN_FLIGHT = (
    CallStatus.ABANDONED.value, CallStatus.SUPERSEDED.value, CallStatus.STALE.value,
    CallStatus.IN_FLIGHT.value)
_PENDING, _ID_LESS, _MALFORMED, _OUT_OF_TURN = (
    CallStatus.PENDING.value, CallStatus.ID_LESS.value, CallStatus.MALFORMED.value,
    CallStatus.OUT_OF_TURN.value)
"""The statuses' values, read once: :func:`call_why` runs for every call a report lists."""


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
    if lease_holder is not None:
        return f"its tool-run lease is alive ({lease_holder}): still running, not healed"
    if status == _ABANDONED:
        return f"the tool-run ledger shows nobody runs it ({run_outcome}): dead at once"
    if status == _SUPERSEDED:
        return "a later invocation started: nothing will answer it"
    if status == _STALE:
        limit = "never" if dead_after is None else format_duration(dead_after)
        return f"unanswered in the newest invocation for over {limit} (--older-than + --clock-skew)"
    if status == _IN_FLIGHT:
        if dead_after is None:
            return "newest invocation, no age limit: may still be running (never healed)"
        limit = format_duration(dead_after)
        return (f"newest invocation, younger than {limit} (--older-than + --clock-skew): "
                "may still be running; healed once older")
    if status == _PENDING:
        return _PENDING_WHY.get(pending_reason or "", f"pending: {pending_reason} (never healed)")
    if status == _ID_LESS:
        return "no call id: no response can be paired with it (never healed)"
    if status == _MALFORMED:
        return ("a heal would break the request some ADK builds (no name, an id its event "
                "repeats or shares with another call event, or such a call's id); ADK 2.10+ "
                "leaves it out while unanswered (never healed)")
    if status == _OUT_OF_TURN:
        return ("Gemini refuses its turn where it stands (after another turn of its agent); "
                "ADK 2.10+ leaves it out while unanswered (never healed)")
    return status


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
    return _tsv_escaped(_tsv_text(value))


def _tsv_text(value: Any) -> str:
    """Returns one TSV field's text, not yet escaped (see :func:`tsv_field`)."""
    if type(value) is str:  # most fields: ids, names, times
        return value
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, list):
        return ",".join(str(item) for item in value)
    if isinstance(value, dict):
        return json.dumps(value, separators=(",", ":"), ensure_ascii=False)
    return str(value)


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
    tabs = len(columns) - 1
    text = _tsv_text
    for record in records:
        if not known.issuperset(record):
            raise ValueError(f"record keys {sorted(record.keys() - known)} have no TSV column")
        fields = [value if type(value) is str else "" if value is None else text(value)
                  for value in map(record.get, columns)]
        line = "\t".join(fields)
        # The line as joined has only its separators' tabs and nothing to escape in almost
        # every record: then it is already what escaping each field would give.
        if line.count("\t") != tabs or "\\" in line or "\n" in line or "\r" in line:
            line = "\t".join([_tsv_escaped(field) for field in fields])
        yield line
