"""adk-session-heal: heal Google ADK sessions left with unanswered tool calls.

When an ADK run dies between a model's ``function_call`` and the tool's
``function_response``, the stored session keeps an unanswered call. This
package writes one clearly marked synthetic error response per dead call, once,
and never edits or deletes an existing event.

The names here are the everyday ones; the rest live in submodules named after
what they hold (``findings``, ``healing``, ``pairing``, ``validators``,
``messages``, ``plugin``, ``store``, ``errors``, ``observe``, ``testing``, ...).
See ``docs/architecture.md`` for the map.
"""

from __future__ import annotations

import importlib
import warnings
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # imported on first use (below), so `import adk_session_heal.x` stays light
    from .adk_services import register_healing_session_services
    from .bulk import RepairPlan, apply_plan, plan_repair, repair, scan
    from .errors import HealError, StoreError
    from .event_access import HEAL_METADATA_KEY
    from .findings import CallStatus, SessionFindings, classify
    from .heal_record import HealRecord
    from .ledger import SqlHealLedger
    from .plugin import ContextWindow, ToolAwareContextFilterPlugin
    from .policy import HealPolicy, ToolEffect
    from .scan_report import RepairReport, ScanReport
    from .service import HealingSessionService
    from .session_key import SessionKey
    from .store import SessionFilter
    from .tool_effects import tool_effects_from
    from .tool_run_plugin import ToolRunLedgerPlugin
    from .validators import Problem, provider_problems, validate

__all__ = [
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

_MOVED = {
    "ADK_EVENTS": "event_access",
    "CallFinding": "findings",
    "CallOccurrence": "pairing",
    "DEFAULT_OLDER_THAN": "bulk",
    "DEFAULT_PAYLOAD": "policy",
    "DeadCall": "policy",
    "EventAccess": "event_access",
    "HEALABLE": "findings",
    "HEALABLE_SCHEMES": "adk_services",
    "HEALED_CALLS_METRIC": "observe",
    "HEALS_METRIC": "observe",
    "HealLedger": "service",
    "HealPlan": "healing",
    "HealTrigger": "heal_record",
    "HealWriteError": "errors",
    "IdlessRule": "pairing",
    "LedgerError": "errors",
    "OrphanedResponse": "pairing",
    "PROVIDERS": "validators",
    "Pairing": "pairing",
    "PendingReason": "findings",
    "ReadOnlyStoreError": "errors",
    "ResponseFinding": "findings",
    "STORED_JSON": "event_access",
    "UnsupportedStoreError": "errors",
    "apply_heals": "healing",
    "build_heal_event": "healing",
    "content_chars": "plugin",
    "filter_contents": "plugin",
    "heal_event_id": "healing",
    "healing_session_service_from_uri": "adk_services",
    "pair": "pairing",
    "plan_heals": "healing",
    "scan_service": "bulk",
    "set_telemetry_providers": "observe",
    "validate_anthropic": "validators",
    "validate_gemini": "validators",
    "validate_openai_chat": "validators",
    "validate_openai_responses": "validators",
}
"""Names the package root exported before, and the submodule each lives in now."""


_PUBLIC = {
    "CallStatus": "findings",
    "ContextWindow": "plugin",
    "HEAL_METADATA_KEY": "event_access",
    "HealError": "errors",
    "HealPolicy": "policy",
    "HealRecord": "heal_record",
    "HealingSessionService": "service",
    "Problem": "validators",
    "RepairPlan": "bulk",
    "RepairReport": "scan_report",
    "ScanReport": "scan_report",
    "SessionFilter": "store",
    "SessionFindings": "findings",
    "SessionKey": "session_key",
    "SqlHealLedger": "ledger",
    "StoreError": "errors",
    "ToolAwareContextFilterPlugin": "plugin",
    "ToolEffect": "policy",
    "ToolRunLedgerPlugin": "tool_run_plugin",
    "apply_plan": "bulk",
    "classify": "findings",
    "plan_repair": "bulk",
    "provider_problems": "validators",
    "register_healing_session_services": "adk_services",
    "repair": "bulk",
    "scan": "bulk",
    "tool_effects_from": "tool_effects",
    "validate": "validators",
}
"""The submodule of each public name: imported on the name's first use, so importing
one submodule (``adk_session_heal.register`` in ``adk web``) loads only what it needs."""


def __getattr__(name: str) -> Any:
    """Serves a public name from its submodule, and a moved one with a ``DeprecationWarning``."""
    public = _PUBLIC.get(name)
    if public is not None:
        value = getattr(importlib.import_module(f"{__name__}.{public}"), name)
        globals()[name] = value
        return value
    home = _MOVED.get(name)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    warnings.warn(
        f"adk_session_heal.{name} moved: import it from adk_session_heal.{home}",
        DeprecationWarning,
        stacklevel=2,
    )
    return getattr(importlib.import_module(f"{__name__}.{home}"), name)


def __dir__() -> list[str]:
    """Lists the public names with the module's own."""
    return sorted({*globals(), *__all__})
