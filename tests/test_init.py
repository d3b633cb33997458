"""Tests for the public API of adk_session_heal."""

from __future__ import annotations

import importlib
import pkgutil
import sys

import pytest

import adk_session_heal


def test_all_is_sorted_and_every_name_exists() -> None:
    """__all__ is a sorted literal, and each name it lists is importable."""
    assert adk_session_heal.__all__ == sorted(adk_session_heal.__all__)
    missing = [n for n in adk_session_heal.__all__ if not hasattr(adk_session_heal, n)]
    assert missing == []


def test_core_entry_points_are_exported() -> None:
    """The wrapper, its policy, repair and the classifier are reachable from the package root."""
    for name in ("HealingSessionService", "HealPolicy", "classify", "repair", "plan_repair",
                 "apply_plan", "SessionKey", "HealRecord", "ToolEffect", "tool_effects_from"):
        assert name in adk_session_heal.__all__


PUBLIC_API = [
    "CallStatus",
    "ContextWindow",
    "HEAL_METADATA_KEY",
    "HealError",
    "HealPolicy",
    "HealRecord",
    "HealingSessionService",
    "Problem",
    "RepairPlan",
    "RepairReport",
    "ScanReport",
    "SessionFilter",
    "SessionFindings",
    "SessionKey",
    "SqlHealLedger",
    "StoreError",
    "ToolAwareContextFilterPlugin",
    "ToolEffect",
    "ToolRunLedgerPlugin",
    "apply_plan",
    "classify",
    "plan_repair",
    "provider_problems",
    "register_healing_session_services",
    "repair",
    "scan",
    "tool_effects_from",
    "validate",
]


def test_public_api_is_pinned() -> None:
    """The exported names change only on purpose (update this list with the change)."""
    assert adk_session_heal.__all__ == PUBLIC_API
    # 25 + ToolEffect, tool_effects_from and ToolRunLedgerPlugin (issue 15); the
    # plugin's SqlToolRunLedger lives in adk_session_heal.ledger beside SqlHealLedger.
    assert len(PUBLIC_API) <= 28


def test_no_exported_name_is_also_a_submodule() -> None:
    """An import never gets a module where it expected a function, or the reverse."""
    submodules = {m.name for m in pkgutil.iter_modules(adk_session_heal.__path__)}
    assert submodules & set(adk_session_heal.__all__) == set()
    assert "bulk" in submodules and callable(adk_session_heal.repair)


@pytest.mark.parametrize("name", sorted(adk_session_heal._MOVED))
def test_names_moved_to_submodules_still_import_with_a_warning(name: str) -> None:
    """Every name the root exported before keeps working for a release, with a warning."""
    home = importlib.import_module(f"adk_session_heal.{adk_session_heal._MOVED[name]}")
    with pytest.warns(DeprecationWarning, match=f"adk_session_heal.{name} moved"):
        value = getattr(adk_session_heal, name)
    assert value is getattr(home, name)


@pytest.mark.parametrize(("old", "new"), [("records", "heal_record"), ("views", "event_access"),
                                          ("reports", "scan_report")])
def test_renamed_modules_still_import_with_a_warning(old: str, new: str) -> None:
    """Modules renamed after what they hold keep their old name for a release, with a warning."""
    sys.modules.pop(f"adk_session_heal.{old}", None)
    with pytest.warns(DeprecationWarning, match=f"adk_session_heal.{old} is deprecated"):
        module = importlib.import_module(f"adk_session_heal.{old}")
    current = importlib.import_module(f"adk_session_heal.{new}")
    assert module.__all__ == current.__all__
    assert all(getattr(module, n) is getattr(current, n) for n in current.__all__)


def test_unknown_names_still_raise_attribute_error() -> None:
    """The deprecation hook serves only moved names."""
    with pytest.raises(AttributeError):
        adk_session_heal.no_such_name  # noqa: B018
