"""The one interface every store layout implements: read raw rows, write a plan.

A *layout* is one way ADK keeps sessions: ``DatabaseSessionService``'s tables
(SQLite, PostgreSQL, MySQL/MariaDB), ADK's own ``SqliteSessionService`` file,
``InMemorySessionService``'s dictionaries, ``RedisSessionService``'s keys, or,
for any other service, nothing but its public ``append_event``. Each layout
has exactly one adapter, a :class:`SessionStore`, and the wrapper and repair
write through the same one:

* :meth:`SessionStore.stream_sessions` yields each session's stored events as
  plain JSON dicts, oldest first, as that layout's ADK reader orders them;
* :meth:`SessionStore.write` applies planned heals
  (:class:`~adk_session_heal.core.healing.SessionHeals`): in one transaction per
  call where the layout has transactions, with each heal's ledger row in that
  same transaction, re-counting each session's events first and skipping a
  session that moved since it was planned. Inserts keep a row that already
  holds a heal's key; nothing is updated;
* :meth:`SessionStore.remove` takes heal rows of ours back out (the one
  deletion there is: a late result or an operator superseded the heal, or
  ``repair --undo`` takes back a run), each removal's ledger row in the same
  transaction. Every remover reads the session's events as stored inside
  that transaction and asks the one rule,
  :func:`~adk_session_heal.core.removal_rule.removal_problem`, through
  :func:`decide_removal`: a row is taken out only while it is still exactly
  what we wrote and the heal of the call event it names; anything else is
  kept;
* :meth:`SessionStore.resolve` writes an operator's resolution and takes out
  the answer it supersedes, in one transaction (:func:`decide_resolution`):
  both, or neither.
"""

from __future__ import annotations

import enum
from collections.abc import AsyncGenerator, Callable, Mapping, Sequence
from contextlib import AbstractAsyncContextManager, nullcontext
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, NamedTuple, TypeGuard, TypeVar

from ..core.event_access import EventAccess
from ..core.healing import Heal, SessionHeals
from ..core.removal_rule import removal_problem
from ..core.session_key import SessionKey
from ..core.shards import Shard
from ..errors import UnsupportedStoreError
from .urls import StoreUrl

if TYPE_CHECKING:  # annotations only: scanning a store by URL loads no ADK
    from google.adk.events.event import Event
    from google.adk.sessions import BaseSessionService
    from sqlalchemy.ext.asyncio import AsyncEngine

    from ..core.tool_runs import ToolRunReader
    from .engines import TimeoutArg
    from .incremental import Since
    from .ledger.heal_ledger import SqlHealLedger
    from .ledger.heal_redis import RedisHealLedger


class Layout(str, enum.Enum):
    """Which ADK service's layout a store holds."""

    DATABASE = "database"
    """``DatabaseSessionService``, schema "1" (any SQL backend)."""
    ADK_SQLITE = "adk_sqlite"
    """ADK's own ``SqliteSessionService``."""
    IN_MEMORY = "in_memory"
    """``InMemorySessionService``'s dictionaries."""
    REDIS = "redis"
    """ADK's ``RedisSessionService``: one JSON string per session."""
    APPEND = "append"
    """Any other service: written through its ``append_event`` only."""


@dataclass(frozen=True, slots=True)
class SessionFilter:
    """Restricts a scan to one app, user or session, to one shard, or to what changed.

    ``None`` means all; ``since`` (:class:`~adk_session_heal.store.incremental.Since`)
    keeps the sessions updated from a point on, and a scope's unsettled ones
    (SQL stores only). A plain value: the SQL layouts read it as SQL through
    :mod:`~adk_session_heal.store.session_filter_sql`, the others through :meth:`holds`.
    """

    app_name: str | None = None
    user_id: str | None = None
    session_id: str | None = None
    shard: Shard | None = None
    since: Since | None = None

    def holds(self, key: SessionKey) -> bool:
        """Whether a session matches (for stores filtered in Python)."""
        return ((self.app_name is None or self.app_name == key.app_name)
                and (self.user_id is None or self.user_id == key.user_id)
                and (self.session_id is None or self.session_id == key.session_id)
                and (self.shard is None or self.shard.holds(key)))


