"""Tests for adk_session_heal.runtime.context_filter: the tool-aware context filter."""

from __future__ import annotations

import logging
from typing import Any

import pytest
from contents import (
    CUSTOM_FILTERS,
    Copies,
    CustomFilter,
    Identity,
    all_problems,
    answers,
    calls,
    model,
    seed_history,
    tool_histories,
    user,
    valid_histories,
)
from google.adk.agents.llm_agent import LlmAgent
from google.adk.models.llm_request import LlmRequest
from google.adk.models.llm_response import LlmResponse
from google.adk.plugins.context_filter_plugin import ContextFilterPlugin
from google.adk.runners import Runner
from google.adk.sessions import InMemorySessionService
from google.genai import types
from hypothesis import given, settings
from hypothesis import strategies as st

from adk_session_heal.core.pairing import pair
from adk_session_heal.policy import DEFAULT_PAYLOAD, HealPolicy, ToolEffect, effect_payload
from adk_session_heal.providers.provider_rules import gemini_steps
from adk_session_heal.runtime.context_filter import ContextWindow, ToolAwareContextFilterPlugin
from adk_session_heal.testing import ProviderRejected, ScriptedModel


def _numbers(out: list[types.Content], history: list[types.Content]) -> list[int]:
    return [next(i + 1 for i, c in enumerate(history) if c is o) for o in out]


def _is_subsequence(out: list[types.Content], history: list[types.Content]) -> bool:
    it = iter(history)
    return all(any(o is c for c in it) for o in out)


def _newest_human(history: list[types.Content]) -> types.Content | None:
    humans = [c for c in history
              if c.role == "user" and not any(p.function_response for p in c.parts or ())]
    return humans[-1] if humans else None


def test_seed_example_keeps_contents_3_to_9() -> None:
    """The issue's example: keep 2 invocations of #1-#9 gives #3-#9."""
    history = seed_history()
    assert _numbers(ContextWindow(num_invocations_to_keep=2).apply(history), history) == [
        3, 4, 5, 6, 7, 8, 9]
    assert _numbers(ContextWindow(num_invocations_to_keep=1).apply(history), history) == [
        7, 8, 9]


def test_cut_widens_back_to_the_invocation_holding_the_call() -> None:
    """A response answered in a later invocation pulls the call's invocation in."""
    history = [user("a"), calls(("lr", "job")), user("b"), model("ok"),
               user("c"), answers(("lr", "job")), model("done")]
    out = ContextWindow(num_invocations_to_keep=1).apply(history)
    assert _numbers(out, history) == [1, 2, 3, 4, 5, 6, 7]
    assert ContextWindow(num_invocations_to_keep=1).apply(history[2:]) == history[4:]


def test_hysteresis_trims_only_after_n_plus_k() -> None:
    """With hysteresis 3 and N=1, two or three invocations stay; four trim to one."""
    window = ContextWindow(num_invocations_to_keep=1, hysteresis=3)
    three = [user("1"), model("a"), user("2"), model("b"), user("3"), model("c")]
    assert window.apply(three) == three
    four = [*three, user("4"), model("d")]
    assert window.apply(four) == four[6:]


def test_budget_keeps_whole_invocations_that_fit_and_the_prefix() -> None:
    """A character budget keeps newest whole invocations plus the protected prefix."""
    history = [user("sys"), user("x" * 50), model("y" * 50), user("q"), calls(("c", "f")),
               answers(("c", "f")), model("ans")]
    out = ContextWindow(budget=40, protected_prefix=1).apply(history)
    assert out[0] is history[0]
    assert _numbers(out, history) == [1, 4, 5, 6, 7]
    tiny = ContextWindow(budget=0).apply(history)
    assert _numbers(tiny, history) == [4, 5, 6, 7]  # the newest invocation always stays


