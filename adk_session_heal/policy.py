"""HealPolicy: what gets healed, with what payload, and how failures are handled.

What a heal tells the model depends on what the dead call's tool does
(:class:`ToolEffect`), because "interrupted" invites a retry, and retrying
``charge_card`` may charge the card twice. Without a record of whether the
tool ran, every dead call's outcome is ``unknown`` (:class:`CallOutcome`), so
a retry is called safe only for tools declared ``read_only`` or
``idempotent``; a tool of unknown effect is treated as one with side effects.
"""

from __future__ import annotations

import enum
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field, replace
from datetime import timedelta
from typing import Any

__all__ = [
    "DEFAULT_BATCH_SIZE",
    "DEFAULT_CLOCK_SKEW",
    "DEFAULT_OLDER_THAN",
    "DEFAULT_PAYLOAD",
    "DEFAULT_RECONCILE_TIMEOUT",
    "HEAL_METADATA_KEY",
    "LEDGER_ERRORS",
    "NOT_STARTED_ERROR",
    "RETRY_SAFE_ERRORS",
    "UNSAFE_RETRY_ERROR",
    "CallOutcome",
    "DeadCall",
    "DoubtfulCall",
    "HealPolicy",
    "Payload",
    "ReconcileHook",
    "Reconciliation",
    "Settled",
    "ToolEffect",
    "settled",
    "effect_payload",
]


class ToolEffect(str, enum.Enum):
    """What running a tool does to the world, as far as a retry is concerned.

    MCP tool annotations map onto it (:func:`~adk_session_heal.tool_effects_from`):
    ``readOnlyHint`` true is ``READ_ONLY``; otherwise ``idempotentHint`` true is
    ``IDEMPOTENT``; otherwise ``SIDE_EFFECT``.
    """

    READ_ONLY = "read_only"
    """Only reads (``get_weather``): running it again changes nothing."""
    IDEMPOTENT = "idempotent"
    """Changes something, but running it again with the same arguments has no further effect."""
    SIDE_EFFECT = "side_effect"
    """Each run changes something (``charge_card``): a blind retry may do it twice."""
    UNKNOWN = "unknown"
    """Not declared (the default); treated as ``SIDE_EFFECT``."""

    @property
    def safe_to_retry(self) -> bool:
        """Whether repeating a call whose outcome is unknown is harmless."""
        return self in (ToolEffect.READ_ONLY, ToolEffect.IDEMPOTENT)


class CallOutcome(str, enum.Enum):
    """What is known of a dead call's run.

    Without the tool-run ledger (:mod:`adk_session_heal.core.tool_runs`) nothing
    records whether a tool started or finished before its process died, so
    every dead call is ``UNKNOWN``; with it,
    :func:`~adk_session_heal.core.tool_runs.run_outcome` tells the other three apart.
    """

    UNKNOWN = "unknown"
    """No ledger: the call may not have started, may have failed, or may have completed."""
    NOT_STARTED = "not_started"
    """The call was announced to the ledger but its tool never started."""
    MAY_HAVE_RUN = "may_have_run"
    """Started, then its lease expired (or it failed) with no result: it may have done its work."""
    FINISHED_RESULT_LOST = "finished_result_lost"
    """The tool returned, but its response never reached the session."""


_RETRY_SAFE_ERROR = ("Tool execution was interrupted before it returned; {why}, so it is safe "
                     "to retry.")
"""The wording of :data:`RETRY_SAFE_ERRORS`: the two effects differ only in why a retry is safe."""

RETRY_SAFE_ERRORS: Mapping[ToolEffect, str] = {
    ToolEffect.READ_ONLY: _RETRY_SAFE_ERROR.format(why="it has no side effects"),
    ToolEffect.IDEMPOTENT: _RETRY_SAFE_ERROR.format(why="repeating it has no further effect"),
}
"""The ``error`` a heal of a read-only or idempotent tool's call carries."""

UNSAFE_RETRY_ERROR = (
    "Tool execution was interrupted; it may have completed. Check the system before "
    "retrying; do not repeat it blindly."
)
"""The ``error`` a heal of a call with side effects, or of unknown effect, carries."""


NOT_STARTED_ERROR = "Tool execution did not start (the tool never ran); it is safe to retry."
"""The ``error`` of a heal whose call the tool-run ledger shows never started."""

LEDGER_ERRORS: Mapping[CallOutcome, str] = {
    CallOutcome.MAY_HAVE_RUN: (
        "Tool execution started but never finished; it may have completed. Check the system "
        "before retrying; do not repeat it blindly."
    ),
    CallOutcome.FINISHED_RESULT_LOST: (
        "Tool execution finished, but its result was lost; it has completed. Check the "
        "system for its result; do not repeat it blindly."
    ),
}
"""The ``error`` of a heal of a side-effect (or undeclared) tool's call, per ledger outcome."""


