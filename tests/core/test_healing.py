"""Tests for adk_session_heal.core.healing: planning heals and the synthetic events."""

from __future__ import annotations

import copy
import math

import pytest
from heal_lists import KEY, NOW, heal
from histories import OPS, build
from hypothesis import given, settings

from adk_session_heal.core.event_access import HEAL_METADATA_KEY
from adk_session_heal.core.findings import CallStatus, classify
from adk_session_heal.core.heal_plan import HEAL_ID_SUFFIX, heal_event_id
from adk_session_heal.core.heal_record import HealTrigger
from adk_session_heal.core.healing import build_heal_event, plan_heals, plan_session, row_seal
from adk_session_heal.core.session_key import SessionKey
from adk_session_heal.policy import (
    DEFAULT_PAYLOAD,
    UNSAFE_RETRY_ERROR,
    DeadCall,
    HealPolicy,
    ToolEffect,
    effect_payload,
)
from adk_session_heal.testing import History


def crashed_parallel() -> History:
    h = History(agent="planner")
    h.user("plan my trip")
    h.calls(("flights", {"to": "Rome"}), ("hotels", {"city": "Rome"}), branch="root.planner")
    h.user("hello?")
    return h


def test_one_heal_per_call_event_covers_all_its_dead_calls() -> None:
    """Parallel dead calls of one event get one synthetic event with one part each."""
    h = crashed_parallel()
    (plan,) = plan_heals(h.events, classify(h.events, now=NOW), **KEY)
    event = build_heal_event(plan, HealPolicy(), healed_at=NOW)
    responses = event.get_function_responses()
    assert [(r.id, r.name, r.response) for r in responses] == [
        ("call-1", "flights", dict(DEFAULT_PAYLOAD)),
        ("call-2", "hotels", dict(DEFAULT_PAYLOAD)),
    ]
    assert DEFAULT_PAYLOAD == {
        "error": "Tool execution was interrupted; it may have completed. Check the system "
                 "before retrying; do not repeat it blindly.",
        "outcome": "unknown",
        "safe_to_retry": False,
    }


def test_synthetic_event_copies_author_branch_invocation_and_is_marked() -> None:
    """The heal carries the call event's author, branch and invocation, and the marker, sealed
    over the rest of the row."""
    h = crashed_parallel()
    call_event = h.events[1]
    (plan,) = plan_heals(h.events, classify(h.events, now=NOW), **KEY)
    event = build_heal_event(plan, HealPolicy(), healed_at=NOW)
    assert (event.author, event.branch, event.invocation_id) == (
        "planner", "root.planner", call_event.invocation_id)
    assert event.content is not None and event.content.role == "user"
    assert event.custom_metadata == {
        HEAL_METADATA_KEY: {
            "synthetic": True,
            "version": 1,
            "reason": "superseded",
            "healed_at": NOW,
            "call_event_id": call_event.id,
            "call_ids": ["call-1", "call-2"],
            "tool_names": ["flights", "hotels"],
            "effects": ["unknown", "unknown"],
            "outcomes": ["unknown", "unknown"],
            "recovered": [False, False],
            "seal": row_seal(event.model_dump(mode="json")),
        }
    }


def test_id_is_deterministic_and_placement_is_right_after_the_call() -> None:
    """Two planners agree on the id; the timestamp sits between the call and the next event."""
    h = crashed_parallel()
    first = plan_heals(h.events, classify(h.events, now=NOW), **KEY)
    second = plan_heals(list(h.events), classify(h.events, now=NOW + 50), **KEY)
    assert first == second
    (plan,) = first
    assert plan.event_id == f"{h.events[1].id}{HEAL_ID_SUFFIX}"
    assert h.events[1].timestamp < plan.timestamp < h.events[2].timestamp
    assert plan.insert_at == 2


def test_placement_when_next_event_is_within_a_microsecond() -> None:
    """With no room before the next event the heal still goes strictly after its call, 1 µs on."""
    h = History(step=0.0000005)
    h.user("q")
    h.call("f")
    h.user("next")
    (plan,) = plan_heals(h.events, classify(h.events, now=NOW), **KEY)
    assert plan.timestamp > h.events[1].timestamp
    assert round(plan.timestamp * 1e6) - math.floor(h.events[1].timestamp * 1e6) == 1