def test_protected_prefix_extends_to_close_its_tool_cycle() -> None:
    """A prefix ending on a call keeps its response too."""
    history = [user("a"), calls(("c", "f")), answers(("c", "f")), user("b"), model("x"),
               user("c"), model("y")]
    out = ContextWindow(num_invocations_to_keep=1, protected_prefix=2).apply(history)
    assert _numbers(out, history) == [1, 2, 3, 6, 7]
    assert all_problems(out) == []


def test_custom_filter_breaking_a_pair_is_widened() -> None:
    """A filter dropping a call content gets it (and its user turn) restored."""
    history = seed_history()
    window = ContextWindow(num_invocations_to_keep=2,
                           custom_filter=lambda cs: [c for c in cs if c is not history[3]])
    out = window.apply(history)
    assert _numbers(out, history) == [3, 4, 5, 6, 7, 8, 9]


def test_custom_filter_breaking_a_pair_is_dropped_when_asked() -> None:
    """repair="drop" removes the orphaned response instead."""
    history = seed_history()
    window = ContextWindow(num_invocations_to_keep=2, repair="drop",
                           custom_filter=lambda cs: [c for c in cs if c is not history[3]])
    out = window.apply(history)
    assert _numbers(out, history) == [3, 6, 7, 8, 9]
    assert all_problems(out) == []


def test_filter_own_contents_are_not_sent(caplog: pytest.LogCaptureFixture) -> None:
    """A content the filter made up (a summary) is left out and logged; the rest is sent."""
    history = seed_history()
    summary = model("summary of earlier turns")
    window = ContextWindow(custom_filter=lambda cs: [cs[0], summary, *cs[6:]])
    with caplog.at_level(logging.WARNING, logger="adk_session_heal.runtime.context_filter"):
        out = window.apply(history)
    assert _numbers(out, history) == [1, 7, 8, 9]
    assert "1 content(s) that were not among its input" in caplog.text


def _separate_answers() -> list[types.Content]:
    """Parallel calls answered by two separate contents, in reverse order."""
    return [user("q"), calls(("a", "f"), ("b", "g")), answers(("b", "g")), answers(("a", "f")),
            model("done"), user("next")]


def test_identity_filter_leaves_separately_answered_calls_unchanged() -> None:
    """An identity filter sends every content as it came, also responses in separate contents."""
    history = _separate_answers()
    snapshot = [c.model_copy(deep=True) for c in history]
    out = ContextWindow(custom_filter=lambda cs: cs).apply(history)
    assert out == snapshot
    assert all(a is b for a, b in zip(out, history, strict=True))


def test_a_call_goes_with_all_its_separate_responses() -> None:
    """Dropping one of two separate responses restores it (widen) or drops the call (drop)."""
    history = _separate_answers()
    without_b = lambda cs: [c for c in cs if c is not history[2]]  # noqa: E731
    assert _numbers(ContextWindow(custom_filter=without_b).apply(history), history) == [
        1, 2, 3, 4, 5, 6]
    dropped = ContextWindow(custom_filter=without_b, repair="drop").apply(history)
    assert _numbers(dropped, history) == [1, 5, 6]


def test_keep_last_filter_keeps_the_newest_human_message() -> None:
    """A keep-last-1 filter ending on a tool cycle still sends the newest human message."""
    history = [*seed_history()[:7], model("let me look"), calls(("c2", "lookup")),
               answers(("c2", "lookup"))]
    for mode in ("widen", "drop"):
        out = ContextWindow(custom_filter=lambda cs: cs[-1:], repair=mode).apply(  # type: ignore[arg-type]
            history)
        assert history[6] in out and all(any(o is c for c in history) for o in out)
        assert all_problems(out) == []
    widened = ContextWindow(custom_filter=lambda cs: cs[-1:]).apply(history)
    assert _numbers(widened, history) == [7, 9, 10]


