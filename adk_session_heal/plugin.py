"""A context filter that never breaks a tool call from its response.

:class:`ToolAwareContextFilterPlugin` is a drop-in for ADK's
``ContextFilterPlugin`` (``before_model_callback``) that keeps the last N
*invocations* of a request's contents, or as many as fit a budget, without
ever sending a provider a response whose call was cut off or a call whose
response was cut off:

* An invocation starts at one or more consecutive human user contents (a
  function response content is role ``user`` but not human) and holds
  everything up to the next human content (ADK's definition).
* The window only ever starts at a *safe cut*: an invocation start after which
  no response belongs to a call before it (pairing is
  :func:`~adk_session_heal.pairing.pair`'s). A cut that is not safe widens back
  to the nearest safe one, so a tool cycle answered across invocations is kept
  whole (ADK-Java semantics, by invocation rather than by content, so the
  window still starts with a human message).
* A ``custom_filter`` runs on the trimmed window; whatever pairs its output
  breaks are repaired, by restoring the missing halves from the window
  (``repair="widen"``, the default) or by dropping the broken halves
  (``repair="drop"``), and anything still broken after widening is dropped.
  The output is never sent broken: if repair cannot make it whole, the trimmed
  window is sent without the filter and the error is logged.
* Optionally (``heal=True`` or a :class:`~adk_session_heal.policy.HealPolicy`),
  calls left unanswered in the request are answered in the request only (not
  persisted) with the same synthetic payload the healing session service writes.
  Calls the session marks as pending (long-running, awaiting confirmation or a
  credential) are never answered, dropped or counted as broken.
* If anything raises, the custom filter included, the request is left exactly
  as it came and the error is logged with its traceback.

The work is a few linear passes over the contents: no step is quadratic.
:func:`filter_contents` is the same logic as a pure function.
"""

from __future__ import annotations

import json
import logging
import time
from bisect import bisect_right
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Literal

from google.adk.agents.callback_context import CallbackContext
from google.adk.models.llm_request import LlmRequest
from google.adk.models.llm_response import LlmResponse
from google.adk.plugins.base_plugin import BasePlugin
from google.genai import types

from .findings import CallStatus, classify
from .pairing import EMPTY_STEP, Pairing, Step, pair
from .policy import DeadCall, HealPolicy
from .validators import gemini_steps

__all__ = [
    "ContentCounter",
    "ContextWindow",
    "Pending",
    "Repair",
    "ToolAwareContextFilterPlugin",
    "content_chars",
    "filter_contents",
]

logger = logging.getLogger(__name__)

Repair = Literal["widen", "drop"]
"""How pairs broken by a custom filter are repaired: see :class:`ContextWindow`."""

ContentCounter = Callable[[types.Content], int]
"""Returns the size of one content in budget units (characters, tokens, ...)."""

IN_REQUEST_REASON = "unanswered"
"""The :attr:`DeadCall.reason` of a call answered in a request by the plugin."""


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


@dataclass(frozen=True, slots=True)
class Pending:
    """Calls that are legitimately unanswered (never healed, dropped or repaired).

    Attributes:
        ids: Call ids awaiting their response.
        names: Tool names of those calls, for requests whose call ids ADK
            stripped (Gemini models get ``adk-`` ids removed).
    """

    ids: frozenset[str] = frozenset()
    names: frozenset[str] = frozenset()

    def covers(self, call_id: str | None, name: str) -> bool:
        """Whether a call of the request is one of these."""
        return call_id in self.ids if call_id else name in self.names


_NOTHING_PENDING = Pending()


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
              pending: Pending = _NOTHING_PENDING) -> list[types.Content]:
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
        trimmed = _trim(contents, self)
        if self.custom_filter is None and self._policy is None:
            return trimmed
        result = trimmed
        if self.custom_filter is not None:
            filtered = self.custom_filter(list(trimmed))
            result = _repair(trimmed, list(filtered), self.repair, pending)
        if self._policy is not None or self.custom_filter is not None:
            result = _sanitize(result, self._policy, pending)
        if self.custom_filter is not None and (
                (trimmed and not result)
                or _broken(result, pending) > _broken(trimmed, pending)):
            logger.error(
                "custom_filter output could not be repaired into a valid history; "
                "sending the trimmed contents without it")
            return _sanitize(trimmed, self._policy, pending) if self._policy else trimmed
        return result


