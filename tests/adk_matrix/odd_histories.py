"""Seeded histories with odd calls, and what healing does to the request ADK builds from them.

Shared by ``tests/core/test_odd_calls.py`` (the installed ADK, with ADK's LiteLlm
adapter) and ``odd_check.py`` (each ADK of the reader matrix), so it imports
only that ADK, the standard library and adk-session-heal (no hypothesis).

:func:`random_ops` draws one session's ops from a ``random.Random`` (the same
vocabulary as ``tests/support/ugly_histories.py``: parallel calls, calls sharing one
id, ids reused across invocations, id-less calls, calls with an empty or
missing name, long-running calls, confirmations, orphaned responses, texts,
new invocations and odd clock steps) and :func:`build` turns them into ADK
events. :func:`compare` heals one history (followed by the user's next message, the turn
whose request ADK builds next) with the package's pure core, and builds that
request from the history before and after healing with the installed ADK's own
request builder (its contents processor: what it drops, moves and merges).
Each provider's validator reads both requests and, when asked, so does ADK's
LiteLlm adapter (a refusal, or the OpenAI Chat problems of the messages it
would send). :func:`harms` says what healing made worse: a request a check
accepted unhealed must be accepted healed, and no call the request showed
unharmed may be named by a problem after healing.
"""

from __future__ import annotations

import inspect
import random
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from google.adk.events.event import Event
from google.adk.events.event_actions import EventActions
from google.adk.flows.llm_flows.contents import _get_contents
from google.genai import types

from adk_session_heal.core.findings import classify
from adk_session_heal.core.healing import apply_heals, build_heal_event, plan_heals
from adk_session_heal.policy import HealPolicy
from adk_session_heal.providers.validators import PROVIDERS, provider_problems, validate_openai_chat

AGENT = "assistant"
NOW = 1_700_200_000.0
"""The healer's clock: every history ends well before it."""

GAPS = {"tie": 0.0, "one_us": 1e-6, "sub_us": 3e-7, "two_us": 2e-6, "back": -2.5}
"""Clock steps a ``("gap", name)`` op puts before the next event (otherwise 1 s)."""

_ID_MODES = ("fresh", "fresh", "shared", "shared", "reuse", "idless", "mixed")
_NAME_MODES = ("named", "named", "named", "empty", "missing")

Op = tuple[Any, ...]


def random_ops(rng: random.Random, max_ops: int = 14) -> list[Op]:
    """Draws one session's ops (after its first user message); see the module docstring."""
    ops: list[Op] = []
    for _ in range(rng.randint(1, max_ops)):
        kind = rng.choice(("user", "text", "call", "call", "call", "answer", "answer",
                           "answer", "confirm", "orphan", "gap"))
        if kind == "call":
            ops.append(("call", rng.randint(1, 3), rng.choice(("plain", "plain", "long")),
                        rng.choice(_ID_MODES), rng.choice(_NAME_MODES)))
        elif kind == "answer":
            ops.append(("answer", rng.randint(0, 7), rng.random() < 0.5))
        elif kind == "confirm":
            ops.append(("confirm", rng.randint(0, 7)))
        elif kind == "gap":
            ops.append(("gap", rng.choice(sorted(GAPS))))
        else:
            ops.append((kind,))
    return ops


@dataclass
class _Open:
    call_id: str
    name: str | None
    event_index: int