def test_copies_choose_the_original_contents() -> None:
    """A filter returning deep copies, even reordered, sends the original objects in order."""
    history = _separate_answers()
    copies = ContextWindow(custom_filter=lambda cs: [c.model_copy(deep=True) for c in cs])
    assert all(a is b for a, b in zip(copies.apply(history), history, strict=True))
    last = ContextWindow(custom_filter=lambda cs: [c.model_copy(deep=True) for c in cs[-3:]],
                         repair="drop")
    assert _numbers(last.apply(history), history) == [5, 6]
    reordered = ContextWindow(
        custom_filter=lambda cs: [c.model_copy(deep=True) for c in reversed(cs)])
    assert all(a is b for a, b in zip(reordered.apply(history), history, strict=True))


def test_equal_contents_are_chosen_in_order() -> None:
    """Copies of equal contents choose them in order; an object listed twice is sent twice."""
    again = user("again")
    history = [user("q"), model("x"), user("r"), model("x"), again, again]
    copies = ContextWindow(custom_filter=lambda cs: [c.model_copy(deep=True) for c in cs[1:4:2]])
    out = copies.apply(history)
    assert [id(c) for c in out] == [id(history[i]) for i in (1, 3, 5)]
    both = ContextWindow(custom_filter=lambda cs: cs).apply(history)
    assert len(both) == 6 and both[4] is both[5] is again


def test_heal_after_a_filter_is_the_heal_without_one() -> None:
    """With heal on, an identity filter changes nothing the heal would not."""
    history = [user("a"), calls(("c1", "f"), ("c2", "f")), answers(("c1", "f")), user("b")]
    healed = ContextWindow(heal=True).apply(history)
    assert ContextWindow(heal=True, custom_filter=lambda cs: cs).apply(history) == healed
    assert all_problems(healed) == []


def test_in_request_heal_answers_with_the_wrappers_payload() -> None:
    """heal=True answers an unanswered call right after it with DEFAULT_PAYLOAD."""
    history = [user("a"), calls(("c1", "f"), ("c2", "f")), answers(("c1", "f")), user("b")]
    out = ContextWindow(heal=True).apply(history)
    assert all_problems(out) == []
    healed = out[2].parts or []
    assert [p.function_response.id for p in healed if p.function_response] == ["c1", "c2"]
    assert healed[1].function_response and healed[1].function_response.response == dict(
        DEFAULT_PAYLOAD)
    assert history[2].parts is not None and len(history[2].parts) == 1  # input untouched
    custom = ContextWindow(heal=HealPolicy(payload={"error": "lost"})).apply(history)
    assert custom[2].parts and custom[2].parts[1].function_response
    assert custom[2].parts[1].function_response.response == {"error": "lost"}


def test_in_request_heal_is_worded_for_each_tool_s_effect() -> None:
    """The plugin's in-request heal answers with the policy's per-tool wording, as the wrapper."""
    history = [user("a"), calls(("c1", "get_weather"), ("c2", "charge_card")), user("b")]
    policy = HealPolicy(tool_effects={"get_weather": ToolEffect.READ_ONLY})
    out = ContextWindow(heal=policy).apply(history)
    assert all_problems(out) == []
    assert [p.function_response.response for c in out for p in c.parts or ()
            if p.function_response] == [effect_payload(ToolEffect.READ_ONLY),
                                        effect_payload(ToolEffect.UNKNOWN)]


# -- properties ------------------------------------------------------------------

WINDOWS = st.builds(
    ContextWindow,
    num_invocations_to_keep=st.one_of(st.none(), st.integers(1, 5)),
    budget=st.one_of(st.none(), st.integers(0, 200)),
    protected_prefix=st.integers(0, 3),
    hysteresis=st.integers(1, 3),
)


@settings(max_examples=150, deadline=None)
@given(valid_histories(), WINDOWS)
def test_any_window_of_a_valid_history_is_valid(history: list[Any],
                                                window: ContextWindow) -> None:
    """Output passes all four validators, is a subsequence, keeps the newest human message."""
    out = window.apply(history)
    assert all_problems(out) == []
    assert _is_subsequence(out, history)
    newest = _newest_human(history)
    assert newest is None or any(c is newest for c in out)


