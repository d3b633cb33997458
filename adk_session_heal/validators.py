"""Strict offline validators: would a provider reject this history, and why?

Each provider's sequencing rule is stated once, as a verdict over a request read as steps;
the validators turn it into the provider's own error texts (docs/plugin.md).

Example::

    problems = provider_problems(llm_request.contents, "anthropic")
    assert problems == [], [p.message for p in problems]
"""

from __future__ import annotations

from .providers.provider_rules import (
    PROVIDERS,
    AnthropicBlock,
    Provider,
    anthropic_turns,
    contents_verdict,
    gemini_steps,
    openai_chat_steps,
    whole,
)
from .providers.validators import (
    Problem,
    adk_request_contents,
    adk_request_problems,
    provider_problems,
    validate,
    validate_alternation,
    validate_anthropic,
    validate_gemini,
    validate_openai_chat,
    validate_openai_responses,
)

__all__ = [
    "AnthropicBlock",
    "PROVIDERS",
    "Problem",
    "Provider",
    "adk_request_contents",
    "adk_request_problems",
    "anthropic_turns",
    "contents_verdict",
    "gemini_steps",
    "openai_chat_steps",
    "provider_problems",
    "validate",
    "validate_alternation",
    "validate_anthropic",
    "validate_gemini",
    "validate_openai_chat",
    "validate_openai_responses",
    "whole",
]