def filter_contents(contents: Sequence[types.Content], window: ContextWindow,
                    pending: Pending = _NOTHING_PENDING) -> list[types.Content]:
    """Applies a :class:`ContextWindow` to request contents (pure).

    Args:
        contents: The request's contents, oldest first (not modified).
        window: What to keep.
        pending: Calls never to heal, drop or repair.

    Returns:
        The contents to send.
    """
    return window.apply(contents, pending)


# -- the window ------------------------------------------------------------------


@dataclass(slots=True)
class _Shape:
    """What the trim needs to know about contents, from one pass plus pairing."""

    steps: list[Step]
    roles: list[str]
    pairing: Pairing
    starts: list[int]  # invocation starts
    safe: list[int]  # invocation starts no response after which has its call before


def _shape(contents: Sequence[types.Content]) -> _Shape:
    steps, roles = gemini_steps(contents)
    starts: list[int] = []
    previous_human = False
    for index, role in enumerate(roles):
        human = role == "user" and not steps[index][1]
        if human and not previous_human:
            starts.append(index)
        previous_human = human
    pairing = pair(steps, idless="positional")
    n = len(steps)
    earliest = list(range(n))
    for occurrence in pairing.occurrences:
        for response in occurrence.responses:
            if occurrence.step < earliest[response]:
                earliest[response] = occurrence.step
    # need[i] = min(earliest[i:]): the oldest call a kept tail from i depends on.
    need = earliest
    for index in range(n - 2, -1, -1):
        if need[index + 1] < need[index]:
            need[index] = need[index + 1]
    safe = [s for s in starts if need[s] >= s]
    return _Shape(steps, roles, pairing, starts, safe)


def _closed_prefix(shape: _Shape, length: int) -> int:
    """Extends a prefix of ``length`` contents to the end of the tool cycles it opens."""
    if length <= 0:
        return 0
    n = len(shape.steps)
    last_response = [-1] * n
    for occurrence in shape.pairing.occurrences:
        if occurrence.responses:
            last = occurrence.responses[-1]
            if last > last_response[occurrence.step]:
                last_response[occurrence.step] = last
    end = min(length, n)
    reach = -1
    index = 0
    while index < end:
        if last_response[index] > reach:
            reach = last_response[index]
        index += 1
        if index == end and reach >= end:
            end = min(reach + 1, n)
    return end


def _is_human(content: types.Content) -> bool:
    """A user-role content holding no function response (a person typed it)."""
    if content.role != "user":
        return False
    return not any(part.function_response is not None for part in content.parts or ())


def _tail_cut(contents: Sequence[types.Content], keep: int, hysteresis: int) -> int | None:
    """The count-mode cut, found from the end without pairing the whole history.

    Walks back only until ``keep + hysteresis`` invocation starts are seen, then
    pairs the kept tail alone. If the tail pairs with no orphan, no kept
    response belongs to a dropped call, so the cut at the start of the
    ``keep``-th newest invocation is safe: the same answer :func:`_shape` gives,
    in time proportional to the tail. Returns ``None`` when the tail has an
    orphan (the cut may have to widen), leaving the full pass to decide.
    """
    starts: list[int] = []
    index = len(contents) - 1
    human_after = False
    while index >= 0 and len(starts) < keep + hysteresis:
        human = _is_human(contents[index])
        if human_after and not human:
            starts.append(index + 1)
        human_after = human
        index -= 1
    if index < 0 and human_after:
        starts.append(0)
    if len(starts) < keep + hysteresis:
        return 0
    cut = starts[keep - 1]
    steps, _roles = gemini_steps(contents[cut:])
    if pair(steps, idless="positional").orphans:
        return None
    return cut


def _trim(contents: Sequence[types.Content], window: ContextWindow) -> list[types.Content]:
    keep = window.num_invocations_to_keep
    if keep is None and window.budget is None:
        return list(contents)
    if keep is not None and window.budget is None and window.protected_prefix == 0:
        fast = _tail_cut(contents, keep, window.hysteresis)
        if fast is not None:
            return list(contents[fast:])
    return _full_trim(contents, window)


