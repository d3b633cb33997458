"""HealingSessionService: a session service that heals dead tool calls in storage.

It decorates any ADK ``BaseSessionService``. Every method is forwarded to the
inner service unchanged, and two add healing:

* ``get_session`` classifies the loaded events (pure, no I/O) and, when a call
  is dead, writes one synthetic response per call event before returning the
  session with the heals in place. A session with nothing to heal costs no I/O
  beyond the inner read. A session read again whose events still start with
  the ones found clean last time (every call answered once; see
  :mod:`~adk_session_heal.core.clean_prefix`) has only its newer events read.
* ``append_event``, when the event starts a new invocation, first heals the
  calls the earlier invocations left dead, through the caller's own session
  object. Storage then reads call, synthetic response, new message, and the
  request ADK builds in that very turn shows the model its failed tool. Only
  invocation boundaries pay for a classification; other appends cost one
  comparison.

What is healed: ``superseded`` calls (a later invocation exists), and
``stale`` ones when :attr:`HealPolicy.stale_after` is set (older than it plus
:attr:`HealPolicy.clock_skew`, so a reader whose clock runs up to that far
ahead of the runner's never heals a running call). Never in-flight,
long-running, HITL, id-less or rewound calls (see
:mod:`adk_session_heal.core.findings`).

Safety: heals for ADK's in-memory, SQLite and database services are written
without touching the session's revision (see
:mod:`adk_session_heal.store`), so a runner in the middle of a turn on
the same session never fails with ``StaleSessionError``. For any other service
the only write path is ``append_event``, which bumps the revision, so
``get_session`` heals those only when the session has been quiet for
:attr:`HealPolicy.quiet_after` seconds (plus the clock skew); right before
appending, such a service's session is read again and re-classified, and a
call answered meanwhile is not healed. Heals are deduplicated through storage
(deterministic ids, primary keys), serialised per session within a process,
and never modify an existing event. ``get_session`` returns what storage
holds: a heal that lost an insert race comes back as the winner stored it, and
when the write is skipped because the session moved between the read and the
write (a runner appended, another process healed, the application deleted it),
the session is read again and healed from that read (up to 10 reads in all,
each after a short random pause that grows, so a re-read moves past a burst
of appends instead of meeting it again). A
failed heal write is logged with its traceback and the session is returned
unhealed, unless :attr:`HealPolicy.raise_errors` is set.

Late results: when a healed call's real response is stored after all (a tool
that outlived ``stale_after``, another replica finishing the run), the heal is
taken back out of storage, the one deletion this package makes (see
:mod:`adk_session_heal.core.late_results`): right after ``append_event`` stores
that response, or on the next ``get_session`` when it was stored without the
wrapper. Readers then see one answer, the real one. The removal is recorded in
the ledger and reported (:func:`~adk_session_heal.observe.report_removal`).
Stores reached only through ``append_event`` cannot delete a row: there the
heal stays, and a WARNING says so.
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
import weakref
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import replace
from types import TracebackType
from typing import TYPE_CHECKING, Any, Protocol, Self, runtime_checkable

from google.adk.events.event import Event
from google.adk.sessions import BaseSessionService, Session
from google.adk.sessions.base_session_service import GetSessionConfig, ListSessionsResponse
from typing_extensions import override

from ..core.clean_prefix import CleanPrefix
from ..core.event_access import ADK_EVENTS
from ..core.heal_record import HealRecord, HealTrigger
from ..core.healing import Heal, SessionHeals, apply_heals
from ..core.late_results import LateResult, late_results
from ..core.session_decision import SessionView, decide, decide_unless_clean
from ..core.session_key import SessionKey
from ..core.tool_runs import ToolRunReader
from ..errors import HealWriteError
from ..observe import report_heal, report_removal
from ..policy import HealPolicy
from ..store.reconcile_hooks import HookReconciler

if TYPE_CHECKING:
    from ..store import SessionStore
    from ..store.base import Removal

logger = logging.getLogger("adk_session_heal")

_CLEAN_SESSIONS = 1024
"""How many sessions' clean prefixes a service remembers (least recently read dropped)."""

