"""``review``: list the healed calls a person should check, and write their true outcome.

:func:`review` scans a store (as ``scan`` does, through the layout's one
adapter) and lists, per session, :func:`~adk_session_heal.review.review_entries`.
:func:`resolve` writes an operator's answer for one call through the same
writer as every heal (:meth:`~adk_session_heal.store.SessionStore.write`,
with its heal-ledger row: trigger ``review``, reason ``resolved``), then takes
every heal it superseded back out through the same remover
(:meth:`~adk_session_heal.store.SessionStore.remove`, with a removals-ledger
row naming who and when). Run again after an interruption it writes nothing
twice: an identical resolution by the same person is reused, and whatever it
superseded is taken out.
"""

from __future__ import annotations

import getpass
import socket
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from .errors import LedgerError, ResolutionError, StoreError
from .event_access import STORED_JSON
from .healing import SessionHeals
from .json_version import JSON_FORMAT
from .late_results import is_resolution, late_results
from .review import ReviewEntry, plan_resolution, review_entries
from .scan_report import counted
from .session_key import SessionKey
from .store import SessionFilter, open_store
from .store.base import Removal, RemovalReason, RemoveOutcome, StoredSession, WriteOutcome
from .store.engines import TimeoutArg
from .store.ledger import missing_ledger_message
from .store.ledger_table import REMOVALS_REVISIONS
from .store.urls import StoreUrl

__all__ = [
    "REVIEW_COLUMNS",
    "ResolveReport",
    "ReviewReport",
    "default_reviewer",
    "resolve",
    "review",
]

REVIEW_COLUMNS = ("kind", "app_name", "user_id", "session_id", "call_event_id", "call_id",
                  "tool_name", "args", "timestamp", "age_seconds", "status", "tool_effect",
                  "run_outcome", "synthetic_event_id")
"""``review --format tsv`` columns."""


def default_reviewer() -> str:
    """``user@host`` of this process: who resolves, unless ``--by`` says."""
    try:
        user = getpass.getuser()
    except Exception:  # no login name (a container without a passwd entry)
        user = "unknown"
    return f"{user}@{socket.gethostname()}"


@dataclass
class ReviewReport:
    """The calls a person should check, over all scanned sessions.

    Attributes:
        url: The store (redacted).
        reviewed_at: The clock (POSIX seconds).
        calls: The entries, in scan order.
        damaged_sessions: Sessions skipped for unreadable rows.
    """

    url: str
    reviewed_at: float
    calls: list[ReviewEntry] = field(default_factory=list)
    damaged_sessions: int = 0

    def records(self) -> Iterator[dict[str, Any]]:
        """One ``review_call`` record per entry (the tsv/jsonl rows)."""
        for entry in self.calls:
            yield {"kind": "review_call", **entry.to_json(self.reviewed_at)}

    def __repr__(self) -> str:
        """A short form, counts only: a review may list every dead call of a store."""
        return (f"ReviewReport(url={self.url!r}, calls={len(self.calls)}, "
                f"damaged_sessions={self.damaged_sessions})")

    def summary_line(self) -> str:
        """The one-line summary."""
        healed = sum(1 for c in self.calls if c.status == "healed")
        return (f"{counted(len(self.calls), 'call to check', 'calls to check')} in {self.url}: "
                f"{healed} healed, {len(self.calls) - healed} not healed yet; "
                f"{counted(self.damaged_sessions, 'session')} with damaged rows skipped")

    def summary_json(self) -> dict[str, Any]:
        """The document without its list (the jsonl summary line)."""
        return {k: v for k, v in self.to_json().items() if not isinstance(v, list)}

    def to_json(self) -> dict[str, Any]:
        """The ``review --json`` document."""
        return {"version": JSON_FORMAT, "format": JSON_FORMAT, "command": "review",
                "url": self.url, "reviewed_at": self.reviewed_at,
                "damaged_sessions": self.damaged_sessions,
                "calls": [c.to_json(self.reviewed_at) for c in self.calls]}


@dataclass(frozen=True)
class ResolveReport:
    """What ``review resolve`` did.

    Attributes:
        url: The store (redacted).
        key: The session.
        call_id: The call resolved.
        resolution_event_id: The response event holding the true outcome.
        written: This run wrote it (``False``: an identical one was there).
        removals: The heals it superseded, and what the remover did with each.
        resolved_by: Who.
        resolved_at: When.
        response: The call's true response.
    """

    url: str
    key: SessionKey
    call_id: str
    resolution_event_id: str
    written: bool
    removals: tuple[tuple[str, RemoveOutcome], ...]
    resolved_by: str
    resolved_at: float
    response: Mapping[str, Any]

    def summary_line(self) -> str:
        """The one-line summary."""
        taken = [event_id for event_id, o in self.removals if o is RemoveOutcome.REMOVED]
        return (f"Resolved call {self.call_id} in session {self.key.app_name}/"
                f"{self.key.user_id}/{self.key.session_id}: "
                f"{'wrote' if self.written else 'kept the identical'} response event "
                f"{self.resolution_event_id}; heals taken back: "
                f"{', '.join(taken) if taken else 'none'}; by {self.resolved_by}.")

    def to_json(self) -> dict[str, Any]:
        """The ``review resolve --json`` document."""
        return {"version": JSON_FORMAT, "format": JSON_FORMAT, "command": "review resolve",
                "url": self.url, "app_name": self.key.app_name, "user_id": self.key.user_id,
                "session_id": self.key.session_id, "call_id": self.call_id,
                "synthetic_event_id": self.resolution_event_id, "written": self.written,
                "removals": [{"synthetic_event_id": e, "outcome": o.value}
                             for e, o in self.removals],
                "resolved_by": self.resolved_by, "resolved_at": self.resolved_at,
                "response": dict(self.response)}


