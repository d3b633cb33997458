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
(:func:`~adk_session_heal.core.rerunnable.rerunnable_calls`: a ``read_only`` or
``idempotent`` tool, by the policy or the tool's MCP annotations, in the
newest invocation), runs the call again with its arguments and stores the
response as the call's answer, one event per call event, right after the call
and before the message. The model then sees a real answer, not "the tool was
interrupted". The event is marked ``custom_metadata["adk_session_heal_rerun"]``
and reported (one WARNING, the ``dead_calls`` counter with
``resolution="re-run"``).

A re-run goes through ADK's own tool path, as a live call does
(:func:`~adk_session_heal.core.adk_compat.run_function_calls`, ADK's
``handle_function_calls_async`` on a copy of the call event holding only that
call, with the tools and the callbacks of the agent that made the call):
every plugin's ``before_tool_callback`` then the agent's, the tool, the
``on_tool_error_callback`` chain if it raises, every plugin's
``after_tool_callback`` then the agent's. So a guard that rewrites the
arguments is honoured, an after-callback that masks the result is what is
stored and what the model reads, and ``ToolRunLedgerPlugin`` records the
re-run's start and end (a new attempt of the call id). A guard that answers
the call (returns a dict) blocks the tool; its answer is stored as the call's
response, exactly as ADK stores it for a live call: the model then reads the
guard's refusal, which is the truth (the tool did not run, and would not run
if asked again), where a heal would call the call interrupted and invite a
retry the guard would refuse anyway.

What ADK's path returns is stored only if it is a plain answer: an event
asking for a credential or a confirmation (the tool has not run; that request
belongs to a live turn, not to a message already on its way), or carrying a
transfer, an escalation or any other control-flow action, is not stored, and
the call is healed as without the plugin (ADK 2.x keeps the same subset of a
batch that ended early). Calls run concurrently, each with its own
``timeout``; one failing never loses its siblings' answers. Runner-level
hooks that ADK applies to events it yields (``on_event_callback``,
``RunConfig.custom_metadata``) do not run: the response is stored by the
plugin, not yielded by a turn.