@settings(max_examples=150, deadline=None)
@given(valid_histories(), WINDOWS, st.sets(st.integers(0, 40)),
       st.sampled_from(["widen", "drop"]))
def test_any_custom_filter_output_is_repaired(history: list[Any], window: ContextWindow,
                                              drop: set[int], mode: str) -> None:
    """Whatever a filter removes (newest human message aside), the output is valid."""
    newest = _newest_human(history)

    def custom(contents: list[types.Content]) -> list[types.Content]:
        return [c for i, c in enumerate(contents) if i not in drop or c is newest]

    configured = ContextWindow(
        num_invocations_to_keep=window.num_invocations_to_keep, budget=window.budget,
        protected_prefix=window.protected_prefix, hysteresis=window.hysteresis,
        custom_filter=custom, repair=mode)  # type: ignore[arg-type]
    out = configured.apply(history)
    assert all_problems(out) == []
    assert _is_subsequence(out, history)
    assert newest is None or any(c is newest for c in out)


@settings(max_examples=100, deadline=None)
@given(valid_histories(), WINDOWS, st.sets(st.integers(0, 40)))
def test_broken_input_is_healed_in_request(history: list[Any], window: ContextWindow,
                                           lost: set[int]) -> None:
    """With heal on, a history with lost contents is sent valid; only synthetic parts added."""
    broken = [c for i, c in enumerate(history)
              if i not in lost or not any(p.function_response for p in c.parts or ())]
    healer = ContextWindow(num_invocations_to_keep=window.num_invocations_to_keep,
                           budget=window.budget, hysteresis=window.hysteresis, heal=True)
    out = healer.apply(broken)
    assert all_problems(out) == []
    originals = {id(p) for c in broken for p in c.parts or ()}
    for content in out:
        for part in content.parts or ():
            assert id(part) in originals or (
                part.function_response is not None
                and part.function_response.response == dict(DEFAULT_PAYLOAD))


@settings(max_examples=40, deadline=None)
@given(valid_histories(idless=True), WINDOWS)
def test_idless_histories_keep_gemini_happy(history: list[Any], window: ContextWindow) -> None:
    """Id-less parallel calls (Gemini requests) are never split either."""
    assert all_problems(window.apply(history), with_ids=False) == []


def _calls_split(history: list[types.Content], out: list[types.Content]) -> list[str]:
    """The calls of ``history`` sent without all their responses, or responses without it."""
    sent = {id(c) for c in out}
    steps, _roles = gemini_steps(history)
    return [f"{o.id or o.name}@{o.step}" for o in pair(steps, idless="positional").occurrences
            if any((id(history[r]) in sent) != (id(history[o.step]) in sent)
                   for r in o.responses)]


def _with(window: ContextWindow, custom: CustomFilter, mode: str,
          heal: bool = False) -> ContextWindow:
    return ContextWindow(
        num_invocations_to_keep=window.num_invocations_to_keep, budget=window.budget,
        protected_prefix=window.protected_prefix, hysteresis=window.hysteresis,
        custom_filter=custom, repair=mode, heal=heal)  # type: ignore[arg-type]


ANY_HISTORY = st.one_of(tool_histories(), valid_histories(),
                        valid_histories(idless=True))


@settings(max_examples=300, deadline=None)
@given(ANY_HISTORY, WINDOWS, CUSTOM_FILTERS, st.sampled_from(["widen", "drop"]))
def test_custom_filter_output_is_a_whole_subsequence(
        history: list[Any], window: ContextWindow, custom: CustomFilter, mode: str) -> None:
    """Any filter: a subsequence, no call split, the newest human kept, valid in, valid out."""
    out = _with(window, custom, mode).apply(history)
    assert _is_subsequence(out, history)
    assert _calls_split(history, out) == []
    newest = _newest_human(history)
    assert newest is None or any(c is newest for c in out)
    with_ids = any(p.function_call.id for c in history for p in c.parts or ()
                   if p.function_call)
    if all_problems(history, with_ids=with_ids) == []:
        assert all_problems(out, with_ids=with_ids) == []


