"""The idempotency key of the tool call a tool is running, read from its ``ToolContext``.

Example, a tool that charges through an API that deduplicates by key::

    from adk_session_heal.plugins import idempotency_key

    async def charge_card(amount: int, tool_context: ToolContext) -> dict[str, str]:
        receipt = await payments.charge(amount, idempotency_key=idempotency_key(tool_context))
        return {"receipt": receipt.id}

What the key is made of, and why it stays the same when ADK runs the call
again, is :mod:`~adk_session_heal.core.idempotency`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from google.adk.events.event import Event
from google.adk.tools.tool_context import ToolContext

from ..core import idempotency
from ..core.session_key import SessionKey


def idempotency_key(tool_context: ToolContext) -> str:
    """Returns the idempotency key of the call being run: pass it to an API that dedupes.

    The same string in every process and on every run of this function call
    (ADK's resume of an interrupted invocation, ``RerunSafeCallsPlugin``),
    another for every other call, including the model's retry. 40 hexadecimal
    characters.

    A generator tool gets, from ADK 2.x, the context of the node ADK runs it
    as, not the call's: the key is then its call's, found through the node's
    parent contexts (:func:`_call_id_of`).

    Args:
        tool_context: The ``ToolContext`` ADK passes the tool.

    Raises:
        ValueError: The call has no function-call id (ADK gives every call it
            runs one).
    """
    call_id = _call_id_of(tool_context)
    if not call_id:
        raise ValueError("this tool call has no function-call id, so no idempotency key")
    session = tool_context.session
    invocation_id = _call_invocation(session.events, call_id, tool_context.invocation_id)
    return idempotency.idempotency_key(SessionKey(session.app_name, session.user_id, session.id),
                                       invocation_id, call_id)


def _call_id_of(context: ToolContext) -> str | None:
    """The function-call id of the tool call ``context`` runs in, or ``None``.

    A tool's own ``ToolContext`` carries it. ADK 2.x runs a generator tool (in
    ``run_async``, not live) as a ``FunctionNode`` and passes the function the
    node's ``Context``, whose ``parent_ctx`` is the call's (``FunctionTool.
    _run_generator_as_node``): the nearest context up that chain with an id is
    the call's. ADK 1.x contexts have no ``parent_ctx``.
    """
    seen: Any = context
    while seen is not None:
        call_id = getattr(seen, "function_call_id", None)
        if call_id:
            return str(call_id)
        seen = getattr(seen, "parent_ctx", None)
    return None


def _call_invocation(events: Sequence[Event], call_id: str, running: str) -> str:
    """The invocation in which the model made the call ``call_id``.

    The running invocation when the call is its own (stored in it, or not
    stored yet: a first run); else the newest stored invocation that made
    it (a call run again in a later invocation, as ``RerunSafeCallsPlugin``
    does).
    """
    made_in = [event.invocation_id for event in events
               if any(call.id == call_id for call in event.get_function_calls())]
    if not made_in or running in made_in:
        return running
    return made_in[-1]