@pytest.mark.parametrize("gap", [0.0, 1e-7, 1e-6, 2e-6, -5.0], ids=["tie", "sub-us", "1us", "2us",
                                                                    "backwards"])
@pytest.mark.parametrize("call_ts", [1_700_000_000.0, 1_700_000_000.1234565, 1_700_000_000.9999999,
                                     1_763_912_345.000_000_4])
def test_heal_time_is_strictly_after_its_call_whatever_the_clocks(call_ts: float,
                                                                  gap: float) -> None:
    """Ties, sub-µs and µs gaps, a clock stepped back, sub-µs call times: heal time > call time."""
    h = History()
    h.user("q")
    h.call("f")
    h.user("next")
    h.events[1].timestamp = call_ts
    h.events[2].timestamp = call_ts + gap
    (plan,) = plan_heals(h.events, classify(h.events, now=NOW), **KEY)
    assert plan.timestamp > call_ts
    assert plan.anchor_timestamp == call_ts
    assert plan.anchor_event_id == h.events[1].id
    if gap >= 2e-6:
        assert plan.timestamp < call_ts + gap


def test_a_heal_stored_before_its_call_still_answers_it() -> None:
    """A heal that sorts before its call (a tie read back out of order) is not healed again."""
    h = crashed_parallel()
    (plan,) = plan_heals(h.events, classify(h.events, now=NOW), **KEY)
    heal = build_heal_event(plan, HealPolicy(), healed_at=NOW)
    misplaced = [*h.events[:1], heal, *h.events[1:]]
    findings = classify(misplaced, now=NOW)
    healed = [c for c in findings.calls if c.event_id == plan.call_event_id]
    assert healed and all(c.status is CallStatus.ANSWERED and c.answered_by_heal for c in healed)
    assert plan_heals(misplaced, findings, **KEY) == ()


def test_long_call_event_id_falls_back_to_uuid5() -> None:
    """An id too long for ADK's 128-character column becomes a UUID5 of session and event."""
    long_id = "x" * 126
    fallback = heal_event_id("app", "u", "s", long_id)
    assert len(fallback) == 36 and fallback == heal_event_id("app", "u", "s", long_id)
    assert fallback != heal_event_id("app", "u", "other", long_id)


def test_payload_can_depend_on_the_call() -> None:
    """A callable payload gives each dead call its own response."""
    policy = HealPolicy(payload=lambda call: {"error": f"{call.name} died ({call.reason})"})
    assert policy.payload_for(DeadCall("c", "flights", "superseded")) == {
        "error": "flights died (superseded)"
    }


SAFE_READ = ("Tool execution was interrupted before it returned; it has no side effects, "
             "so it is safe to retry.")
SAFE_REPEAT = ("Tool execution was interrupted before it returned; repeating it has no further "
               "effect, so it is safe to retry.")
UNSAFE = ("Tool execution was interrupted; it may have completed. Check the system before "
          "retrying; do not repeat it blindly.")


@pytest.mark.parametrize(("effect", "error", "safe"), [
    (ToolEffect.READ_ONLY, SAFE_READ, True),
    (ToolEffect.IDEMPOTENT, SAFE_REPEAT, True),
    (ToolEffect.SIDE_EFFECT, UNSAFE, False),
    (ToolEffect.UNKNOWN, UNSAFE, False),
])
def test_each_effect_gets_its_own_wording_and_retry_verdict(effect: ToolEffect, error: str,
                                                            safe: bool) -> None:
    """The model is told a retry is safe only for read-only and idempotent tools; the outcome
    of a dead call is unknown without a ledger."""
    policy = HealPolicy(tool_effects={"tool": effect})
    assert policy.payload_for(DeadCall("c", "tool", "superseded")) == {
        "error": error, "outcome": "unknown", "safe_to_retry": safe}
    assert effect_payload(effect) == policy.payload_for(DeadCall("c", "tool", "superseded"))
    assert UNSAFE == UNSAFE_RETRY_ERROR


def test_an_undeclared_tool_is_unknown_and_worded_as_having_side_effects() -> None:
    """With no declaration (or another tool's only) a call gets the cautious default payload."""
    call = DeadCall("c", "charge_card", "superseded")
    assert HealPolicy().effect_of("charge_card") is ToolEffect.UNKNOWN
    assert HealPolicy().payload_for(call) == dict(DEFAULT_PAYLOAD)
    declared = HealPolicy(tool_effects={"get_weather": ToolEffect.READ_ONLY})
    assert declared.payload_for(call) == {"error": UNSAFE, "outcome": "unknown",
                                          "safe_to_retry": False}


