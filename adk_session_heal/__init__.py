"""adk-session-heal: heal Google ADK sessions left with unanswered tool calls.

When an ADK run dies between a model's ``function_call`` and the tool's
``function_response``, the stored session keeps an unanswered call. This
package writes one clearly marked synthetic error response per dead call, once,
and never edits or deletes an existing event.
"""

from __future__ import annotations

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
from .pairing import CallOccurrence, OrphanedResponse, Pairing, pair
from .policy import DEFAULT_PAYLOAD, DeadCall, HealPolicy
from .records import HealRecord, HealTrigger
from .service import HealingSessionService, HealLedger
from .views import ADK_EVENTS, HEAL_METADATA_KEY, STORED_JSON, EventAccess

__all__ = [
    "ADK_EVENTS",
    "CallFinding",
    "CallOccurrence",
    "CallStatus",
    "DEFAULT_PAYLOAD",
    "DeadCall",
    "EventAccess",
    "HEALABLE",
    "HEAL_METADATA_KEY",
    "HealError",
    "HealLedger",
    "HealPlan",
    "HealPolicy",
    "HealRecord",
    "HealTrigger",
    "HealWriteError",
    "HealingSessionService",
    "LedgerError",
    "OrphanedResponse",
    "Pairing",
    "PendingReason",
    "ReadOnlyStoreError",
    "ResponseFinding",
    "STORED_JSON",
    "SessionFindings",
    "StoreError",
    "UnsupportedStoreError",
    "apply_heals",
    "build_heal_event",
    "classify",
    "heal_event_id",
    "pair",
    "plan_heals",
]
