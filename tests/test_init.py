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


PUBLIC_API = [
    "ADK_EVENTS",
    "CallFinding",
    "CallOccurrence",
    "CallStatus",
    "ContextWindow",
    "DEFAULT_OLDER_THAN",
    "DEFAULT_PAYLOAD",
    "DeadCall",
    "EventAccess",
    "HEALABLE",
    "HEALABLE_SCHEMES",
    "HEALED_CALLS_METRIC",
    "HEALS_METRIC",
    "HEAL_METADATA_KEY",
    "HealError",
    "HealLedger",
    "HealPlan",
    "HealPolicy",
    "HealRecord",
    "HealTrigger",
    "HealWriteError",
    "HealingSessionService",
    "IdlessRule",
    "LedgerError",
    "OrphanedResponse",
    "PROVIDERS",
    "Pairing",
    "PendingReason",
    "Problem",
    "ReadOnlyStoreError",
    "RepairReport",
    "ResponseFinding",
    "STORED_JSON",
    "ScanReport",
    "SessionFilter",
    "SessionFindings",
    "SqlHealLedger",
    "StoreError",
    "ToolAwareContextFilterPlugin",
    "UnsupportedStoreError",
    "apply_heals",
    "build_heal_event",
    "classify",
    "content_chars",
    "filter_contents",
    "heal_event_id",
    "healing_session_service_from_uri",
    "messages",
    "pair",
    "plan_heals",
    "provider_problems",
    "register_healing_session_services",
    "repair",
    "scan",
    "scan_service",
    "set_telemetry_providers",
    "validate",
    "validate_anthropic",
    "validate_gemini",
    "validate_openai_chat",
    "validate_openai_responses",
]


def test_public_api_is_pinned() -> None:
    """The exported names change only on purpose (update this list with the change)."""
    assert adk_session_heal.__all__ == PUBLIC_API