async def review(
    url: str | StoreUrl,
    *,
    where: SessionFilter | None = None,
    stale_after: float | None = None,
    clock_skew: float = 300.0,
    now: float | None = None,
    timeout: TimeoutArg = None,
) -> ReviewReport:
    """Lists the dead and healed calls a person should check (read-only).

    Args:
        url: The store.
        where: Restrict to an app, user or session.
        stale_after: As for ``scan`` (which unhealed calls count as dead).
        clock_skew: As for ``scan``.
        now: The clock (default: now).
        timeout: How long to wait for a database server.
    """
    from .bulk import classify_stored, tool_runs_of

    clock = time.time() if now is None else now
    store = await open_store(url, timeout=timeout)
    report = ReviewReport(str(store), clock)
    try:
        async with tool_runs_of(store, timeout) as tool_runs:
            async for stored in store.stream_sessions(where or SessionFilter()):
                if stored.damaged:
                    report.damaged_sessions += 1
                    continue
                try:
                    findings = await classify_stored(stored, tool_runs, now=clock,
                                                     stale_after=stale_after,
                                                     clock_skew=clock_skew)
                    report.calls.extend(review_entries(stored.events, findings, stored.key))
                except (TypeError, AttributeError, ValueError):
                    report.damaged_sessions += 1
    finally:
        await store.close()
    return report


def _answers(stored: StoredSession, call_id: str) -> bool:
    return any(call_id in ((STORED_JSON.heal_marker(e) or {}).get("call_ids") or ())
               for e in stored.events)


async def resolve(
    url: str | StoreUrl,
    call_id: str,
    response: Mapping[str, Any],
    *,
    where: SessionFilter | None = None,
    by: str | None = None,
    ledger: bool = True,
    now: float | None = None,
    timeout: TimeoutArg = None,
) -> ResolveReport:
    """Writes a healed call's true outcome and takes back the heal it supersedes.

    Args:
        url: The store.
        call_id: The call.
        response: Its true response: ``{"result": ...}`` or ``{"error": ...}``.
        where: Which session (needed when the id is healed in several).
        by: Who resolves (default: :func:`default_reviewer`).
        ledger: Record the resolution and the removals in the ledger (it must be
            at revision 0003 or later).
        now: The clock (default: now).
        timeout: How long to wait for a database server.

    Raises:
        ResolutionError: No heal answers the call, or several sessions hold it.
        LedgerError: ``ledger`` is on and the removals table is missing.
        StoreError: The store cannot be used.
    """
    clock = time.time() if now is None else now
    who = by or default_reviewer()
    store = await open_store(url, writable=True, timeout=timeout)
    try:
        if ledger and (revision := await store.ledger_revision()) not in REMOVALS_REVISIONS:
            raise LedgerError(missing_ledger_message(store, revision), missing=True)
        found = [s async for s in store.stream_sessions(where or SessionFilter())
                 if not s.damaged and _answers(s, call_id)]
        if not found:
            raise ResolutionError(f"no heal answers call {call_id!r} in {store}: check the id "
                                  f"(`adk-session-heal review {store}` lists them), or run "
                                  "repair first")
        if len(found) > 1:
            raise ResolutionError(
                f"call {call_id!r} is healed in {len(found)} sessions: pass --session "
                f"(one of {', '.join(s.key.session_id for s in found[:3])})")
        (stored,) = found
        events = stored.events
        newest = [e for e in events
                  if call_id in ((STORED_JSON.heal_marker(e) or {}).get("call_ids") or ())][-1]
        marker = STORED_JSON.heal_marker(newest) or {}
        if is_resolution(marker) and marker.get("resolved_by") == who and _response_of(
                newest, call_id) == dict(response):
            event_id, written = STORED_JSON.event_id(newest), False
        else:
            heal, _ = plan_resolution(events, stored.key, call_id, response, by=who, at=clock)
            (result,) = await store.write([SessionHeals(stored.key, None, (heal,))],
                                          ledger=ledger)
            if result.outcome not in (WriteOutcome.WRITTEN, WriteOutcome.PRESENT):
                raise StoreError(f"session {stored.key.session_id!r} changed while resolving: "
                                 "run the command again")
            event_id, written = heal.event_id, result.written
            events = [*events[:heal.plan.insert_at], heal.data, *events[heal.plan.insert_at:]]
        removals = [Removal(stored.key, late.heal_event_id, late.call_event_id, late.call_ids,
                            RemovalReason.RESOLVED, clock, who, (event_id,))
                    for late in late_results(events, STORED_JSON)
                    if late.heal_event_id != event_id]
        outcomes = await store.remove(removals, ledger=ledger) if removals else []
    finally:
        await store.close()
    return ResolveReport(str(store), stored.key, call_id, event_id, written,
                         tuple((r.event_id, o) for r, o in zip(removals, outcomes, strict=True)),
                         who, clock, dict(response))


def _response_of(event: Mapping[str, Any], call_id: str) -> dict[str, Any] | None:
    for part in (event.get("content") or {}).get("parts") or []:
        response = part.get("function_response") if isinstance(part, Mapping) else None
        if isinstance(response, Mapping) and response.get("id") == call_id:
            return dict(response.get("response") or {})
    return None