_READS = 10
"""Reads ``get_session`` makes at most of a session whose heal keeps losing to a change:
each write re-counts the session's events and skips it when they moved since the read.
Measured with a runner appending to 3 sessions without pause and 8 reader processes on
MariaDB (7,137 reads): 2.5 % needed a second read, 0.4 % a third, 0.1 % a fourth, 0.03 %
a fifth; with at most 5 reads, 2 of 8 runs of the test of thousands of reads
(``test_the_race_at_the_size_it_was_reported``) returned a dead call once."""
_PAUSE = 0.005
"""Seconds: the pause before the n-th re-read is random, up to ``_PAUSE * 2**n`` (at most
:data:`_MAX_PAUSE`)."""
_MAX_PAUSE = 0.2


class HealLedger(Protocol):
    """Where heals are recorded for audit (see :mod:`adk_session_heal.ledger`)."""

    async def record(self, records: Sequence[HealRecord]) -> None:
        """Records heals; recording the same heal twice keeps one row."""
        ...


@runtime_checkable
class RemovalLedger(Protocol):
    """A ledger that also records heals taken back out (both of this package's ledgers)."""

    async def record_removals(self, removals: Sequence[Removal]) -> None:
        """Records heals taken back out of storage."""
        ...


class HealingSessionService(BaseSessionService):
    """Decorates a session service so that dead tool calls are healed in storage.

    Example::

        from google.adk.sessions import DatabaseSessionService
        from adk_session_heal import HealingSessionService

        service = HealingSessionService(DatabaseSessionService("sqlite+aiosqlite:///s.db"))
        runner = Runner(app_name="app", agent=agent, session_service=service)

    Args:
        inner: The session service to decorate.
        policy: What to heal and how (default: :class:`HealPolicy`).
        on_heal: Called once per heal written, with its :class:`HealRecord`
            (for metrics). Exceptions it raises are logged, never propagated.
        ledger: Where to record heals for audit, e.g.
            :class:`adk_session_heal.ledger.SqlHealLedger`. Optional.
        tool_runs: The tool-run ledger the runners'
            :class:`~adk_session_heal.runtime.tool_run_plugin.ToolRunLedgerPlugin`
            writes (a :class:`~adk_session_heal.ledger.SqlToolRunLedger` or,
            beside ADK's Redis sessions, a
            :class:`~adk_session_heal.ledger.RedisToolRunLedger`).
            With it, a call whose lease is alive is never healed, however
            old; one whose lease expired (or whose run ended) is healed at
            once, worded by its outcome, a finished run's kept result
            written as its response (see
            :func:`~adk_session_heal.core.session_decision.with_tool_runs`). If it cannot
            be read, nothing is healed that time. Optional.
        clock: Returns the current POSIX time (for ages and markers).
    """

    def __init__(
        self,
        inner: BaseSessionService,
        policy: HealPolicy | None = None,
        *,
        on_heal: Callable[[HealRecord], object] | None = None,
        ledger: HealLedger | None = None,
        tool_runs: ToolRunReader | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._inner = inner
        self.policy = policy or HealPolicy()
        self._on_heal = on_heal
        self._ledger = ledger
        self._tool_runs = tool_runs
        self._reconciler = HookReconciler(self.policy) if self.policy.reconcile else None
        self._clock = clock
        self._locks: weakref.WeakValueDictionary[SessionKey, asyncio.Lock] = (
            weakref.WeakValueDictionary()
        )
        self._clean: OrderedDict[SessionKey, CleanPrefix] = OrderedDict()

    @property
    def inner(self) -> BaseSessionService:
        """The decorated session service."""
        return self._inner

    # -- forwarded unchanged ------------------------------------------------

    @override
    async def create_session(
        self,
        *,
        app_name: str,
        user_id: str,
        state: dict[str, Any] | None = None,
        session_id: str | None = None,
    ) -> Session:
        """Forwards to the inner service."""
        return await self._inner.create_session(
            app_name=app_name, user_id=user_id, state=state, session_id=session_id
        )

    @override
    async def list_sessions(
        self, *, app_name: str, user_id: str | None = None
    ) -> ListSessionsResponse:
        """Forwards to the inner service."""
        return await self._inner.list_sessions(app_name=app_name, user_id=user_id)

    @override
    async def delete_session(self, *, app_name: str, user_id: str, session_id: str) -> None:
        """Forwards to the inner service."""
        self._clean.pop(SessionKey(app_name, user_id, session_id), None)
        await self._inner.delete_session(app_name=app_name, user_id=user_id, session_id=session_id)

    @override
    async def get_user_state(self, *, app_name: str, user_id: str) -> dict[str, Any]:
        """Forwards to the inner service."""
        return await self._inner.get_user_state(app_name=app_name, user_id=user_id)

    @override
    async def flush(self) -> None:
        """Forwards to the inner service."""
        await self._inner.flush()

    async def close(self) -> None:
        """Closes the inner service, if it has anything to close."""
        close = getattr(self._inner, "close", None)
        if close is not None:
            await close()

    async def __aenter__(self) -> Self:
        """Enters the async context manager; returns this service."""
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc_val: BaseException | None,
        exc_tb: TracebackType | None,
    ) -> None:
        """Closes the inner service."""
        await self.close()

    # -- healing --------------------------------------------------------------

    @override
    async def get_session(
        self,
        *,
        app_name: str,
        user_id: str,
        session_id: str,
        config: GetSessionConfig | None = None,
    ) -> Session | None:
        """Reads the session from the inner service and heals its dead calls.

        When the heal's write is skipped because the session moved between
        the read and the write (another event appended, the session deleted),
        the session is read again and healed from the new read, up to
        :data:`_READS` reads in all: what is returned is what storage holds,
        never a dead call it has healed (or that this read should have healed)
        meanwhile.
        """
        partial = config is not None and (
            config.num_recent_events is not None or config.after_timestamp is not None
        )
        for read in range(_READS):
            if read:  # past the burst of appends the last read met, at a random moment
                await asyncio.sleep(random.uniform(0, min(_MAX_PAUSE, _PAUSE * 2**read)))
            session = await self._inner.get_session(
                app_name=app_name, user_id=user_id, session_id=session_id, config=config
            )
            if session is None or not self.policy.heal_on_get:
                return session
            if await self._heal(session, HealTrigger.GET_SESSION, whole=not partial):
                return session
        logger.warning(
            "adk_session_heal: session %s changed under each of %d reads while its dead calls"
            " were healed; returning the last read unhealed", session_id, _READS)
        return session

    @override
    async def append_event(self, session: Session, event: Event) -> Event:
        """Heals what earlier invocations left dead when ``event`` starts a new one.

        Then appends ``event`` through the inner service.
        """
        if (
            self.policy.heal_on_append
            and not event.partial
            and session.events
            and event.invocation_id
            and event.invocation_id != session.events[-1].invocation_id
        ):
            await self._heal(session, HealTrigger.APPEND, incoming=event)
        appended = await self._inner.append_event(session, event)
        if not event.partial and event.get_function_responses():
            await self._take_back_for(session, event)
        return appended

    async def _take_back_for(self, session: Session, event: Event) -> None:
        """Takes back the heals ``event``, a real response just stored, supersedes.

        One walk back from ``event`` to the calls it answers (usually a few
        events; never a classification of the session). The caller's session
        shows the heal when it was read after it; a runner that held the
        session since before a ``stale_after`` heal does not see it, so for a
        call older than that the stored session is read once more (the only
        case where that costs a read).
        """
        now = self._clock()
        healed, oldest_call = _walk_back(session.events, event)
        if healed:
            await self._take_back(session, late_results(session.events), now, warn=True)
            return
        stale = self.policy.stale_after_seconds
        if stale is None or oldest_call is None:
            return
        if oldest_call >= now - (stale - self.policy.clock_skew_seconds):
            return
        stored = await self._inner.get_session(
            app_name=session.app_name, user_id=session.user_id, session_id=session.id)
        if stored is not None and _walk_back(stored.events, event)[0]:
            await self._take_back(stored, late_results(stored.events), now, warn=True)

    def _remember(self, key: SessionKey, clean: CleanPrefix) -> None:
        """Remembers ``clean`` as the session's clean prefix, for its next read.

        The least recently read session is forgotten past :data:`_CLEAN_SESSIONS`.
        """
        if clean is not self._clean.get(key):
            self._clean[key] = clean
            if len(self._clean) > _CLEAN_SESSIONS:
                self._clean.popitem(last=False)
        self._clean.move_to_end(key)

    async def _heal(
        self,
        session: Session,
        trigger: HealTrigger,
        *,
        incoming: Event | None = None,
        whole: bool = True,
    ) -> bool:
        """Heals the session's dead calls in storage and in ``session.events``.

        One way down: decide (:meth:`_decide`), write the heals through the
        store's one writer under the session's lock, put them into
        ``session.events``, and report those written (:meth:`_report_heals`).

        Args:
            session: The session as read (or as the runner holds it).
            trigger: Which path heals.
            incoming: The event about to be appended, if any (it proves that
                the invocations before it are over).
            whole: ``session.events`` is every stored event, so the writer can
                re-count them before it writes.

        Returns:
            ``False`` when the writer skipped a heal because the session moved
            since it was read (:attr:`~adk_session_heal.store.WriteOutcome.CHANGED`
            or ``GONE``): ``session`` is then out of date, read it again.
            ``True`` otherwise, also when nothing needed healing or a failure
            was logged (fail-open).
        """
        now = self._clock()
        try:  # fail-open like the write: a healer must never break the user's turn
            planned = await self._decide(session, trigger, now, incoming=incoming, whole=whole)
        except Exception:
            if self.policy.raise_errors:
                raise
            logger.exception(
                "adk_session_heal: could not plan heals for session %s; returning it unhealed",
                session.id,
            )
            return True
        if planned is None:
            return True
        # The store layer (SQLAlchemy, drivers) is imported on the first heal,
        # not with the service: `adk web` builds the service at startup, and
        # sessions with nothing to heal never need it.
        from ..store import WriteOutcome, store_for_service

        store = store_for_service(self._inner, session)
        if (
            store.bumps_revision
            and trigger is HealTrigger.GET_SESSION
            and not self.policy.is_quiet(session.events[-1].timestamp, now=now)
        ):
            return True
        async with self._locks.setdefault(planned.key, asyncio.Lock()):
            try:
                # With a SqlHealLedger on the session database, the ledger rows
                # commit in the heals' own transaction.
                in_transaction = self._ledger_in_transaction(store)
                results = await store.write([planned], ledger=in_transaction, read_back=True)
                in_storage = [r for r in results
                              if r.outcome in (WriteOutcome.WRITTEN, WriteOutcome.PRESENT)]
                if not store.bumps_revision:
                    session.events[:] = apply_heals(
                        session.events,
                        [(r.heal.plan.insert_at, r.stored or r.heal.event) for r in in_storage],
                    )
                await self._report_heals([r.heal for r in results if r.written],
                                         in_transaction=in_transaction)
            except Exception as exc:
                if self.policy.raise_errors:
                    raise HealWriteError(
                        f"could not heal session {session.id!r}: {exc}"
                    ) from exc
                logger.exception(
                    "adk_session_heal: could not heal session %s; returning it unhealed",
                    session.id,
                    extra={
                        "adk_session_heal": {
                            "app_name": session.app_name,
                            "user_id": session.user_id,
                            "session_id": session.id,
                            "call_event_ids": [h.plan.call_event_id for h in planned.heals],
                        }
                    },
                )
                return True
        return len(in_storage) == len(results)

    async def _decide(
        self,
        session: Session,
        trigger: HealTrigger,
        now: float,
        *,
        incoming: Event | None,
        whole: bool,
    ) -> SessionHeals | None:
        """Decides which of the session's calls to heal, in one call to the core.

        A whole session found clean
        (:func:`~adk_session_heal.core.session_decision.decide_unless_clean`
        reads only the events after the clean prefix remembered from its last
        read) is remembered as the new one and costs nothing more. On a read,
        the heals a late result superseded are taken back first, and the
        session decided again without them.

        Args:
            session: As for :meth:`_heal`.
            trigger: As for :meth:`_heal`.
            now: The clock.
            incoming: As for :meth:`_heal`.
            whole: As for :meth:`_heal`.

        Returns:
            The heals to write (``None``: none).
        """
        events: Sequence[Event] = session.events
        if incoming is not None:
            events = [*session.events, incoming]
        view = SessionView(SessionKey.of(session), events, ADK_EVENTS,
                           seen_events=len(session.events) if whole else None,
                           before=len(session.events))
        # Each hook is asked once per read, also when the session is decided twice.
        reconciler = self._reconciler.once() if self._reconciler is not None else None
        checked = await decide_unless_clean(view, self.policy, known=self._clean.get(view.key),
                                            now=now, trigger=trigger, tool_runs=self._tool_runs,
                                            reconciler=reconciler)
        if checked.clean is not None:
            self._remember(view.key, checked.clean)
        decision = checked.decision
        if decision is None:
            return None
        if whole and incoming is None and decision.superseded:
            await self._take_back(session, decision.superseded, now, warn=False)
            view = replace(view, events=session.events, seen_events=len(session.events),
                           before=len(session.events))
            decision = await decide(view, self.policy, now=now, trigger=trigger,
                                    tool_runs=self._tool_runs, reconciler=reconciler)
        return decision.heals

    def _ledger_in_transaction(self, store: SessionStore) -> bool:
        """Whether the ledger's rows can commit in the store's own write transaction."""
        from ..store.ledger.heal_ledger import SqlHealLedger

        return (
            store.transactional
            and isinstance(self._ledger, SqlHealLedger)
            and self._ledger.shares_database(self._inner)
        )

    async def _take_back(self, session: Session, late: Sequence[LateResult], now: float, *,
                         warn: bool) -> None:
        """Takes out of storage, and of ``session.events``, each heal a late result superseded.

        Args:
            session: The session as read (or as the runner holds it).
            late: The superseded heals found in it
                (:func:`~adk_session_heal.core.late_results.late_results`).
            now: The clock.
            warn: Say so (a WARNING) when the store cannot delete rows: as the
                response is appended, not on every later read.
        """
        from ..store import store_for_service
        from ..store.base import Removal, RemovalReason, RemoveOutcome

        if not late:
            return
        store = store_for_service(self._inner, session)
        if not store.removes:
            if warn:
                logger.warning(
                    "adk_session_heal: a late result superseded heal(s) %s in session %s, but"
                    " %s cannot delete rows: the heal stays beside the real response",
                    ", ".join(found.heal_event_id for found in late), session.id, store)
            return
        key = SessionKey.of(session)
        removals = [
            Removal(key, found.heal_event_id, found.call_event_id, found.call_ids,
                    RemovalReason.LATE_RESULT, now, "wrapper", found.response_event_ids)
            for found in late
        ]
        in_transaction = self._ledger_in_transaction(store)
        async with self._locks.setdefault(key, asyncio.Lock()):
            try:
                results = await store.remove(removals, ledger=in_transaction)
            except Exception:
                if self.policy.raise_errors:
                    raise
                logger.exception("adk_session_heal: could not take back superseded heal(s) in"
                                 " session %s; they stay", session.id)
                return
        gone = {r.event_id for r, outcome in zip(removals, results, strict=True)
                if outcome is not RemoveOutcome.KEPT}
        if kept := [r.event_id for r in removals if r.event_id not in gone]:
            logger.log(logging.WARNING if warn else logging.DEBUG,
                       "adk_session_heal: kept superseded row(s) %s in session %s: changed "
                       "since written, or not a heal of ours in its place", ", ".join(kept),
                       session.id)
        session.events[:] = [e for e in session.events if e.id not in gone]
        done: list[Removal] = []
        for removal, found, outcome in zip(removals, late, results, strict=True):
            if outcome is RemoveOutcome.REMOVED:
                done.append(removal)
                report_removal(removal, dict(zip(found.call_ids, found.tool_names, strict=True)))
        if done and not in_transaction and isinstance(self._ledger, RemovalLedger):
            try:
                await self._ledger.record_removals(done)
            except Exception:
                if self.policy.raise_errors:
                    raise
                logger.exception("adk_session_heal: took back heal(s) in session %s but could"
                                 " not record it in the ledger", session.id)

    async def _report_heals(self, heals: Sequence[Heal], *, in_transaction: bool) -> None:
        """Reports the heals a write inserted (all of one session) and records them in the ledger.

        Args:
            heals: The heals written.
            in_transaction: Their ledger rows committed with the heals already.
        """
        for heal in heals:
            report_heal(heal.record, self._on_heal, data=heal.record_json)
        if heals and self._ledger is not None and not in_transaction:
            try:
                await self._ledger.record([heal.record for heal in heals])
            except Exception:
                if self.policy.raise_errors:
                    raise
                logger.exception(
                    "adk_session_heal: healed session %s but could not record it in the ledger",
                    heals[0].key.session_id,
                )


def _walk_back(events: Sequence[Event], event: Event) -> tuple[bool, float | None]:
    """Walks back from the end of ``events`` to the calls ``event``'s responses answer.

    A heal sorts after its call, so it is met on the way.

    Returns:
        Whether a heal of ours answers one of those calls, and the time of the
        oldest of them found (``None``: none found, or ``event`` is no real response).
    """
    ids = {r.id for r in event.get_function_responses() if r.id}
    if not ids or ADK_EVENTS.heal_marker(event) is not None:
        return False, None
    healed = False
    oldest: float | None = None
    for stored in reversed(events):
        if stored is event:
            continue
        marker = ADK_EVENTS.heal_marker(stored)
        if marker is not None and ids.intersection(marker.get("call_ids") or ()):
            healed = True
        for call in stored.get_function_calls():
            if call.id in ids:
                ids.discard(call.id)
                oldest = stored.timestamp
        if not ids:
            break
    return healed, oldest