def _full_trim(contents: Sequence[types.Content], window: ContextWindow) -> list[types.Content]:
    """The trim from one pass over every content plus a full pairing."""
    keep = window.num_invocations_to_keep
    shape = _shape(contents)
    starts, safe = shape.starts, shape.safe
    cut = 0
    if keep is not None and len(starts) >= keep + window.hysteresis:
        target = starts[-keep]
        position = bisect_right(safe, target)
        cut = safe[position - 1] if position else 0
    prefix = _closed_prefix(shape, window.protected_prefix)
    if window.budget is not None:
        sizes = [window.counter(c) for c in contents]
        prefix_size = sum(sizes[:prefix])
        suffix = 0
        sizes_from: dict[int, int] = {}
        position = len(contents)
        for start in reversed(safe):
            suffix += sum(sizes[start:position])
            position = start
            sizes_from[start] = suffix
        best = None
        for start in reversed(safe):
            if start < cut:
                break
            if best is not None and prefix_size + sizes_from[start] > window.budget:
                break
            best = start
        if best is not None and best > cut:
            cut = best
    if cut <= prefix:
        return list(contents)
    return [*contents[:prefix], *contents[cut:]]


# -- repair and heal -------------------------------------------------------------


def _repair(trimmed: list[types.Content], filtered: list[types.Content], mode: Repair,
            pending: Pending) -> list[types.Content]:
    """Restores, in widen mode, what the filter's output needs from the trimmed contents."""
    if mode == "drop":
        return filtered
    position = {id(c): i for i, c in enumerate(trimmed)}
    origin = [position.get(id(c)) for c in filtered]
    known = [i for i in origin if i is not None]
    if any(b <= a for a, b in zip(known, known[1:], strict=False)):
        return filtered  # reordered or repeated: nothing to widen into; drop instead.
    steps, roles = gemini_steps(trimmed)
    partners: list[list[int]] = [[] for _ in trimmed]
    for occurrence in pair(steps, idless="positional").occurrences:
        if pending.covers(occurrence.id, occurrence.name):
            continue
        for response in occurrence.responses:
            partners[occurrence.step].append(response)
            partners[response].append(occurrence.step)
    for index, (calls, _responses) in enumerate(steps):
        if calls and index > 0 and roles[index - 1] == "user":
            partners[index].append(index - 1)
    kept = [False] * len(trimmed)
    work = list(known)
    for index in known:
        kept[index] = True
    restored = [False] * len(trimmed)
    while work:
        index = work.pop()
        for partner in partners[index]:
            if not kept[partner]:
                kept[partner] = restored[partner] = True
                work.append(partner)
    if not any(restored):
        return filtered
    result: list[types.Content] = []
    cursor = 0
    for content, source in zip(filtered, origin, strict=True):
        if source is not None:
            while cursor < source:
                if restored[cursor]:
                    result.append(trimmed[cursor])
                cursor += 1
            cursor = source + 1
        result.append(content)
    result.extend(trimmed[i] for i in range(cursor, len(trimmed)) if restored[i])
    return result


Key = tuple[str | None, str]


def _key(call_id: str | None, name: str) -> Key:
    return (call_id, "") if call_id else (None, name)


@dataclass(slots=True)
class _Plan:
    """What :func:`_sanitize` keeps, decided from the pairing before the pass."""

    drop_calls: dict[int, set[int]] = field(default_factory=dict)  # step -> call positions
    heal_calls: dict[int, list[tuple[str | None, str]]] = field(default_factory=dict)
    keep: dict[int, dict[Key, int]] = field(default_factory=dict)  # step -> responses kept
    whole: dict[int, list[tuple[int, Key, bool]]] = field(default_factory=dict)

    def keep_one(self, step: int, key: Key, count: int = 1) -> None:
        budget = self.keep.setdefault(step, {})
        budget[key] = budget.get(key, 0) + count


def _plan(steps: Sequence[Step], policy: HealPolicy | None, pending: Pending) -> _Plan:
    plan = _Plan()
    for occurrence in pair(steps, idless="positional").occurrences:
        step, key = occurrence.step, _key(occurrence.id, occurrence.name)
        if pending.covers(occurrence.id, occurrence.name):
            for response in occurrence.responses:
                plan.keep_one(response, key)
            continue
        answered = (step + 1) in occurrence.responses
        if answered:
            plan.keep_one(step + 1, key)
        elif policy is not None:
            plan.heal_calls.setdefault(step, []).append((occurrence.id, occurrence.name))
        else:
            plan.drop_calls.setdefault(step, set()).add(occurrence.position)
            continue
        plan.whole.setdefault(step, []).append((occurrence.position, key, answered))
    return plan


