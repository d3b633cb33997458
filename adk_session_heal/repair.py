"""Scanning and repairing a whole session database: plan, then apply.

:func:`scan` streams ADK's events table once, in session order, and feeds each
session's stored JSON to the pure classifier (no pydantic ``Event`` is built
for any stored event); memory is bounded by the largest session plus what is
reported. :func:`repair` runs the same scan, plans heals with the same
:func:`~adk_session_heal.healing.plan_heals` and
:func:`~adk_session_heal.healing.build_heal_event` as the wrapper (so the same
deterministic ids and the same rows), and inserts them in batched
transactions that skip existing keys, with their ledger records in the same
transactions. That gives:

* **idempotence**: a second run finds every call answered and heals 0;
* **interruption safety** (SIGKILL included): a batch commits whole or not at
  all, and a rerun plans the same ids, so it finishes the job without
  duplicates;
* **no revision bump**: ``sessions`` is never written, so a runner in the
  middle of a turn never fails with ``StaleSessionError``.

:func:`scan_service` is the fallback for session services without SQL
storage (in-memory, Vertex AI): ``list_sessions`` + ``get_session``.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

from google.adk.sessions import BaseSessionService

from .errors import LedgerError
from .findings import classify
from .healing import HealPlan, build_heal_event, plan_heals
from .ledger import missing_ledger_message
from .migrate import head_revision
from .observe import report_heal
from .policy import HealPolicy
from .records import HealRecord, HealTrigger
from .reports import HealEntry, RepairReport, ScanReport
from .store.database import HealWrite, SessionFilter, SessionStore, open_store
from .store.urls import StoreUrl
from .views import ADK_EVENTS, STORED_JSON

__all__ = [
    "DEFAULT_BATCH_SIZE",
    "DEFAULT_OLDER_THAN",
    "ScanProgress",
    "SessionFilter",
    "repair",
    "scan",
    "scan_service",
]

DEFAULT_OLDER_THAN = 24 * 3600.0
"""Default age (seconds) after which a call of a session's newest invocation is healed.

A day: far longer than any tool or human-in-the-loop wait should take without
ADK marking the call long-running, so ``stale`` calls are dead, not slow.
Superseded calls are healed whatever their age.
"""

DEFAULT_BATCH_SIZE = 500
"""Synthetic events inserted per transaction."""


class ScanProgress(Protocol):
    """Receives a scan's progress (e.g. a progress bar)."""

    def start(self, total_sessions: int) -> None:
        """Called once, before the first session, with the number to scan."""
        ...

    def advance(self, sessions: int) -> None:
        """Called as sessions are scanned."""
        ...


@dataclass(frozen=True, slots=True)
class _Planned:
    key: tuple[str, str, str]
    plans: tuple[HealPlan, ...]


async def _scan_store(
    store: SessionStore,
    where: SessionFilter,
    *,
    now: float,
    stale_after: float | None,
    progress: ScanProgress | None,
    plan: bool,
) -> tuple[ScanReport, list[_Planned]]:
    report = ScanReport(str(store.url), store.layout.value, now, stale_after)
    report.sessions_scanned = await store.count_sessions(where)
    if progress is not None:
        progress.start(report.sessions_scanned)
    planned: list[_Planned] = []
    async for stored in store.stream_sessions(where):
        key = (stored.app_name, stored.user_id, stored.session_id)
        findings = classify(stored.events, STORED_JSON, now=now, stale_after=stale_after)
        report.add(key, len(stored.events), findings)
        if plan and findings.needs_healing:
            plans = plan_heals(
                stored.events, findings, app_name=key[0], user_id=key[1], session_id=key[2],
                access=STORED_JSON,
            )
            planned.append(_Planned(key, plans))
        if progress is not None:
            progress.advance(1)
    return report, planned


async def scan(
    url: str | StoreUrl,
    *,
    where: SessionFilter | None = None,
    stale_after: float | None = DEFAULT_OLDER_THAN,
    now: float | None = None,
    progress: ScanProgress | None = None,
) -> ScanReport:
    """Scans an ADK session database, read-only.

    Args:
        url: The database (any form :func:`~adk_session_heal.store.urls.parse_store_url`
            accepts).
        where: Restrict to an app, user or session.
        stale_after: Age (seconds) after which a call of the newest invocation
            counts as stale (dead); ``None``: only superseded calls are dead.
        now: The clock (default: the current time).
        progress: Receives progress.

    Returns:
        The report.

    Raises:
        StoreError: The URL or database cannot be used (one-line message).
    """
    store = await open_store(url)
    try:
        report, _ = await _scan_store(
            store, where or SessionFilter(), now=time.time() if now is None else now,
            stale_after=stale_after, progress=progress, plan=False,
        )
        return report
    finally:
        await store.close()


