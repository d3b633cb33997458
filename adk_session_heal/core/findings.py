"""Classification of every tool call in a session: which are answered, which are dead.

:func:`classify` looks at a session's events (oldest first, as ADK stores and
returns them) and gives every function-call occurrence one
:class:`CallStatus`:

===============  ================================================================
``answered``     a response belongs to it (ADK's attribution rule, see
                 :mod:`adk_session_heal.core.pairing`).
``superseded``   unanswered, and a later event belongs to another invocation. In
                 ADK a new invocation on a session means the old one is over, so
                 the call is dead for sure (ADK's compaction reasons the same way
                 in ``_provably_dead_call_ids``).
``stale``        unanswered, in the newest invocation, older than ``stale_after``
                 plus ``clock_skew`` (the call's time is its writer's clock, the
                 age is read on ours).
``in_flight``    unanswered, in the newest invocation, younger than that (or no
                 age given, or stamped in our future). May still be running:
                 never healed.
``pending``      a long-running call (``long_running_tool_ids``), a tool awaiting
                 confirmation or credentials, or one of ADK's client function
                 calls (``adk_request_*``). Legitimately unanswered: never healed.
``id_less``      the call has no id, so no response can be tied to it reliably.
                 Reported, never healed (ADK leaves them alone too).
``malformed``    unanswered, and a heal would break the request some ADK builds:
                 its name is empty (LiteLlm refuses it), another call of its
                 event carries its id (OpenAI and Anthropic refuse the pair
                 answered), its event shares an id with another call event
                 and one of the two holds several calls (ADK 1.x would send
                 the heal after both), or its id is another malformed call's.
                 ADK 2.10+ leaves such calls out of the request while
                 unanswered. Reported, never healed (see
                 :mod:`~adk_session_heal.core.unhealable`).
``out_of_turn``  unanswered, and Gemini refuses its turn where it stands (the
                 content ADK's request would show before it is a turn of its
                 own agent); ADK 2.10+ leaves it out of the request while
                 unanswered, and an answer would bring it back. Reported,
                 never healed (see :mod:`~adk_session_heal.core.unhealable`).
``rewound``      the call sits in a stretch of history a rewind annulled. ADK
                 never shows it to a model; a response written now would become
                 an orphan. Reported, never healed.
``abandoned``    only with the tool-run ledger (its correction is the decision's
                 :func:`~.session_decision.with_tool_runs`): an ``in_flight``
                 call whose record shows nobody runs it (its lease expired, or
                 it ended without its response reaching the session). Dead at
                 once, whatever its age.
===============  ================================================================

Responses whose call is missing are reported as orphaned; calls answered more
than once (other than a long-running call's progress updates) are reported as
duplicates. Only ``superseded``, ``stale`` and ``abandoned`` calls are ever
healed; with the tool-run ledger, never one whose lease is alive, however old
(:func:`~.session_decision.with_tool_runs` makes it ``in_flight``).

The module is pure: it reads events through an
:class:`~adk_session_heal.views.EventAccess` and performs no I/O.
"""

from __future__ import annotations

import enum
import functools
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

from ..policy import CallOutcome
from .event_access import ADK_EVENTS, EventAccess
from .invocations import live_mask, supersession_boundary
from .pairing import EMPTY_STEP, CallOccurrence, Step, answered_once, pair

E = TypeVar("E")

CLIENT_FUNCTION_CALL_NAMES = frozenset(
    {
        "adk_request_credential",
        "adk_request_confirmation",
        "adk_request_input",
        "adk_framework",
    }
)
"""Function names ADK uses for its own client and framework calls (never healed)."""


class CallStatus(str, enum.Enum):
    """What became of one function-call occurrence."""

    ANSWERED = "answered"
    SUPERSEDED = "superseded"
    STALE = "stale"
    IN_FLIGHT = "in_flight"
    PENDING = "pending"
    ID_LESS = "id_less"
    MALFORMED = "malformed"
    OUT_OF_TURN = "out_of_turn"
    REWOUND = "rewound"
    ABANDONED = "abandoned"


class PendingReason(str, enum.Enum):
    """Why a ``pending`` call is legitimately unanswered."""

    LONG_RUNNING = "long_running"
    AWAITING_CONFIRMATION_OR_CREDENTIAL = "awaiting_confirmation_or_credential"
    CLIENT_CALL = "client_call"