def test_tool_effects_accept_the_enum_s_strings_and_reject_others() -> None:
    """Declarations from config files (plain strings) work; a typo fails at construction."""
    policy = HealPolicy(tool_effects={"get_weather": "read_only", "refund": "idempotent"})
    assert policy.tool_effects == {"get_weather": ToolEffect.READ_ONLY,
                                   "refund": ToolEffect.IDEMPOTENT}
    with pytest.raises(ValueError, match="readonly"):
        HealPolicy(tool_effects={"get_weather": "readonly"})


def test_a_payload_function_sees_the_declared_effect_and_a_fixed_payload_is_kept() -> None:
    """Custom payloads still win as given; a function gets the call with its tool's effect."""
    effects = {"charge_card": ToolEffect.SIDE_EFFECT}
    call = DeadCall("c", "charge_card", "stale")
    custom = HealPolicy(tool_effects=effects,
                        payload=lambda c: {**effect_payload(c.effect), "tool": c.name})
    assert custom.payload_for(call) == {"error": UNSAFE, "outcome": "unknown",
                                        "safe_to_retry": False, "tool": "charge_card"}
    seen: list[DeadCall] = []
    HealPolicy(tool_effects=effects, payload=lambda c: seen.append(c) or {}).payload_for(call)
    assert seen == [DeadCall("c", "charge_card", "stale", ToolEffect.SIDE_EFFECT)]
    fixed = HealPolicy(tool_effects=effects, payload={"error": "lost"})
    assert fixed.payload_for(call) == {"error": "lost"}


def test_mixed_call_event_gets_one_heal_with_each_tool_s_own_wording() -> None:
    """Parallel dead calls of tools with different effects: one event, one part each, each
    worded for its own tool; the marker records every call's effect and outcome."""
    h = History()
    h.user("weather in Rome, then book and pay")
    h.calls("get_weather", "book_room", "charge_card", "mystery")
    h.user("hello?")
    policy = HealPolicy(tool_effects={"get_weather": ToolEffect.READ_ONLY,
                                      "book_room": ToolEffect.IDEMPOTENT,
                                      "charge_card": ToolEffect.SIDE_EFFECT})
    (plan,) = plan_heals(h.events, classify(h.events, now=NOW), **KEY)
    event = build_heal_event(plan, policy, healed_at=NOW)
    assert [(r.name, r.response) for r in event.get_function_responses()] == [
        ("get_weather", {"error": SAFE_READ, "outcome": "unknown", "safe_to_retry": True}),
        ("book_room", {"error": SAFE_REPEAT, "outcome": "unknown", "safe_to_retry": True}),
        ("charge_card", {"error": UNSAFE, "outcome": "unknown", "safe_to_retry": False}),
        ("mystery", {"error": UNSAFE, "outcome": "unknown", "safe_to_retry": False}),
    ]
    marker = (event.custom_metadata or {})[HEAL_METADATA_KEY]
    assert marker["effects"] == ["read_only", "idempotent", "side_effect", "unknown"]
    assert marker["outcomes"] == ["unknown"] * 4
    assert marker["version"] == 1
    assert plan == plan_heals(h.events, classify(h.events, now=NOW), **KEY)[0]
    assert event.id == f"{h.events[1].id}{HEAL_ID_SUFFIX}"


def test_existing_heal_of_the_same_call_event_gets_a_new_id() -> None:
    """If a heal of a call event is already stored, a further heal does not reuse its id."""
    h = History()
    h.user("q")
    h.calls("f", "g")
    h.user("next")
    events = h.events
    (plan,) = plan_heals(events, classify(events, now=NOW), **KEY)
    decoy = events[0].model_copy(update={"id": plan.event_id})
    events = [decoy, *events[1:]]
    (again,) = plan_heals(events, classify(events, now=NOW), **KEY)
    assert again.event_id == f"{plan.event_id}-2"


