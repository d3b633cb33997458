"""The heal ledger's documents: what ``history`` prints, as JSON and as line records.

Like the other JSON documents (:mod:`~adk_session_heal.ops.scan_report`), each
carries ``"version": 1``; fields are only ever added under that number.

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

The line formats (``--format jsonl`` and ``--format tsv``) write one
:func:`history_records` or :func:`runs_records` object per line
(:mod:`~adk_session_heal.ops.text_output`).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

from ..core.heal_record import HealRecord
from ..store.ledger.repair_runs import RepairRun
from .json_version import JSON_FORMAT

_HISTORY_KEYS = ("app_name", "user_id", "session_id", "call_event_id", "synthetic_event_id",
                 "invocation_id", "call_ids", "tool_names", "reason")
"""The fields of a heal record every ``history`` record carries."""


def record_json(record: HealRecord, *, with_trigger: bool = True) -> dict[str, Any]:
    """Returns a heal record as a JSON object (its ``trigger`` and ``healed_at`` too)."""
    data = record.to_json()
    keys = (*_HISTORY_KEYS, "trigger", "healed_at") if with_trigger else _HISTORY_KEYS
    return {key: data[key] for key in keys}


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