HEALABLE = frozenset({CallStatus.SUPERSEDED, CallStatus.STALE, CallStatus.ABANDONED})
"""The statuses of calls that are dead and may be healed."""

_OPEN = frozenset({*HEALABLE, CallStatus.IN_FLIGHT})
"""Statuses the tool-run ledger can change: unanswered calls that are not pending."""


@dataclass(frozen=True, slots=True)
class CallFinding:
    """The status of one function-call occurrence.

    Attributes:
        event_index: Position of the call event in the classified list.
        event_id: Id of the call event.
        invocation_id: Invocation of the call event.
        call_id: The call id (``None`` for id-less calls).
        name: The function name.
        timestamp: Time of the call event (POSIX seconds).
        status: What became of the call.
        pending_reason: Why it is pending, for ``pending`` calls.
        answered_by_heal: For answered calls: the response that counts (the last
            one) is a synthetic one written by this package.
        outcome: What the tool-run ledger says of an unanswered call's run
            (``unknown`` without it; see
            :func:`~adk_session_heal.core.session_decision.with_tool_runs`).
        recovered: A ``finished`` run's result, kept by the ledger: what a
            heal answers with instead of an error.
        lease_holder: ``host/pid`` of a live lease that keeps the call
            ``in_flight``; ``None`` otherwise.
    """

    event_index: int
    event_id: str
    invocation_id: str
    call_id: str | None
    name: str
    timestamp: float
    status: CallStatus
    pending_reason: PendingReason | None = None
    answered_by_heal: bool = False
    outcome: CallOutcome = CallOutcome.UNKNOWN
    recovered: Mapping[str, Any] | None = field(default=None, compare=False)
    lease_holder: str | None = None


@dataclass(frozen=True, slots=True)
class ResponseFinding:
    """A response that does not pair cleanly: orphaned, or one of several.

    Attributes:
        event_index: Position of the response event in the classified list.
        event_id: Id of the response event.
        call_id: The response id (``None`` when it has none).
        name: The function name.
        involves_heal: For duplicates: one of the responses is synthetic (a real
            response arrived after a heal; ADK keeps the last one).
    """

    event_index: int
    event_id: str
    call_id: str | None
    name: str
    involves_heal: bool = False


