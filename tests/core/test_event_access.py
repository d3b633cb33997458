"""Tests for adk_session_heal.core.event_access: reading call and response parts."""

from __future__ import annotations

from google.genai import types

from adk_session_heal.core.event_access import EMPTY_STEP, content_step, content_steps


def _call(call_id: str | None, name: str) -> types.Part:
    return types.Part(function_call=types.FunctionCall(id=call_id, name=name, args={}))


def _response(call_id: str | None, name: str) -> types.Part:
    return types.Part(function_response=types.FunctionResponse(id=call_id, name=name,
                                                               response={}))


def test_content_steps_reads_every_shape_with_its_role() -> None:
    """One-part, many-part, empty and missing contents give their parts and roles."""
    contents: list[types.Content | None] = [
        types.Content(role="user", parts=[types.Part(text="hi")]),
        types.Content(role="model", parts=[_call("a", "f")]),
        types.Content(role="user", parts=[_response("a", "f")]),
        types.Content(role="model", parts=[types.Part(text="x"), _call(None, "g"),
                                           _call("", "h"), _call("b", "")]),
        types.Content(role="user", parts=[_response("b", ""), types.Part(text="and"),
                                          _response(None, "g")]),
        types.Content(role="model", parts=[]),
        types.Content(parts=[_call("c", "f")]),
        None,
    ]
    steps, roles = content_steps(contents)
    assert roles == ["user", "model", "user", "model", "user", "model", "", ""]
    assert steps == [
        EMPTY_STEP,
        ([("a", "f")], ()),
        ((), [("a", "f")]),
        ([(None, "g"), (None, "h"), ("b", "")], ()),
        ((), [("b", ""), (None, "g")]),
        EMPTY_STEP,
        ([("c", "f")], ()),
        EMPTY_STEP,
    ]
    assert steps[0] is EMPTY_STEP and steps[5] is EMPTY_STEP and steps[7] is EMPTY_STEP
    assert [content_step(c) for c in contents] == steps


def test_a_part_holding_a_call_and_a_response_counts_as_a_call() -> None:
    """A part with both fields set reads as its call, in one-part and many-part contents."""
    both = types.Part(function_call=types.FunctionCall(id="a", name="f"),
                      function_response=types.FunctionResponse(id="z", name="f", response={}))
    one, many = content_steps([types.Content(role="model", parts=[both]),
                               types.Content(role="model", parts=[both, both])])[0]
    assert one == ([("a", "f")], ())
    assert many == ([("a", "f"), ("a", "f")], ())


def test_speaks_means_a_visible_part_besides_calls_and_responses_on_both_accessors() -> None:
    """Text, data or code speak; calls, responses, thoughts, empty or partial events do not."""
    from google.adk.events.event import Event

    from adk_session_heal.core.event_access import ADK_EVENTS, STORED_JSON

    def event(*parts: types.Part, partial: bool = False) -> Event:
        content = types.Content(role="model", parts=list(parts)) if parts else None
        return Event(author="agent", content=content, partial=partial or None)

    cases = [
        (event(types.Part(text="hi")), True),
        (event(_call("a", "f"), types.Part(text="let me see")), True),
        (event(types.Part(inline_data=types.Blob(mime_type="image/png", data=b"x"))), True),
        (event(types.Part(executable_code=types.ExecutableCode(code="1", language="PYTHON"))),
         True),
        (event(_call("a", "f")), False),
        (event(_response("a", "f")), False),
        (event(types.Part(text="pondering", thought=True)), False),
        (event(types.Part(text="")), False),
        (event(), False),
        (event(types.Part(text="hi"), partial=True), False),
    ]
    for adk_event, speaks in cases:
        stored = adk_event.model_dump(exclude_none=True, mode="json")
        assert ADK_EVENTS.speaks(adk_event) is speaks, adk_event
        assert STORED_JSON.speaks(stored) is speaks, stored
