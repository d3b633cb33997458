"""Re-running dead read-only calls on the next user message, through a real Runner."""

from __future__ import annotations

import asyncio
import json
import logging
import os
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from google.adk.agents import LlmAgent
from google.adk.apps import App, ResumabilityConfig
from google.adk.events.event import Event
from google.adk.plugins.base_plugin import BasePlugin
from google.adk.runners import Runner
from google.adk.sessions import (
    BaseSessionService,
    DatabaseSessionService,
    InMemorySessionService,
    Session,
)
from google.adk.tools.base_tool import BaseTool
from google.adk.tools.function_tool import FunctionTool
from google.adk.tools.tool_context import ToolContext
from google.genai import types
from stores import Store, adk_store_fixture, close, tool_run_ledger_fixture  # noqa: F401

from adk_session_heal.core.event_access import HEAL_METADATA_KEY
from adk_session_heal.core.findings import CallStatus, classify
from adk_session_heal.core.rerunnable import RERUN_METADATA_KEY, deferring, rerunnable_calls
from adk_session_heal.core.session_key import SessionKey
from adk_session_heal.core.tool_runs import RunState, ToolRun
from adk_session_heal.ledger import SqlToolRunLedger
from adk_session_heal.policy import HealPolicy, ToolEffect
from adk_session_heal.providers.validators import PROVIDERS, provider_problems
from adk_session_heal.runtime.rerun_plugin import RerunSafeCallsPlugin
from adk_session_heal.runtime.service import HealingSessionService
from adk_session_heal.runtime.tool_run_plugin import ToolRunLedgerPlugin
from adk_session_heal.testing import History, ScriptedModel, outline

APP, USER, AGENT = "rerun_app", "rerun_user", "shop"
POLICY = HealPolicy(rerun_safe_calls=True,
                    tool_effects={"get_weather": ToolEffect.READ_ONLY,
                                  "charge_card": ToolEffect.SIDE_EFFECT})


class Tools:
    """The agent's tools, counting their runs."""

    def __init__(self, *, weather_fails: bool = False) -> None:
        self.runs: list[tuple[str, dict[str, Any]]] = []
        self.weather_fails = weather_fails

    def get_weather(self, city: str) -> dict[str, Any]:
        """Returns the weather of a city."""
        self.runs.append(("get_weather", {"city": city}))
        if self.weather_fails:
            raise ConnectionError("weather service down")
        return {"city": city, "temp_c": 21}

    def charge_card(self, amount: int) -> dict[str, Any]:
        """Charges the card."""
        self.runs.append(("charge_card", {"amount": amount}))
        return {"charged": amount}


def died_mid_tools() -> History:
    """The model called get_weather and charge_card in one turn; the process died."""
    history = History(agent=AGENT, start=time.time() - 600)
    history.user("weather in Paris, and pay my order")
    history.calls(("get_weather", {"city": "Paris"}), ("charge_card", {"amount": 42}),
                  ids=["wx-1", "pay-1"])
    return history


async def turn(inner: BaseSessionService, tools: Tools, policy: HealPolicy, *,
               resumable: bool = False, plugins: Sequence[BasePlugin] = ()
               ) -> tuple[ScriptedModel, Session]:
    """Stores the crashed session, then runs the user's next turn through a real Runner."""
    model = ScriptedModel(script=[ScriptedModel.say("Here you go.")])
    agent = LlmAgent(name=AGENT, model=model, tools=[tools.get_weather, tools.charge_card])
    stored = await crashed_turn(inner, died_mid_tools(), agent, policy, resumable=resumable,
                                plugins=plugins)
    return model, stored


async def crashed_turn(inner: BaseSessionService, crashed: History, agent: LlmAgent,
                       policy: HealPolicy, *, resumable: bool = False,
                       plugins: Sequence[BasePlugin] = ()) -> Session:
    """Stores ``crashed``, runs one user turn with ``agent``; returns the stored session."""
    session = await inner.create_session(app_name=APP, user_id=USER)
    for event in crashed.events:
        await inner.append_event(session, event)
    app = App(name=APP, root_agent=agent, plugins=[RerunSafeCallsPlugin(policy), *plugins],
              resumability_config=ResumabilityConfig(is_resumable=resumable))
    runner = Runner(app=app, session_service=HealingSessionService(inner, policy))
    message = types.Content(role="user", parts=[types.Part(text="hello?")])
    async for _ in runner.run_async(user_id=USER, session_id=session.id, new_message=message):
        pass
    stored = await inner.get_session(app_name=APP, user_id=USER, session_id=session.id)
    assert stored is not None
    return stored