class SessionFindings:
    """Everything :func:`classify` found in one session.

    The per-call findings are built on first access to :attr:`calls`, so a
    caller that only asks :attr:`needs_healing` of a session whose calls are all
    answered (the wrapper's case on every ``get_session``) never pays for them.

    Attributes:
        orphaned_responses: Responses with no call to belong to.
        duplicate_responses: Extra responses to an already answered call (the
            second and later ones), excluding long-running progress updates.
    """

    __slots__ = ("_all_answered", "_calls", "_factory", "_maybe_dead", "_read",
                 "duplicate_responses", "orphaned_responses")

    def __init__(
        self,
        calls: Sequence[CallFinding] | Callable[[], Sequence[CallFinding]] = (),
        orphaned_responses: Sequence[ResponseFinding] = (),
        duplicate_responses: Sequence[ResponseFinding] = (),
        *,
        maybe_dead: bool = True,
        all_answered: bool | Callable[[], bool] = False,
    ) -> None:
        """Creates findings from call findings, or from a function building them.

        Args:
            calls: The call findings, or a function returning them on demand.
            orphaned_responses: Responses with no call to belong to.
            duplicate_responses: Extra responses to answered calls.
            maybe_dead: ``False`` promises that no call is healable, so
                :attr:`dead` can answer without building the call findings.
            all_answered: ``True``, or a function checking it on demand,
                promises that every call is ``answered`` and no response is
                orphaned or a duplicate (see :attr:`all_answered`).
        """
        if callable(calls):
            self._factory: Callable[[], Sequence[CallFinding]] | None = calls
            self._calls: tuple[CallFinding, ...] | None = None
        else:
            self._factory = None
            self._calls = tuple(calls)
        self._maybe_dead = maybe_dead
        self._all_answered = all_answered
        self.orphaned_responses = tuple(orphaned_responses)
        self.duplicate_responses = tuple(duplicate_responses)
        self._read: tuple[Sequence[Any], list[Step]] | None = None

    def steps_of(self, events: Sequence[E]) -> list[Step] | None:
        """Returns each event's call and response parts as classifying read them, or ``None``.

        Planning reads the same parts :func:`classify` read, so a planner given
        the very events classified (the same object) reuses them instead of
        walking the events again. ``None`` for other events, or findings not
        made by :func:`classify` from events with calls.
        """
        read = self._read
        return read[1] if read is not None and read[0] is events else None

    @property
    def calls(self) -> tuple[CallFinding, ...]:
        """One finding per call occurrence, in history order."""
        if self._calls is None:
            assert self._factory is not None
            self._calls = tuple(self._factory())
            self._factory = None
        return self._calls

    @property
    def all_answered(self) -> bool:
        """Whether every call is ``answered``, by exactly one response, and nothing else is there.

        ``True`` only where :func:`classify` could tell without building the
        call findings (the healthy session; a session without calls); ``False``
        means "look at :attr:`calls`". A report lists nothing of such a
        session, so it skips them. Checking it raises what building the call
        findings would raise for a malformed row.
        """
        if callable(self._all_answered):
            self._all_answered = self._all_answered()
        return self._all_answered

    @property
    def dead(self) -> tuple[CallFinding, ...]:
        """The calls that may be healed (``superseded`` and ``stale``)."""
        if not self._maybe_dead:
            return ()
        return tuple(c for c in self.calls if c.status in HEALABLE)

    @property
    def needs_healing(self) -> bool:
        """Whether at least one call may be healed."""
        return bool(self.dead)

    @property
    def open_call_ids(self) -> tuple[str, ...]:
        """Ids of the unanswered calls the tool-run ledger can speak for (not pending).

        Empty at no cost when every call with an id is answered (the call
        findings are not built): a healer reads tool runs only for these.
        """
        if not self._maybe_dead:
            return ()
        return tuple(c.call_id for c in self.calls if c.call_id and c.status in _OPEN)

    def with_status(self, status: CallStatus) -> tuple[CallFinding, ...]:
        """Returns the call findings with one status."""
        return tuple(c for c in self.calls if c.status is status)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, SessionFindings):
            return NotImplemented
        return (
            self.calls == other.calls
            and self.orphaned_responses == other.orphaned_responses
            and self.duplicate_responses == other.duplicate_responses
        )

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return (
            f"SessionFindings(calls={self.calls!r}, "
            f"orphaned_responses={self.orphaned_responses!r}, "
            f"duplicate_responses={self.duplicate_responses!r})"
        )


NO_FINDINGS = SessionFindings(all_answered=True)
"""The findings of a session with nothing to report (no call, or every call answered once:
:func:`all_answered`); shared, never changed."""


