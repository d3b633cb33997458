"""Contract tests for HealingSessionService over every real inner session service.

Each test body runs against InMemorySessionService, ADK's SqliteSessionService,
and DatabaseSessionService on SQLite, PostgreSQL and MariaDB (the
``store_factory`` fixture), the way ADK's own session tests are written.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import time

import pytest
from conftest import ServiceFactory
from google.adk.events.event import Event
from google.adk.flows.llm_flows.contents import _get_contents
from google.adk.sessions import BaseSessionService, DatabaseSessionService
from google.genai import types
from service_histories import (
    APP,
    USER,
    crashed_history,
    store_crashed,
    stored_events,
    synthetic,
)

from adk_session_heal.core.event_access import HEAL_METADATA_KEY
from adk_session_heal.core.findings import CallStatus, classify
from adk_session_heal.core.heal_record import HealRecord, HealTrigger
from adk_session_heal.errors import HealWriteError
from adk_session_heal.policy import DEFAULT_PAYLOAD, HealPolicy, ToolEffect, effect_payload
from adk_session_heal.runtime.service import HealingSessionService
from adk_session_heal.testing import History


def test_every_public_method_of_the_base_class_is_overridden() -> None:
    """A new BaseSessionService method cannot silently bypass the wrapper."""
    public = {
        name
        for name, member in inspect.getmembers(BaseSessionService)
        if not name.startswith("_") and callable(member)
    }
    missing = {name for name in public if name not in vars(HealingSessionService)}
    assert missing == set()
    assert {"close", "__aenter__", "__aexit__"} <= set(vars(HealingSessionService))


async def test_get_session_heals_a_superseded_call_in_storage(
    store_factory: ServiceFactory,
) -> None:
    """One synthetic response is stored right after the dead call, and returned in place."""
    inner = await store_factory()
    history = crashed_history()
    session = await store_crashed(inner, history)
    service = HealingSessionService(await store_factory())

    healed = await service.get_session(app_name=APP, user_id=USER, session_id=session.id)

    assert healed is not None
    assert [e.id for e in healed.events] == ["e-0001", "e-0002", "e-0002-heal", "e-0003"]
    stored = await stored_events(store_factory, session.id)
    assert [e.id for e in stored] == ["e-0001", "e-0002", "e-0002-heal", "e-0003"]
    (heal,) = synthetic(stored)
    assert heal.author == history.events[1].author
    assert heal.invocation_id == history.events[1].invocation_id
    assert [(r.id, r.name, r.response) for r in heal.get_function_responses()] == [
        ("call-1", "get_weather", dict(DEFAULT_PAYLOAD))
    ]
    assert heal.custom_metadata is not None
    assert heal.custom_metadata[HEAL_METADATA_KEY]["reason"] == "superseded"
    assert not classify(stored, now=time.time()).needs_healing


async def test_each_store_keeps_each_tool_s_wording_and_the_marker_s_effects(
    store_factory: ServiceFactory,
) -> None:
    """A mixed call event's heal, stored by every writer, answers each call for its own tool's
    effect and records the effects and outcomes in the marker."""
    inner = await store_factory()
    history = History(start=time.time() - 60)
    history.user("weather, then pay")
    history.calls("get_weather", "charge_card")
    history.user("hello?")
    session = await store_crashed(inner, history)
    policy = HealPolicy(tool_effects={"get_weather": ToolEffect.READ_ONLY,
                                      "charge_card": ToolEffect.SIDE_EFFECT})
    await HealingSessionService(await store_factory(), policy=policy).get_session(
        app_name=APP, user_id=USER, session_id=session.id)

    (heal,) = synthetic(await stored_events(store_factory, session.id))
    assert [(r.name, r.response) for r in heal.get_function_responses()] == [
        ("get_weather", effect_payload(ToolEffect.READ_ONLY)),
        ("charge_card", effect_payload(ToolEffect.SIDE_EFFECT)),
    ]
    marker = (heal.custom_metadata or {})[HEAL_METADATA_KEY]
    assert (marker["effects"], marker["outcomes"]) == (["read_only", "side_effect"],
                                                       ["unknown", "unknown"])


async def test_originals_stay_byte_identical(store_factory: ServiceFactory) -> None:
    """Healing adds one event and never changes or removes a stored one."""
    inner = await store_factory()
    session = await store_crashed(inner, crashed_history())
    before = {e.id: e.model_dump_json() for e in await stored_events(store_factory, session.id)}

    await HealingSessionService(await store_factory()).get_session(
        app_name=APP, user_id=USER, session_id=session.id
    )

    after = {e.id: e.model_dump_json() for e in await stored_events(store_factory, session.id)}
    assert {k: after[k] for k in before} == before
    assert set(after) - set(before) == {"e-0002-heal"}


async def test_second_reader_in_another_process_adds_nothing(store_factory: ServiceFactory) -> None:
    """Dedup is by storage: a fresh service reading a healed session writes nothing."""
    session = await store_crashed(await store_factory(), crashed_history())
    heals: list[HealRecord] = []
    for _ in range(3):
        service = HealingSessionService(await store_factory(), on_heal=heals.append)
        await service.get_session(app_name=APP, user_id=USER, session_id=session.id)
    assert len(heals) == 1
    assert len(synthetic(await stored_events(store_factory, session.id))) == 1


@pytest.mark.parametrize(
    "gap", [0.0, 1e-7, 1e-6, 2e-6, -3.0], ids=["tie", "sub-us", "1us", "2us", "backwards"])
async def test_ties_and_stepped_clocks_heal_once_after_the_call(
    store_factory: ServiceFactory, gap: float
) -> None:
    """Tied, µs-close or stepped-back clocks: one heal, read after its call; 5 reads add nothing."""
    history = crashed_history()
    call = history.events[1]
    history.events[2].timestamp = call.timestamp + gap
    session = await store_crashed(await store_factory(), history)
    heals: list[HealRecord] = []
    for _ in range(6):
        service = HealingSessionService(await store_factory(),
                                        HealPolicy(stale_after=1, clock_skew=0),  # one host
                                        on_heal=heals.append)
        await service.get_session(app_name=APP, user_id=USER, session_id=session.id)

    stored = await stored_events(store_factory, session.id)
    ids = [e.id for e in stored]
    (heal,) = synthetic(stored)
    assert len(heals) == 1
    assert heal.timestamp > call.timestamp
    assert ids.index(heal.id) > ids.index(call.id)
    if gap >= 2e-6:  # room before the next event: read right after the call
        assert ids == ["e-0001", "e-0002", heal.id, "e-0003"]
    assert not classify(stored, now=time.time(), stale_after=1).needs_healing


async def test_concurrent_healers_write_exactly_one_event(store_factory: ServiceFactory) -> None:
    """Healers racing on one dead call (separate service instances) store one row."""
    session = await store_crashed(await store_factory(), crashed_history())
    heals: list[HealRecord] = []
    services = [
        HealingSessionService(await store_factory(), on_heal=heals.append) for _ in range(4)
    ]
    results = await asyncio.gather(
        *(s.get_session(app_name=APP, user_id=USER, session_id=session.id) for s in services)
    )
    for result in results:
        assert result is not None
        assert [e.id for e in result.events].count("e-0002-heal") == 1
    assert len(synthetic(await stored_events(store_factory, session.id))) == 1
    assert len(heals) == 1


async def test_in_flight_long_running_and_idless_calls_are_left_alone(
    store_factory: ServiceFactory,
) -> None:
    """Calls that may still run or are legitimately pending are never healed."""
    history = History(start=time.time() - 60)
    history.user("start a job")
    history.call("slow_job", long_running=True)
    history.calls("legacy", ids=[None])
    history.user("and the weather?")
    history.call("get_weather")  # newest invocation: in flight
    session = await store_crashed(await store_factory(), history)

    service = HealingSessionService(await store_factory())
    healed = await service.get_session(app_name=APP, user_id=USER, session_id=session.id)

    assert healed is not None
    assert synthetic(healed.events) == []
    assert synthetic(await stored_events(store_factory, session.id)) == []


async def test_stale_call_healed_only_when_policy_sets_an_age(
    store_factory: ServiceFactory,
) -> None:
    """A call of the newest invocation is healed only past HealPolicy.stale_after."""
    history = History(start=time.time() - 600)
    history.user("weather?")
    history.call("get_weather")
    session = await store_crashed(await store_factory(), history)

    default = HealingSessionService(await store_factory())
    await default.get_session(app_name=APP, user_id=USER, session_id=session.id)
    assert synthetic(await stored_events(store_factory, session.id)) == []

    patient = HealingSessionService(await store_factory(), HealPolicy(stale_after=3600))
    await patient.get_session(app_name=APP, user_id=USER, session_id=session.id)
    assert synthetic(await stored_events(store_factory, session.id)) == []

    eager = HealingSessionService(await store_factory(),
                                  HealPolicy(stale_after=300, clock_skew=0))  # one host
    healed = await eager.get_session(app_name=APP, user_id=USER, session_id=session.id)
    assert healed is not None
    (heal,) = synthetic(await stored_events(store_factory, session.id))
    assert heal.custom_metadata is not None
    assert heal.custom_metadata[HEAL_METADATA_KEY]["reason"] == "stale"


async def test_append_of_a_new_invocation_heals_first(store_factory: ServiceFactory) -> None:
    """The crash-then-user-returns path: call, synthetic response, then the new message."""
    history = History(start=time.time() - 60)
    history.user("weather?")
    history.call("get_weather")
    session = await store_crashed(await store_factory(), history)
    service = HealingSessionService(await store_factory(), HealPolicy(heal_on_get=False))
    loaded = await service.get_session(app_name=APP, user_id=USER, session_id=session.id)
    assert loaded is not None and synthetic(loaded.events) == []

    message = Event(
        invocation_id="inv-new",
        author="user",
        content=types.Content(role="user", parts=[types.Part(text="hello?")]),
    )
    await service.append_event(loaded, message)

    expected = ["e-0001", "e-0002", "e-0002-heal", message.id]
    assert [e.id for e in loaded.events] == expected
    assert [e.id for e in await stored_events(store_factory, session.id)] == expected


async def test_append_within_an_invocation_does_not_classify(
    store_factory: ServiceFactory,
) -> None:
    """Appends inside one invocation never heal (no rescan on every append)."""
    history = History(start=time.time() - 60)
    history.user("weather?")
    call = history.call("get_weather")
    session = await store_crashed(await store_factory(), history)
    service = HealingSessionService(await store_factory(), HealPolicy(stale_after=1))
    loaded = await service.get_session(app_name=APP, user_id=USER, session_id=session.id)
    assert loaded is not None
    heal_count = len(synthetic(loaded.events))

    response = Event(
        invocation_id=history.invocation_id,
        author="assistant",
        content=types.Content(role="user", parts=[types.Part(
            function_response=types.FunctionResponse(id=call, name="get_weather",
                                                     response={"ok": True}))]),
    )
    await service.append_event(loaded, response)
    assert len(synthetic(loaded.events)) == heal_count


async def test_heal_never_makes_an_active_runner_stale(store_factory: ServiceFactory) -> None:
    """A runner holding the session keeps appending after another reader heals it."""
    session = await store_crashed(await store_factory(), crashed_history())
    runner_view = await (await store_factory()).get_session(
        app_name=APP, user_id=USER, session_id=session.id
    )
    assert runner_view is not None

    reader = HealingSessionService(await store_factory())
    await reader.get_session(app_name=APP, user_id=USER, session_id=session.id)

    writer = await store_factory()
    reply = Event(
        invocation_id=runner_view.events[-1].invocation_id,
        author="assistant",
        content=types.Content(role="model", parts=[types.Part(text="hi again")]),
    )
    await writer.append_event(runner_view, reply)  # would raise StaleSessionError
    stored = await stored_events(store_factory, session.id)
    assert [e.id for e in stored][-2:] == ["e-0003", reply.id]
    assert len(synthetic(stored)) == 1


async def test_late_real_response_wins_in_the_request(store_factory: ServiceFactory) -> None:
    """After a heal, a real response that arrives late is the one ADK sends the model."""
    history = History(start=time.time() - 600)
    history.user("weather?")
    call = history.call("get_weather")
    session = await store_crashed(await store_factory(), history)
    service = HealingSessionService(await store_factory(), HealPolicy(stale_after=60))
    healed = await service.get_session(app_name=APP, user_id=USER, session_id=session.id)
    assert healed is not None and len(synthetic(healed.events)) == 1

    late = Event(
        invocation_id=history.invocation_id,
        author="assistant",
        content=types.Content(role="user", parts=[types.Part(
            function_response=types.FunctionResponse(id=call, name="get_weather",
                                                     response={"forecast": "sunny"}))]),
    )
    await (await store_factory()).append_event(healed, late)
    events = await stored_events(store_factory, session.id)
    contents = _get_contents(None, events, "assistant", preserve_function_call_ids=True)
    responses = [
        p.function_response.response
        for c in contents
        for p in c.parts or ()
        if p.function_response is not None and p.function_response.id == call
    ]
    assert responses == [{"forecast": "sunny"}]
    (finding,) = classify(events, now=time.time()).calls
    assert finding.status is CallStatus.ANSWERED and not finding.answered_by_heal


async def test_a_session_read_clean_then_left_with_a_dead_call_is_healed(
    store_factory: ServiceFactory,
) -> None:
    """A session the wrapper remembers as clean, given a dead call by another writer, is
    healed on the next read: the events after the remembered ones are read."""
    history = History(start=time.time() - 600)
    history.user("weather?")
    call = history.call("get_weather")
    history.respond((call, "get_weather", {"temp": 20}))
    history.text("20 degrees")
    session = await store_crashed(await store_factory(), history)
    service = HealingSessionService(await store_factory())
    for _ in range(2):
        read = await service.get_session(app_name=APP, user_id=USER, session_id=session.id)
        assert read is not None and synthetic(read.events) == []

    more = History(start=time.time() - 300)
    more.user("and tomorrow?")
    lost = more.call("get_weather")
    more.user("hello?")
    writer = await store_factory()  # another process, bypassing the wrapper
    held = await writer.get_session(app_name=APP, user_id=USER, session_id=session.id)
    assert held is not None
    for event in more.events:
        await writer.append_event(held, event.model_copy(update={"id": f"more-{event.id}"}))

    healed = await service.get_session(app_name=APP, user_id=USER, session_id=session.id)
    assert healed is not None
    (heal,) = synthetic(await stored_events(store_factory, session.id))
    assert heal.content is not None and heal.content.parts is not None
    response = heal.content.parts[0].function_response
    assert response is not None and response.id == lost


async def test_an_in_flight_call_read_again_is_healed_once_stale(
    store_factory: ServiceFactory,
) -> None:
    """A session with a call in flight is not remembered as clean: once the call is stale,
    the next read heals it, and reads after that add nothing."""
    now = [time.time()]
    history = History(start=now[0] - 10)
    history.user("weather?")
    history.call("get_weather")
    session = await store_crashed(await store_factory(), history)
    service = HealingSessionService(await store_factory(),
                                    HealPolicy(stale_after=60, clock_skew=0),
                                    clock=lambda: now[0])
    await service.get_session(app_name=APP, user_id=USER, session_id=session.id)
    await service.get_session(app_name=APP, user_id=USER, session_id=session.id)
    assert synthetic(await stored_events(store_factory, session.id)) == []
    now[0] += 120
    for _ in range(3):
        await service.get_session(app_name=APP, user_id=USER, session_id=session.id)
    assert len(synthetic(await stored_events(store_factory, session.id))) == 1


async def test_a_heal_remembered_as_clean_is_taken_back_when_the_real_answer_comes(
    store_factory: ServiceFactory,
) -> None:
    """Read again after its heal, a session is clean (the heal answers the call); the real
    response stored later by another writer still makes the next read take the heal back."""
    history = History(start=time.time() - 600)
    history.user("weather?")
    call = history.call("get_weather")
    session = await store_crashed(await store_factory(), history)
    service = HealingSessionService(await store_factory(), HealPolicy(stale_after=60))
    for _ in range(2):
        read = await service.get_session(app_name=APP, user_id=USER, session_id=session.id)
        assert read is not None and len(synthetic(read.events)) == 1

    writer = await store_factory()
    held = await writer.get_session(app_name=APP, user_id=USER, session_id=session.id)
    assert held is not None
    await writer.append_event(held, Event(
        invocation_id=history.invocation_id, author="assistant",
        content=types.Content(role="user", parts=[types.Part(
            function_response=types.FunctionResponse(id=call, name="get_weather",
                                                     response={"forecast": "sunny"}))])))
    read = await service.get_session(app_name=APP, user_id=USER, session_id=session.id)
    assert read is not None and synthetic(read.events) == []
    stored = await stored_events(store_factory, session.id)
    assert synthetic(stored) == [] and len(stored) == 3


async def test_nothing_to_heal_costs_no_writes(store_factory: ServiceFactory) -> None:
    """A healthy session is returned as the inner service returned it."""
    history = History(start=time.time() - 60)
    history.user("weather?")
    call = history.call("get_weather")
    history.respond((call, "get_weather"))
    history.text("sunny")
    session = await store_crashed(await store_factory(), history)
    bare = await (await store_factory()).get_session(
        app_name=APP, user_id=USER, session_id=session.id)
    wrapped = await HealingSessionService(await store_factory()).get_session(
        app_name=APP, user_id=USER, session_id=session.id)
    assert bare is not None and wrapped is not None
    assert [e.model_dump_json() for e in wrapped.events] == [
        e.model_dump_json() for e in bare.events]


async def test_one_warning_per_heal_never_per_request(
    store_factory: ServiceFactory, caplog: pytest.LogCaptureFixture
) -> None:
    """A heal logs one structured warning; later reads of the healed session log nothing."""
    session = await store_crashed(await store_factory(), crashed_history())
    caplog.set_level(logging.WARNING, logger="adk_session_heal")
    for _ in range(3):
        await HealingSessionService(await store_factory()).get_session(
            app_name=APP, user_id=USER, session_id=session.id)
    records = [r for r in caplog.records if r.name == "adk_session_heal"]
    assert len(records) == 1
    fields = records[0].adk_session_heal  # type: ignore[attr-defined]
    assert fields["session_id"] == session.id
    assert fields["call_ids"] == ["call-1"] and fields["tool_names"] == ["get_weather"]
    assert fields["reason"] == "superseded" and fields["trigger"] == "get_session"


async def test_on_heal_and_ledger_receive_each_heal_once(store_factory: ServiceFactory) -> None:
    """on_heal gets one HealRecord per heal; the ledger records the same; a raising
    callback never breaks the read."""
    session = await store_crashed(await store_factory(), crashed_history())

    class ListLedger:
        def __init__(self) -> None:
            self.rows: list[HealRecord] = []

        async def record(self, records: list[HealRecord]) -> None:
            self.rows.extend(records)

    def exploding(record: HealRecord) -> None:
        raise RuntimeError("metrics backend down")

    ledger = ListLedger()
    service = HealingSessionService(await store_factory(), on_heal=exploding, ledger=ledger)
    healed = await service.get_session(app_name=APP, user_id=USER, session_id=session.id)
    assert healed is not None and len(synthetic(healed.events)) == 1
    (record,) = ledger.rows
    assert (record.session_id, record.call_ids, record.trigger) == (
        session.id, ("call-1",), HealTrigger.GET_SESSION)
    assert record.synthetic_event_id == "e-0002-heal"


async def test_forwarded_methods_behave_like_the_inner_service(
    store_factory: ServiceFactory,
) -> None:
    """create/list/delete/get_user_state/flush go to the inner service unchanged."""
    service = HealingSessionService(await store_factory())
    session = await service.create_session(app_name=APP, user_id=USER, state={"user:x": 1})
    listed = await service.list_sessions(app_name=APP, user_id=USER)
    assert session.id in {s.id for s in listed.sessions}
    assert await service.get_user_state(app_name=APP, user_id=USER) == {"x": 1}
    await service.flush()
    await service.delete_session(app_name=APP, user_id=USER, session_id=session.id)
    assert await service.get_session(app_name=APP, user_id=USER, session_id=session.id) is None


async def test_failed_heal_is_logged_and_session_returned_unhealed(
    tmp_path: object, caplog: pytest.LogCaptureFixture
) -> None:
    """Fail-open: a read-only database logs the traceback and returns the session as read."""
    path = f"{tmp_path}/ro.db"
    writable = DatabaseSessionService(f"sqlite+aiosqlite:///{path}")
    session = await store_crashed(writable, crashed_history())
    await writable.close()
    read_only = DatabaseSessionService(f"sqlite+aiosqlite:///file:{path}?mode=ro&uri=true")
    try:
        caplog.set_level(logging.ERROR, logger="adk_session_heal")
        service = HealingSessionService(read_only)
        result = await service.get_session(app_name=APP, user_id=USER, session_id=session.id)
        assert result is not None
        assert [e.id for e in result.events] == ["e-0001", "e-0002", "e-0003"]
        (error,) = [r for r in caplog.records if r.name == "adk_session_heal"]
        assert error.exc_info is not None and "readonly" in str(error.exc_info[1]).lower()

        strict = HealingSessionService(read_only, HealPolicy(raise_errors=True))
        with pytest.raises(HealWriteError):
            await strict.get_session(app_name=APP, user_id=USER, session_id=session.id)
    finally:
        await read_only.close()


async def test_healthy_session_costs_no_extra_sql(tmp_path: object) -> None:
    """On a session with nothing to heal the wrapper issues no SQL beyond the inner read."""
    from sqlalchemy import event as sa_event

    inner = DatabaseSessionService(f"sqlite+aiosqlite:///{tmp_path}/io.db")
    history = History(start=time.time() - 60)
    history.user("weather?")
    call = history.call("get_weather")
    history.respond((call, "get_weather"))
    session = await store_crashed(inner, history)
    statements: list[str] = []

    def count(conn: object, cursor: object, statement: str, *args: object) -> None:
        statements.append(statement)

    sa_event.listen(inner.db_engine.sync_engine, "before_cursor_execute", count)
    try:
        await inner.get_session(app_name=APP, user_id=USER, session_id=session.id)
        bare = list(statements)
        statements.clear()
        await HealingSessionService(inner).get_session(
            app_name=APP, user_id=USER, session_id=session.id)
        assert statements == bare
    finally:
        sa_event.remove(inner.db_engine.sync_engine, "before_cursor_execute", count)
        await inner.close()


async def test_wrapper_records_heals_in_the_sql_ledger(tmp_path: object) -> None:
    """With a SqlHealLedger the wrapper's heals are in the audit table, once each."""
    from adk_session_heal.ledger import SqlHealLedger
    from adk_session_heal.migrate import upgrade

    url = f"sqlite+aiosqlite:///{tmp_path}/ledger.db"
    inner = DatabaseSessionService(url)
    session = await store_crashed(inner, crashed_history())
    await upgrade(url)
    ledger = SqlHealLedger(inner.db_engine)
    try:
        for _ in range(2):
            await HealingSessionService(inner, ledger=ledger).get_session(
                app_name=APP, user_id=USER, session_id=session.id)
        (record,) = await ledger.history(session_id=session.id)
        assert (record.synthetic_event_id, record.call_ids, record.trigger) == (
            "e-0002-heal", ("call-1",), HealTrigger.GET_SESSION)
    finally:
        await inner.close()
