"""The ADK plugin: :class:`ToolAwareContextFilterPlugin`, a drop-in for ``ContextFilterPlugin``.

Its ``before_model_callback`` replaces the request's contents with what its
:class:`~adk_session_heal.runtime.context_filter.window.ContextWindow` keeps, telling the
window, when it heals, which calls the session marks as pending. If anything raises, the
custom filter included, the request is left exactly as it came and the error
is logged with its traceback.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from google.adk.agents.callback_context import CallbackContext
from google.adk.models.llm_request import LlmRequest
from google.adk.models.llm_response import LlmResponse
from google.adk.plugins.base_plugin import BasePlugin
from google.genai import types

from ...core.findings import CallStatus, classify
from ...policy import HealPolicy
from ...providers.request_repair import NOTHING_PENDING, Pending, merge_same_role_contents
from .widening import Repair
from .window import ContentCounter, ContextWindow, content_chars

logger = logging.getLogger(__name__)


def pending_calls(callback_context: CallbackContext) -> Pending:
    """Reads the session's pending calls (long-running, confirmations, credentials)."""
    events = callback_context.session.events
    findings = classify(events, now=time.time())
    pending = findings.with_status(CallStatus.PENDING)
    if not pending:
        return NOTHING_PENDING
    return Pending(frozenset(c.call_id for c in pending if c.call_id),
                   frozenset(c.name for c in pending))


class ToolAwareContextFilterPlugin(BasePlugin):
    """Trims the model's context by whole invocations, never splitting a tool call.

    Example::

        plugin = ToolAwareContextFilterPlugin(num_invocations_to_keep=3)
        runner = Runner(agent=agent, app_name="app", session_service=service,
                        plugins=[plugin])

    Args:
        num_invocations_to_keep: Keep at most the last N invocations.
        custom_filter: Runs after the trim and chooses which contents to send;
            the choice is completed so that no call is split (see
            :class:`ContextWindow`).
        repair: ``"widen"`` (default) or ``"drop"``: see :class:`ContextWindow`.
        budget: Keep as many whole invocations as fit this size.
        counter: Size of a content for ``budget`` (default: characters).
        protected_prefix: The first K contents are always kept.
        hysteresis: Trim by count only once N + hysteresis invocations exist.
        heal: Answer unanswered calls in the request (not persisted), with this
            policy's payload (``True``: the default payload).
        strict_alternation: Last, make consecutive contents of one role one
            turn (:func:`~adk_session_heal.providers.request_repair.merge_same_role_contents`),
            for a model path that sends one message per content to an API
            wanting strictly alternating roles. Request only; stored events
            are never changed.
        alternation_bridge: With ``strict_alternation``, keep tool results
            and text in separate user turns with a model turn of this text
            between them (Bedrock Converse rejects a turn mixing them).
        name: The plugin's name.
    """

    def __init__(
        self,
        num_invocations_to_keep: int | None = None,
        custom_filter: Callable[[list[types.Content]], list[types.Content]] | None = None,
        *,
        repair: Repair = "widen",
        budget: int | None = None,
        counter: ContentCounter = content_chars,
        protected_prefix: int = 0,
        hysteresis: int = 1,
        heal: HealPolicy | bool = False,
        strict_alternation: bool = False,
        alternation_bridge: str | None = None,
        name: str = "tool_aware_context_filter",
    ) -> None:
        super().__init__(name)
        self.strict_alternation = strict_alternation
        self.alternation_bridge = alternation_bridge
        self.window = ContextWindow(
            num_invocations_to_keep=num_invocations_to_keep,
            budget=budget,
            counter=counter,
            protected_prefix=protected_prefix,
            hysteresis=hysteresis,
            custom_filter=custom_filter,
            repair=repair,
            heal=heal,
        )

    async def before_model_callback(
        self, *, callback_context: CallbackContext, llm_request: LlmRequest
    ) -> LlmResponse | None:
        """Replaces the request's contents with the filtered window.

        If anything raises, the request is left exactly as it came and the
        error is logged with its traceback; the model call goes ahead.
        """
        window = self.window
        try:
            pending = pending_calls(callback_context) if window.heal else NOTHING_PENDING
            contents = window.apply(llm_request.contents, pending)
            if self.strict_alternation:
                contents = merge_same_role_contents(contents, bridge=self.alternation_bridge)
        except Exception:  # fail open: a filter must never break the agent
            logger.exception("Tool-aware context filter failed; request left unfiltered")
            return None
        llm_request.contents = contents
        return None
