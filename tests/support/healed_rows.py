"""A crashed session's stored JSON rows with its heal in place, built by the one builder.

For the removal-rule and undo tests.
"""

from __future__ import annotations

from typing import Any

from adk_session_heal.core.event_access import STORED_JSON
from adk_session_heal.core.findings import classify
from adk_session_heal.core.heal_record import HealTrigger
from adk_session_heal.core.healing import Heal, apply_heals, plan_session
from adk_session_heal.core.session_key import SessionKey
from adk_session_heal.policy import HealPolicy
from adk_session_heal.testing import History

APP, USER = "app", "user"
KEY = SessionKey(APP, USER, "s")


def crashed(start: float = 1_700_000_000.0) -> tuple[History, str]:
    """user asks (e-0001) -> charge_card called (e-0002) -> (process dies) -> user returns."""
    history = History(start=start)
    history.user("charge my card")
    call_id = history.call("charge_card", {"amount": 5})
    history.user("hello?")
    return history, call_id


def healed(start: float = 1_700_000_000.0) -> tuple[list[dict[str, Any]], Heal, str]:
    """The crashed session as stored JSON with its heal in place, built by the one builder."""
    history, call_id = crashed(start)
    events = [e.model_dump(mode="json", exclude_none=True) for e in history.events]
    findings = classify(events, STORED_JSON, now=start + 3600)
    planned = plan_session(events, findings, KEY, HealPolicy(), trigger=HealTrigger.REPAIR,
                           healed_at=start + 3600, seen_events=len(events), access=STORED_JSON)
    assert planned is not None
    (heal,) = planned.heals
    return apply_heals(events, [(heal.plan.insert_at, heal.data)]), heal, call_id
