"""Tests for adk_session_heal.core.unhealable: dead calls a heal would make worse are never healed.

Each shape is checked against the request the installed ADK builds
(``_get_contents``): left unanswered, ADK 2.10+ leaves the call out and every
provider accepts the request; answered, the call comes back and a provider
refuses it. The healer must therefore leave it alone and say why.
"""

from __future__ import annotations

import asyncio
import importlib
from collections.abc import Sequence

import pytest
from google.adk.events.event import Event
from google.adk.flows.llm_flows.contents import _get_contents
from google.genai import types
from heal_lists import NOW, heal

from adk_session_heal.core.event_access import ADK_EVENTS, STORED_JSON
from adk_session_heal.core.findings import HEALABLE, CallStatus, classify
from adk_session_heal.core.session_decision import with_tool_runs
from adk_session_heal.core.tool_runs import RunState, ToolRun
from adk_session_heal.providers.validators import PROVIDERS, provider_problems
from adk_session_heal.testing import History


def statuses(events: Sequence[Event]) -> list[tuple[str | None, str]]:
    """``(call id, status)`` of every call, in history order."""
    return [(c.call_id, c.status.value) for c in classify(events, now=NOW).calls]


def request(events: Sequence[Event]) -> list[types.Content]:
    """The contents of the next model request, as the installed ADK builds them."""
    return _get_contents(None, list(events), "assistant", preserve_function_call_ids=True)


def problem_codes(events: Sequence[Event]) -> dict[str, list[str]]:
    """Each provider's problem codes with the request ADK builds from ``events``."""
    contents = request(events)
    return {p: [x.code for x in provider_problems(contents, p)] for p in PROVIDERS}


ACCEPTED = {p: [] for p in PROVIDERS}


def answered_by_hand(history: History, *answers: tuple[str, str]) -> list[Event]:
    """The history with a real-looking response for ``answers`` right after the call event,
    as a heal would have placed it (to show what answering the call does)."""
    events = list(history.events)
    index = next(i for i, e in enumerate(events)
                 if {c.id for c in e.get_function_calls()} >= {a[0] for a in answers})
    response = History(start=events[index].timestamp + 0.001).respond(*answers)
    return [*events[:index + 1], response, *events[index + 1:]]


def test_a_nameless_dead_call_is_malformed_and_never_healed() -> None:
    """ADK leaves it out unanswered; answered, ADK's LiteLlm adapter refuses it before sending."""
    lite_llm = importlib.import_module("google.adk.models.lite_llm")
    h = History(start=NOW - 1000)
    h.user("q")
    h.calls("", ids=["n1"])
    h.user("next")
    assert statuses(h.events) == [("n1", "malformed")]
    assert heal(h.events) == h.events
    assert problem_codes(h.events) == ACCEPTED

    answered = request(answered_by_hand(h, ("n1", "")))
    with pytest.raises(ValueError, match="require a name"):
        asyncio.run(lite_llm._content_to_message_param(answered[1]))


@pytest.mark.parametrize("answered", [(), ("a",)], ids=["both-dead", "one-dead"])
def test_parallel_dead_calls_sharing_an_id_are_malformed_and_never_healed(
        answered: tuple[str, ...]) -> None:
    """Answered one each, they are refused by OpenAI and Anthropic: left as they are."""
    h = History(start=NOW - 1000)
    h.user("two things")
    h.calls("a", "b", ids=["x", "x"])
    if answered:
        h.respond(*(("x", name) for name in answered))
    h.user("next")
    expected = [("x", "answered"), ("x", "malformed")] if answered else [("x", "malformed")] * 2
    assert statuses(h.events) == expected
    assert heal(h.events) == h.events
    if not answered:  # ADK leaves both out: every provider accepts the request
        assert problem_codes(h.events) == ACCEPTED
    both = answered_by_hand(h, ("x", "a"), ("x", "b")) if not answered else None
    if both is not None:
        codes = problem_codes(both)
        assert "duplicate_call_id" in codes["openai_chat"]
        assert "duplicate_call_id" in codes["anthropic"]


def test_a_call_of_an_id_a_malformed_call_carries_is_never_healed() -> None:
    """ADK keeps or drops unanswered calls by id: a heal of the second call would bring
    the nameless first one back into the request."""
    h = History(start=NOW - 1000)
    h.user("q")
    h.calls("", ids=["r"])
    h.user("again")
    h.call("f", call_id="r")
    h.user("next")
    assert statuses(h.events) == [("r", "malformed"), ("r", "malformed")]
    assert heal(h.events) == h.events
    assert problem_codes(h.events) == ACCEPTED
    answered = request(answered_by_hand(h, ("r", "f")))
    assert [c.name for x in answered for c in (p.function_call for p in x.parts or ())
            if c] == ["", "f"]  # the nameless call is back


def test_reused_ids_across_events_of_several_calls_are_malformed() -> None:
    """ADK 1.x sends every call event the last response event carrying one of its ids: a heal
    of the second event would answer, after the first, a call it does not hold."""
    h = History(start=NOW - 1000)
    h.user("q")
    h.calls("a", "b", ids=["r", "s"])
    h.respond(("r", "a"), ("s", "b"))
    h.user("again")
    h.calls("c", "d", ids=["r", "t"])
    h.user("next")
    assert statuses(h.events) == [("r", "answered"), ("s", "answered"),
                                  ("r", "malformed"), ("t", "malformed")]
    assert heal(h.events) == h.events


