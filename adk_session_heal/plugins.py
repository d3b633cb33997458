"""The ADK plugins this package offers, under one public name.

- :class:`ToolAwareContextFilterPlugin`: a drop-in for ADK's ``ContextFilterPlugin`` that
  never separates a tool call from its response (docs/plugin.md);
- :class:`ToolRunLedgerPlugin`: records each tool call's start (with a lease) and end, so a
  heal says whether the tool ran (README, "Did the tool run?");
- :class:`RerunSafeCallsPlugin`: on the next user message, runs dead read-only calls again
  through ADK's own tool path (README, "Re-running safe calls");
- :func:`idempotency_key`: for a tool, the key of the call it runs, the same on every run of
  that call, to pass to an API that deduplicates (README, "One charge per call").

Example::

    runner = Runner(app=App(name="support", root_agent=agent,
                            plugins=[ToolAwareContextFilterPlugin(num_invocations_to_keep=5)]),
                    session_service=service)
"""

from __future__ import annotations

from .providers.request_repair import Pending, merge_same_role_contents
from .runtime.context_filter.adk_plugin import ToolAwareContextFilterPlugin
from .runtime.context_filter.widening import Repair
from .runtime.context_filter.window import (
    ContentCounter,
    ContextWindow,
    content_chars,
    filter_contents,
)
from .runtime.idempotency import idempotency_key
from .runtime.rerun_plugin import RerunSafeCallsPlugin
from .runtime.tool_leases import ToolRunLedger
from .runtime.tool_run_plugin import ToolRunLedgerPlugin

__all__ = [
    "ContentCounter",
    "ContextWindow",
    "Pending",
    "Repair",
    "RerunSafeCallsPlugin",
    "ToolAwareContextFilterPlugin",
    "ToolRunLedger",
    "ToolRunLedgerPlugin",
    "content_chars",
    "filter_contents",
    "idempotency_key",
    "merge_same_role_contents",
]
