"""Tests for runtime/idempotency.py: the key a tool reads from its ToolContext, on a Runner."""

from __future__ import annotations

import time
from typing import Any

from google.adk.agents import LlmAgent
from google.adk.apps import App
from google.adk.events.event import Event
from google.adk.models.llm_response import LlmResponse
from google.adk.runners import Runner
from google.adk.sessions import InMemorySessionService, Session
from google.adk.tools.tool_context import ToolContext
from google.genai import types

from adk_session_heal import HealingSessionService, HealPolicy, ToolEffect
from adk_session_heal.core import idempotency
from adk_session_heal.core.session_key import SessionKey
from adk_session_heal.plugins import RerunSafeCallsPlugin, idempotency_key
from adk_session_heal.runtime.idempotency import _call_invocation
from adk_session_heal.testing import History, ScriptedModel

APP, USER = "shop", "customer"


class Payments:
    """The keys a tool sent, by call id, in the order it ran."""

    def __init__(self) -> None:
        self.sent: list[tuple[str, str]] = []

    async def pay(self, amount: int, tool_context: ToolContext) -> dict[str, Any]:
        """Charges the customer's card."""
        self.sent.append((str(tool_context.function_call_id), idempotency_key(tool_context)))
        return {"charged": amount}


def _calls(*ids: str) -> LlmResponse:
    """A model reply calling ``pay`` once per id, in one event."""
    return LlmResponse(content=types.Content(role="model", parts=[
        types.Part(function_call=types.FunctionCall(id=call_id, name="pay", args={"amount": 5}))
        for call_id in ids]))


async def _turns(script: list[Any], payments: Payments, turns: int) -> Session:
    """Runs ``turns`` user turns of an agent with the ``pay`` tool; returns the session."""
    service = InMemorySessionService()
    session = await service.create_session(app_name=APP, user_id=USER)
    agent = LlmAgent(name="cashier", tools=[payments.pay], model=ScriptedModel(script=script))
    runner = Runner(app=App(name=APP, root_agent=agent), session_service=service)
    for turn in range(turns):
        message = types.Content(role="user", parts=[types.Part(text=f"pay 5 ({turn})")])
        async for _ in runner.run_async(user_id=USER, session_id=session.id,
                                        new_message=message):
            pass
    stored = await service.get_session(app_name=APP, user_id=USER, session_id=session.id)
    assert stored is not None
    return stored


def _made_in(events: list[Event], call_id: str) -> list[str]:
    """The invocations of the stored events that call ``call_id``."""
    return [e.invocation_id for e in events
            if any(c.id == call_id for c in e.get_function_calls())]


async def test_parallel_calls_each_get_the_key_of_their_own_call() -> None:
    """Two calls in one model turn: two keys, each the key of its call where it was made."""
    payments = Payments()
    stored = await _turns([_calls("p-1", "p-2"), ScriptedModel.say("Paid twice.")], payments, 1)
    sent = dict(payments.sent)
    assert sorted(sent) == ["p-1", "p-2"] and sent["p-1"] != sent["p-2"]
    key = SessionKey(APP, USER, stored.id)
    for call_id in ("p-1", "p-2"):
        (invocation,) = _made_in(stored.events, call_id)
        assert sent[call_id] == idempotency.idempotency_key(key, invocation, call_id)


async def test_a_model_that_reuses_a_call_id_gets_a_new_key_each_turn() -> None:
    """A model numbering its calls from call_0 every turn: each turn's charge has its own key."""
    payments = Payments()
    stored = await _turns([_calls("call_0"), ScriptedModel.say("Paid."),
                           _calls("call_0"), ScriptedModel.say("Paid again.")], payments, 2)
    (first, second) = payments.sent
    assert first[0] == second[0] == "call_0" and first[1] != second[1]
    assert len(set(_made_in(stored.events, "call_0"))) == 2


async def test_a_re_run_in_a_later_invocation_sends_the_key_of_the_call_it_runs() -> None:
    """RerunSafeCallsPlugin runs a dead call in the next turn: the key is the call's own."""
    payments = Payments()
    crashed = History(agent="cashier", start=time.time() - 600)
    crashed.user("pay 5")
    crashed.calls(("pay", {"amount": 5}), ids=["rc-1"])
    policy = HealPolicy(rerun_safe_calls=True, tool_effects={"pay": ToolEffect.IDEMPOTENT})
    inner = InMemorySessionService()
    session = await inner.create_session(app_name=APP, user_id=USER)
    for event in crashed.events:
        await inner.append_event(session, event)
    agent = LlmAgent(name="cashier", tools=[payments.pay],
                     model=ScriptedModel(script=[ScriptedModel.say("Paid.")]))
    runner = Runner(app=App(name=APP, root_agent=agent, plugins=[RerunSafeCallsPlugin(policy)]),
                    session_service=HealingSessionService(inner, policy))
    message = types.Content(role="user", parts=[types.Part(text="did it go through?")])
    invocations = {event.invocation_id
                   async for event in runner.run_async(user_id=USER, session_id=session.id,
                                                       new_message=message)}
    ((call_id, sent),) = payments.sent
    (made_in,) = _made_in(crashed.events, "rc-1")
    assert call_id == "rc-1" and made_in not in invocations
    assert sent == idempotency.idempotency_key(SessionKey(APP, USER, session.id), made_in, "rc-1")


def test_the_invocation_of_a_call_is_the_running_one_unless_it_was_made_earlier() -> None:
    """Not stored yet or stored in this invocation: the running one; else the newest maker."""
    history = History(agent="cashier")
    history.user("pay")
    history.calls(("pay", {"amount": 5}), ids=["c-1"])
    events = history.events
    (made_in,) = _made_in(events, "c-1")
    assert _call_invocation(events, "c-9", "running") == "running"
    assert _call_invocation(events, "c-1", made_in) == made_in
    assert _call_invocation(events, "c-1", "a-later-one") == made_in