def answers(events: list[Event]) -> dict[str, dict[str, Any]]:
    """Each call id's stored response."""
    return {r.id or "": dict(r.response or {}) for e in events for r in e.get_function_responses()}


async def test_the_read_only_call_runs_again_and_the_side_effect_call_is_healed(
        caplog: pytest.LogCaptureFixture) -> None:
    """get_weather re-runs once (real result stored before the message); charge_card never."""
    tools = Tools()
    with caplog.at_level(logging.WARNING, logger="adk_session_heal"):
        model, stored = await turn(InMemorySessionService(), tools, POLICY)
    assert tools.runs == [("get_weather", {"city": "Paris"})]
    stored_answers = answers(stored.events)
    assert stored_answers["wx-1"] == {"city": "Paris", "temp_c": 21}
    assert "error" in stored_answers["pay-1"] and stored_answers["pay-1"]["safe_to_retry"] is False
    rerun = [e for e in stored.events if RERUN_METADATA_KEY in (e.custom_metadata or {})]
    assert len(rerun) == 1 and rerun[0].custom_metadata is not None
    assert rerun[0].custom_metadata[RERUN_METADATA_KEY]["effects"] == ["read_only"]
    words = outline(stored.events)
    assert words.index("hello?") > max(i for i, w in enumerate(words) if w.startswith("response"))
    (request,) = model.requests
    assert not [p for p in PROVIDERS if provider_problems(request.contents, p)]
    assert sum("re-ran dead tool call get_weather#wx-1" in r.getMessage()
               for r in caplog.records) == 1


async def test_nothing_runs_again_when_off_or_resumable_and_the_calls_are_healed() -> None:
    """Without rerun_safe_calls, or in an app ADK resumes itself, both calls get heals."""
    for policy, resumable in ((HealPolicy(tool_effects=POLICY.tool_effects), False),
                              (POLICY, True)):
        tools = Tools()
        _, stored = await turn(InMemorySessionService(), tools, policy, resumable=resumable)
        assert tools.runs == []
        assert all("error" in a for a in answers(stored.events).values())


async def test_a_failing_re_run_stores_nothing_and_the_call_is_healed() -> None:
    """The tool raises on its re-run: the wrapper heals it as the message is stored."""
    tools = Tools(weather_fails=True)
    _, stored = await turn(InMemorySessionService(), tools, POLICY)
    assert tools.runs == [("get_weather", {"city": "Paris"})]
    assert "error" in answers(stored.events)["wx-1"]


def test_only_safe_calls_of_the_newest_invocation_are_re_runnable() -> None:
    """read_only/idempotent, with an id, in the newest invocation; deferring holds them."""
    history = died_mid_tools()
    earlier = History(agent=AGENT, start=time.time() - 7200)
    earlier.user("weather in Rome?")
    earlier.calls(("get_weather", {"city": "Rome"}), ids=["wx-0"])
    events = [*earlier.events, *[e.model_copy(update={"invocation_id": "inv-9"})
                                 for e in history.events]]
    incoming = Event(invocation_id="inv-10", author="user", timestamp=time.time(),
                     content=types.Content(role="user", parts=[types.Part(text="hi")]))
    findings = classify([*events, incoming], now=time.time())
    runnable = rerunnable_calls(events, findings, POLICY)
    assert [c.call_id for c in runnable] == ["wx-1"]  # not wx-0 (older turn), not pay-1
    held = deferring(findings, runnable)
    assert {c.call_id: c.status for c in held.calls}["wx-1"] is CallStatus.IN_FLIGHT
    assert {c.call_id: c.status for c in held.calls}["pay-1"] is CallStatus.SUPERSEDED


async def test_get_session_leaves_the_re_runnable_call_for_the_plugin() -> None:
    """With rerun_safe_calls and stale_after, a read leaves get_weather and heals charge_card."""
    inner = InMemorySessionService()
    session = await inner.create_session(app_name=APP, user_id=USER)
    for event in died_mid_tools().events:
        await inner.append_event(session, event)
    policy = HealPolicy(rerun_safe_calls=True, stale_after=60, clock_skew=0,
                        tool_effects=POLICY.tool_effects)
    read = await HealingSessionService(inner, policy).get_session(
        app_name=APP, user_id=USER, session_id=session.id)
    assert read is not None
    assert set(answers(read.events)) == {"pay-1"}


# -- re-runs go through ADK's own tool path: guards, masks, error callbacks, the ledger --------