@dataclass
class _Builder:
    clock: float
    events: list[Event] = field(default_factory=list)
    invocation: int = 0
    calls: int = 0
    orphans: int = 0
    used: list[str] = field(default_factory=list)
    open: list[_Open] = field(default_factory=list)
    gap: float | None = None

    def add(self, author: str = AGENT, **fields: Any) -> Event:
        if self.events:
            self.clock += 1.0 if self.gap is None else self.gap
        self.gap = None
        event = Event(id=f"e-{len(self.events) + 1:04d}", timestamp=self.clock, author=author,
                      invocation_id=f"inv-{self.invocation}", **fields)
        self.events.append(event)
        return event

    def user(self) -> None:
        self.invocation += 1
        self.add("user", content=types.Content(
            role="user", parts=[types.Part(text=f"turn {self.invocation}")]))

    def fresh(self) -> str:
        self.calls += 1
        self.used.append(f"call-{self.calls}")
        return self.used[-1]

    def call(self, count: int, flavour: str, id_mode: str, name_mode: str) -> None:
        ids: list[str | None]
        if id_mode == "shared":
            ids = [self.fresh()] * count
        elif id_mode == "reuse" and self.used:
            ids = [self.used[0], *(self.fresh() for _ in range(count - 1))]
        elif id_mode == "idless":
            ids = [None] * count
        elif id_mode == "mixed":
            ids = [None, *(self.fresh() for _ in range(count - 1))]
        else:
            ids = [self.fresh() for _ in range(count)]
        names: list[str | None] = [f"tool{i}" for i in range(count)]
        names[0] = {"named": "tool0", "empty": "", "missing": None}[name_mode]
        parts = [types.Part(function_call=types.FunctionCall(id=i, name=n, args={}))
                 for i, n in zip(ids, names, strict=True)]
        long_running = {i for i in ids if i} if flavour == "long" else None
        self.add(content=types.Content(role="model", parts=parts),
                 long_running_tool_ids=long_running or None)
        index = len(self.events) - 1
        self.open.extend(_Open(i, n, index) for i, n in zip(ids, names, strict=True) if i)

    def respond(self, answers: Sequence[_Open], *, pending: bool = False) -> None:
        parts = [types.Part(function_response=types.FunctionResponse(
            id=a.call_id, name=a.name, response={"result": "ok"})) for a in answers]
        actions = EventActions()
        if pending:
            from google.adk.tools.tool_confirmation import ToolConfirmation

            actions.requested_tool_confirmations = {
                a.call_id: ToolConfirmation(hint="confirm?") for a in answers}
        self.add("user", content=types.Content(role="user", parts=parts), actions=actions)

    def answer(self, pick: int, together: bool) -> None:
        if self.open:
            chosen = self.open[pick % len(self.open)]
            answers = ([c for c in self.open if c.event_index == chosen.event_index]
                       if together else [chosen])
            for answered in answers:
                self.open.remove(answered)
            self.respond(answers)


def build(ops: Sequence[Op], *, start: float = NOW - 10_000) -> list[Event]:
    """Builds one session's events: a first user message, then one event per op.

    Args:
        ops: From :func:`random_ops`, or written by hand for a regression.
        start: The first event's time; each later one is 1 s on unless a
            ``("gap", name)`` op set the step before it (:data:`GAPS`).

    Returns:
        The events, ids ``e-0001``, ``e-0002``, ... in the order written.
    """
    builder = _Builder(clock=start)
    builder.user()
    for op in ops:
        kind = op[0]
        if kind == "user":
            builder.user()
        elif kind == "text":
            builder.add(content=types.Content(role="model", parts=[types.Part(text="reply")]))
        elif kind == "call":
            builder.call(int(op[1]), str(op[2]), str(op[3]), str(op[4]))
        elif kind == "answer":
            builder.answer(int(op[1]), bool(op[2]))
        elif kind == "confirm" and builder.open:
            builder.respond([builder.open.pop(int(op[1]) % len(builder.open))], pending=True)
        elif kind == "orphan":
            builder.orphans += 1
            builder.respond([_Open(f"ghost-{builder.orphans}", "ghost", -1)])
        elif kind == "gap":
            builder.gap = GAPS[str(op[1])]
    return builder.events


def healed(events: Sequence[Event], stale_after: float | None) -> list[Event]:
    """Heals a history with the package's pure core (classify, plan, build, place)."""
    findings = classify(events, now=NOW, stale_after=stale_after)
    plans = plan_heals(events, findings, app_name="app", user_id="user", session_id="s")
    return apply_heals(events, [(p.insert_at, build_heal_event(p, HealPolicy(), healed_at=NOW))
                                for p in plans])


_PRESERVES_IDS = "preserve_function_call_ids" in inspect.signature(_get_contents).parameters


def request_contents(events: Sequence[Event]) -> list[types.Content] | None:
    """The contents of the agent's next model request, as the installed ADK builds them.

    ``None`` when ADK's builder raises (1.x refuses some orphaned last responses).
    """
    kwargs: dict[str, Any] = {"preserve_function_call_ids": True} if _PRESERVES_IDS else {}
    try:
        return _get_contents(None, list(events), AGENT, **kwargs)
    except ValueError:
        return None


Trouble = dict[str, list[tuple[str, tuple[str, ...]]]]
"""Per check (a provider's validator, ``litellm``, ``adk``): its problems, ``(code, ids)``."""


