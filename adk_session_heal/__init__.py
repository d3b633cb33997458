"""adk-session-heal: heal Google ADK sessions left with unanswered tool calls.

When an ADK run dies between a model's ``function_call`` and the tool's
``function_response``, the stored session keeps an unanswered call. This
package writes one clearly marked synthetic error response per dead call, once,
and never edits or deletes an existing event.
"""

from __future__ import annotations

from . import messages
from .adk_services import (
    HEALABLE_SCHEMES,
    healing_session_service_from_uri,
    register_healing_session_services,
)
from .errors import (
    HealError,
    HealWriteError,
    LedgerError,
    ReadOnlyStoreError,
    StoreError,
    UnsupportedStoreError,
)
from .findings import (
    HEALABLE,
    CallFinding,
    CallStatus,
    PendingReason,
    ResponseFinding,
    SessionFindings,
    classify,
)
from .healing import HealPlan, apply_heals, build_heal_event, heal_event_id, plan_heals
from .ledger import SqlHealLedger
from .observe import HEALED_CALLS_METRIC, HEALS_METRIC, set_telemetry_providers
from .pairing import CallOccurrence, IdlessRule, OrphanedResponse, Pairing, pair
from .plugin import ContextWindow, ToolAwareContextFilterPlugin, content_chars, filter_contents
from .policy import DEFAULT_PAYLOAD, DeadCall, HealPolicy
from .records import HealRecord, HealTrigger
from .repair import DEFAULT_OLDER_THAN, SessionFilter, repair, scan, scan_service
from .reports import RepairReport, ScanReport
from .service import HealingSessionService, HealLedger
from .validators import (
    PROVIDERS,
    Problem,
    provider_problems,
    validate,
    validate_anthropic,
    validate_gemini,
    validate_openai_chat,
    validate_openai_responses,
)
from .views import ADK_EVENTS, HEAL_METADATA_KEY, STORED_JSON, EventAccess

__all__ = [
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
