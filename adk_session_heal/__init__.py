"""adk-session-heal: heal Google ADK sessions left with unanswered tool calls.

When an ADK run dies between a model's ``function_call`` and the tool's
``function_response``, the stored session keeps an unanswered call. This
package writes one clearly marked synthetic error response per dead call, once,
and never edits or deletes an existing event.

The names here are the everyday ones. The other public modules are
``plugins``, ``validators``, ``messages``, ``ledger``, ``migrate``, ``policy``,
``observe``, ``errors``, ``testing`` and ``register`` (docs/api.md lists them);
the layers below (``core``, ``providers``, ``store``, ``runtime``, ``ops``,
``cli``) are private and may change. docs/architecture.md is the map.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # imported on first use (below), so `import adk_session_heal.x` stays light
    from .core.findings import CallStatus, SessionFindings, classify
    from .core.heal_record import HealRecord
    from .core.session_key import SessionKey
    from .core.tool_effects import tool_effects_from
    from .errors import HealError, StoreError
    from .ops.apply import apply_plan
    from .ops.repair import repair
    from .ops.repair_report import RepairReport
    from .ops.scan import RepairPlan, ScanOptions, plan_repair, scan
    from .ops.scan_report import ScanReport
    from .plugins import ToolAwareContextFilterPlugin, ToolRunLedgerPlugin
    from .policy import HealPolicy, ToolEffect
    from .runtime.adk_services import register_healing_session_services
    from .runtime.service import HealingSessionService
    from .store import SessionFilter
    from .validators import provider_problems, validate

__all__ = [
    "CallStatus",
    "HealError",
    "HealPolicy",
    "HealRecord",
    "HealingSessionService",
    "RepairPlan",
    "RepairReport",
    "ScanOptions",
    "ScanReport",
    "SessionFilter",
    "SessionFindings",
    "SessionKey",
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

_PUBLIC = {
    "CallStatus": "core.findings",
    "HealError": "errors",
    "HealPolicy": "policy",
    "HealRecord": "core.heal_record",
    "HealingSessionService": "runtime.service",
    "RepairPlan": "ops.scan",
    "RepairReport": "ops.repair_report",
    "ScanOptions": "ops.scan",
    "ScanReport": "ops.scan_report",
    "SessionFilter": "store",
    "SessionFindings": "core.findings",
    "SessionKey": "core.session_key",
    "StoreError": "errors",
    "ToolAwareContextFilterPlugin": "plugins",
    "ToolEffect": "policy",
    "ToolRunLedgerPlugin": "plugins",
    "apply_plan": "ops.apply",
    "classify": "core.findings",
    "plan_repair": "ops.scan",
    "provider_problems": "validators",
    "register_healing_session_services": "runtime.adk_services",
    "repair": "ops.repair",
    "scan": "ops.scan",
    "tool_effects_from": "core.tool_effects",
    "validate": "validators",
}
"""The module of each public name: imported on the name's first use, so importing
one module (``adk_session_heal.register`` in ``adk web``) loads only what it needs."""


def __getattr__(name: str) -> Any:
    """Serves a public name from its module on first use."""
    home = _PUBLIC.get(name)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{home}"), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    """Lists the public names with the module's own."""
    return sorted({*globals(), *__all__})
