"""Odd but legal calls: ids shared by parallel calls, empty names, ids reused across invocations.

Each heal must answer every dead call once and leave a history every provider rule
accepts (and that ADK's LiteLlm adapter converts) whenever the calls themselves allow it.
"""

from __future__ import annotations

import asyncio
import importlib

import pytest
from google.adk.events.event import Event
from google.genai import types
from test_healing import NOW, heal

from adk_session_heal.findings import CallStatus, classify
from adk_session_heal.testing import History
from adk_session_heal.validators import PROVIDERS, provider_problems


def all_problems(events: list[Event]) -> dict[str, list[str]]:
    """Problem codes per provider."""
    return {p: [x.code for x in provider_problems(events, p)] for p in PROVIDERS}


def shared_id_history(answer: tuple[str, ...]) -> History:
    """Two parallel calls (``a``, ``b``) sharing the id ``x``; ``answer`` names those answered."""
    h = History(start=NOW - 1000)
    h.user("two things")
    h.calls("a", "b", ids=["x", "x"])
    if answer:
        h.respond(*(("x", name) for name in answer))
    h.user("next")
    return h


def test_parallel_calls_sharing_an_id_both_answered_are_not_dead() -> None:
    """Two responses with the shared id answer the two calls, one each: nothing to heal."""
    events = shared_id_history(("a", "b")).events
    statuses = [c.status for c in classify(events, now=NOW).calls]
    assert statuses == [CallStatus.ANSWERED, CallStatus.ANSWERED]
    assert heal(events) == events


@pytest.mark.parametrize("answered", [(), ("a",)], ids=["both-dead", "one-dead"])
def test_parallel_calls_sharing_an_id_get_one_answer_each(answered: tuple[str, ...]) -> None:
    """Dead calls sharing an id get exactly the missing answers; every provider rule passes."""
    events = shared_id_history(answered).events
    healed = heal(events)
    (synthetic,) = [e for e in healed if e not in events]
    assert [(r.id, r.name) for r in synthetic.get_function_responses()] == [
        ("x", n) for n in ("a", "b")[len(answered):]]
    assert [c.status for c in classify(healed, now=NOW).calls] == [CallStatus.ANSWERED] * 2
    assert heal(healed) == healed
    if not answered:  # one response event after the call: every rule is met
        assert all_problems(healed) == {p: [] for p in PROVIDERS}


def test_ids_reused_across_invocations_heal_only_the_dead_occurrence() -> None:
    """An id answered in one invocation and reused by a dead call later: one heal, for the later."""
    h = History(start=NOW - 1000)
    h.user("q")
    h.call("f", call_id="r")
    h.respond(("r", "f"))
    h.text("ok")
    h.user("again")
    h.call("f", call_id="r")
    h.user("next")
    healed = heal(h.events)
    assert [e.id for e in healed] == [*(e.id for e in h.events[:6]), f"{h.events[5].id}-heal",
                                      h.events[6].id]
    assert all_problems(h.events)["anthropic"] == ["unanswered_call"]
    assert all_problems(healed) == {p: [] for p in PROVIDERS}


def test_a_nameless_dead_call_gets_a_response_with_the_same_empty_name() -> None:
    """The heal copies the call's empty name; every rule passes; LiteLlm refuses only the call."""
    lite_llm = importlib.import_module("google.adk.models.lite_llm")  # needs litellm (dev extra)
    h = History(start=NOW - 1000)
    h.user("q")
    h.calls("", ids=["n1"])
    h.user("next")
    healed = heal(h.events)
    (response,) = healed[2].get_function_responses()
    assert (response.id, response.name) == ("n1", "")
    assert all_problems(healed) == {p: [] for p in PROVIDERS}

    async def to_litellm(content: types.Content) -> object:
        return await lite_llm._content_to_message_param(content)

    message = asyncio.run(to_litellm(healed[2].content))  # the heal converts: a tool message
    assert message["role"] == "tool" and message["tool_call_id"] == "n1"
    with pytest.raises(ValueError, match="require a name"):  # the call never did, healed or not
        asyncio.run(to_litellm(healed[1].content))