def trouble(contents: list[types.Content] | None) -> Trouble:
    """Each provider's problems with a request (``adk``: ADK could not build it)."""
    if contents is None:
        return {"adk": [("refused", ())]}
    return {p: [(x.code, x.ids) for x in provider_problems(contents, p)] for p in PROVIDERS}


async def litellm_trouble(contents: list[types.Content] | None) -> Trouble:
    """What ADK's LiteLlm adapter makes of a request for an OpenAI model.

    ``refused`` when it raises before sending (a call without a name);
    otherwise the OpenAI Chat problems of the messages it would send (after
    its own placeholder results for calls nothing answers).
    """
    from google.adk.models.lite_llm import _get_completion_inputs
    from google.adk.models.llm_request import LlmRequest

    if contents is None:
        return {}
    try:
        inputs = await _get_completion_inputs(LlmRequest(contents=contents), "openai/gpt-4o")
    except ValueError:
        return {"litellm": [("refused", ())]}
    return {"litellm": [(x.code, x.ids) for x in validate_openai_chat(inputs[0])]}


def shown(contents: list[types.Content] | None) -> set[str]:
    """The ids of the calls a request shows (``""`` for a call without one)."""
    return {part.function_call.id or "" for content in contents or ()
            for part in content.parts or () if part.function_call}


@dataclass
class Comparison:
    """One history's next request before and after healing, as each reader judges it."""

    ops: list[Op]
    stale_after: float | None
    events: list[Event]
    healed: list[Event]
    shown: set[str] = field(default_factory=set)
    before: Trouble = field(default_factory=dict)
    after: Trouble = field(default_factory=dict)

    @property
    def heals(self) -> int:
        """How many synthetic events healing added."""
        return len(self.healed) - len(self.events)


def harms(comparison: Comparison) -> dict[str, str]:
    """What healing made worse, per check (empty when nothing).

    A check that accepted the request before healing must accept it after, and
    no call the request showed before with no problem may be named by one
    after. (Counting problems would not do: a heal between two calls nothing
    answers splits one Anthropic problem over their two turns into two.)
    """
    found: dict[str, str] = {}
    if "adk" in comparison.before:
        return found  # ADK could not build the request unhealed: nothing to make worse
    for check in sorted({*comparison.before, *comparison.after}):
        before = comparison.before.get(check, [])
        after = comparison.after.get(check, [])
        if after and not before:
            found[check] = f"accepted unhealed, refused healed: {after}"
            continue
        troubled_before = {i for _, ids in before for i in ids or ("",)}
        hurt = {i for _, ids in after for i in ids or ("",)} & (
            comparison.shown - troubled_before)
        if hurt:
            found[check] = f"calls unharmed before, named after: {sorted(hurt)}: {after}"
    return found


async def compare(ops: Sequence[Op], stale_after: float | None, *,
                  litellm: bool = False) -> Comparison:
    """Builds one history, followed by the user's next message, heals it, and judges both.

    Args:
        ops: The history's ops (the next user message is added after them).
        stale_after: The healer's age limit (``None``: superseded calls only).
        litellm: Also ask ADK's LiteLlm adapter what it makes of each request.
    """
    events = build([*ops, ("user",)])
    after_heal = healed(events, stale_after)
    comparison = Comparison(list(ops), stale_after, events, after_heal)
    if len(after_heal) == len(events):  # nothing healed: the same request twice
        return comparison
    before_request, after_request = request_contents(events), request_contents(after_heal)
    comparison.shown = shown(before_request)
    comparison.before, comparison.after = trouble(before_request), trouble(after_request)
    if litellm:
        comparison.before |= await litellm_trouble(before_request)
        comparison.after |= await litellm_trouble(after_request)
    return comparison


def seeded_ops(seed: int) -> tuple[list[Op], float | None]:
    """The ops and healing age limit of history number ``seed``."""
    rng = random.Random(seed)
    return random_ops(rng), rng.choice((None, 1.0))


def describe(events: Sequence[Event]) -> str:
    """One line per event (id, invocation, parts), for failure reports."""
    lines = []
    for event in events:
        parts = []
        for part in (event.content.parts or []) if event.content else []:
            if part.function_call is not None:
                parts.append(f"call({part.function_call.id},{part.function_call.name!r})")
            elif part.function_response is not None:
                parts.append(f"resp({part.function_response.id},{part.function_response.name!r})")
            elif part.text:
                parts.append(f"text({part.text!r})")
        lines.append(f"{event.id:<14} {event.invocation_id:<7} {event.author:<10} "
                     f"{' '.join(parts)}")
    return "\n".join(lines)