@settings(max_examples=150, deadline=None)
@given(OPS)
def test_heal_is_idempotent_and_leaves_no_dead_call(ops: list) -> None:
    """Healing a healed history changes nothing, and no dead call remains."""
    events = build(ops).events
    once = heal(events)
    assert not classify(once, now=NOW).needs_healing
    assert heal(once) == once


@settings(max_examples=150, deadline=None)
@given(OPS)
def test_originals_are_untouched_and_in_order(ops: list) -> None:
    """Heals only insert: every original event stays, byte-identical, in its order."""
    events = build(ops).events
    before = [e.model_dump_json() for e in events]
    snapshot = copy.deepcopy(events)
    healed = heal(events)
    assert [e.model_dump_json() for e in events] == before
    assert events == snapshot
    kept = [e.model_dump_json() for e in healed if not (e.custom_metadata or {}).get(
        HEAL_METADATA_KEY)]
    assert kept == before


@settings(max_examples=150, deadline=None)
@given(OPS)
def test_never_heals_in_flight_pending_or_idless(ops: list) -> None:
    """Only superseded calls are healed by default: never in-flight, pending or id-less."""
    events = build(ops).events
    findings = classify(events, now=NOW)
    plans = plan_heals(events, findings, **KEY)
    healed_ids = {(p.call_event_index, c.call_id) for p in plans for c in p.calls}
    for finding in findings.calls:
        key = (finding.event_index, finding.call_id)
        assert (key in healed_ids) == (finding.status is CallStatus.SUPERSEDED)


def troubled(events: list, provider: str) -> set[str]:
    """The call ids a provider's problems name (turn order aside: that is the history's own)."""
    from adk_session_heal.providers.validators import provider_problems

    return {i for p in provider_problems(events, provider) if p.code != "turn_order"  # type: ignore[arg-type]
            for i in p.ids}


@settings(max_examples=100, deadline=None)
@given(OPS)
def test_healed_calls_never_trouble_a_provider(ops: list) -> None:
    """Healing troubles no call a provider accepted before; a healed call stays troubled only
    beside a real answer the history itself misplaced; and a history whose only broken calls
    were dead is accepted outright after healing."""
    from adk_session_heal.providers.validators import PROVIDERS

    events = build(ops).events
    findings = classify(events, now=NOW)
    healed_ids = {c.call_id for c in findings.dead}
    healed = heal(events)
    for provider in PROVIDERS:
        before, after = troubled(events, provider), troubled(healed, provider)
        assert after <= before, (provider, after - before)
        if after & healed_ids:
            assert after - healed_ids, (provider, after)
        if before <= healed_ids:
            assert after == set(), (provider, after)


def test_a_dead_sibling_of_a_call_answered_after_the_next_user_message_is_healed_into_its_turn(
) -> None:
    """ADK's request passes every rule; no provider troubles a call it accepted before, and
    Anthropic keeps only the late answer's own problem.

    Found by the property tests (first a strict xfail here, then by the store fuzz test
    under a random seed): a call event with two calls, a text reply, the next user turn,
    then the late real answer of the first call. Anthropic merges the user's message
    and that answer into one user turn, so the heal of the dead second call goes after
    the text, before the user's message, opening that turn: a heal right after the
    call split the first call from its answer. OpenAI Chat and Gemini already reject the
    late answer where it is and still name it.
    """
    from google.adk.flows.llm_flows.contents import _get_contents

    from adk_session_heal.providers.validators import PROVIDERS, provider_problems

    events = build([("call", 2, "plain"), ("text",), ("user",), ("answer", 0)]).events
    healed = heal(events)
    late, dead = (p.function_call.id for p in events[1].content.parts if p.function_call)
    assert [c.call_id for c in classify(events, now=NOW).dead] == [dead]
    ids = [e.id for e in healed]
    assert ids.index(f"{events[1].id}-heal") == ids.index(events[2].id) + 1
    request = _get_contents(None, healed, events[1].author, preserve_function_call_ids=True)
    for provider in PROVIDERS:
        assert provider_problems(request, provider) == [], provider
        assert troubled(healed, provider) <= troubled(events, provider), provider
    kept = {(p.code, p.ids) for p in provider_problems(healed, "anthropic")}
    assert kept == {("result_not_first", (late,))}
    assert kept <= {(p.code, p.ids) for p in provider_problems(events, "anthropic")}
    for provider in ("openai_chat", "gemini"):
        assert late in troubled(events, provider) & troubled(healed, provider), provider


