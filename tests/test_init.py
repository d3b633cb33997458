"""Tests for the public API of adk_session_heal."""

from __future__ import annotations

import adk_session_heal


def test_all_is_sorted_and_every_name_exists() -> None:
    """__all__ is a sorted literal, and each name it lists is importable."""
    assert adk_session_heal.__all__ == sorted(adk_session_heal.__all__)
    missing = [n for n in adk_session_heal.__all__ if not hasattr(adk_session_heal, n)]
    assert missing == []


def test_core_entry_points_are_exported() -> None:
    """The wrapper, its policy and the pure core are reachable from the package root."""
    for name in ("HealingSessionService", "HealPolicy", "classify", "plan_heals",
                 "build_heal_event", "pair", "HealRecord"):
        assert name in adk_session_heal.__all__