SSN = "123-45-6789"
PLUGIN_DENIAL = "Access denied by the customer-data guard: not this user's record."
AGENT_DENIAL = "The shop agent may read only the signed-in user's record."
CUSTOMER_POLICY = HealPolicy(rerun_safe_calls=True,
                             tool_effects={"read_customer": ToolEffect.READ_ONLY})


def customer_tool(kind: str, reads: list[str]) -> Callable[..., Any]:
    """``read_customer`` as a plain ``def`` or an ``async def`` tool, recording each read."""
    if kind == "def":
        def read_customer(customer: str) -> dict[str, str]:
            """Returns a customer's record."""
            reads.append(customer)
            return {"customer": customer, "plan": "gold", "ssn": SSN}
        return read_customer

    async def read_customer_async(customer: str) -> dict[str, str]:
        """Returns a customer's record."""
        await asyncio.sleep(0)
        reads.append(customer)
        return {"customer": customer, "plan": "gold", "ssn": SSN}
    read_customer_async.__name__ = "read_customer"
    return read_customer_async


def read_customer_died(customer: str) -> History:
    """The model called read_customer(customer); the process died before it answered."""
    history = History(agent=AGENT, start=time.time() - 600)
    history.user(f"show me {customer}'s record")
    history.calls(("read_customer", {"customer": customer}), ids=["rc-1"])
    return history


class CustomerGuard(BasePlugin):
    """A plugin guard: read_customer only for the session's own user."""

    def __init__(self) -> None:
        super().__init__(name="customer_guard")

    async def before_tool_callback(self, *, tool: BaseTool, tool_args: dict[str, Any],
                                   tool_context: ToolContext) -> dict[str, Any] | None:
        """Answers the call with a refusal for any other customer; the tool does not run."""
        if tool.name == "read_customer" and tool_args.get("customer") != USER:
            return {"error": PLUGIN_DENIAL}
        return None


def agent_guard(tool: BaseTool, args: dict[str, Any],
                tool_context: ToolContext) -> dict[str, Any] | None:
    """The agent's before_tool_callback: the same rule, its own refusal."""
    if tool.name == "read_customer" and args.get("customer") != USER:
        return {"error": AGENT_DENIAL}
    return None


def normalize_customer(tool: BaseTool, args: dict[str, Any],
                       tool_context: ToolContext) -> dict[str, Any] | None:
    """The agent's before_tool_callback rewriting the arguments in place (ADK hands them on)."""
    args["customer"] = args["customer"].strip().lower()
    return None


def masked(record: dict[str, Any]) -> dict[str, Any]:
    """The record with its SSN masked."""
    return {**record, "ssn": "***-**-" + str(record["ssn"])[-4:]}


def agent_mask(tool: BaseTool, args: dict[str, Any], tool_context: ToolContext,
               tool_response: dict[str, Any]) -> dict[str, Any] | None:
    """The agent's after_tool_callback masking the SSN."""
    return masked(tool_response) if "ssn" in tool_response else None


class MaskingPlugin(BasePlugin):
    """A plugin after_tool_callback masking the SSN."""

    def __init__(self) -> None:
        super().__init__(name="ssn_mask")

    async def after_tool_callback(self, *, tool: BaseTool, tool_args: dict[str, Any],
                                  tool_context: ToolContext,
                                  result: dict[str, Any]) -> dict[str, Any] | None:
        """Returns the result with the SSN masked."""
        return masked(result) if "ssn" in result else None


def rerun_events(events: list[Event]) -> list[Event]:
    """The events the plugin stored."""
    return [e for e in events if RERUN_METADATA_KEY in (e.custom_metadata or {})]


def request_answers(request: Any) -> dict[str, dict[str, Any]]:
    """Each call id's response as the model's request carries it."""
    return {p.function_response.id or "": dict(p.function_response.response or {})
            for c in request.contents for p in c.parts or [] if p.function_response}


@pytest.mark.parametrize(("denies", "refusal"), [
    ("plugin", PLUGIN_DENIAL), ("agent", AGENT_DENIAL), ("both", PLUGIN_DENIAL)])