def effect_payload(
    effect: ToolEffect = ToolEffect.UNKNOWN, outcome: CallOutcome = CallOutcome.UNKNOWN
) -> dict[str, Any]:
    """Returns the default synthetic response for a dead call of a tool with ``effect``.

    ``{"error": <wording>, "outcome": <outcome>, "safe_to_retry": <bool>}``.
    ``safe_to_retry`` is true for ``read_only`` and ``idempotent`` tools, and
    for a call the tool-run ledger shows never started (``not_started``). The
    wording follows: a call that never started says so; a retry-safe tool's
    says it is safe to retry; any other (side effects, or undeclared) says it
    may have completed (or, ``finished_result_lost``, that it did) and must
    not be repeated blindly. A payload function can start from it
    (``{**effect_payload(call.effect), ...}``).

    Args:
        effect: What the tool does (``UNKNOWN`` is worded as ``SIDE_EFFECT``).
        outcome: What is known of the run (``UNKNOWN`` without the tool-run
            ledger; see :func:`~adk_session_heal.core.tool_runs.run_outcome`).

    Returns:
        A new dict.
    """
    effect, outcome = ToolEffect(effect), CallOutcome(outcome)
    if outcome is CallOutcome.NOT_STARTED:
        error, safe = NOT_STARTED_ERROR, True
    elif effect.safe_to_retry:
        error, safe = RETRY_SAFE_ERRORS[effect], True
    else:
        error, safe = LEDGER_ERRORS.get(outcome, UNSAFE_RETRY_ERROR), False
    return {"error": error, "outcome": outcome.value, "safe_to_retry": safe}


HEAL_METADATA_KEY = "adk_session_heal"
"""Key of ``Event.custom_metadata`` that marks an event this package wrote (a heal)."""

DEFAULT_PAYLOAD: Mapping[str, Any] = effect_payload(ToolEffect.UNKNOWN)
"""The response a healed call of an undeclared tool gets unless the policy says otherwise:
``{"error": UNSAFE_RETRY_ERROR, "outcome": "unknown", "safe_to_retry": False}``."""

DEFAULT_CLOCK_SKEW = 300.0
"""How far apart (seconds) the clocks of two hosts sharing a session may be: 5 minutes.

ADK stamps an event with its writer's clock; a healer on another host judges
its age with its own. Every age rule (``stale_after``, ``quiet_after``) waits
this much longer, so a healer whose clock runs up to this far ahead of the
writer's never takes a running call for a stale one.
"""


DEFAULT_OLDER_THAN = 24 * 3600.0
"""Default age (seconds) after which a call of a session's newest invocation is healed.

A day: far longer than any tool or human-in-the-loop wait should take without
ADK marking the call long-running, so ``stale`` calls are dead, not slow.
Superseded calls are healed whatever their age.
"""


DEFAULT_BATCH_SIZE = 500
"""Synthetic events ``repair`` inserts per transaction (whole sessions)."""


@dataclass(frozen=True, slots=True)
class DeadCall:
    """One dead call a heal answers.

    Attributes:
        call_id: The function call id.
        name: The function name (the synthetic response carries the same name).
        reason: ``"superseded"``, ``"stale"`` or ``"abandoned"`` for a heal;
            ``"replayed"`` for a replayed call ``ToolRunLedgerPlugin``
            answers instead of running it again.
        effect: What the tool does, as the policy declares it: filled in by
            :meth:`HealPolicy.payload_for` before a payload function sees the
            call (``UNKNOWN`` in a :class:`~adk_session_heal.core.heal_plan.HealPlan`,
            which knows no policy).
        outcome: What the tool-run ledger says of the run (``UNKNOWN``
            without it).
        recovered: The tool's real result, kept by the tool-run ledger when
            the run finished but its response never reached the session: the
            default payload is this result, not an error.
    """

    call_id: str
    name: str
    reason: str
    effect: ToolEffect = ToolEffect.UNKNOWN
    outcome: CallOutcome = CallOutcome.UNKNOWN
    recovered: Mapping[str, Any] | None = field(default=None, compare=False)


Payload = Mapping[str, Any] | Callable[[DeadCall], Mapping[str, Any]]
"""A fixed response dict, or a function giving the response for each dead call."""


class Settled(str, enum.Enum):
    """What a reconcile hook learnt from the real system about a call that may have run."""

    FINISHED = "finished"
    """It happened: the hook returns the call's real result."""
    DID_NOT_HAPPEN = "did_not_happen"
    """It did not happen: the call is answered as one that never started (safe to retry)."""
    UNKNOWN = "unknown"
    """The system cannot tell: the call stays ``may_have_run``."""