def classify(
    events: Sequence[E],
    access: EventAccess[E] = ADK_EVENTS,  # type: ignore[assignment]
    *,
    now: float,
    stale_after: float | None = None,
    clock_skew: float = 0.0,
) -> SessionFindings:
    """Classifies every function-call occurrence of a session.

    Args:
        events: The session's events, oldest first (as ADK returns them).
        access: How to read the events: :data:`~adk_session_heal.views.ADK_EVENTS`
            for ``Event`` objects (the default) or
            :data:`~adk_session_heal.views.STORED_JSON` for stored JSON dicts.
        now: The current time (POSIX seconds), for the age of calls.
        stale_after: Age in seconds after which an unanswered call of the newest
            invocation counts as ``stale``. ``None`` (the default) never calls a
            call of the newest invocation stale.
        clock_skew: How far (seconds) the writer's clock may be behind ``now``'s:
            a call is ``stale`` only when ``now - its time > stale_after +
            clock_skew``, so never when it is stamped in the future. The
            healers pass :attr:`HealPolicy.clock_skew
            <adk_session_heal.policy.HealPolicy.clock_skew>` (5 minutes by
            default); ``0`` (the default here) trusts one shared clock.
            ``superseded`` does not depend on clocks.

    Returns:
        The findings. A session without calls costs one pass over the events;
        one whose calls are all answered, one more pass over its calls.
    """
    steps, rewinds = access.steps(events)
    if not rewinds and all(step is EMPTY_STEP for step in steps):
        return NO_FINDINGS

    read = (events, steps)  # the parts as read, before a rewind empties any
    live = live_mask(events, access, rewinds)
    if live is not None:
        steps = [step if live[i] else EMPTY_STEP for i, step in enumerate(steps)]
    stale_age = None if stale_after is None else stale_after + clock_skew
    if answered_once(steps):
        # Every call answered once, no orphan, no duplicate: the healthy session
        # (the wrapper's case on every get_session) is paired only if its
        # per-call findings are asked for.
        healthy = SessionFindings(
            lambda: _call_findings(events, access, pair(steps).occurrences, live, steps,
                                   now=now, stale_age=stale_age, maybe_dead=False),
            maybe_dead=False,
            all_answered=False if live is not None else (
                lambda: _none_pending(events, access, steps)),
        )
        healthy._read = read
        return healthy
    pairing = pair(steps)

    maybe_dead = any(o.id and not o.responses for o in pairing.occurrences)

    def build_calls() -> list[CallFinding]:
        return _call_findings(events, access, pairing.occurrences, live, steps,
                              now=now, stale_age=stale_age, maybe_dead=maybe_dead)

    orphans = tuple(
        ResponseFinding(
            event_index=o.step,
            event_id=access.event_id(events[o.step]),
            call_id=o.id,
            name=o.name,
        )
        for o in pairing.orphans
    )
    duplicates: list[ResponseFinding] = []
    for occurrence in pairing.occurrences:
        if len(occurrence.responses) < 2:
            continue
        if occurrence.id and occurrence.id in access.long_running_ids(events[occurrence.step]):
            continue
        involves_heal = any(
            access.heal_marker(events[i]) is not None for i in occurrence.responses
        )
        for index in occurrence.responses[1:]:
            duplicates.append(
                ResponseFinding(
                    event_index=index,
                    event_id=access.event_id(events[index]),
                    call_id=occurrence.id,
                    name=occurrence.name,
                    involves_heal=involves_heal,
                )
            )
    findings = SessionFindings(
        build_calls,
        orphaned_responses=orphans,
        duplicate_responses=duplicates,
        maybe_dead=maybe_dead,
    )
    findings._read = read
    return findings


def all_answered(events: Sequence[E], access: EventAccess[E] = ADK_EVENTS,  # type: ignore[assignment]
                 ) -> bool:
    """Whether :func:`classify` would find every call answered once and nothing else.

    The same answer as ``classify(events, access, ...).all_answered`` (under
    any ``now``, ``stale_after`` or ``clock_skew``), from the same steps, by
    the same tests: no event rewinds, and either no event holds a call or a
    response, or :func:`~.pairing.answered_once` holds and no response awaits
    a confirmation or a credential. It reads only ``access.steps``, and, of
    the events holding calls or responses, ``access.timestamp``,
    ``access.heal_marker`` and ``access.pending_ids``: a store may decode just
    the fields those read to learn that a session has nothing to report (and
    :func:`~.session_decision.decide` nothing to decide), and decode the rest
    only when it has.

    Raises:
        TypeError, AttributeError, ValueError: What :func:`classify` and its
            findings' ``all_answered`` raise for an event of the wrong shape.
    """
    steps, rewinds = access.steps(events)
    if rewinds:
        return False
    if all(step is EMPTY_STEP for step in steps):
        return True
    return answered_once(steps) and _none_pending(events, access, steps)


def _none_pending(events: Sequence[E], access: EventAccess[E], steps: Sequence[Step]) -> bool:
    """Whether no call of a healthy session is ``pending`` (its one response asks for more).

    For :attr:`SessionFindings.all_answered`: in a session where every call has
    exactly one response, :func:`_call_findings` would find each call
    ``answered`` unless its response awaits a confirmation or a credential. It
    reads the same values :func:`_call_findings` reads, through the same
    accessors, so a malformed row raises here as it would there.
    """
    for index, (calls, responses) in enumerate(steps):
        if calls:
            access.timestamp(events[index])
        if responses:
            access.heal_marker(events[index])
            if access.pending_ids(events[index]):
                return False
    return True