@pytest.mark.parametrize("kind", ["def", "async"])
async def test_a_guard_that_denies_blocks_the_re_run_and_its_answer_is_stored(
        denies: str, refusal: str, kind: str) -> None:
    """A dead read_customer(someone-else) never runs; the guard's refusal answers it, as live."""
    reads: list[str] = []
    model = ScriptedModel(script=[ScriptedModel.say("I cannot show that record.")])
    agent = LlmAgent(name=AGENT, model=model, tools=[customer_tool(kind, reads)],
                     before_tool_callback=agent_guard if denies in ("agent", "both") else None)
    plugins = [CustomerGuard()] if denies in ("plugin", "both") else []
    stored = await crashed_turn(InMemorySessionService(), read_customer_died("someone-else"),
                                agent, CUSTOMER_POLICY, plugins=plugins)
    assert reads == []  # the tool never ran
    assert answers(stored.events) == {"rc-1": {"error": refusal}}
    (rerun,) = rerun_events(stored.events)
    assert rerun.get_function_responses()[0].name == "read_customer"
    (request,) = model.requests
    assert request_answers(request) == {"rc-1": {"error": refusal}}
    words = outline(stored.events)
    assert words.index("hello?") > max(i for i, w in enumerate(words) if w.startswith("response"))


async def test_parallel_calls_each_take_their_own_path_into_one_event() -> None:
    """Allowed, denied and raising calls of one event: one stored event answers the first two."""
    reads: list[str] = []
    tools = Tools(weather_fails=True)
    crashed = History(agent=AGENT, start=time.time() - 600)
    crashed.user("my record, someone else's, and the weather")
    crashed.calls(("read_customer", {"customer": USER}),
                  ("read_customer", {"customer": "someone-else"}),
                  ("get_weather", {"city": "Paris"}), ids=["rc-1", "rc-2", "wx-1"])
    model = ScriptedModel(script=[ScriptedModel.say("Here is what I could get.")])
    agent = LlmAgent(name=AGENT, model=model,
                     tools=[customer_tool("def", reads), tools.get_weather])
    policy = HealPolicy(rerun_safe_calls=True, tool_effects={
        "read_customer": ToolEffect.READ_ONLY, "get_weather": ToolEffect.READ_ONLY})
    stored = await crashed_turn(InMemorySessionService(), crashed, agent, policy,
                                plugins=[CustomerGuard()])
    assert reads == [USER] and tools.runs == [("get_weather", {"city": "Paris"})]
    (rerun,) = rerun_events(stored.events)
    assert [(r.id, dict(r.response or {})) for r in rerun.get_function_responses()] == [
        ("rc-1", {"customer": USER, "plan": "gold", "ssn": SSN}),
        ("rc-2", {"error": PLUGIN_DENIAL})]
    assert rerun.custom_metadata is not None
    assert rerun.custom_metadata[RERUN_METADATA_KEY]["call_ids"] == ["rc-1", "rc-2"]
    assert "error" in answers(stored.events)["wx-1"]  # raised, no error callback: healed
    (request,) = model.requests
    assert not [p for p in PROVIDERS if provider_problems(request.contents, p)]


async def test_a_sub_agent_s_own_guard_is_honoured_on_its_call() -> None:
    """The call's author (a sub-agent) is the agent whose callbacks and tools the re-run uses."""
    reads: list[str] = []
    model = ScriptedModel(script=[ScriptedModel.say("I cannot show that record.")])
    shop = LlmAgent(name=AGENT, model=model, tools=[customer_tool("def", reads)],
                    before_tool_callback=agent_guard)
    root = LlmAgent(name="front_desk", model=model, sub_agents=[shop])
    stored = await crashed_turn(InMemorySessionService(), read_customer_died("someone-else"),
                                root, CUSTOMER_POLICY)
    assert reads == []
    assert answers(stored.events) == {"rc-1": {"error": AGENT_DENIAL}}
    assert rerun_events(stored.events)[0].author == AGENT


@pytest.mark.parametrize("kind", ["def", "async"])
async def test_a_guard_that_rewrites_the_arguments_is_honoured(kind: str) -> None:
    """The agent's before_tool_callback rewrites the arguments; the tool runs with what it wrote."""
    reads: list[str] = []
    model = ScriptedModel(script=[ScriptedModel.say("Here is your record.")])
    agent = LlmAgent(name=AGENT, model=model, tools=[customer_tool(kind, reads)],
                     before_tool_callback=normalize_customer)
    stored = await crashed_turn(InMemorySessionService(), read_customer_died(f"  {USER.upper()} "),
                                agent, CUSTOMER_POLICY)
    assert reads == [USER]
    assert answers(stored.events)["rc-1"]["customer"] == USER


