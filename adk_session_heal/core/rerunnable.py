"""Which dead calls may be run again instead of healed with an error (pure).

A dead call is *re-runnable* when running it twice is harmless and its answer
can still go right after it:

* its tool is ``read_only`` or ``idempotent``
  (:attr:`~adk_session_heal.policy.ToolEffect.safe_to_retry`), by the policy's
  declarations or the tools' MCP annotations; ``side_effect`` and unknown
  tools never are;
* it is in the session's newest invocation (nothing was stored after its turn
  but its own events), so the real response, stored before the next user
  message, answers it in place;
* it has an id, and the run-time classification calls it dead (``stale``,
  ``superseded`` by the message arriving, or ``abandoned``).

:class:`~adk_session_heal.runtime.rerun_plugin.RerunSafeCallsPlugin` runs those on the
next user message; the wrapper leaves them unhealed on ``get_session`` when
:attr:`~adk_session_heal.policy.HealPolicy.rerun_safe_calls` is on
(:func:`deferring`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import TypeVar

from ..policy import HealPolicy, ToolEffect
from .event_access import ADK_EVENTS, EventAccess
from .findings import HEALABLE, CallFinding, CallStatus, SessionFindings

E = TypeVar("E")

RERUN_METADATA_KEY = "adk_session_heal_rerun"
"""Key of ``Event.custom_metadata`` marking a real response produced by a re-run."""


def rerunnable_calls(
    events: Sequence[E],
    findings: SessionFindings,
    policy: HealPolicy,
    *,
    effects: Mapping[str, ToolEffect] | None = None,
    access: EventAccess[E] = ADK_EVENTS,  # type: ignore[assignment]
) -> list[CallFinding]:
    """Returns the dead calls of ``events`` that may be run again (see the module docstring).

    Args:
        events: The stored events, oldest first (without an incoming message).
        findings: Their classification (with an incoming message, if any, so
            that it proves the newest invocation over).
        policy: Declares tool effects.
        effects: More effects by tool name (the tools' MCP annotations); the
            policy's declarations win.
        access: How to read ``events``.
    """
    if not events:
        return []
    newest = access.invocation_id(events[-1])
    known = {**(effects or {}), **policy.tool_effects}
    return [
        call for call in findings.calls
        if call.status in HEALABLE and call.call_id
        and call.event_index < len(events)
        and access.invocation_id(events[call.event_index]) == newest
        and known.get(call.name, ToolEffect.UNKNOWN).safe_to_retry
    ]


def deferring(findings: SessionFindings, calls: Sequence[CallFinding]) -> SessionFindings:
    """Returns the findings with ``calls`` marked ``in_flight``: not healed this time."""
    if not calls:
        return findings
    held = {(c.event_index, c.call_id) for c in calls}
    return SessionFindings(
        [replace(c, status=CallStatus.IN_FLIGHT) if (c.event_index, c.call_id) in held else c
         for c in findings.calls],
        findings.orphaned_responses, findings.duplicate_responses)