Nothing is re-run unless the policy's ``rerun_safe_calls`` is on. Never re-run:
``side_effect`` and unknown tools, calls of an app ADK resumes
itself (``ResumabilityConfig(is_resumable=True)``: ADK 2.x re-runs the calls
that never ran on resume), calls whose agent (the call event's author) is not
an ``LlmAgent`` of the runner's tree or lacks the tool, and turns whose
message is a function response (a long-running tool's answer). A re-run that
raises (and no error callback answers it), outlasts ``timeout`` or gives no
response stores nothing: the wrapper then heals the call with its error as the
message is stored, as without the plugin.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Mapping

from google.adk.agents.invocation_context import InvocationContext
from google.adk.agents.llm_agent import LlmAgent
from google.adk.agents.readonly_context import ReadonlyContext
from google.adk.events.event import Event
from google.adk.plugins.base_plugin import BasePlugin
from google.adk.tools.base_tool import BaseTool
from google.genai import types

from ..core.adk_compat import merge_function_responses, run_function_calls
from ..core.event_access import ADK_EVENTS
from ..core.findings import HEALABLE, CallFinding
from ..core.heal_record import HealTrigger
from ..core.rerunnable import RERUN_METADATA_KEY, rerunnable_calls
from ..core.session_decision import SessionView, decide
from ..core.session_key import SessionKey
from ..core.tool_effects import tool_effects_from
from ..observe import report_rerun
from ..policy import HealPolicy, ToolEffect

logger = logging.getLogger("adk_session_heal")

_PLAIN_ACTIONS = frozenset({"state_delta", "artifact_delta", "skip_summarization",
                            "render_ui_widgets"})
"""Actions a stored re-run answer may carry: what a tool leaves, no control flow."""


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
        # The decision every healer makes, as on an append (the new message ends the
        # invocations before it); no plan: these calls are answered by running them.
        findings = (await decide(
            SessionView(SessionKey.of(context.session), [*events, incoming], ADK_EVENTS,
                        seen_events=None),
            self.policy, now=now, trigger=HealTrigger.APPEND, plan=False)).findings
        if not findings.needs_healing:
            return
        authors = sorted({events[c.event_index].author for c in findings.calls
                          if c.status in HEALABLE and c.event_index < len(events)})
        for author in authors:
            agent = _agent_named(context, author)
            if agent is None:
                continue
            # The context ADK gives the agent's own run: its callbacks and tools apply.
            agent_context = context.model_copy(update={"agent": agent})
            tools = {tool.name: tool
                     for tool in await agent.canonical_tools(ReadonlyContext(agent_context))}
            effects = await tool_effects_from(list(tools.values()))
            by_event: dict[int, list[CallFinding]] = {}
            for call in rerunnable_calls(events, findings, self.policy, effects=effects):
                if events[call.event_index].author == author and call.name in tools:
                    by_event.setdefault(call.event_index, []).append(call)
            for index, calls in by_event.items():
                await self._answer(agent_context, events, events[index], calls, tools, effects)

    async def _answer(self, context: InvocationContext, events: list[Event], call_event: Event,
                      calls: list[CallFinding], tools: Mapping[str, BaseTool],
                      effects: Mapping[str, ToolEffect]) -> None:
        """Runs one call event's re-runnable calls through ADK and stores their responses."""
        answers = await asyncio.gather(*(self._run(context, call_event, call, tools)
                                         for call in calls))
        kept = [answer for answer in answers if answer is not None]
        if not kept:
            return
        response = merge_function_responses(kept)
        done = {r.id: r.name or "" for r in response.get_function_responses()}
        now = time.time()
        event = response.model_copy(update={
            "invocation_id": call_event.invocation_id, "author": call_event.author,
            "branch": call_event.branch, "timestamp": max(now, events[-1].timestamp + 1e-6),
            "custom_metadata": {**(response.custom_metadata or {}), RERUN_METADATA_KEY: {
                "rerun": True, "call_event_id": call_event.id, "rerun_at": now,
                "call_ids": list(done), "tool_names": list(done.values()),
                "effects": [self.policy.tool_effects.get(name, effects.get(
                    name, ToolEffect.UNKNOWN)).value for name in done.values()],
            }},
        })
        await context.session_service.append_event(context.session, event)
        for call_id, name in done.items():
            report_rerun(context.session, call_event.id, call_id or "", name)

    async def _run(self, context: InvocationContext, call_event: Event, call: CallFinding,
                   tools: Mapping[str, BaseTool]) -> Event | None:
        """Runs one dead call through ADK's tool path; its response event, or ``None``."""
        found = next((c for c in call_event.get_function_calls() if c.id == call.call_id), None)
        if found is None or call_event.content is None:
            return None
        # A copy of the call event holding only this call: ADK runs what the event holds.
        only = call_event.model_copy(update={"content": types.Content(
            role=call_event.content.role,
            parts=[types.Part(function_call=found.model_copy(deep=True))])})
        try:
            response = await asyncio.wait_for(run_function_calls(context, only, tools),
                                              self.timeout)
        except Exception as exc:
            logger.warning("adk_session_heal: re-running %s#%s raised %s; it is healed "
                           "as usual", call.name, call.call_id, type(exc).__name__)
            return None
        if response is None:
            logger.warning("adk_session_heal: re-running %s#%s gave no response; it is "
                           "healed as usual", call.name, call.call_id)
            return None
        actions = _control_actions(response)
        if actions:
            logger.warning("adk_session_heal: re-running %s#%s asked for %s, which only a live "
                           "turn can carry out; it is healed as usual", call.name,
                           call.call_id, ", ".join(actions))
            return None
        return response


def _agent_named(context: InvocationContext, name: str) -> LlmAgent | None:
    """The runner's ``LlmAgent`` called ``name`` (the author of a call event), if any."""
    agent = context.agent
    root = getattr(agent, "root_agent", None)
    find = getattr(root, "find_agent", None)
    found = find(name) if find is not None else None
    return found if isinstance(found, LlmAgent) else None


def _control_actions(event: Event) -> list[str]:
    """The actions of ``event`` other than what a tool leaves (state, artifacts), by name."""
    actions = event.actions
    return [name for name, field in type(actions).model_fields.items()
            if name not in _PLAIN_ACTIONS
            and getattr(actions, name) != field.get_default(call_default_factory=True)]