@pytest.mark.parametrize("masker", ["agent", "plugin"])
@pytest.mark.parametrize("kind", ["def", "async"])
async def test_a_masking_after_callback_is_what_is_stored_and_sent(
        masker: str, kind: str, tmp_path: Path) -> None:
    """An allowed re-run's SSN is masked by the after-callback: never stored or sent in clear."""
    reads: list[str] = []
    model = ScriptedModel(script=[ScriptedModel.say("Here is your record.")])
    agent = LlmAgent(name=AGENT, model=model, tools=[customer_tool(kind, reads)],
                     after_tool_callback=agent_mask if masker == "agent" else None)
    inner = DatabaseSessionService(f"sqlite+aiosqlite:///{tmp_path / 'sessions.db'}")
    try:
        stored = await crashed_turn(inner, read_customer_died(USER), agent, CUSTOMER_POLICY,
                                    plugins=[MaskingPlugin()] if masker == "plugin" else [])
    finally:
        await close(inner)
    expected = {"customer": USER, "plan": "gold", "ssn": "***-**-6789"}
    assert reads == [USER]
    assert answers(stored.events) == {"rc-1": expected}
    assert len(rerun_events(stored.events)) == 1
    (request,) = model.requests
    assert request_answers(request) == {"rc-1": expected}
    assert SSN not in request.model_dump_json()
    files = [path for path in tmp_path.iterdir() if path.is_file()]
    assert files and not [path for path in files if SSN.encode() in path.read_bytes()]


async def test_an_error_callback_s_answer_is_stored_when_the_re_run_raises() -> None:
    """The tool raises and a plugin's on_tool_error_callback answers: that answer is stored."""

    class WeatherDown(BasePlugin):
        async def on_tool_error_callback(self, *, tool: BaseTool, tool_args: dict[str, Any],
                                         tool_context: ToolContext,
                                         error: Exception) -> dict[str, Any] | None:
            return {"error": f"weather service unavailable ({type(error).__name__})"}

    tools = Tools(weather_fails=True)
    model, stored = await turn(InMemorySessionService(), tools, POLICY,
                               plugins=[WeatherDown(name="weather_down")])
    assert tools.runs == [("get_weather", {"city": "Paris"})]
    expected = {"error": "weather service unavailable (ConnectionError)"}
    assert answers(stored.events)["wx-1"] == expected
    assert len(rerun_events(stored.events)) == 1
    assert request_answers(model.requests[0])["wx-1"] == expected


async def test_a_re_run_outlasting_its_timeout_is_cancelled_and_the_call_is_healed() -> None:
    """The timeout cancels the tool inside ADK's handler; nothing is stored, the call is healed."""
    outcome: list[str] = []
    never = asyncio.Event()

    async def read_customer(customer: str) -> dict[str, str]:
        """Returns a customer's record (this one hangs)."""
        try:
            await never.wait()
        except asyncio.CancelledError:
            outcome.append("cancelled")
            raise
        outcome.append("returned")
        return {"customer": customer}

    model = ScriptedModel(script=[ScriptedModel.say("Let me check again.")])
    agent = LlmAgent(name=AGENT, model=model, tools=[read_customer])
    inner = InMemorySessionService()
    session = await inner.create_session(app_name=APP, user_id=USER)
    for event in read_customer_died(USER).events:
        await inner.append_event(session, event)
    app = App(name=APP, root_agent=agent,
              plugins=[RerunSafeCallsPlugin(CUSTOMER_POLICY, timeout=0.2)])
    runner = Runner(app=app, session_service=HealingSessionService(inner, CUSTOMER_POLICY))
    message = types.Content(role="user", parts=[types.Part(text="hello?")])
    async for _ in runner.run_async(user_id=USER, session_id=session.id, new_message=message):
        pass
    stored = await inner.get_session(app_name=APP, user_id=USER, session_id=session.id)
    assert stored is not None and outcome == ["cancelled"]
    assert rerun_events(stored.events) == []
    assert "error" in answers(stored.events)["rc-1"]


async def test_a_re_run_asking_for_confirmation_is_not_stored_and_the_call_is_healed() -> None:
    """A tool needing a human's confirmation cannot get one before the message: healed, not run."""
    reads: list[str] = []
    model = ScriptedModel(script=[ScriptedModel.say("Let me check again.")])
    tool = FunctionTool(customer_tool("def", reads), require_confirmation=True)
    agent = LlmAgent(name=AGENT, model=model, tools=[tool])
    stored = await crashed_turn(InMemorySessionService(), read_customer_died(USER), agent,
                                CUSTOMER_POLICY)
    assert reads == []
    assert rerun_events(stored.events) == []
    (heal,) = [e for e in stored.events if HEAL_METADATA_KEY in (e.custom_metadata or {})]
    assert [r.id for r in heal.get_function_responses()] == ["rc-1"]