@dataclass(frozen=True, slots=True)
class DoubtfulCall:
    """A call that may have run (``may_have_run``), as a reconcile hook is asked about it.

    Attributes:
        app_name: The session's app.
        user_id: The session's user.
        session_id: The session.
        call_id: The function-call id.
        tool_name: The tool.
        idempotency_key: The call's key (what ``idempotency_key(tool_context)``
            gave the tool), to look the call up in the real system.
    """

    app_name: str
    user_id: str
    session_id: str
    call_id: str
    tool_name: str
    idempotency_key: str


@dataclass(frozen=True, slots=True)
class Reconciliation:
    """A reconcile hook's answer (see :func:`settled`).

    Attributes:
        settled: What happened.
        result: With ``FINISHED``: the call's real result, answered as the tool's response.
    """

    settled: Settled
    result: Mapping[str, Any] | None = None


def settled(result: Mapping[str, Any] | None = None, *, happened: bool | None = True
            ) -> Reconciliation:
    """Builds a hook's answer: ``settled(receipt)``, ``settled(happened=False)`` or unknown.

    Args:
        result: The call's real result, when it happened.
        happened: ``True`` (with ``result``), ``False`` (it did not happen), or
            ``None`` (the system cannot tell).
    """
    if happened is None:
        return Reconciliation(Settled.UNKNOWN)
    if not happened:
        return Reconciliation(Settled.DID_NOT_HAPPEN)
    return Reconciliation(Settled.FINISHED, dict(result or {}))


ReconcileHook = Callable[[DoubtfulCall], Awaitable[Reconciliation] | Reconciliation]
"""Asks the real system what became of a call that may have run (by its idempotency key):
``async``, or a plain function (run in a worker thread)."""

DEFAULT_RECONCILE_TIMEOUT = 5.0
"""Seconds a reconcile hook may take before its call stays ``may_have_run``."""


def _seconds(value: float | timedelta | None, name: str) -> float | None:
    if value is None:
        return None
    seconds = value.total_seconds() if isinstance(value, timedelta) else float(value)
    if seconds < 0:
        raise ValueError(f"{name} must not be negative")
    return seconds


