"""A context filter that never breaks a tool call from its response (private; public
through :mod:`adk_session_heal.plugins`).

:class:`ToolAwareContextFilterPlugin` is a drop-in for ADK's
``ContextFilterPlugin`` (``before_model_callback``) that keeps the last N
*invocations* of a request's contents, or as many as fit a budget, without
ever sending a provider a response whose call was cut off or a call whose
response was cut off:

* The window only starts where no kept response belongs to a dropped call
  (:mod:`~adk_session_heal.runtime.context_filter.trimming`).
* A ``custom_filter`` runs on the trimmed window and *chooses* what to send:
  its output is read back as positions of its input
  (:mod:`~adk_session_heal.runtime.context_filter.matching`: the objects it was given, or
  equal copies), and what is sent is always a subsequence of the request's
  contents, never an edited or made-up content. The choice is completed
  (:mod:`~adk_session_heal.runtime.context_filter.widening`): a call is sent if and only if
  all its responses are, wherever they sit, and the newest human message
  always is; the halves the filter split are restored (``repair="widen"``, the
  default) or left out (``repair="drop"``). An identity filter changes nothing.
* Optionally (``heal=True`` or a :class:`~adk_session_heal.policy.HealPolicy`),
  calls left unanswered in the request are answered in the request only (not
  persisted) with the same synthetic payload the healing session service writes.
  Calls the session marks as pending (long-running, awaiting confirmation or a
  credential) are never answered, dropped or counted as broken.
* If anything raises, the custom filter included, the request is left exactly
  as it came and the error is logged with its traceback
  (:mod:`~adk_session_heal.runtime.context_filter.adk_plugin`).

Which response belongs to which call is :func:`adk_session_heal.core.pairing.pair`'s
decision, and a request the strict validators accept stays accepted. The work
is a few linear passes over the contents: no step is quadratic.
:func:`filter_contents` (:mod:`~adk_session_heal.runtime.context_filter.window`) is the same
logic as a pure function.
"""

from __future__ import annotations

# The package's names, re-exported explicitly (``X as X``: no ``__all__`` in a private layer).
from ...providers.request_repair import Pending as Pending
from .adk_plugin import ToolAwareContextFilterPlugin as ToolAwareContextFilterPlugin
from .widening import Repair as Repair
from .window import ContentCounter as ContentCounter
from .window import ContextWindow as ContextWindow
from .window import content_chars as content_chars
from .window import filter_contents as filter_contents