class DamagedRow(NamedTuple):
    """A stored event that cannot be read as ADK stores events.

    Attributes:
        event_id: The row's event id (``None`` when even that is unknown, e.g.
            a whole Redis value that is not JSON).
        problem: What is wrong, in one short line (never the row's content).
    """

    event_id: str | None
    problem: str


class StoredSession(NamedTuple):
    """One session's stored events, oldest first, as ADK would read them.

    ``events`` are the ``event_data`` JSON dicts, with ``id``,
    ``invocation_id`` and ``timestamp`` as ADK's reader sets them. ``damaged``
    are the rows that could not be read as an event (left out of ``events``):
    a session with any is skipped whole by scan and repair, since an
    unreadable row may hold the response to a call that looks dead.

    ``clean``: the store found, decoding each row only in part, that
    :func:`~adk_session_heal.core.findings.all_answered` holds (a stream asked
    to ``pass_clean``): nothing to report and nothing to decide, and
    ``events`` hold only the fields that test reads (one per row).
    """

    key: SessionKey
    events: list[dict[str, Any]]
    damaged: tuple[DamagedRow, ...] = ()
    clean: bool = False


class WriteOutcome(str, enum.Enum):
    """What a writer did with one planned heal."""

    WRITTEN = "written"
    """Inserted by this write."""
    PRESENT = "already_present"
    """A row with the heal's key was already stored (another healer won)."""
    CHANGED = "session_changed"
    """Skipped: the session's events changed since the plan was made."""
    GONE = "session_deleted"
    """Skipped: the session was deleted since the plan was made."""


@dataclass(frozen=True, slots=True)
class WriteResult:
    """One planned heal and what the writer did with it.

    Attributes:
        heal: The planned heal.
        outcome: What happened.
        stored: The event storage holds under the heal's id when it was
            already present and the caller asked to read it back; else ``None``.
    """

    heal: Heal
    outcome: WriteOutcome
    stored: Event | None = None

    @property
    def written(self) -> bool:
        """Whether this write inserted the heal."""
        return self.outcome is WriteOutcome.WRITTEN


class RemovalReason(str, enum.Enum):
    """Why one of our heals is taken out of storage."""

    LATE_RESULT = "late_result"
    """The call's real response was stored after all (see ``core/late_results.py``)."""
    RESOLVED = "resolved"
    """An operator wrote the call's true outcome (see :mod:`~adk_session_heal.core.review`)."""
    UNDO = "undo"
    """``repair --undo`` takes back a whole run (see :mod:`~adk_session_heal.ops.undo`)."""


@dataclass(frozen=True, slots=True)
class Removal:
    """One heal row of ours to take out of storage, and the ledger's record of it.

    Attributes:
        key: The session.
        event_id: The heal event's id.
        call_event_id: The call event the heal answers (the stored row's
            marker must name it, and the session as stored must bear it out,
            see :func:`decide_removal`).
        call_ids: The calls it answered.
        reason: Why it is taken out.
        removed_at: When (POSIX seconds).
        removed_by: Who: ``"wrapper"``, ``"repair"``, or an operator's name.
        detail: What superseded it (for a late result: the real responses'
            event ids; for an undo: the undone run's id).
        digest: The :func:`~adk_session_heal.core.healing.event_digest` the row
            must still have (an undo's: the digest its run recorded);
            ``None``: the row's own seal alone.
        run_id: The run taking it out (``None``: no ``repair`` run), kept
            in the removal's ledger row.
    """

    key: SessionKey
    event_id: str
    call_event_id: str
    call_ids: tuple[str, ...]
    reason: RemovalReason
    removed_at: float
    removed_by: str
    detail: tuple[str, ...] = ()
    digest: str | None = None
    run_id: str | None = None

    @property
    def must_be_superseded(self) -> bool:
        """The row goes only while something else answers its calls (not for an undo)."""
        return self.reason is not RemovalReason.UNDO


class RemoveOutcome(str, enum.Enum):
    """What a store did with one :class:`Removal`."""

    REMOVED = "removed"
    """Taken out by this call."""
    ABSENT = "absent"
    """No row with that id (already taken out, or the session is gone)."""
    KEPT = "kept"
    """The row is not that call event's heal of ours: left as it is."""