async def _rerun_over_record(kind: str, adk_store: Store, ledger: SqlToolRunLedger, *,
                            finished: Mapping[str, Any] | None = None
                            ) -> tuple[list[str], Any, History, ToolRun]:
    """A read_customer call died in a process whose lease ran out; the user's next turn runs
    with RerunSafeCallsPlugin and ToolRunLedgerPlugin.

    ``finished``: the dead run had finished with this result (else it had only started).

    Returns:
        The tool's runs in this turn, the stored session, the crashed history, and the
        call's record afterwards.
    """
    reads: list[str] = []
    inner = adk_store.service()
    crashed = read_customer_died(USER)
    created = await inner.create_session(app_name=APP, user_id=USER)
    # Read back first: on MariaDB, ADK 1.39's create_session returns a session whose
    # revision marker never matches storage, so appending to it fails as stale.
    session = await inner.get_session(app_name=APP, user_id=USER, session_id=created.id)
    assert session is not None
    for event in crashed.events:
        await inner.append_event(session, event)
    # The process that ran it died: its lease ran out longer ago than the clock skew allows.
    dead_at = time.time() - 600
    dead = ToolRun(app_name=APP, user_id=USER, session_id=session.id, call_id="rc-1",
                   tool_name="read_customer", invocation_id=crashed.invocation_id,
                   state=RunState.STARTED, host="dead-host", pid=1, attempt=0,
                   started_at=dead_at, lease_until=dead_at + 60)
    await ledger.announce([replace(dead, state=RunState.ANNOUNCED)])
    assert await ledger.start(dead) == 1
    if finished is not None:
        assert await ledger.finish(replace(dead, attempt=1), RunState.FINISHED, dead_at + 1,
                                   json.dumps(finished), False)
    model = ScriptedModel(script=[ScriptedModel.say("Here is your record.")])
    agent = LlmAgent(name=AGENT, model=model, tools=[customer_tool(kind, reads)])
    app = App(name=APP, root_agent=agent, plugins=[
        RerunSafeCallsPlugin(CUSTOMER_POLICY),
        ToolRunLedgerPlugin(ledger, policy=CUSTOMER_POLICY)])
    runner = Runner(app=app, session_service=HealingSessionService(inner, CUSTOMER_POLICY))
    message = types.Content(role="user", parts=[types.Part(text="hello?")])
    try:
        async for _ in runner.run_async(user_id=USER, session_id=session.id,
                                        new_message=message):
            pass
        stored = await inner.get_session(app_name=APP, user_id=USER, session_id=session.id)
    finally:
        await close(inner)
    assert stored is not None
    run = (await ledger.runs(SessionKey(APP, USER, session.id)))["rc-1"]
    return reads, stored, crashed, run


@pytest.mark.parametrize("kind", ["def", "async"])
async def test_the_tool_run_ledger_records_the_re_run(
        kind: str, adk_store: Store, tool_run_ledger: SqlToolRunLedger) -> None:
    """With ToolRunLedgerPlugin in the app, the re-run is a new attempt: started, then finished."""
    reads, stored, crashed, run = await _rerun_over_record(kind, adk_store, tool_run_ledger)
    assert stored is not None and reads == [USER]
    record = {"customer": USER, "plan": "gold", "ssn": SSN}
    assert answers(stored.events)["rc-1"] == record
    assert run.state is RunState.FINISHED and run.attempt == 2
    assert run.pid == os.getpid() and run.host != "dead-host"
    assert run.invocation_id == stored.events[-1].invocation_id != crashed.invocation_id
    assert run.result == record and run.finished_at is not None


@pytest.mark.parametrize("kind", ["def", "async"])
async def test_a_call_whose_run_finished_is_answered_with_its_result_not_run_again(
        kind: str, adk_store: Store, tool_run_ledger: SqlToolRunLedger) -> None:
    """The process died after the read finished but before its response was stored: the
    re-run goes through the ledger's replay guard, which answers with the recorded result
    and does not run the tool a second time."""
    record = {"customer": USER, "plan": "gold", "ssn": "***"}
    reads, stored, _, run = await _rerun_over_record(kind, adk_store, tool_run_ledger,
                                                     finished=record)
    assert stored is not None and reads == []
    assert answers(stored.events)["rc-1"] == record
    assert run.state is RunState.FINISHED and run.attempt == 1