def _call_findings(
    events: Sequence[E],
    access: EventAccess[E],
    occurrences: Sequence[CallOccurrence],
    live: list[bool] | None,
    steps: Sequence[Step],
    *,
    now: float,
    stale_age: float | None,
    maybe_dead: bool,
) -> list[CallFinding]:
    """Builds the per-call findings of :func:`classify` (on first access).

    ``stale_age`` is ``stale_after + clock_skew``, or ``None``: never stale.
    """
    long_running: set[str] = set()
    awaiting: set[str] = set()
    newest: str | None = None
    tail_start, last_counted = 0, -1
    healed: set[tuple[str, str]] = set()
    if maybe_dead:
        for index, step in enumerate(steps):
            if step is not EMPTY_STEP:
                event = events[index]
                if ids := access.long_running_ids(event):
                    long_running.update(ids)
                if ids := access.pending_ids(event):
                    awaiting.update(ids)
                if (marker := access.heal_marker(event)) is not None:
                    healed.update(_healed_calls(marker))
        newest, tail_start, last_counted = supersession_boundary(events, access)

    calls: list[CallFinding] = []
    for occurrence in occurrences:
        index = occurrence.step
        event = events[index]
        call_id = occurrence.id
        invocation = access.invocation_id(event)
        pending_reason: PendingReason | None = None
        answered_by_heal = False
        if call_id is None:
            status = CallStatus.ID_LESS
        elif not occurrence.responses and (access.event_id(event), call_id) in healed:
            # Our heal of this very call event, stored where pairing cannot see it
            # (before its call, after a tie or a clock step): healing again would
            # only add another.
            status, answered_by_heal = CallStatus.ANSWERED, True
        elif occurrence.responses:
            last_response = events[occurrence.responses[-1]]
            if call_id in access.pending_ids(last_response):
                status = CallStatus.PENDING
                pending_reason = PendingReason.AWAITING_CONFIRMATION_OR_CREDENTIAL
            else:
                status = CallStatus.ANSWERED
                answered_by_heal = access.heal_marker(last_response) is not None
        elif occurrence.name in CLIENT_FUNCTION_CALL_NAMES:
            status, pending_reason = CallStatus.PENDING, PendingReason.CLIENT_CALL
        elif call_id in long_running:
            status, pending_reason = CallStatus.PENDING, PendingReason.LONG_RUNNING
        elif call_id in awaiting:
            status = CallStatus.PENDING
            pending_reason = PendingReason.AWAITING_CONFIRMATION_OR_CREDENTIAL
        elif index < tail_start or (invocation != newest and index < last_counted):
            status = CallStatus.SUPERSEDED
        elif stale_age is not None and now - access.timestamp(event) > max(stale_age, 0.0):
            status = CallStatus.STALE  # an age past the skew; never a time in our future
        else:
            status = CallStatus.IN_FLIGHT
        calls.append(
            CallFinding(
                event_index=index,
                event_id=access.event_id(event),
                invocation_id=invocation,
                call_id=call_id,
                name=occurrence.name,
                timestamp=access.timestamp(event),
                status=status,
                pending_reason=pending_reason,
                answered_by_heal=answered_by_heal,
            )
        )

    if maybe_dead:
        calls = _unhealable_judge()(events, access, occurrences, calls, steps, live)

    if live is not None:
        calls.extend(_rewound_calls(events, access, live))
        calls.sort(key=lambda c: c.event_index)

    return calls


@functools.cache
def _unhealable_judge() -> Callable[..., list[CallFinding]]:
    """:func:`~.unhealable.judge_unhealable`, imported on first use (it reads this module's
    statuses), then kept: a repair asks it of every session."""
    from .unhealable import judge_unhealable

    return judge_unhealable


def _healed_calls(marker: Mapping[str, Any] | None) -> Iterator[tuple[str, str]]:
    """Yields ``(call event id, call id)`` for each call a heal marker says it answers."""
    if marker is None:
        return
    call_event_id, call_ids = marker.get("call_event_id"), marker.get("call_ids")
    if isinstance(call_event_id, str) and isinstance(call_ids, list):
        for call_id in call_ids:
            if isinstance(call_id, str):
                yield call_event_id, call_id


def _rewound_calls(
    events: Sequence[E], access: EventAccess[E], live: list[bool]
) -> list[CallFinding]:
    """Returns a ``rewound`` finding for every call in an annulled event."""
    found: list[CallFinding] = []
    for index, event in enumerate(events):
        if live[index]:
            continue
        (calls, _responses) = access.steps([event])[0][0]
        for call_id, name in calls:
            found.append(
                CallFinding(
                    event_index=index,
                    event_id=access.event_id(event),
                    invocation_id=access.invocation_id(event),
                    call_id=call_id,
                    name=name,
                    timestamp=access.timestamp(event),
                    status=CallStatus.REWOUND,
                )
            )
    return found
