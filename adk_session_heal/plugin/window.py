"""The context window: what to keep of a request's contents, as data and as a pure function.

:class:`ContextWindow` holds the plugin's settings and applies them:

1. Trim by whole invocations, never splitting a tool cycle
   (:mod:`adk_session_heal.plugin.trimming`).
2. Run the ``custom_filter`` on the trimmed window; restore the halves of the
   pairs its output breaks from the window (``repair="widen"``,
   :mod:`adk_session_heal.plugin.widening`) or leave them to be dropped
   (``repair="drop"``).
3. Repair what is still broken with the request-side repairer
   (:func:`~adk_session_heal.request_repair.repair_contents`): broken halves
   are dropped or, with ``heal``, unanswered calls are answered with the
   healing policy's payload. Pending calls are never touched.
4. If the repaired output is more broken than the trimmed window, send the
   trimmed window without the filter and log the error.

:func:`filter_contents` is the same as a function. Pure: no I/O (logging aside).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Literal

from google.genai import types

from ..policy import HealPolicy
from ..provider_rules import contents_verdict
from ..request_repair import NOTHING_PENDING, Pending, repair_contents
from .trimming import trim
from .widening import broken, widen

__all__ = ["ContentCounter", "ContextWindow", "Repair", "content_chars", "filter_contents"]

logger = logging.getLogger(__name__)

Repair = Literal["widen", "drop"]
"""How pairs broken by a custom filter are repaired: see :class:`ContextWindow`."""

ContentCounter = Callable[[types.Content], int]
"""Returns the size of one content in budget units (characters, tokens, ...)."""


def content_chars(content: types.Content) -> int:
    """Returns a content's size in characters: texts plus JSON of calls and responses.

    The default budget counter. Pass your tokenizer's counter instead for a
    token budget.
    """
    size = 0
    for part in content.parts or ():
        if part.text:
            size += len(part.text)
        elif part.function_call is not None:
            call = part.function_call
            size += len(call.name or "") + len(json.dumps(call.args or {}, default=str))
        elif part.function_response is not None:
            response = part.function_response
            size += len(response.name or "") + len(
                json.dumps(response.response or {}, default=str))
    return size


@dataclass(frozen=True)
class ContextWindow:
    """What to keep of a request's contents (the plugin's settings, as data).

    Attributes:
        num_invocations_to_keep: Keep at most the last N invocations
            (``None``: no count limit).
        budget: Keep as many whole invocations, newest first, as fit this
            total size (``None``: no budget). The newest invocation is kept
            even if it alone exceeds the budget.
        counter: Size of one content for ``budget`` (default
            :func:`content_chars`).
        protected_prefix: The first K contents are always kept (extended to
            the end of any tool cycle they start).
        hysteresis: Trim by count only once at least N + hysteresis
            invocations exist, then back to N, so the kept prefix (and a
            provider's prompt cache) stays put for ``hysteresis - 1`` turns.
            ``1`` (the default) trims whenever more than N exist, like ADK's
            ``remove_amount=1``.
        custom_filter: Runs on the trimmed contents; its output is checked and
            repaired.
        repair: ``"widen"`` restores the halves of pairs the filter broke (and
            the content before a call it left without its user turn) from the
            trimmed contents; ``"drop"`` removes the broken halves instead.
        heal: Answer calls left unanswered in the request with this policy's
            payload (``True`` for the default policy). Never persisted.
    """

    num_invocations_to_keep: int | None = None
    budget: int | None = None
    counter: ContentCounter = content_chars
    protected_prefix: int = 0
    hysteresis: int = 1
    custom_filter: Callable[[list[types.Content]], list[types.Content]] | None = None
    repair: Repair = "widen"
    heal: HealPolicy | bool = False
    _policy: HealPolicy | None = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if self.num_invocations_to_keep is not None and self.num_invocations_to_keep < 1:
            raise ValueError("num_invocations_to_keep must be at least 1 (or None)")
        if self.budget is not None and self.budget < 0:
            raise ValueError("budget must not be negative")
        if self.protected_prefix < 0:
            raise ValueError("protected_prefix must not be negative")
        if self.hysteresis < 1:
            raise ValueError("hysteresis must be at least 1")
        if self.repair not in ("widen", "drop"):
            raise ValueError("repair must be 'widen' or 'drop'")
        policy = (HealPolicy() if self.heal is True
                  else self.heal if isinstance(self.heal, HealPolicy) else None)
        object.__setattr__(self, "_policy", policy)

    def apply(self, contents: Sequence[types.Content],
              pending: Pending = NOTHING_PENDING) -> list[types.Content]:
        """Returns the contents to send (a new list; ``contents`` is not modified).

        Args:
            contents: The request's contents, oldest first.
            pending: Calls never to heal, drop or repair.

        Returns:
            The filtered contents. Content objects are shared with the input,
            except those the heal or repair rebuilt.

        Raises:
            Exception: Whatever the custom filter or counter raises.
        """
        trimmed = trim(contents, self)
        policy = self._policy
        if self.custom_filter is None:
            return trimmed if policy is None else repair_contents(trimmed, policy, pending)
        filtered = list(self.custom_filter(list(trimmed)))
        verdict = contents_verdict(trimmed)
        result = (widen(trimmed, verdict, filtered, pending) if self.repair == "widen"
                  else filtered)
        result = repair_contents(result, policy, pending)
        if (trimmed and not result) or (
                broken(contents_verdict(result), pending) > broken(verdict, pending)):
            logger.error(
                "custom_filter output could not be repaired into a valid history; "
                "sending the trimmed contents without it")
            return repair_contents(trimmed, policy, pending) if policy else trimmed
        return result


def filter_contents(contents: Sequence[types.Content], window: ContextWindow,
                    pending: Pending = NOTHING_PENDING) -> list[types.Content]:
    """Applies a :class:`ContextWindow` to request contents (pure).

    Args:
        contents: The request's contents, oldest first (not modified).
        window: What to keep.
        pending: Calls never to heal, drop or repair.

    Returns:
        The contents to send.
    """
    return window.apply(contents, pending)
