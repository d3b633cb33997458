"""The scripted offline model for ``Runner.run_async``, and the provider rule it checks requests by.

Public through :mod:`adk_session_heal.testing`, which re-exports every name here.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, Callable, Mapping, Sequence
from typing import Any

from google.adk.models.base_llm import BaseLlm
from google.adk.models.llm_request import LlmRequest
from google.adk.models.llm_response import LlmResponse
from google.genai import types
from pydantic import Field, PrivateAttr

from ..providers.provider_rules import contents_verdict


class ProviderRejected(ValueError):
    """Raised by :class:`ScriptedModel` for a history a provider would reject."""


def unpaired_tool_calls(contents: Sequence[types.Content]) -> list[str]:
    """Returns why a strict provider would reject these request contents.

    The rule for ADK contents in :mod:`adk_session_heal.providers.provider_rules`, which
    every provider accepts: each function call is answered exactly once, in the
    very next content; every response answers a call of the content right
    before it; and a content with calls comes right after a user or
    function-response content (Gemini's turn order).

    Args:
        contents: The ``LlmRequest.contents`` of one request.

    Returns:
        One line per problem; empty when the history is acceptable.
    """
    # Positional pairing (in the verdict): ADK strips its own "adk-" ids before a
    # request to most models, so parallel calls of one tool arrive id-less.
    verdict = contents_verdict(contents)
    occurrences = verdict.pairing.occurrences
    problems = [
        f"tool call {o.id or o.name} at content {o.step} has no response"
        for o in occurrences
        if not o.responses
    ]
    problems += [
        f"tool call {o.id or o.name} at content {o.step} is answered at {o.responses},"
        " not only in the next content"
        for o in (occurrences[i] for i in dict.fromkeys(i for i, _ in verdict.misplaced))
    ]
    problems += [
        f"tool call {o.id or o.name} at content {o.step} is answered"
        f" {o.responses.count(o.step + 1)} times in the next content"
        for o in (occurrences[i] for i in dict.fromkeys(i for i, _ in verdict.duplicates))
    ]
    problems += [
        f"tool call turn at content {step} does not come right after a user or"
        " function-response content"
        for step in sorted(verdict.out_of_order)
    ]
    problems += [
        f"tool response {r.id or r.name} at content {r.step} answers no call"
        for r in verdict.pairing.orphans
    ]
    return problems


Reply = LlmResponse | Callable[[LlmRequest], LlmResponse]


_NO_TOKENS = types.GenerateContentResponseUsageMetadata(
    prompt_token_count=0, candidates_token_count=0, total_token_count=0)
"""The usage a scripted reply reports: it spent no tokens."""


class _ScriptedBase(BaseLlm):
    """What the scripted models share: the history check and the replies they build."""

    validate_contents: Callable[[Sequence[types.Content]], list[str]] = Field(
        default=unpaired_tool_calls, alias="validate"
    )

    @staticmethod
    def call(name: str, args: Mapping[str, Any] | None = None,
             call_id: str | None = None) -> LlmResponse:
        """Returns a model reply holding one function call."""
        return LlmResponse(
            content=types.Content(
                role="model",
                parts=[types.Part(function_call=types.FunctionCall(
                    id=call_id, name=name, args=dict(args or {})))],
            )
        )

    @staticmethod
    def say(text: str) -> LlmResponse:
        """Returns a model reply holding text."""
        return LlmResponse(content=types.Content(role="model", parts=[types.Part(text=text)]))


class ScriptedModel(_ScriptedBase):
    """An offline model that replays a script and records every request.

    Each request is checked first: a history a strict provider would reject
    raises :class:`ProviderRejected` (as OpenAI, Anthropic and Gemini answer
    with HTTP 400), so a test fails where production would.

    Args:
        script: The replies, in order: an ``LlmResponse``, or a function of the
            request returning one. Use :meth:`call` and :meth:`say` to build them.
        validate: Returns the problems of a request's contents; defaults to
            :func:`unpaired_tool_calls`.
    """

    model: str = "scripted-offline-model"
    script: list[Any] = Field(default_factory=list)
    _requests: list[LlmRequest] = PrivateAttr(default_factory=list)
    _position: int = PrivateAttr(default=0)

    @property
    def requests(self) -> list[LlmRequest]:
        """Every request received, in order (deep copies)."""
        return self._requests

    async def generate_content_async(
        self, llm_request: LlmRequest, stream: bool = False
    ) -> AsyncGenerator[LlmResponse, None]:
        """Records and checks the request, then yields the next scripted reply."""
        self._requests.append(llm_request.model_copy(deep=True))
        problems = self.validate_contents(llm_request.contents)
        if problems:
            raise ProviderRejected("; ".join(problems))
        if self._position >= len(self.script):
            raise AssertionError(f"script exhausted after {self._position} replies")
        reply = self.script[self._position]
        self._position += 1
        response: LlmResponse = reply(llm_request) if callable(reply) else reply
        if response.usage_metadata is None:
            # A real model reports its token usage; without it ADK 2.13 logs a
            # WARNING per model call ("Skipping missing token usage metadata").
            response = response.model_copy(update={"usage_metadata": _NO_TOKENS})
        yield response
