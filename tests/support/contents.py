"""Builders and hypothesis strategies for ADK request contents (plugin and validator tests)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from google.genai import types
from hypothesis import strategies as st

from adk_session_heal.providers.validators import PROVIDERS, Problem, provider_problems


def user(text: str) -> types.Content:
    """A human user content."""
    return types.Content(role="user", parts=[types.Part(text=text)])


def model(text: str) -> types.Content:
    """A model text content."""
    return types.Content(role="model", parts=[types.Part(text=text)])


def calls(*refs: tuple[str | None, str]) -> types.Content:
    """A model content with one function call per ``(id, name)``."""
    return types.Content(role="model", parts=[
        types.Part(function_call=types.FunctionCall(id=i, name=n, args={"q": n}))
        for i, n in refs])


def answers(*refs: tuple[str | None, str]) -> types.Content:
    """A user content with one function response per ``(id, name)``."""
    return types.Content(role="user", parts=[
        types.Part(function_response=types.FunctionResponse(id=i, name=n, response={"r": 1}))
        for i, n in refs])


def chat_call(call_id: str) -> dict[str, Any]:
    """A Chat Completions ``tool_calls`` entry calling ``f``."""
    return {"id": call_id, "type": "function", "function": {"name": "f", "arguments": "{}"}}


def seed_history() -> list[types.Content]:
    """The issue's example, contents #1-#9."""
    return [
        user("hello"), model("hi"),
        user("tell me about X"), calls(("c1", "lookup")), answers(("c1", "lookup")),
        model("X is ..."),
        user("tell me more"), calls(("c2", "lookup")), answers(("c2", "lookup")),
    ]


def all_problems(contents: Sequence[types.Content], *, with_ids: bool = True) -> list[Problem]:
    """Every provider's problems (only Gemini's for id-less histories)."""
    providers = PROVIDERS if with_ids else ("gemini",)
    return [p for provider in providers for p in provider_problems(contents, provider)]


Refs = list[tuple[str | None, str]]


def _history(draw: st.DrawFn, *, idless: bool, invocations: int,
             answer: Callable[[st.DrawFn, Refs], list[types.Content]]) -> list[types.Content]:
    """Invocations of one or two user messages, rounds of parallel calls, maybe an answer.

    ``answer`` returns the contents answering one round's calls.
    """
    contents: list[types.Content] = []
    counter = 0
    for _ in range(draw(st.integers(1, invocations))):
        contents.append(user(f"u{len(contents)}"))
        if draw(st.booleans()):
            contents.append(user("and also"))
        for _round in range(draw(st.integers(0, 3))):
            names = draw(st.lists(st.sampled_from(["a", "b"]), min_size=1, max_size=3))
            refs: Refs = []
            for name in names:
                counter += 1
                refs.append((None if idless else f"id{counter}", name))
            contents.append(calls(*refs))
            contents.extend(answer(draw, refs))
        if draw(st.booleans()):
            contents.append(model("answer"))
    return contents


@st.composite
def valid_histories(draw: st.DrawFn, *, idless: bool = False) -> list[types.Content]:
    """ADK-shaped request contents that every provider accepts."""

    def together(draw: st.DrawFn, refs: Refs) -> list[types.Content]:
        return [answers(*draw(st.permutations(refs)) if not idless else refs)]

    return _history(draw, idless=idless, invocations=7, answer=together)


@st.composite
def tool_histories(draw: st.DrawFn) -> list[types.Content]:
    """ADK-shaped contents whose tool calls are answered in every way a request may hold.

    Parallel calls (possibly id-less, as Gemini requests are), answered in one
    content or each response in its own content, in any order, sometimes with a
    response lost. Histories with separate or lost responses are ones the strict
    validators reject; the rest they accept.
    """

    def any_way(draw: st.DrawFn, refs: Refs) -> list[types.Content]:
        answered = list(draw(st.permutations(refs)))
        if len(answered) > 1 and draw(st.integers(0, 5)) == 0:
            answered.pop(draw(st.integers(0, len(answered) - 1)))  # a lost response
        if draw(st.booleans()):
            return [answers(*answered)]
        return [answers(ref) for ref in answered]

    return _history(draw, idless=draw(st.booleans()), invocations=5, answer=any_way)


@dataclass(frozen=True)
class Identity:
    """A custom filter returning its input list as it is."""

    def __call__(self, contents: list[types.Content]) -> list[types.Content]:
        """Returns ``contents``."""
        return contents


@dataclass(frozen=True)
class KeepLast:
    """A custom filter keeping the last ``k`` contents."""

    k: int

    def __call__(self, contents: list[types.Content]) -> list[types.Content]:
        """Returns ``contents[-k:]``."""
        return contents[-self.k:]


@dataclass(frozen=True)
class RandomDrop:
    """A custom filter dropping the contents at some positions."""

    dropped: frozenset[int]

    def __call__(self, contents: list[types.Content]) -> list[types.Content]:
        """Returns ``contents`` without those positions."""
        return [c for i, c in enumerate(contents) if i not in self.dropped]


@dataclass(frozen=True)
class Copies:
    """A custom filter returning deep copies of what another one returns."""

    inner: Identity | KeepLast | RandomDrop

    def __call__(self, contents: list[types.Content]) -> list[types.Content]:
        """Returns ``[c.model_copy(deep=True) for c in inner(contents)]``."""
        return [c.model_copy(deep=True) for c in self.inner(contents)]


CustomFilter = Identity | KeepLast | RandomDrop | Copies

_PLAIN_FILTERS: st.SearchStrategy[Identity | KeepLast | RandomDrop] = st.one_of(
    st.just(Identity()),
    st.builds(KeepLast, st.integers(1, 6)),
    st.builds(RandomDrop, st.frozensets(st.integers(0, 40))),
)

CUSTOM_FILTERS: st.SearchStrategy[CustomFilter] = st.one_of(
    _PLAIN_FILTERS, st.builds(Copies, _PLAIN_FILTERS))
"""Identity, keep-last-k and random-drop filters, and the same returning copies."""