@settings(max_examples=150, deadline=None)
@given(ANY_HISTORY, st.booleans(), st.sampled_from(["widen", "drop"]))
def test_identity_filter_changes_nothing(history: list[Any], copies: bool, mode: str) -> None:
    """An identity filter, or one returning copies of everything, sends the input as it is."""
    custom: CustomFilter = Copies(Identity()) if copies else Identity()
    out = ContextWindow(custom_filter=custom, repair=mode).apply(  # type: ignore[arg-type]
        history)
    assert len(out) == len(history) and all(a is b for a, b in zip(out, history, strict=True))


@settings(max_examples=100, deadline=None)
@given(valid_histories(), WINDOWS, CUSTOM_FILTERS, st.sampled_from(["widen", "drop"]))
def test_heal_adds_nothing_to_a_whole_choice(history: list[Any], window: ContextWindow,
                                             custom: CustomFilter, mode: str) -> None:
    """With heal on, a filter's choice of a valid history is sent as without heal."""
    assert _with(window, custom, mode, heal=True).apply(history) == _with(
        window, custom, mode).apply(history)


# -- the plugin in ADK ---------------------------------------------------------------


class _Context:
    """The one attribute the plugin reads from a CallbackContext."""

    class session:  # noqa: N801
        events: list[Any] = []


async def test_raising_filter_leaves_request_exactly_as_it_came(
        caplog: pytest.LogCaptureFixture) -> None:
    """A custom filter that raises changes nothing and is logged with its traceback."""

    def boom(contents: list[types.Content]) -> list[types.Content]:
        raise RuntimeError("filter exploded")

    plugin = ToolAwareContextFilterPlugin(num_invocations_to_keep=1, custom_filter=boom)
    request = LlmRequest(contents=seed_history())
    before_list, before = request.contents, list(request.contents)
    with caplog.at_level(logging.ERROR, logger="adk_session_heal.runtime.context_filter"):
        result = await plugin.before_model_callback(
            callback_context=_Context(), llm_request=request)  # type: ignore[arg-type]
    assert result is None
    assert request.contents is before_list and request.contents == before
    assert all(a is b for a, b in zip(request.contents, before, strict=True))
    (record,) = caplog.records
    assert record.exc_info is not None and "filter exploded" in str(record.exc_info[1])


async def test_identity_filter_leaves_the_request_as_it_came() -> None:
    """The plugin with an identity filter sends the request's own contents, equal and unedited."""
    plugin = ToolAwareContextFilterPlugin(custom_filter=lambda contents: contents)
    request = LlmRequest(contents=_separate_answers())
    before, snapshot = list(request.contents), request.model_copy(deep=True)
    await plugin.before_model_callback(
        callback_context=_Context(), llm_request=request)  # type: ignore[arg-type]
    assert all(a is b for a, b in zip(request.contents, before, strict=True))
    assert request == snapshot


def _strict(contents: Any) -> list[str]:
    return [p.message for p in all_problems(contents)]


def _lookup(topic: str) -> dict[str, str]:
    """Looks a topic up."""
    return {"topic": topic, "facts": "many"}


async def _run(plugin: Any, script: list[Any]) -> ScriptedModel:
    model_ = ScriptedModel(script=script, validate=_strict)
    agent = LlmAgent(name="assistant", model=model_, tools=[_lookup])
    service = InMemorySessionService()
    runner = Runner(agent=agent, app_name="app", session_service=service, plugins=[plugin])
    session = await service.create_session(app_name="app", user_id="u")
    for text in ("hello", "tell me about X", "tell me more"):
        async for _event in runner.run_async(
                user_id="u", session_id=session.id,
                new_message=types.Content(role="user", parts=[types.Part(text=text)])):
            pass
    return model_


