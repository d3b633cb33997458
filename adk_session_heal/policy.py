"""HealPolicy: what gets healed, with what payload, and how failures are handled."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

__all__ = [
    "DEFAULT_CLOCK_SKEW",
    "DEFAULT_PAYLOAD",
    "DeadCall",
    "HealPolicy",
    "Payload",
]

DEFAULT_PAYLOAD: Mapping[str, Any] = {"error": "Tool execution was interrupted."}
"""The response a healed call gets unless the policy says otherwise."""

DEFAULT_CLOCK_SKEW = 300.0
"""How far apart (seconds) the clocks of two hosts sharing a session may be: 5 minutes.

ADK stamps an event with its writer's clock; a healer on another host judges
its age with its own. Every age rule (``stale_after``, ``quiet_after``) waits
this much longer, so a healer whose clock runs up to this far ahead of the
writer's never takes a running call for a stale one.
"""


@dataclass(frozen=True, slots=True)
class DeadCall:
    """One dead call a heal answers.

    Attributes:
        call_id: The function call id.
        name: The function name (the synthetic response carries the same name).
        reason: ``"superseded"`` or ``"stale"``.
    """

    call_id: str
    name: str
    reason: str


Payload = Mapping[str, Any] | Callable[[DeadCall], Mapping[str, Any]]
"""A fixed response dict, or a function giving the response for each dead call."""


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
            :class:`DeadCall` returning one. Defaults to
            ``{"error": "Tool execution was interrupted."}``.
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
    """

    stale_after: float | timedelta | None = None
    payload: Payload = field(default_factory=lambda: dict(DEFAULT_PAYLOAD))
    heal_on_get: bool = True
    heal_on_append: bool = True
    quiet_after: float = 60.0
    raise_errors: bool = False
    clock_skew: float | timedelta = DEFAULT_CLOCK_SKEW

    def __post_init__(self) -> None:
        _seconds(self.stale_after, "stale_after")
        _seconds(self.clock_skew, "clock_skew")
        if self.quiet_after < 0:
            raise ValueError("quiet_after must not be negative")

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

    def payload_for(self, call: DeadCall) -> dict[str, Any]:
        """Returns the synthetic response for one dead call (a fresh dict)."""
        payload = self.payload
        value = payload(call) if callable(payload) else payload
        return dict(value)
