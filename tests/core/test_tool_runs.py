"""The tool-run record's meaning: redaction, the result cap, outcomes and their wording."""

from __future__ import annotations

import json

import pytest

from adk_session_heal.core.tool_runs import (
    RunState,
    ToolRun,
    as_response,
    kept_result,
    redacted,
    run_outcome,
    stored_result,
)
from adk_session_heal.policy import (
    LEDGER_ERRORS,
    NOT_STARTED_ERROR,
    RETRY_SAFE_ERRORS,
    UNSAFE_RETRY_ERROR,
    CallOutcome,
    ToolEffect,
    effect_payload,
)

NOW = 1_800_000_000.0


def _run(state: RunState, lease_until: float = NOW + 10) -> ToolRun:
    return ToolRun(app_name="a", user_id="u", session_id="s", call_id="c", tool_name="t",
                   invocation_id="i", state=state, host="h", pid=1, attempt=1,
                   started_at=NOW - 5, lease_until=lease_until)


def test_secret_looking_keys_lose_their_values_at_every_depth() -> None:
    """Passwords, tokens, keys and the like are replaced by *** in dicts inside lists and dicts."""
    value = {"status": "ok", "Authorization": "Bearer x", "nested": [
        {"api_key": "k", "apiKey": "k2", "db_password": "p", "count": 3}],
        "refresh_token": "r", "tokens_used": 12, "private-key": "pk"}
    assert redacted(value) == {"status": "ok", "Authorization": "***", "nested": [
        {"api_key": "***", "apiKey": "***", "db_password": "***", "count": 3}],
        "refresh_token": "***", "tokens_used": "***", "private-key": "***"}
    assert redacted(["a", 1, None]) == ["a", 1, None]


def test_a_result_is_kept_whole_or_not_at_all() -> None:
    """Within the cap the redacted JSON is kept; over it nothing is (never a partial result)."""
    text, cut = stored_result({"b": 1, "a": "é", "secret": "s"}, max_bytes=100)
    assert json.loads(text or "") == {"a": "é", "b": 1, "secret": "***"} and not cut
    assert stored_result({"rows": "x" * 200}, max_bytes=100) == (None, True)
    assert stored_result({"a": "é" * 40}, max_bytes=60) == (None, True)  # bytes, not characters
    text, _ = stored_result({"when": object}, max_bytes=100)
    assert "class" in (text or "")  # what JSON cannot hold is written as its str


def test_each_record_state_gives_its_outcome() -> None:
    """No record: unknown; live lease: None; announced, lease out: not started; started, lease
    out: may have run; finished: result lost."""
    assert run_outcome(None, NOW) is CallOutcome.UNKNOWN  # may predate the ledger: no claim
    assert run_outcome(_run(RunState.ANNOUNCED), NOW) is None  # about to run
    assert run_outcome(_run(RunState.ANNOUNCED, lease_until=NOW - 1), NOW) is (
        CallOutcome.NOT_STARTED)
    assert run_outcome(_run(RunState.STARTED), NOW) is None
    assert run_outcome(_run(RunState.STARTED, lease_until=NOW - 1), NOW) is CallOutcome.MAY_HAVE_RUN
    assert run_outcome(_run(RunState.STARTED, lease_until=NOW), NOW) is CallOutcome.MAY_HAVE_RUN
    assert run_outcome(_run(RunState.FAILED, lease_until=NOW + 99), NOW) is CallOutcome.MAY_HAVE_RUN
    assert run_outcome(_run(RunState.FINISHED, lease_until=NOW - 99), NOW) is (
        CallOutcome.FINISHED_RESULT_LOST)


def test_a_reader_with_a_fast_clock_waits_out_the_skew() -> None:
    """A lease stamped by a slower clock stays alive for a reader up to clock_skew ahead."""
    run = _run(RunState.STARTED, lease_until=NOW)
    assert run_outcome(run, NOW + 200, clock_skew=300) is None
    assert run_outcome(run, NOW + 301, clock_skew=300) is CallOutcome.MAY_HAVE_RUN


@pytest.mark.parametrize("effect", list(ToolEffect))
def test_not_started_is_safe_to_retry_whatever_the_tool_does(effect: ToolEffect) -> None:
    """A call the ledger shows never started says so and may be retried, even for charge_card."""
    assert effect_payload(effect, CallOutcome.NOT_STARTED) == {
        "error": NOT_STARTED_ERROR, "outcome": "not_started", "safe_to_retry": True}


@pytest.mark.parametrize("outcome", [CallOutcome.MAY_HAVE_RUN, CallOutcome.FINISHED_RESULT_LOST,
                                     CallOutcome.UNKNOWN])
def test_a_tool_with_side_effects_is_never_called_safe_to_retry(outcome: CallOutcome) -> None:
    """Side effects (or undeclared) are never safe to retry; retry-safe tools say they are."""
    for effect in (ToolEffect.SIDE_EFFECT, ToolEffect.UNKNOWN):
        assert effect_payload(effect, outcome) == {
            "error": LEDGER_ERRORS.get(outcome, UNSAFE_RETRY_ERROR), "outcome": outcome.value,
            "safe_to_retry": False}
    for effect in (ToolEffect.READ_ONLY, ToolEffect.IDEMPOTENT):
        assert effect_payload(effect, outcome) == {
            "error": RETRY_SAFE_ERRORS[effect], "outcome": outcome.value, "safe_to_retry": True}
    assert "may have completed" in effect_payload(ToolEffect.SIDE_EFFECT,
                                                  CallOutcome.MAY_HAVE_RUN)["error"]


def test_as_response_wraps_what_is_not_a_dict_as_adk_does() -> None:
    """A dict is sent as it is (a copy); anything else as {"result": value}."""
    original = {"ok": True}
    assert as_response(original) == original and as_response(original) is not original
    assert as_response("text") == {"result": "text"}
    assert as_response(None) == {"result": None}
    assert kept_result(None) is None and kept_result("{") is None
    assert kept_result('{"a": 1}') == {"a": 1} and kept_result("7") == {"result": 7}