async def repair(
    url: str | StoreUrl,
    *,
    where: SessionFilter | None = None,
    policy: HealPolicy | None = None,
    dry_run: bool = False,
    ledger: bool = True,
    batch_size: int = DEFAULT_BATCH_SIZE,
    now: float | None = None,
    progress: ScanProgress | None = None,
    on_heal: Callable[[HealRecord], object] | None = None,
) -> RepairReport:
    """Heals every dead call in an ADK session database.

    Each heal this call writes is reported like the wrapper's: one WARNING record
    on the ``adk_session_heal`` logger, the OpenTelemetry counters and span, and
    ``on_heal`` (see :mod:`adk_session_heal.observe`).

    Args:
        url: The database.
        where: Restrict to an app, user or session.
        policy: Which calls are dead (``stale_after``; default
            :data:`DEFAULT_OLDER_THAN`) and the synthetic payload.
        dry_run: Plan and report exactly what would be written; write nothing.
        ledger: Record each heal in the ledger, in the same transaction. The
            ledger must be installed (``db upgrade``) unless this is ``False``.
        batch_size: Synthetic events per transaction.
        now: The clock, also the heals' ``healed_at`` (default: now).
        progress: Receives the scan's progress.
        on_heal: Called once per heal written, with its record.

    Returns:
        The report, with one entry per synthetic event.

    Raises:
        StoreError: The URL or database cannot be used, or refuses writes.
        LedgerError: ``ledger`` is on and the ledger is missing or outdated.
    """
    policy = policy or HealPolicy(stale_after=DEFAULT_OLDER_THAN)
    clock = time.time() if now is None else now
    store = await open_store(url, writable=not dry_run)
    try:
        if ledger and not dry_run:
            revision = await store.ledger_revision()
            if revision != head_revision():
                raise LedgerError(missing_ledger_message(store.url, revision))
        report, planned = await _scan_store(
            store, where or SessionFilter(), now=clock,
            stale_after=policy.stale_after_seconds, progress=progress, plan=True,
        )
        writes = [
            HealWrite(
                build_heal_event(plan, policy, healed_at=clock),
                HealRecord.from_plan(
                    plan, app_name=item.key[0], user_id=item.key[1], session_id=item.key[2],
                    trigger=HealTrigger.REPAIR, healed_at=clock,
                ),
            )
            for item in planned
            for plan in item.plans
        ]
        heals: list[HealEntry] = []
        for start in range(0, len(writes), max(1, batch_size)):
            batch = writes[start:start + batch_size]
            written: Sequence[bool | None] = (
                [None] * len(batch) if dry_run else await store.write(batch, ledger=ledger)
            )
            heals.extend(
                HealEntry(w.record, w.event, ok) for w, ok in zip(batch, written, strict=True)
            )
            for write, ok in zip(batch, written, strict=True):
                if ok:
                    report_heal(write.record, on_heal)
        return RepairReport(report, heals, dry_run=dry_run, ledger=ledger and not dry_run)
    finally:
        await store.close()


async def scan_service(
    service: BaseSessionService,
    *,
    app_name: str,
    user_id: str | None = None,
    session_id: str | None = None,
    stale_after: float | None = DEFAULT_OLDER_THAN,
    now: float | None = None,
) -> ScanReport:
    """Scans sessions through a session service's API (for stores without SQL).

    One ``list_sessions`` and one ``get_session`` per session: use :func:`scan`
    for ADK's SQL stores, which is many times faster.

    Args:
        service: Any ADK session service (e.g. in-memory, Vertex AI).
        app_name: The app whose sessions to scan (the service API needs it).
        user_id: Only this user's sessions.
        session_id: Only this session.
        stale_after: As for :func:`scan`.
        now: The clock.

    Returns:
        The report (``layout`` is the service's class name).
    """
    clock = time.time() if now is None else now
    report = ScanReport(type(service).__name__, "service", clock, stale_after)
    listed = await service.list_sessions(app_name=app_name, user_id=user_id)
    for listed_session in listed.sessions:
        if session_id is not None and listed_session.id != session_id:
            continue
        session = await service.get_session(
            app_name=app_name, user_id=listed_session.user_id, session_id=listed_session.id
        )
        if session is None:
            continue
        report.sessions_scanned += 1
        findings = classify(session.events, ADK_EVENTS, now=clock, stale_after=stale_after)
        report.add((app_name, session.user_id, session.id), len(session.events), findings)
    return report