def _script() -> list[Any]:
    return [
        ScriptedModel.say("hi"),
        ScriptedModel.call("_lookup", {"topic": "X"}, call_id="c1"),
        ScriptedModel.say("X is ..."),
        ScriptedModel.call("_lookup", {"topic": "X more"}, call_id="c2"),
        ScriptedModel.say("more about X"),
    ]


async def test_plugin_in_a_real_runner_sends_whole_invocations() -> None:
    """Inside Runner + LlmAgent, each request holds the last 2 invocations, all valid."""
    model_ = await _run(ToolAwareContextFilterPlugin(num_invocations_to_keep=2), _script())
    last = model_.requests[-1].contents
    texts = [p.text for c in last for p in c.parts or () if p.text]
    assert texts[0] == "tell me about X"
    assert len(last) == 7  # the seed example, #3-#9, as ADK builds it


async def test_adk_plugin_with_a_pair_breaking_filter_is_rejected_ours_is_not() -> None:
    """The same call-dropping filter breaks ADK's plugin request but not ours."""

    def drop_calls(contents: list[types.Content]) -> list[types.Content]:
        return [c for c in contents if not any(p.function_call for p in c.parts or ())]

    with pytest.raises(ProviderRejected):
        await _run(ContextFilterPlugin(num_invocations_to_keep=2, custom_filter=drop_calls),
                   _script())
    model_ = await _run(ToolAwareContextFilterPlugin(num_invocations_to_keep=2,
                                                     custom_filter=drop_calls), _script())
    assert len(model_.requests) == 5


def _parallel_script() -> list[Any]:
    both = LlmResponse(content=types.Content(role="model", parts=[
        types.Part(function_call=types.FunctionCall(id=f"p{i}", name="_lookup",
                                                    args={"topic": topic}))
        for i, topic in enumerate(("X", "Y"))]))
    return [ScriptedModel.say("hi"), both, ScriptedModel.say("X and Y are ..."),
            ScriptedModel.call("_lookup", {"topic": "Z"}, call_id="c3"),
            ScriptedModel.say("Z is ...")]


async def test_keep_last_copy_filter_in_a_real_runner_keeps_the_question() -> None:
    """A keep-last-1 filter returning copies: ADK's request is rejected, ours valid and asked."""

    def last_copy(contents: list[types.Content]) -> list[types.Content]:
        return [c.model_copy(deep=True) for c in contents[-1:]]

    with pytest.raises(ProviderRejected):
        await _run(ContextFilterPlugin(custom_filter=last_copy), _parallel_script())
    model_ = await _run(ToolAwareContextFilterPlugin(custom_filter=last_copy),
                        _parallel_script())
    questions = ["hello", "tell me about X", "tell me about X", "tell me more", "tell me more"]
    for request, question in zip(model_.requests, questions, strict=True):
        assert [p.text for p in request.contents[0].parts or ()] == [question]
    assert [len(r.contents) for r in model_.requests] == [1, 1, 3, 1, 3]


@settings(max_examples=300, deadline=None)
@given(st.booleans().flatmap(lambda idless: valid_histories(idless=idless)),
       st.integers(0, 6), st.integers(1, 4), st.integers(1, 3), st.data())
def test_tail_cut_agrees_with_the_full_pass(history: list[Any], dropped: int, keep: int,
                                            hysteresis: int, data: st.DataObject) -> None:
    """The count-mode fast path (late answers, orphans, a prefix) cuts where the full pass does."""
    from adk_session_heal.runtime.context_filter.trimming import full_trim, trim

    contents = history[dropped:]  # dropping a prefix may orphan responses
    for _late in range(data.draw(st.integers(0, 2))):  # answers moved invocations later
        responses = [i for i, c in enumerate(contents)
                     if any(p.function_response for p in c.parts or ())]
        if responses:
            moved = contents.pop(data.draw(st.sampled_from(responses)))
            contents.insert(data.draw(st.integers(0, len(contents))), moved)
    window = ContextWindow(num_invocations_to_keep=keep, hysteresis=hysteresis,
                           protected_prefix=data.draw(st.integers(0, 4)))
    assert trim(contents, window) == full_trim(contents, window)