class RemovalDecision(NamedTuple):
    """What a remover is to do with one :class:`Removal` (:func:`decide_removal`).

    Attributes:
        outcome: :attr:`RemoveOutcome.REMOVED` (take it out), ``ABSENT`` or ``KEPT``.
        position: The row's index in the events read (``None`` when absent).
        problem: Why it is kept (``None`` otherwise).
    """

    outcome: RemoveOutcome
    position: int | None = None
    problem: str | None = None


E = TypeVar("E")


def _position(events: Sequence[E], event_id: str, access: EventAccess[E]) -> int | None:
    """The index of the (first) event with this id, or ``None``."""
    return next((i for i, event in enumerate(events) if access.event_id(event) == event_id),
                None)


def decide_removal(
    events: Sequence[E],
    removal: Removal,
    *,
    access: EventAccess[E],
    stored: Callable[[E], Mapping[str, Any]],
) -> RemovalDecision:
    """Decides one removal from the session's events as stored (read in the write transaction).

    The one rule is :func:`~adk_session_heal.core.removal_rule.removal_problem`;
    this finds the row and turns the answer into an outcome.

    Args:
        events: The session's events as stored, in its layout's read order
            (empty when the session is gone).
        removal: The planned removal.
        access: How to read ``events``.
        stored: Returns an event's JSON object as stored (for its seal and digest).
    """
    index = _position(events, removal.event_id, access)
    if index is None:
        return RemovalDecision(RemoveOutcome.ABSENT)
    problem = removal_problem(events, index, stored(events[index]),
                              call_event_id=removal.call_event_id, digest=removal.digest,
                              superseded=removal.must_be_superseded, access=access)
    if problem is not None:
        return RemovalDecision(RemoveOutcome.KEPT, index, problem)
    return RemovalDecision(RemoveOutcome.REMOVED, index)


class ResolveOutcome(str, enum.Enum):
    """What a store did with an operator's resolution (:meth:`SessionStore.resolve`)."""

    WRITTEN = "written"
    """Stored, and the answer it supersedes taken out, in one transaction."""
    PRESENT = "already_present"
    """A row with its id was stored already; the answer it supersedes taken out."""
    GONE = "superseded_gone"
    """Nothing written: the answer it was to supersede is no longer stored (another
    operator's resolution, or a late result, replaced it meanwhile)."""
    KEPT = "superseded_kept"
    """Nothing written: the answer it was to supersede may not be taken out (see
    :attr:`ResolveResult.problem`)."""


class ResolveResult(NamedTuple):
    """What :meth:`SessionStore.resolve` did.

    Attributes:
        outcome: What happened.
        problem: For :attr:`ResolveOutcome.KEPT`: why the superseded row stays.
    """

    outcome: ResolveOutcome
    problem: str | None = None


class ResolutionDecision(NamedTuple):
    """What a store is to do with a resolution (:func:`decide_resolution`).

    Attributes:
        result: The outcome to report.
        removal: The decision on the superseded row (its index in the events
            read, before the resolution is inserted).
        insert: Insert the resolution (its id is not stored yet).
    """

    result: ResolveResult
    removal: RemovalDecision
    insert: bool


def decide_resolution(
    events: Sequence[E],
    resolution: E,
    removal: Removal,
    *,
    access: EventAccess[E],
    stored: Callable[[E], Mapping[str, Any]],
) -> ResolutionDecision:
    """Decides an operator's resolution from the session's events as stored.

    The resolution goes right after the answer it supersedes; that answer
    must still be stored and, with the resolution in place, be one the one
    rule lets go (:func:`decide_removal`). Otherwise nothing is written.

    Args:
        events: The session's events as stored, read in the write transaction.
        resolution: The resolution, in the form this layout stores events.
        removal: The removal of the answer it supersedes.
        access: How to read ``events``.
        stored: As for :func:`decide_removal`.
    """
    index = _position(events, removal.event_id, access)
    if index is None:
        return ResolutionDecision(ResolveResult(ResolveOutcome.GONE),
                                  RemovalDecision(RemoveOutcome.ABSENT), False)
    present = _position(events, access.event_id(resolution), access) is not None
    after = list(events) if present else [*events[:index + 1], resolution, *events[index + 1:]]
    decision = decide_removal(after, removal, access=access, stored=stored)
    if decision.outcome is not RemoveOutcome.REMOVED:
        return ResolutionDecision(ResolveResult(ResolveOutcome.KEPT, decision.problem),
                                  RemovalDecision(RemoveOutcome.KEPT, index, decision.problem),
                                  False)
    outcome = ResolveOutcome.PRESENT if present else ResolveOutcome.WRITTEN
    return ResolutionDecision(ResolveResult(outcome),
                              RemovalDecision(RemoveOutcome.REMOVED, index), not present)