def _synthetic(heals: Sequence[tuple[str | None, str]], policy: HealPolicy) -> list[types.Part]:
    return [
        types.Part(function_response=types.FunctionResponse(
            id=call_id, name=name,
            response=policy.payload_for(DeadCall(call_id or "", name, IN_REQUEST_REASON))))
        for call_id, name in heals
    ]


def _sanitize(contents: Sequence[types.Content], policy: HealPolicy | None,
              pending: Pending) -> list[types.Content]:
    """Drops (or, with a policy, answers) every broken pair, in one forward pass.

    A call is whole when the next content holds a response to it (surplus and
    misplaced responses and orphans are dropped); a content with calls must come
    right after a user-role content, or its calls and their responses are
    dropped. Pending calls and their responses are left as they are. Contents
    that do not change are passed through, not copied.
    """
    steps, _roles = gemini_steps(contents)
    plan = _plan(steps, policy, pending)
    n = len(contents)
    result: list[types.Content] = []
    carried: dict[int, list[types.Part]] = {}  # synthetic answers for the next content
    for index, content in enumerate(contents):
        calls, responses = steps[index]
        extra = carried.pop(index, None)
        if not calls and not responses and extra is None:
            result.append(content)
            continue
        drop = plan.drop_calls.get(index, set())
        heals = plan.heal_calls.get(index, [])
        if calls and not (result and result[-1].role == "user"):
            # A call turn must follow a user turn: drop its calls and their answers.
            drop = drop | {position for position, _key_, _answered in plan.whole.get(index, ())}
            for _position, key, answered in plan.whole.get(index, ()):
                if answered:
                    plan.keep_one(index + 1, key, -1)
            heals = []
        budget = plan.keep.get(index, {})
        parts: list[types.Part] = []
        call_position = 0
        for part in content.parts or ():
            if part.function_call is not None:
                call_position += 1
                if call_position - 1 in drop:
                    continue
            elif part.function_response is not None:
                response = part.function_response
                key = _key(response.id or None, response.name or "")
                if budget.get(key, 0) <= 0:
                    continue
                budget[key] -= 1
            parts.append(part)
        if extra:
            parts.extend(extra)
        if extra or len(parts) != len(content.parts or ()):
            if parts:
                result.append(content.model_copy(update={"parts": parts}))
        else:
            result.append(content)
        if heals:
            assert policy is not None
            synthetic = _synthetic(heals, policy)
            following = steps[index + 1] if index + 1 < n else EMPTY_STEP
            if following[1] and not following[0]:
                carried[index + 1] = synthetic  # beside the siblings' responses
            else:
                result.append(types.Content(role="user", parts=synthetic))
    return result


def _broken(contents: Sequence[types.Content], pending: Pending) -> int:
    """Counts broken pairs (the rule :func:`_sanitize` enforces), pending calls aside."""
    steps, roles = gemini_steps(contents)
    pairing = pair(steps, idless="positional")
    broken = len(pairing.orphans)
    for occurrence in pairing.occurrences:
        if pending.covers(occurrence.id, occurrence.name):
            continue
        step = occurrence.step
        if occurrence.responses != [step + 1] or step == 0 or roles[step - 1] != "user":
            broken += 1
    return broken


# -- the plugin ------------------------------------------------------------------


def _pending_calls(callback_context: CallbackContext) -> Pending:
    """Reads the session's pending calls (long-running, confirmations, credentials)."""
    events = callback_context.session.events
    findings = classify(events, now=time.time())
    pending = findings.with_status(CallStatus.PENDING)
    if not pending:
        return _NOTHING_PENDING
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
        custom_filter: Runs after the trim; its output is checked and repaired.
        repair: ``"widen"`` (default) or ``"drop"``: see :class:`ContextWindow`.
        budget: Keep as many whole invocations as fit this size.
        counter: Size of a content for ``budget`` (default: characters).
        protected_prefix: The first K contents are always kept.
        hysteresis: Trim by count only once N + hysteresis invocations exist.
        heal: Answer unanswered calls in the request (not persisted), with this
            policy's payload (``True``: the default payload).
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
        name: str = "tool_aware_context_filter",
    ) -> None:
        super().__init__(name)
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
            pending = (_pending_calls(callback_context)
                       if window.custom_filter is not None or window.heal else _NOTHING_PENDING)
            contents = window.apply(llm_request.contents, pending)
        except Exception:  # fail open: a filter must never break the agent
            logger.exception("Tool-aware context filter failed; request left unfiltered")
            return None
        llm_request.contents = contents
        return None
