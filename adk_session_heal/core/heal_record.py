"""HealRecord: what one heal did, for logs, metrics callbacks and the ledger.

Records of new heals are built in one place,
:attr:`adk_session_heal.core.healing.Heal.record`; the ledger reads stored ones back.
:class:`ResolutionRecord` is the ledger's record of an operator's resolution
(``review resolve``): who, when, what.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from .session_key import SessionKey


@dataclass(frozen=True, slots=True)
class HealRecord:
    """One heal written to storage.

    Attributes:
        app_name: The session's app.
        user_id: The session's user.
        session_id: The session id.
        call_event_id: The event holding the dead calls.
        synthetic_event_id: The id of the synthetic response event.
        invocation_id: The invocation of the call event.
        call_ids: The answered call ids.
        tool_names: Their tools, in the same order.
        reason: ``"superseded"``, ``"stale"`` or ``"abandoned"``.
        trigger: Which path wrote the heal.
        healed_at: When (POSIX seconds).
        effects: Each call's tool effect (a
            :class:`~adk_session_heal.policy.ToolEffect` value), parallel to
            ``call_ids``; empty when not known (a ledger row), read as
            ``unknown``.
        outcomes: Each call's outcome class (a
            :class:`~adk_session_heal.policy.CallOutcome` value), parallel to
            ``call_ids``; empty when not known, read as ``unknown``.
        recovered: Per call, whether the heal wrote the tool's real result
            kept by the tool-run ledger; empty when not known, read as
            ``False``. Not kept by the ledgers, so not compared.
        run_id: The ``repair`` run that wrote it (``None``: the wrapper, or a
            ledger before revision ``0004``). Not compared.
    """

    app_name: str
    user_id: str
    session_id: str
    call_event_id: str
    synthetic_event_id: str
    invocation_id: str
    call_ids: tuple[str, ...]
    tool_names: tuple[str, ...]
    reason: str
    trigger: HealTrigger
    healed_at: float
    effects: tuple[str, ...] = ()
    outcomes: tuple[str, ...] = ()
    recovered: tuple[bool, ...] = field(default=(), compare=False)
    run_id: str | None = field(default=None, compare=False)

    @property
    def key(self) -> SessionKey:
        """The healed session's key."""
        return SessionKey(self.app_name, self.user_id, self.session_id)

    @property
    def call_effects(self) -> tuple[str, ...]:
        """Each call's tool effect, ``unknown`` where the record does not say."""
        return _parallel(self.effects, len(self.call_ids))

    @property
    def call_outcomes(self) -> tuple[str, ...]:
        """Each call's outcome class, ``unknown`` where the record does not say."""
        return _parallel(self.outcomes, len(self.call_ids))

    @property
    def call_recovered(self) -> tuple[bool, ...]:
        """Per call, whether its real result was written (``False`` where not said)."""
        count = len(self.call_ids)
        return (self.recovered + (False,) * count)[:count]

    def to_json(self) -> dict[str, Any]:
        """Returns the record as plain JSON values: the one encoding of its fields.

        Every other form derives from it: the ledger's rows
        (:func:`~adk_session_heal.store.ledger.heal_table.ledger_row`), the
        ``history`` documents, log fields and span attributes. ``recovered`` is
        not kept (no ledger keeps it).
        """
        return {
            "app_name": self.app_name,
            "user_id": self.user_id,
            "session_id": self.session_id,
            "call_event_id": self.call_event_id,
            "synthetic_event_id": self.synthetic_event_id,
            "invocation_id": self.invocation_id,
            "call_ids": list(self.call_ids),
            "tool_names": list(self.tool_names),
            "reason": self.reason,
            "trigger": self.trigger.value,
            "healed_at": self.healed_at,
            "effects": list(self.effects),
            "outcomes": list(self.outcomes),
            "run_id": self.run_id,
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> HealRecord:
        """Returns the record :meth:`to_json` encoded (``effects``, ``outcomes`` and
        ``run_id`` may be missing: a ledger that does not keep them)."""
        return cls(
            app_name=data["app_name"],
            user_id=data["user_id"],
            session_id=data["session_id"],
            call_event_id=data["call_event_id"],
            synthetic_event_id=data["synthetic_event_id"],
            invocation_id=data["invocation_id"],
            call_ids=tuple(data["call_ids"]),
            tool_names=tuple(data["tool_names"]),
            reason=data["reason"],
            trigger=HealTrigger(data["trigger"]),
            healed_at=float(data["healed_at"]),
            effects=tuple(data.get("effects") or ()),
            outcomes=tuple(data.get("outcomes") or ()),
            run_id=data.get("run_id") or None,
        )


class HealTrigger(str, enum.Enum):
    """Which path wrote a heal."""

    GET_SESSION = "get_session"
    APPEND = "append"
    REPAIR = "repair"
    REVIEW = "review"
    """An operator's resolution (``adk-session-heal review resolve``)."""


def _parallel(values: tuple[str, ...], count: int) -> tuple[str, ...]:
    """Pads (or cuts) a per-call tuple to ``count`` entries with ``unknown``."""
    return (values + ("unknown",) * count)[:count]


@dataclass(frozen=True, slots=True)
class ResolutionRecord:
    """One operator's resolution, as the ledger keeps it (revision ``0006``).

    Every resolution gets one, also once a later one has superseded it and its
    event is gone from the session: the ledger keeps each (who, when, what).

    Attributes:
        app_name: The session's app.
        user_id: The session's user.
        session_id: The session id.
        synthetic_event_id: The resolution's event id.
        call_event_id: The event holding the call.
        call_id: The call resolved.
        supersedes: The heal or earlier resolution it replaced (taken out).
        resolved_by: Who.
        resolved_at: When (POSIX seconds).
        response: The call's true response, as written.
    """

    app_name: str
    user_id: str
    session_id: str
    synthetic_event_id: str
    call_event_id: str
    call_id: str
    supersedes: str
    resolved_by: str
    resolved_at: float
    response: Mapping[str, Any]

    @property
    def key(self) -> SessionKey:
        """The session's key."""
        return SessionKey(self.app_name, self.user_id, self.session_id)
