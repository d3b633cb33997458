"""A context filter that never breaks a tool call from its response.

:class:`ToolAwareContextFilterPlugin` is a drop-in for ADK's
``ContextFilterPlugin`` (``before_model_callback``) that keeps the last N
*invocations* of a request's contents, or as many as fit a budget, without
ever sending a provider a response whose call was cut off or a call whose
response was cut off:

* The window only starts where no kept response belongs to a dropped call
  (:mod:`~adk_session_heal.plugin.trimming`).
* A ``custom_filter`` runs on the trimmed window; whatever pairs its output
  breaks are repaired, by restoring the missing halves from the window
  (``repair="widen"``, the default, :mod:`~adk_session_heal.plugin.widening`)
  or by dropping the broken halves (``repair="drop"``), and anything still
  broken after widening is dropped by the request-side repairer
  (:mod:`adk_session_heal.request_repair`). The output is never sent broken:
  if repair cannot make it whole, the trimmed window is sent without the
  filter and the error is logged.
* Optionally (``heal=True`` or a :class:`~adk_session_heal.policy.HealPolicy`),
  calls left unanswered in the request are answered in the request only (not
  persisted) with the same synthetic payload the healing session service writes.
  Calls the session marks as pending (long-running, awaiting confirmation or a
  credential) are never answered, dropped or counted as broken.
* If anything raises, the custom filter included, the request is left exactly
  as it came and the error is logged with its traceback
  (:mod:`~adk_session_heal.plugin.adk_plugin`).

What "broken" means is :mod:`adk_session_heal.provider_rules`' one statement of
the providers' rules. The work is a few linear passes over the contents: no
step is quadratic. :func:`filter_contents` (:mod:`~adk_session_heal.plugin.window`)
is the same logic as a pure function.
"""

from __future__ import annotations

from ..request_repair import Pending
from .adk_plugin import ToolAwareContextFilterPlugin
from .window import ContentCounter, ContextWindow, Repair, content_chars, filter_contents

__all__ = [
    "ContentCounter",
    "ContextWindow",
    "Pending",
    "Repair",
    "ToolAwareContextFilterPlugin",
    "content_chars",
    "filter_contents",
]
