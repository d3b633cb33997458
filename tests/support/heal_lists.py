"""Heals planned, built and applied to a list of events in memory, at a fixed time."""

from __future__ import annotations

from adk_session_heal.core.findings import classify
from adk_session_heal.core.healing import apply_heals, build_heal_event, plan_heals
from adk_session_heal.policy import HealPolicy

NOW = 1_700_010_000.0
KEY = {"app_name": "app", "user_id": "u", "session_id": "s"}


def heal(events: list, policy: HealPolicy | None = None, stale_after: float | None = None) -> list:
    """``events`` with the heals of their dead calls (as classified at ``NOW``) in place."""
    findings = classify(events, now=NOW, stale_after=stale_after)
    plans = plan_heals(events, findings, **KEY)
    built = [(p.insert_at, build_heal_event(p, policy or HealPolicy(), healed_at=NOW))
             for p in plans]
    return apply_heals(events, built)