def _turns(count: int) -> list[types.Content]:
    return [c for i in range(count) for c in (user(f"q{i}"), model(f"a{i}"))]


@pytest.mark.parametrize("name,contents", [
    ("answered at once", [user("q"), calls(("p", "f")), answers(("p", "f")), *_turns(12)]),
    ("answered late, beyond the cut", [user("q"), calls(("p", "f")), *_turns(12),
                                       answers(("p", "f"))]),
    ("answered twice, the second late", [user("q"), calls(("p", "f")), answers(("p", "f")),
                                         *_turns(6), answers(("p", "f")), *_turns(6)]),
    ("its id reused later: the late answer is the new call's",
     [user("q"), calls(("p", "f")), answers(("p", "f")), *_turns(4), calls(("p", "f")),
      *_turns(3), answers(("p", "f")), *_turns(6)]),
    ("a call inside the extension answered later (transitive)",
     [user("q"), calls(("p", "f")), calls(("x", "g")), answers(("p", "f")), *_turns(3),
      answers(("x", "g")), *_turns(8)]),
    ("a later call pulled in by a late answer, answered later still",
     [user("q"), calls(("p", "f")), *_turns(2), calls(("y", "h")), *_turns(2),
      answers(("p", "f")), *_turns(2), answers(("y", "h")), *_turns(8)]),
    ("id-less, matched by name", [user("q"), calls((None, "f")), *_turns(3),
                                  answers((None, "f")), *_turns(9)]),
])
def test_a_protected_prefix_closes_like_the_full_pass(name: str,
                                                      contents: list[types.Content]) -> None:
    """The prefix's tool cycles close at the same end without pairing the whole history."""
    from adk_session_heal.runtime.context_filter.trimming import full_trim, trim

    for keep in (1, 2, 4):
        for prefix in (1, 2, 3):
            window = ContextWindow(num_invocations_to_keep=keep, protected_prefix=prefix)
            assert trim(contents, window) == full_trim(contents, window), (name, keep, prefix)


def _chained(invocations: int, links: int) -> list[types.Content]:
    """Invocations of user, call, answer, reply; link k's answer moved 3 invocations later."""
    contents = [c for i in range(invocations)
                for c in (user(f"q{i}"), calls((f"c{i}", "f")), answers((f"c{i}", "f")),
                          model(f"a{i}"))]
    for k in range(links):
        back = 11 + 2 * k
        response = contents[(invocations - 1 - back) * 4 + 2]
        target = contents[(invocations - 1 - (back - 3)) * 4 + 2]
        contents.remove(response)
        contents.insert(contents.index(target) + 1, response)
    return contents


def test_tail_cut_widens_over_long_chains_and_leaves_most_of_history_to_the_full_pass() -> None:
    """Ten chained late answers are widened over from the tail, reading only what each
    widening takes in; a chain reaching back over most of the history goes to the full pass.
    Either way the cut is the full pass's."""
    from adk_session_heal.runtime.context_filter.trimming import full_trim, tail_cut, trim

    window = ContextWindow(num_invocations_to_keep=10)
    ten = _chained(200, 10)
    cut = tail_cut(ten, 10, window.hysteresis)
    assert cut is not None and ten[cut:] == full_trim(ten, window) == trim(ten, window)
    assert cut < len(ten) - 10 * 4 * 2  # widened well past the ten kept invocations
    whole = _chained(200, 90)
    assert tail_cut(whole, 10, window.hysteresis) is None
    assert trim(whole, window) == full_trim(whole, window)
