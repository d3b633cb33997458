"""The context window: what to keep of a request's contents, as data and as a pure function.

:class:`ContextWindow` holds the plugin's settings and applies them:

1. Trim by whole invocations, never splitting a tool cycle
   (:mod:`adk_session_heal.runtime.context_filter.trimming`).
2. Run the ``custom_filter`` on the trimmed window and read what it returned
   as a choice of the window's contents
   (:mod:`adk_session_heal.runtime.context_filter.matching`): the filter chooses, it never
   edits; contents it made up are not sent.
3. Complete that choice (:mod:`adk_session_heal.runtime.context_filter.widening`): a call is
   sent if and only if all its responses are, and the newest human message
   always is; pairs the filter split are restored from the window
   (``repair="widen"``) or left out (``repair="drop"``).
4. With ``heal``, answer the calls still unanswered with the healing policy's
   payload (:func:`~adk_session_heal.providers.request_repair.repair_contents`). Pending
   calls are never answered.

So what is sent is the trimmed window, a subsequence of it, or (with ``heal``)
that plus synthetic answers. :func:`filter_contents` is the same as a
function. Pure: no I/O (logging aside).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from google.genai import types

from ...core.event_access import content_steps
from ...core.pairing import response_owners
from ...policy import HealPolicy
from ...providers.request_repair import NOTHING_PENDING, Pending, repair_contents
from .matching import chosen_positions
from .trimming import Trimmed, trim_read
from .widening import Repair, complete, newest_human

logger = logging.getLogger(__name__)

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
        custom_filter: Runs on the trimmed contents and chooses which to send:
            what it returns is matched back to them (the objects, or equal
            copies); its order does not matter and contents it made up are not
            sent. The choice is completed so that a call goes with all its
            responses and the newest human message is kept.
        repair: ``"widen"`` adds what the filter's choice needs (the call of
            a kept response, the responses of a kept call, wherever they sit,
            the user turn before a kept call turn); ``"drop"`` leaves out
            whatever needs a content the filter dropped instead.
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
            pending: Calls ``heal`` never answers.

        Returns:
            A subsequence of ``contents`` (the same objects, in order) or, with
            ``heal``, that with unanswered calls answered (the contents the
            heal adds to or adds are new).

        Raises:
            Exception: Whatever the custom filter or counter raises.
        """
        read = trim_read(contents, self)
        trimmed = read.contents
        if self.custom_filter is not None:
            trimmed = self._choose(read, self.custom_filter(list(trimmed)))
        policy = self._policy
        return trimmed if policy is None else repair_contents(trimmed, policy, pending)

    def _choose(self, read: Trimmed,
                returned: Sequence[types.Content]) -> list[types.Content]:
        """The trimmed contents the filter's output chooses, completed (see :meth:`apply`)."""
        trimmed = read.contents
        chosen, foreign = chosen_positions(trimmed, returned)
        if foreign:
            logger.warning(
                "custom_filter returned %d content(s) that were not among its input; "
                "they are not sent (a filter chooses contents, it cannot add or edit them)",
                foreign)
        if all(chosen):
            return trimmed
        if read.steps is not None and read.roles is not None:  # the full pass read them
            steps, roles = read.steps, read.roles
        else:
            steps, roles = content_steps(trimmed)
        sent = complete(chosen, steps, roles, response_owners(steps), self.repair,
                        newest_human(steps, roles))
        result = [content for content, keep in zip(trimmed, sent, strict=True) if keep]
        if trimmed and not result:
            logger.error("custom_filter left nothing to send; sending the trimmed contents")
            return trimmed
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