def test_a_single_call_reusing_an_id_is_still_healed() -> None:
    """One call per event: whichever response ADK 1.x sends after each, every call gets one."""
    h = History(start=NOW - 1000)
    h.user("q")
    h.call("f", call_id="r")
    h.respond(("r", "f"))
    h.user("again")
    h.call("f", call_id="r")
    h.user("next")
    assert statuses(h.events) == [("r", "answered"), ("r", "superseded")]
    assert len(heal(h.events)) == len(h.events) + 1


def test_a_call_turn_after_a_text_reply_of_its_agent_is_out_of_turn() -> None:
    """Gemini refuses a call turn right after a model turn: unanswered, ADK leaves the call
    out and Gemini accepts; answered, the turn is back and Gemini refuses it."""
    h = History(start=NOW - 1000)
    h.user("q")
    h.text("let me check")
    call = h.call("f")
    h.user("next")
    assert statuses(h.events) == [(call, "out_of_turn")]
    assert heal(h.events) == h.events
    assert problem_codes(h.events) == ACCEPTED
    assert problem_codes(answered_by_hand(h, (call, "f")))["gemini"] == ["turn_order"]


def test_a_call_turn_after_calls_left_out_is_judged_by_what_comes_before_them() -> None:
    """A call event ADK leaves out whole (a malformed call) is not a turn: what decides is the
    content before it (a text reply: out of turn; the user's message: healed)."""
    after_text = History(start=NOW - 1000)
    after_text.user("q")
    after_text.text("let me check")
    after_text.calls("", ids=["n1"])
    late = after_text.call("f")
    after_text.user("next")
    assert statuses(after_text.events) == [("n1", "malformed"), (late, "out_of_turn")]

    after_user = History(start=NOW - 1000)
    after_user.user("q")
    after_user.calls("", ids=["n1"])
    healed = after_user.call("f")
    after_user.user("next")
    assert statuses(after_user.events) == [("n1", "malformed"), (healed, "superseded")]
    after = heal(after_user.events)
    assert len(after) == len(after_user.events) + 1
    assert problem_codes(after) == ACCEPTED


@pytest.mark.parametrize("shape", ["after_user", "after_answer", "after_heal", "after_agent"])
def test_a_call_turn_in_order_is_healed(shape: str) -> None:
    """After the user's message, an answered call, a healed call or another agent's reply
    (which ADK shows as user context), a dead call is healed and the request stays valid."""
    h = History(start=NOW - 1000)
    h.user("q")
    if shape == "after_answer":
        first = h.call("lookup")
        h.respond((first, "lookup"))
    elif shape == "after_heal":
        h.call("lookup")
    elif shape == "after_agent":
        h.text("routing you", author="router")
    dead = h.call("f")
    h.user("next")
    assert all(status in {s.value for s in HEALABLE} | {"answered"}
               for _, status in statuses(h.events))
    assert (dead, "superseded") in statuses(h.events)
    healed = heal(h.events)
    assert len(healed) == len(h.events) + (2 if shape == "after_heal" else 1)
    assert problem_codes(healed) == ACCEPTED


def test_a_call_turn_after_a_long_running_call_nothing_answers_is_out_of_turn() -> None:
    """ADK keeps an unanswered long-running call: the content before the dead call is a call
    turn of its agent with no answer after it."""
    h = History(start=NOW - 1000)
    h.user("q")
    slow = h.call("slow", long_running=True)
    dead = h.call("f")
    h.user("next")
    assert statuses(h.events) == [(slow, "pending"), (dead, "out_of_turn")]


def test_stored_json_gives_the_same_statuses() -> None:
    """The scan reads stored JSON: the same decisions (``speaks`` included) as on Events."""
    h = History(start=NOW - 1000)
    h.user("q")
    h.text("let me check")
    h.calls("", ids=["n1"])
    h.call("f")
    h.calls("a", "b", ids=["x", "x"])
    h.user("next")
    stored = [e.model_dump(exclude_none=True, mode="json") for e in h.events]
    assert (classify(stored, STORED_JSON, now=NOW).calls
            == classify(h.events, ADK_EVENTS, now=NOW).calls)
    assert [c.status for c in classify(stored, STORED_JSON, now=NOW).calls] == [
        CallStatus.MALFORMED, CallStatus.OUT_OF_TURN, CallStatus.MALFORMED,
        CallStatus.MALFORMED]


def test_the_tool_run_ledger_never_turns_an_unhealable_call_into_an_abandoned_one() -> None:
    """An in-flight nameless call whose run ended stays malformed (the ledger only corrects
    calls that may be healed or are in flight)."""
    h = History(start=NOW - 10)
    h.user("q")
    h.calls("", ids=["n1"])
    findings = classify(h.events, now=NOW)
    assert [c.status for c in findings.calls] == [CallStatus.MALFORMED]
    run = ToolRun(app_name="app", user_id="u", session_id="s", call_id="n1", tool_name="",
                  invocation_id=h.invocation_id, state=RunState.STARTED, host="h", pid=1,
                  attempt=1, started_at=NOW - 9, lease_until=NOW - 5)
    corrected = with_tool_runs(findings, {"n1": run}, now=NOW)
    assert [c.status for c in corrected.calls] == [CallStatus.MALFORMED]
    assert not corrected.needs_healing
