"""HealPolicy: what gets healed, with what payload, and how failures are handled."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

__all__ = [
    "DEFAULT_PAYLOAD",
    "DeadCall",
    "HealPolicy",
    "Payload",
]

DEFAULT_PAYLOAD: Mapping[str, Any] = {"error": "Tool execution was interrupted."}
"""The response a healed call gets unless the policy says otherwise."""


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


def _seconds(value: float | timedelta | None) -> float | None:
    if value is None:
        return None
    seconds = value.total_seconds() if isinstance(value, timedelta) else float(value)
    if seconds < 0:
        raise ValueError("stale_after must not be negative")
    return seconds


@dataclass(frozen=True)
class HealPolicy:
    """What the healers heal and how.

    Attributes:
        stale_after: Age after which an unanswered call of the *newest*
            invocation is healed as ``stale`` (seconds or a ``timedelta``).
            ``None`` (the default) never heals a call of the newest invocation:
            only calls proven dead by a later invocation (``superseded``) are
            healed. Set it above your slowest tool's run time.
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
            when the newest event is at least this old (seconds), so a runner
            that is mid-turn never fails with ``StaleSessionError``. The
            ``append_event`` path heals such services at once.
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

    def __post_init__(self) -> None:
        _seconds(self.stale_after)
        if self.quiet_after < 0:
            raise ValueError("quiet_after must not be negative")

    @property
    def stale_after_seconds(self) -> float | None:
        """``stale_after`` in seconds, or ``None``."""
        return _seconds(self.stale_after)

    def payload_for(self, call: DeadCall) -> dict[str, Any]:
        """Returns the synthetic response for one dead call (a fresh dict)."""
        payload = self.payload
        value = payload(call) if callable(payload) else payload
        return dict(value)