@dataclass(frozen=True)
class HealPolicy:
    """What the healers heal and how.

    Attributes:
        stale_after: Age after which an unanswered call of the *newest*
            invocation is healed as ``stale`` (seconds or a ``timedelta``).
            ``None`` (the default) never heals a call of the newest invocation:
            only calls proven dead by a later invocation (``superseded``) are
            healed. Set it above your slowest tool's run time. A call is
            stale only once ``now - call time > stale_after + clock_skew``.
        payload: The synthetic response: a dict, or a function of the
            :class:`DeadCall` (its ``effect`` filled in) returning one, used
            as given for every call. ``None`` (the default) answers each call
            with :func:`effect_payload` of its tool's effect: an ``error``
            worded for that effect, ``"outcome": "unknown"`` and
            ``safe_to_retry`` (true only for ``read_only`` and ``idempotent``
            tools).
        tool_effects: What each tool does, by the function name the model
            calls: ``{"get_weather": ToolEffect.READ_ONLY, "charge_card":
            ToolEffect.SIDE_EFFECT}`` (values may be the enum's strings).
            Tools not listed are ``UNKNOWN``, treated as ``SIDE_EFFECT``.
            :func:`~adk_session_heal.core.tool_effects.tool_effects_from` reads
            them from MCP tool annotations.
        heal_on_get: Heal in ``get_session`` (default ``True``).
        heal_on_append: Heal when the first event of a new invocation is
            appended (default ``True``): the model sees the failed tool in that
            very turn.
        quiet_after: For session services the wrapper cannot write to without
            bumping the session's revision (any service other than ADK's own
            in-memory, SQLite and database services), ``get_session`` heals only
            when the newest event is at least this old (seconds) plus
            ``clock_skew``, so a runner that is mid-turn never fails with
            ``StaleSessionError``. The ``append_event`` path heals such
            services at once.
        clock_skew: The clock difference between hosts tolerated (seconds or
            a ``timedelta``; default :data:`DEFAULT_CLOCK_SKEW`, 5 minutes):
            an event's time is its writer's clock, its age is read on the
            healer's, so both age rules above wait this much longer. A call
            stamped in the healer's future is never stale. Set it to ``0``
            only when every process sharing the sessions runs on one host
            (one clock). ``superseded`` calls need no clock and are healed
            at any age.
        raise_errors: If a heal write fails, raise instead of logging the
            error with its traceback and returning the session unhealed
            (fail-open, the default).
        rerun_safe_calls: Leave a dead call of a ``read_only`` or
            ``idempotent`` tool in the session's newest invocation unhealed on
            ``get_session``, so that
            :class:`~adk_session_heal.runtime.rerun_plugin.RerunSafeCallsPlugin` runs
            it again on the next user message and stores its real result; if
            that does not happen, the call is healed as usual when the message
            is stored. Off by default. ``side_effect`` and unknown tools are
            never re-run.
        reconcile: For a call in doubt (``may_have_run``: it started and its
            run ended without a result), a hook per tool name that asks the
            real system what happened, by the call's idempotency key, and
            returns :func:`settled` (its real result), ``settled(happened=False)``
            or ``settled(happened=None)``. The wrapper, ``scan`` and ``repair``
            ask before they heal, ``review`` before it lists, and
            ``ToolRunLedgerPlugin`` before it answers a replayed call; a result
            becomes the answer, "did not happen" answers ``not_started`` (or
            lets a replay run), and a hook that raises, returns anything else
            or outlasts ``reconcile_timeout`` leaves the call ``may_have_run``.
        reconcile_timeout: Seconds each hook may take (default
            :data:`DEFAULT_RECONCILE_TIMEOUT`).
        resumable_app: The app is resumable
            (``ResumabilityConfig(is_resumable=True)``): ADK's resume of an
            interrupted invocation replays its unanswered calls, so the
            wrapper leaves a dead call that no later invocation superseded
            (``stale``, or ``abandoned`` by the tool-run ledger) to that
            replay, where ``ToolRunLedgerPlugin`` decides whether it runs. It
            is healed once a later invocation supersedes it. ``scan`` and
            ``repair`` are not affected. Off by default. Ignored on ADK 2.0
            and 2.1, whose ``run_async(invocation_id=...)`` starts a new
            invocation instead of replaying (the call would reach the model
            unanswered): there the wrapper heals as usual.
    """

    stale_after: float | timedelta | None = None
    payload: Payload | None = None
    heal_on_get: bool = True
    heal_on_append: bool = True
    quiet_after: float = 60.0
    raise_errors: bool = False
    clock_skew: float | timedelta = DEFAULT_CLOCK_SKEW
    tool_effects: Mapping[str, ToolEffect] = field(default_factory=dict)
    rerun_safe_calls: bool = False
    reconcile: Mapping[str, ReconcileHook] = field(default_factory=dict)
    reconcile_timeout: float = DEFAULT_RECONCILE_TIMEOUT
    resumable_app: bool = False

    def __post_init__(self) -> None:
        effects = {str(name): ToolEffect(effect) for name, effect in self.tool_effects.items()}
        object.__setattr__(self, "tool_effects", effects)
        _seconds(self.stale_after, "stale_after")
        _seconds(self.clock_skew, "clock_skew")
        if self.quiet_after < 0:
            raise ValueError("quiet_after must not be negative")
        if self.reconcile_timeout <= 0:
            raise ValueError("reconcile_timeout must be positive")
        object.__setattr__(self, "reconcile", {str(k): v for k, v in self.reconcile.items()})

    @property
    def stale_after_seconds(self) -> float | None:
        """``stale_after`` in seconds, or ``None``."""
        return _seconds(self.stale_after, "stale_after")

    @property
    def clock_skew_seconds(self) -> float:
        """``clock_skew`` in seconds."""
        skew = _seconds(self.clock_skew, "clock_skew")
        assert skew is not None
        return skew

    def is_quiet(self, newest: float, *, now: float) -> bool:
        """Whether a session whose newest event is stamped ``newest`` has been idle long enough.

        The rule of ``quiet_after``: ``now - newest >= quiet_after + clock_skew``.

        Args:
            newest: Time of the session's newest event (its writer's clock).
            now: The healer's clock.
        """
        return now - newest >= self.quiet_after + self.clock_skew_seconds

    def effect_of(self, name: str) -> ToolEffect:
        """Returns the declared effect of the tool called ``name`` (``UNKNOWN`` if undeclared)."""
        return self.tool_effects.get(name, ToolEffect.UNKNOWN)

    def payload_for(self, call: DeadCall) -> dict[str, Any]:
        """Returns the synthetic response for one dead call (a fresh dict).

        Args:
            call: The dead call; its ``effect`` is replaced by the policy's.

        Returns:
            The policy's ``payload`` (given the call with its effect when a
            function); by default the recovered result of a finished run, or
            :func:`effect_payload` of the call's effect and outcome.
        """
        effect = self.effect_of(call.name)
        payload = self.payload
        if payload is None:
            if call.recovered is not None:
                return dict(call.recovered)
            return effect_payload(effect, call.outcome)
        if callable(payload):
            return dict(payload(replace(call, effect=effect)))
        return dict(payload)
