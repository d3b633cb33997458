"""RerunSafeCallsPlugin: on the next user message, run dead read-only calls again.

Opt-in (off by default), for tools whose second run is harmless. Add it to the
``App``'s or ``Runner``'s plugins, with the same policy as the wrapper, whose
:attr:`~adk_session_heal.policy.HealPolicy.rerun_safe_calls` must be on::

    policy = HealPolicy(rerun_safe_calls=True,
                        tool_effects={"get_weather": ToolEffect.READ_ONLY})
    runner = Runner(agent=agent, app_name="app",
                    session_service=HealingSessionService(inner, policy),
                    plugins=[RerunSafeCallsPlugin(policy)])

When the user's next message arrives (``on_user_message_callback``, before
ADK stores it), the plugin classifies the session with that message (which
proves the earlier turn over) and, for each re-runnable dead call
(:func:`~adk_session_heal.reruns.rerunnable_calls`: a ``read_only`` or
``idempotent`` tool, by the policy or the tool's MCP annotations, in the
newest invocation), runs the tool again with the call's arguments and stores
its real result as the call's response, one event per call event, right
after the call and before the message. The model then sees a real answer, not
"the tool was interrupted". The event is marked
``custom_metadata["adk_session_heal_rerun"]`` and reported (one WARNING, the
``dead_calls`` counter with ``resolution="re-run"``).

Nothing is re-run unless the policy's ``rerun_safe_calls`` is on. Never re-run:
``side_effect`` and unknown tools, calls of an app ADK resumes
itself (``ResumabilityConfig(is_resumable=True)``: ADK 2.x re-runs the calls
that never ran on resume), calls whose tool is not found, and turns whose
message is a function response (a long-running tool's answer). A re-run
that raises or outlasts ``timeout`` stores nothing: the wrapper then heals
the call with its error as the message is stored, as without the plugin.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

from google.adk.agents.invocation_context import InvocationContext
from google.adk.agents.readonly_context import ReadonlyContext
from google.adk.events.event import Event
from google.adk.plugins.base_plugin import BasePlugin
from google.adk.tools.tool_context import ToolContext
from google.genai import types

from .findings import CallFinding, classify
from .observe import report_rerun
from .policy import HealPolicy, ToolEffect
from .reruns import RERUN_METADATA_KEY, rerunnable_calls
from .tool_effects import tool_effects_from

__all__ = ["RerunSafeCallsPlugin"]

logger = logging.getLogger("adk_session_heal")


class RerunSafeCallsPlugin(BasePlugin):
    """Runs dead calls of read-only and idempotent tools again on the next user message.

    Args:
        policy: The wrapper's policy (its ``tool_effects`` and ages; it should
            have ``rerun_safe_calls=True``).
        timeout: Seconds one re-run may take before it is given up.
        name: The plugin's name.
    """

    def __init__(self, policy: HealPolicy, *, timeout: float = 30.0,
                 name: str = "adk_session_heal_rerun") -> None:
        super().__init__(name=name)
        self.policy = policy
        self.timeout = timeout

    async def on_user_message_callback(
        self, *, invocation_context: InvocationContext, user_message: types.Content
    ) -> types.Content | None:
        """Re-runs the session's re-runnable dead calls before ``user_message`` is stored."""
        if not self.policy.rerun_safe_calls or getattr(invocation_context, "is_resumable", False):
            return None
        if any(part.function_response for part in user_message.parts or []):
            return None
        session = invocation_context.session
        events = list(session.events)
        if not events:
            return None
        try:
            await self._rerun(invocation_context, events, user_message)
        except Exception:  # a re-run must never break the user's turn
            logger.exception("adk_session_heal: re-running dead calls of session %s failed; "
                             "they are healed as usual", session.id)
        return None

    async def _rerun(self, context: InvocationContext, events: list[Event],
                     message: types.Content) -> None:
        now = time.time()
        incoming = Event(invocation_id=context.invocation_id, author="user", content=message,
                         timestamp=now)
        findings = classify([*events, incoming], now=now,
                            stale_after=self.policy.stale_after_seconds,
                            clock_skew=self.policy.clock_skew_seconds)
        if not findings.needs_healing:
            return
        tools = await self._tools(context)
        effects = await tool_effects_from(list(tools.values()))
        by_event: dict[int, list[CallFinding]] = {}
        for call in rerunnable_calls(events, findings, self.policy, effects=effects):
            if call.name in tools:
                by_event.setdefault(call.event_index, []).append(call)
        for index, calls in by_event.items():
            await self._answer(context, events, events[index], calls, tools, effects)

    async def _tools(self, context: InvocationContext) -> dict[str, Any]:
        """The tools of the invocation's agent and its sub-agents, by the name the model calls."""
        found: dict[str, Any] = {}
        pending = [context.agent]
        while pending:
            agent = pending.pop()
            canonical = getattr(agent, "canonical_tools", None)
            if canonical is not None:
                for tool in await canonical(ReadonlyContext(context)):
                    found.setdefault(tool.name, tool)
            pending.extend(getattr(agent, "sub_agents", None) or ())
        return found

    async def _answer(self, context: InvocationContext, events: list[Event], call_event: Event,
                      calls: list[CallFinding], tools: dict[str, Any],
                      effects: dict[str, ToolEffect]) -> None:
        """Runs one call event's re-runnable calls and stores their real responses."""
        args = {c.id: dict(c.args or {}) for c in call_event.get_function_calls()}
        parts: list[types.Part] = []
        done: list[CallFinding] = []
        for call in calls:
            assert call.call_id is not None
            tool_context = ToolContext(context, function_call_id=call.call_id)
            try:
                result = await asyncio.wait_for(
                    tools[call.name].run_async(args=args.get(call.call_id, {}),
                                               tool_context=tool_context),
                    self.timeout)
            except Exception as exc:
                logger.warning("adk_session_heal: re-running %s#%s raised %s; it is healed "
                               "as usual", call.name, call.call_id, type(exc).__name__)
                continue
            response = result if isinstance(result, dict) else {"result": result}
            parts.append(types.Part(function_response=types.FunctionResponse(
                id=call.call_id, name=call.name, response=response)))
            done.append(call)
        if not parts:
            return
        now = time.time()
        event = Event(
            invocation_id=call_event.invocation_id, author=call_event.author,
            branch=call_event.branch, content=types.Content(role="user", parts=parts),
            timestamp=max(now, events[-1].timestamp + 1e-6),
            custom_metadata={RERUN_METADATA_KEY: {
                "rerun": True, "call_event_id": call_event.id, "rerun_at": now,
                "call_ids": [c.call_id for c in done], "tool_names": [c.name for c in done],
                "effects": [self.policy.tool_effects.get(c.name, effects.get(
                    c.name, ToolEffect.UNKNOWN)).value for c in done],
            }},
        )
        session_service = context.session_service
        await session_service.append_event(context.session, event)
        for call in done:
            report_rerun(context.session, call_event.id, call.call_id or "", call.name)