class SessionStore:
    """One store layout's adapter (see the module docstring).

    Attributes:
        layout: Which layout this adapter serves.
        url: The URL it was opened from (``None``: built over a service).
        transactional: Heals and their ledger rows commit together.
        bumps_revision: A write changes the session's stored revision (only
            the ``append_event`` fallback), so a runner holding the session
            would fail its next append.
        removes: :meth:`remove` can take a row out (not through
            ``append_event`` alone).
    """

    layout: Layout
    url: StoreUrl | None = None
    transactional = True
    bumps_revision = False
    removes = True

    def __str__(self) -> str:
        """Names the store for messages (URLs with their password redacted)."""
        return self.layout.value

    async def count_sessions(self, where: SessionFilter) -> int:
        """Returns how many sessions match."""
        raise UnsupportedStoreError(f"{self} cannot be scanned: use scan_service")

    def stream_sessions(self, where: SessionFilter, *,
                        pass_clean: bool = False) -> AsyncGenerator[StoredSession, None]:
        """Yields every matching session that has events, in one ordered pass.

        Rows are streamed in chunks; one session's events are held at a time.
        With ``pass_clean``, a layout may yield a session it found clean
        without decoding it whole (:attr:`StoredSession.clean`); layouts that
        do not, ignore it.
        """
        raise UnsupportedStoreError(f"{self} cannot be scanned: use scan_service")

    async def candidates(
        self, where: SessionFilter, *, everywhere: bool = False, all_if_most: bool = False
    ) -> tuple[int, AsyncGenerator[StoredSession, None]] | None:
        """Lets the database pick the sessions that can hold a finding (a SQL prefilter).

        Args:
            where: The sessions to consider.
            everywhere: Also where the prefilter measured slower than a full
                scan (MySQL/MariaDB).
            all_if_most: When the candidates are nearly all the sessions, the
                stream may yield every matching session instead, where one
                ordered pass reads them faster (PostgreSQL).

        Returns:
            The number of matching events (all sessions) and a stream of the
            sessions not provably clean, as :meth:`stream_sessions` yields
            them; ``None`` when the layout or engine has no prefilter (scan
            everything).
        """
        return None

    async def newest_update(self, where: SessionFilter) -> float | None:
        """Returns the newest ``update_time`` of the matching sessions, in column seconds.

        What an incremental run records as its watermark
        (:mod:`adk_session_heal.store.incremental`); ``where.since`` is ignored.

        Raises:
            UnsupportedStoreError: The layout keeps no update time a query can
                read (Redis, in-memory, any other service): scan it whole.
        """
        raise UnsupportedStoreError(
            f"{self} keeps no update time a query can filter on: --incremental and --since "
            "need ADK's SQL storage (DatabaseSessionService or SqliteSessionService); scan it "
            "whole")

    async def ledger_revision(self) -> str | None:
        """Returns the heal ledger's migration revision, or ``None`` if absent."""
        return None

    def _opened_url(self) -> StoreUrl:
        """The URL this store was opened from.

        Raises:
            UnsupportedStoreError: It was built over a session service.
        """
        if self.url is None:
            raise UnsupportedStoreError(f"{self} keeps no heal ledger: open the store by its URL")
        return self.url

    def heal_ledger(self, timeout: TimeoutArg = None) -> SqlHealLedger | RedisHealLedger:
        """Opens the heal ledger beside these sessions (each layout says which it keeps).

        A SQL layout's is its tables (on a database server sharing this
        store's engine, :meth:`server_engine`), Redis's the hashes beside its
        sessions. Close it when done.

        Raises:
            UnsupportedStoreError: The layout keeps none, or the store was
                built over a session service, not opened from a URL.
        """
        raise UnsupportedStoreError(f"{self} keeps no heal ledger: open the store by its URL")

    def tool_runs(
        self, timeout: TimeoutArg = None
    ) -> AbstractAsyncContextManager[ToolRunReader | None]:
        """The tool-run ledger beside these sessions, for reading; ``None`` when there is none.

        A SQL layout's is its table (revision ``0002`` or later, and ``None``
        while it holds no run at all), Redis's the hashes beside its sessions;
        every other layout has none (this default).
        """
        return nullcontext(None)

    async def write(
        self, batch: Sequence[SessionHeals], *, ledger: bool, read_back: bool = False
    ) -> list[WriteResult]:
        """Applies planned heals.

        Args:
            batch: The heals, grouped by session.
            ledger: Also insert each written heal's ledger row, in the same
                transaction.
            read_back: For a heal already present, read the stored event back
                into :attr:`WriteResult.stored`.

        Returns:
            One result per heal, in ``batch`` order.
        """
        raise NotImplementedError

    async def remove(self, batch: Sequence[Removal], *, ledger: bool) -> list[RemoveOutcome]:
        """Takes heal rows of ours out of storage (see the module docstring).

        Args:
            batch: The removals.
            ledger: Also insert each removal's ledger row, in the same transaction.

        Returns:
            One outcome per removal, in ``batch`` order.

        Raises:
            UnsupportedStoreError: The layout has no way to delete a row (the
                ``append_event`` fallback).
        """
        raise UnsupportedStoreError(f"{self} cannot take a row out: only ADK's own stores can")

    async def resolve(
        self, resolution: Heal, removal: Removal, *, ledger: bool
    ) -> ResolveResult:
        """Writes an operator's resolution and takes out the answer it supersedes, together.

        One transaction (see :func:`decide_resolution`): lock the session,
        read its events, check that the superseded row is still stored and
        still may go, insert the resolution, delete that row, and (``ledger``)
        insert the resolution's heal-ledger row, the removal's row and the
        resolution's own record (who, when, what). Nothing is written unless
        all of it is.

        Args:
            resolution: The resolution (from
                :func:`~adk_session_heal.core.review.plan_resolution`).
            removal: The removal of the heal or earlier resolution it supersedes.
            ledger: Record it in the ledger (revision ``0006`` or later).

        Raises:
            UnsupportedStoreError: The layout cannot take a row out.
        """
        raise UnsupportedStoreError(f"{self} cannot take a row out: only ADK's own stores can")

    def server_engine(self) -> AsyncEngine | None:
        """The engine of a database server, for a ledger on the same database to share.

        Sharing saves the ledger reads and writes of a short run (an
        incremental scan) their own connections: on PostgreSQL each new
        connection cost 5-10 ms (measured). ``None`` (the default): the
        ledger opens its own (a SQLite file, whose scan opens it read-only).
        """
        return None

    async def close(self) -> None:
        """Releases connections this adapter opened."""


S = TypeVar("S", bound="BaseSessionService")


def stores_as_adk_does(service: object, adk_class: type[S]) -> TypeGuard[S]:
    """Whether ``service`` is ``adk_class`` or a subclass that changes nothing it stores.

    Every attribute a subclass defines that ``adk_class`` also has must be
    ``__init__`` or a dunder the class machinery sets: overriding any method
    (``append_event``, ``get_session``, a private helper) may change how rows
    are written or read, so such a service is only written through its own API.

    Args:
        service: The session service.
        adk_class: One of ADK's own session services.
    """
    cls = type(service)
    if not issubclass(cls, adk_class):
        return False
    for klass in cls.__mro__:
        if klass is adk_class:
            return True
        for name, value in vars(klass).items():
            if name == "__init__" or not hasattr(adk_class, name):
                continue
            if name.startswith("__") and name.endswith("__") and not callable(value):
                continue
            if name in _CLASS_MACHINERY:
                continue
            return False
    return True  # pragma: no cover - adk_class is always in the MRO of its subclass


_CLASS_MACHINERY = frozenset({
    "__init_subclass__", "__subclasshook__", "__class_getitem__", "_abc_impl",
})
"""Attributes Python's class and ABC machinery sets on every subclass."""
