"""ADK's live-mode streaming tools, as the tool-run plugin sees them.

In ``Runner.run_live``, ADK (every supported release) runs a tool whose function
is an async generator as a stream. Between the call's before- and after-tool
callbacks its live caller (``_process_function_live_helper``: in
``flows/llm_flows/tools/_live_caller.py`` on 2.13, ``flows/llm_flows/functions.py``
on 1.x up to 2.7) starts the generator in a task of its own, registers that task
on the invocation, and answers the call "pending" at once. The task sends each
value the generator yields to the model (as text up to 1.28 and on 2.0, as
function responses of the call from 1.39 and 2.6), and ends when the generator
is done, when it raises (1.39 and 2.13 catch the error and tell the model; the
others let the task die), or when it is cancelled (the model's
``stop_streaming``, the live run's end). No callback runs for the stream itself.

:func:`stream_task` finds that task in ADK's own registry, right after ADK
registered it: by call id where the invocation has
``_active_background_tools`` (2.13), else by tool name
(``InvocationContext.active_streaming_tools``: 1.x up to 2.7, where a later
stream of the same tool replaces the entry's task).
"""

from __future__ import annotations

import asyncio
import inspect
from typing import Any

from google.adk.tools.base_tool import BaseTool
from google.adk.tools.tool_context import ToolContext

_ABSENT = object()


def is_live_stream(tool: BaseTool, tool_context: ToolContext) -> bool:
    """Whether ADK runs this call as a live stream: an async generator function, in ``run_live``.

    The test ADK's live caller makes (``tool.func`` is an async generator
    function), in an invocation with a live request queue (only ``run_live``
    has one).
    """
    func = getattr(tool, "func", None)
    context = getattr(tool_context, "_invocation_context", None)
    return (func is not None and inspect.isasyncgenfunction(func)
            and getattr(context, "live_request_queue", None) is not None)


def stream_task(tool: BaseTool, tool_context: ToolContext) -> asyncio.Task[Any] | None:
    """The task ADK registered for this call's live stream, or ``None`` if it has none.

    ``None`` on 2.13 once the stream ended (ADK drops its entry then). By tool
    name (1.x up to 2.7), the task of the tool's latest stream, which may have
    ended.
    """
    context = getattr(tool_context, "_invocation_context", None)
    registry: Any = getattr(context, "_active_background_tools", _ABSENT)
    entry: Any
    if registry is not _ABSENT:  # by call id
        entry = (registry or {}).get(tool_context.function_call_id)
    else:  # by tool name
        entry = (getattr(context, "active_streaming_tools", None) or {}).get(tool.name)
    task = getattr(entry, "task", None)
    return task if isinstance(task, asyncio.Task) else None
