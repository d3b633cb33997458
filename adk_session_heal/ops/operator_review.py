"""``review``: list the healed calls a person should check, and write their true outcome.

:func:`review` scans a store (as ``scan`` does, through the layout's one
adapter) and lists, per session, :func:`~adk_session_heal.core.review.review_entries`.
:func:`resolve` writes an operator's answer for one call and takes out the
answer it supersedes (the heal, or an earlier resolution) in one transaction
of the layout's adapter (:meth:`~adk_session_heal.store.SessionStore.resolve`),
with its ledger rows: the heal-ledger row (trigger ``review``, reason
``resolved``), the removal (who, when) and the resolution's own record (who,
when, what; revision ``0006``). So every resolve is stored or refused:

* an identical repeat (same outcome, same person, still the newest answer)
  writes nothing;
* a different outcome is a correction: a new resolution, with an id of its
  own, superseding the one before;
* operators resolving one call at once: the first to commit answers it; each
  other one finds the answer it meant to supersede gone, writes nothing, and
  says in one line what is stored now (:class:`~adk_session_heal.errors.ResolutionError`,
  exit 2);
* a heal that cannot be taken out (changed since it was written, or not ours)
  is left alone, and nothing is written.
"""

from __future__ import annotations

import getpass
import socket
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from ..core.event_access import STORED_JSON
from ..core.heal_record import HealTrigger
from ..core.late_results import is_resolution, late_results
from ..core.reconcile import in_doubt, settled_outcome
from ..core.review import (
    ReviewEntry,
    check_response,
    check_text,
    describe_answer,
    plan_resolution,
    review_entries,
)
from ..core.session_decision import SessionView, decide
from ..core.session_key import SessionKey
from ..errors import ResolutionError
from ..policy import (
    DEFAULT_CLOCK_SKEW,
    DEFAULT_RECONCILE_TIMEOUT,
    CallOutcome,
    HealPolicy,
    ReconcileHook,
)
from ..store import SessionFilter, SessionStore, open_store
from ..store.base import (
    Removal,
    RemovalReason,
    RemoveOutcome,
    ResolveOutcome,
    StoredSession,
)
from ..store.engines import TimeoutArg
from ..store.ledger.revisions import Feature
from ..store.reconcile_hooks import HookReconciler
from ..store.urls import StoreUrl
from .json_version import JSON_FORMAT
from .text_output import counted

