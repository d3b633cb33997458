"""Strict offline validators: would a provider reject this history, and why?

Each provider's sequencing rule is stated once, as a verdict over a request read as steps;
the validators turn it into the provider's own error texts (docs/plugin.md).

Example::

    problems = provider_problems(llm_request.contents, "anthropic")
    assert problems == [], [p.message for p in problems]
"""

from __future__ import annotations

from .providers.provider_rules import contents_verdict as contents_verdict
from .providers.provider_rules import whole as whole
from .providers.validators import *  # noqa: F403 (the public validators, listed below)
from .providers.validators import __all__ as _VALIDATORS

__all__ = sorted([*_VALIDATORS, "contents_verdict", "whole"])