SIBLING_ANSWERED_AFTER_TEXT = [("call", 2, "plain"), ("text",), ("answer", 0), ("user",)]
"""Two calls, a text reply, the real answer of the first, the next user turn (found by the
property test above under a random seed)."""


def test_a_dead_sibling_of_a_call_answered_after_a_text_is_healed_for_adk_s_request() -> None:
    """The request ADK builds passes every rule; in stored order no provider troubles a call it
    accepted before, and OpenAI Chat and Gemini, which already reject the answered sibling's
    late answer, still name it."""
    from google.adk.flows.llm_flows.contents import _get_contents

    from adk_session_heal.providers.validators import PROVIDERS, provider_problems

    events = build(SIBLING_ANSWERED_AFTER_TEXT).events
    healed = heal(events)
    answered, dead = (p.function_call.id for p in events[1].content.parts if p.function_call)
    assert [c.call_id for c in classify(events, now=NOW).dead] == [dead]
    request = _get_contents(None, healed, events[1].author, preserve_function_call_ids=True)
    for provider in PROVIDERS:
        assert provider_problems(request, provider) == [], provider
        assert troubled(healed, provider) <= troubled(events, provider), provider
    for provider in ("openai_chat", "gemini"):
        assert answered in troubled(events, provider) & troubled(healed, provider), provider


def test_a_dead_sibling_of_a_call_answered_after_a_text_keeps_stored_order_valid() -> None:
    """Anthropic: the heal goes after the text it merges into the call's turn, so the answered
    sibling's result still follows its ``tool_use`` and the history is accepted outright."""
    from adk_session_heal.providers.validators import provider_problems

    events = build(SIBLING_ANSWERED_AFTER_TEXT).events
    healed = heal(events)
    assert [e.id for e in healed].index(events[2].id) + 1 == [e.id for e in healed].index(
        f"{events[1].id}-heal")
    assert provider_problems(healed, "anthropic") == []


EFFECTS = HealPolicy(tool_effects={"tool0": ToolEffect.READ_ONLY, "tool1": ToolEffect.IDEMPOTENT,
                                   "tool2": ToolEffect.SIDE_EFFECT})
"""Effects for the property histories' tool names (tool3 and later stay unknown)."""


@settings(max_examples=100, deadline=None)
@given(OPS)
def test_effects_change_only_the_payloads_and_the_marker(ops: list) -> None:
    """With declared effects every heal part is worded for its own tool, the marker lists the
    effects, and ids, placement, order and every provider's verdict are those of a default
    heal."""
    from adk_session_heal.providers.validators import PROVIDERS, provider_problems

    events = build(ops).events
    plain, declared = heal(events), heal(events, policy=EFFECTS)
    assert [(e.id, e.timestamp, e.author, e.invocation_id) for e in declared] == [
        (e.id, e.timestamp, e.author, e.invocation_id) for e in plain]
    for event in declared:
        marker = (event.custom_metadata or {}).get(HEAL_METADATA_KEY)
        if not marker or marker.get("healed_at") != NOW:
            continue
        responses = event.get_function_responses()
        assert [r.response for r in responses] == [
            effect_payload(EFFECTS.effect_of(r.name or "")) for r in responses]
        assert marker["effects"] == [EFFECTS.effect_of(r.name or "").value for r in responses]
        assert marker["outcomes"] == ["unknown"] * len(responses)
    for provider in PROVIDERS:
        assert provider_problems(declared, provider) == provider_problems(plain, provider)  # type: ignore[arg-type]


def test_a_heal_s_record_is_encoded_once_as_its_record_encodes() -> None:
    """The encoding a written heal's ledger row and report share is its record's own
    ``to_json``, made once per heal: a run's heal keeps its run id in it."""
    events = crashed_parallel().events
    planned = plan_session(events, classify(events, now=NOW, stale_after=60.0),
                           SessionKey(**KEY), HealPolicy(), trigger=HealTrigger.REPAIR,
                           healed_at=NOW, seen_events=len(events), run_id="run-1")
    assert planned is not None and planned.heals
    for made in planned.heals:
        assert made.record_json == made.record.to_json()
        assert made.record_json is made.record_json
        assert made.record_json["run_id"] == "run-1"