REVIEW_COLUMNS = ("kind", "app_name", "user_id", "session_id", "call_event_id", "call_id",
                  "tool_name", "args", "timestamp", "age_seconds", "status", "tool_effect",
                  "run_outcome", "synthetic_event_id", "idempotency_key")
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
        settled_by_hooks: Calls a reconcile hook settled, so not listed
            (``None``: no hook was asked).
    """

    url: str
    reviewed_at: float
    calls: list[ReviewEntry] = field(default_factory=list)
    damaged_sessions: int = 0
    settled_by_hooks: int | None = None

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
        settled = "" if self.settled_by_hooks is None else (
            f"; {counted(self.settled_by_hooks, 'call')} settled by reconcile hooks, not listed")
        return (f"{counted(len(self.calls), 'call to check', 'calls to check')} in {self.url}: "
                f"{healed} healed, {len(self.calls) - healed} not healed yet; "
                f"{counted(self.damaged_sessions, 'session')} with damaged rows skipped{settled}")

    def summary_json(self) -> dict[str, Any]:
        """The document without its list (the jsonl summary line)."""
        return {k: v for k, v in self.to_json().items() if not isinstance(v, list)}

    def to_json(self) -> dict[str, Any]:
        """The ``review --json`` document."""
        return {"version": JSON_FORMAT, "format": JSON_FORMAT, "command": "review",
                "url": self.url, "reviewed_at": self.reviewed_at,
                "damaged_sessions": self.damaged_sessions,
                "settled_by_hooks": self.settled_by_hooks,
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
    clock_skew: float = DEFAULT_CLOCK_SKEW,
    now: float | None = None,
    timeout: TimeoutArg = None,
    reconcile: Mapping[str, ReconcileHook] | None = None,
    reconcile_timeout: float = DEFAULT_RECONCILE_TIMEOUT,
) -> ReviewReport:
    """Lists the dead and healed calls a person should check (read-only).

    With ``reconcile``, each listed call whose tool has a hook is asked about
    first (by its idempotency key), and only what no hook could settle is
    listed: a call its hook finds (``settled(result)``) or finds undone
    (``settled(happened=False)``) needs no person. The next ``repair`` given
    the same hooks answers a dead one with that; a healed one keeps its heal
    until resolved (``review resolve``).

    Args:
        url: The store.
        where: Restrict to an app, user or session.
        stale_after: As for ``scan`` (which unhealed calls count as dead).
        clock_skew: As for ``scan``.
        now: The clock (default: now).
        timeout: How long to wait for a database server.
        reconcile: Reconcile hooks by tool name (``HealPolicy.reconcile``).
        reconcile_timeout: Seconds each hook may take.
    """
    clock = time.time() if now is None else now
    policy = HealPolicy(stale_after=stale_after, clock_skew=clock_skew,
                        reconcile=reconcile or {}, reconcile_timeout=reconcile_timeout)
    reconciler = HookReconciler(policy) if policy.reconcile else None
    store = await open_store(url, timeout=timeout)
    report = ReviewReport(str(store), clock, settled_by_hooks=None if reconciler is None else 0)
    try:
        async with store.tool_runs(timeout) as tool_runs:
            async for stored in store.stream_sessions(where or SessionFilter()):
                if stored.damaged:
                    report.damaged_sessions += 1
                    continue
                try:
                    decision = await decide(
                        SessionView(stored.key, stored.events, STORED_JSON,
                                    seen_events=len(stored.events)),
                        policy, now=clock, trigger=HealTrigger.REVIEW, tool_runs=tool_runs,
                        plan=False)
                    entries = review_entries(stored.events, decision.findings, stored.key)
                except (TypeError, AttributeError, ValueError):
                    report.damaged_sessions += 1
                    continue
                if reconciler is not None and entries:
                    kept = await _unsettled(reconciler, policy, entries)
                    report.settled_by_hooks = (report.settled_by_hooks or 0) + (
                        len(entries) - len(kept))
                    entries = kept
                report.calls.extend(entries)
    finally:
        await store.close()
    return report


async def _unsettled(reconciler: HookReconciler, policy: HealPolicy,
                     entries: list[ReviewEntry]) -> list[ReviewEntry]:
    """The entries no reconcile hook could settle (see :func:`review`)."""
    asked = [e for e in entries if in_doubt(CallOutcome(e.outcome), e.tool_name, policy)]
    if not asked:
        return entries
    answers = await reconciler.settle([e.doubt() for e in asked])
    return [e for e in entries
            if settled_outcome(CallOutcome(e.outcome), answers.get(e.idempotency_key)) is None]


def _answers(stored: StoredSession, call_id: str) -> bool:
    return any(call_id in ((STORED_JSON.heal_marker(e) or {}).get("call_ids") or ())
               for e in stored.events)


async def _find(store: SessionStore, where: SessionFilter, call_id: str) -> StoredSession:
    """The one session where a heal of ours answers ``call_id``."""
    found = [s async for s in store.stream_sessions(where)
             if not s.damaged and _answers(s, call_id)]
    if not found:
        raise ResolutionError(f"no heal answers call {call_id!r} in {store}: check the id "
                              f"(`adk-session-heal review {store}` lists them), or run "
                              "repair first")
    if len(found) > 1:
        raise ResolutionError(
            f"call {call_id!r} is healed in {len(found)} sessions: pass --session "
            f"(one of {', '.join(s.key.session_id for s in found[:3])})")
    return found[0]


def _newest_answer(events: list[dict[str, Any]], call_id: str) -> dict[str, Any]:
    return [e for e in events
            if call_id in ((STORED_JSON.heal_marker(e) or {}).get("call_ids") or ())][-1]


def _identical(event: dict[str, Any], call_id: str, response: Mapping[str, Any],
               who: str) -> bool:
    """Whether ``event`` is a resolution of ``call_id`` by ``who`` with this very response."""
    marker = STORED_JSON.heal_marker(event) or {}
    return (is_resolution(marker) and marker.get("resolved_by") == who
            and _response_of(event, call_id) == dict(response))


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
    """Writes a healed call's true outcome and takes back the answer it supersedes.

    Args:
        url: The store.
        call_id: The call.
        response: Its true response: ``{"result": ...}`` or ``{"error": ...}``.
        where: Which session (needed when the id is healed in several).
        by: Who resolves (default: :func:`default_reviewer`).
        ledger: Record the resolution and the removal in the ledger (it must be
            at revision 0006 or later).
        now: The clock (default: now).
        timeout: How long to wait for a database server.

    Raises:
        ResolutionError: The response or the name is one ADK could not read
            back, no heal answers the call, several sessions hold it, the call
            has its real response already, the answer to supersede cannot be
            taken out, or another operator resolved the call meanwhile (the
            message says what is stored now). Nothing is written.
        LedgerError: ``ledger`` is on and the ledger is below revision 0006.
        StoreError: The store cannot be used.
    """
    clock = time.time() if now is None else now
    who = by or default_reviewer()
    check_response(response)
    check_text(who, "the resolver's name (--by)")
    store = await open_store(url, writable=True, timeout=timeout,
                             needs=(Feature.RESOLUTIONS,) if ledger else ())
    try:
        stored = await _find(store, where or SessionFilter(), call_id)
        events = stored.events
        newest = _newest_answer(events, call_id)
        removals: list[tuple[str, RemoveOutcome]] = []
        if _identical(newest, call_id, response, who):
            event_id, written = STORED_JSON.event_id(newest), False
        else:
            heal, superseded = plan_resolution(events, stored.key, call_id, response, by=who,
                                               at=clock)
            marker = STORED_JSON.heal_marker(superseded) or {}
            removal = Removal(stored.key, STORED_JSON.event_id(superseded),
                              str(marker.get("call_event_id", "")),
                              tuple(str(c) for c in marker.get("call_ids") or ()),
                              RemovalReason.RESOLVED, clock, who, (heal.event_id,))
            result = await store.resolve(heal, removal, ledger=ledger)
            if result.outcome is ResolveOutcome.KEPT:
                raise ResolutionError(
                    f"{removal.event_id}, the answer to call {call_id!r} this would replace, "
                    f"stays ({result.problem}): nothing written; check it, then take it out "
                    "by hand or leave the call as it is")
            if result.outcome is ResolveOutcome.GONE:
                now_stored = await _find(store, where or SessionFilter(), call_id)
                current = _newest_answer(now_stored.events, call_id)
                if not _identical(current, call_id, response, who):
                    raise ResolutionError(
                        f"call {call_id!r} was answered meanwhile, now by "
                        f"{describe_answer(now_stored.events, call_id)}: nothing written; "
                        "check it, then resolve again to change it")
                event_id, written = STORED_JSON.event_id(current), False
                events = now_stored.events
            else:
                event_id, written = heal.event_id, result.outcome is ResolveOutcome.WRITTEN
                removals.append((removal.event_id, RemoveOutcome.REMOVED))
                index = next(i for i, e in enumerate(events)
                             if STORED_JSON.event_id(e) == removal.event_id)
                events = [*events[:index], heal.data, *events[index + 1:]]
        removals.extend(await _clean_up(store, stored.key, events, event_id, who, clock, ledger))
    finally:
        await store.close()
    return ResolveReport(str(store), stored.key, call_id, event_id, written, tuple(removals),
                         who, clock, dict(response))


async def _clean_up(
    store: SessionStore, key: SessionKey, events: list[dict[str, Any]], event_id: str,
    who: str, clock: float, ledger: bool,
) -> list[tuple[str, RemoveOutcome]]:
    """Takes out what earlier, interrupted resolves left superseded (rows the rule lets go)."""
    removals = [Removal(key, late.heal_event_id, late.call_event_id, late.call_ids,
                        RemovalReason.RESOLVED, clock, who, (event_id,))
                for late in late_results(events, STORED_JSON)
                if late.heal_event_id != event_id]
    if not removals:
        return []
    outcomes = await store.remove(removals, ledger=ledger)
    return [(r.event_id, o) for r, o in zip(removals, outcomes, strict=True)]


def _response_of(event: Mapping[str, Any], call_id: str) -> dict[str, Any] | None:
    for part in (event.get("content") or {}).get("parts") or []:
        response = part.get("function_response") if isinstance(part, Mapping) else None
        if isinstance(response, Mapping) and response.get("id") == call_id:
            return dict(response.get("response") or {})
    return None
