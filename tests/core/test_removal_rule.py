"""The one removal rule: only our own unchanged rows, in their place, go; on every layout."""

from __future__ import annotations

import dataclasses
import json
import time
from typing import Any

from conftest import ServiceFactory
from google.adk.events.event import Event
from google.adk.sessions import BaseSessionService, Session
from google.genai import types
from healed_rows import APP, KEY, USER, crashed, healed
from stored_rows import edit_event, stored_events

from adk_session_heal.core.adk_compat import readable_event_data
from adk_session_heal.core.event_access import HEAL_METADATA_KEY, STORED_JSON
from adk_session_heal.core.healing import event_digest, row_seal
from adk_session_heal.core.removal_rule import removal_problem
from adk_session_heal.core.review import plan_resolution
from adk_session_heal.core.session_key import SessionKey
from adk_session_heal.runtime.service import HealingSessionService
from adk_session_heal.store import store_for_service
from adk_session_heal.store.base import (
    Removal,
    RemovalReason,
    RemoveOutcome,
    ResolveOutcome,
    decide_removal,
)

NOTE = " (support: card refunded by hand, ticket 4711)"


def answer(call_id: str, *, event_id: str = "late-1", marker: dict[str, Any] | None = None,
           timestamp: float = 1_700_000_100.0) -> Event:
    """A response to the call stored later: the tool's real one, or (``marker``) a look-alike."""
    part = types.Part(function_response=types.FunctionResponse(
        id=call_id, name="charge_card", response={"charged": True}))
    return Event(id=event_id, invocation_id="inv-1", author="assistant", timestamp=timestamp,
                 content=types.Content(role="user", parts=[part]),
                 custom_metadata=None if marker is None else {HEAL_METADATA_KEY: marker})


def as_json(event: Event) -> dict[str, Any]:
    """An event as the SQL layouts store it."""
    return event.model_dump(mode="json", exclude_none=True)


def with_note(row: dict[str, Any]) -> dict[str, Any]:
    """The row with a support note appended to its error message."""
    return {**row, "error_message": row["error_message"] + NOTE}


def late_removal(heal_id: str, call_event_id: str = "e-0002", *,
                 reason: RemovalReason = RemovalReason.LATE_RESULT,
                 digest: str | None = None, key: SessionKey = KEY) -> Removal:
    """A removal of one row, as a late result, a resolve or an undo would plan it."""
    return Removal(key, heal_id, call_event_id, ("call-1",), reason, 1.0, "tester",
                   digest=digest)


def problem(events: list[dict[str, Any]], event_id: str, *, call_event_id: str = "e-0002",
            digest: str | None = None, superseded: bool = True) -> str | None:
    """The rule's answer for the row ``event_id`` of ``events``."""
    index = next(i for i, e in enumerate(events) if e["id"] == event_id)
    return removal_problem(events, index, events[index], call_event_id=call_event_id,
                           digest=digest, superseded=superseded, access=STORED_JSON)


def test_every_form_the_layouts_store_keeps_the_seal() -> None:
    """The SQL row, the in-memory Event's dump, Redis's full JSON and a JSONB read (keys
    reordered) of one heal all match its seal; a note appended, a value changed or a key
    added with content does not."""
    _, heal, _ = healed()
    data = heal.data
    seal = data["custom_metadata"][HEAL_METADATA_KEY]["seal"]
    event = Event.model_validate(readable_event_data(data))
    for form in (data, event.model_dump(mode="json"), json.loads(event.model_dump_json()),
                 json.loads(json.dumps(data, sort_keys=True)),
                 dict(reversed(list(data.items())))):
        assert row_seal(form) == seal
    assert row_seal(with_note(data)) != seal
    assert row_seal({**data, "author": "support"}) != seal
    assert row_seal({**data, "long_running_tool_ids": ["call-1"]}) != seal
    marker = data["custom_metadata"][HEAL_METADATA_KEY]
    assert row_seal({**data, "custom_metadata": {HEAL_METADATA_KEY: {
        **marker, "reason": "stale"}}}) != seal


def test_an_unchanged_superseded_heal_may_go_and_nothing_else() -> None:
    """The heal of e-0002 goes once the real response is stored; not before, not edited."""
    events, heal, call_id = healed()
    late = [*events, as_json(answer(call_id))]
    assert problem(late, heal.event_id) is None
    assert problem(events, heal.event_id) == (
        "a call it answers has no other answer (nothing supersedes it)")
    assert problem(events, heal.event_id, superseded=False) is None  # an undo does not ask
    edited = [with_note(e) if e["id"] == heal.event_id else e for e in late]
    assert problem(edited, heal.event_id) == "it was changed after it was written"
    assert "names call event 'e-0002', not 'e-0001'" in (
        problem(late, heal.event_id, call_event_id="e-0001") or "")


def test_look_alike_rows_are_kept() -> None:
    """A support row marked synthetic naming a user message, and a row wearing a copy of a
    real heal's marker (seal included), are not heals of ours: kept."""
    events, heal, call_id = healed()
    support = as_json(answer(call_id, event_id="support-1", timestamp=1_700_000_050.0, marker={
        "synthetic": True, "call_event_id": "e-0001", "call_ids": [call_id]}))
    copied = as_json(answer(call_id, event_id="support-2", timestamp=1_700_000_060.0,
                            marker=dict(heal.data["custom_metadata"][HEAL_METADATA_KEY])))
    stored = [*events, support, copied, as_json(answer(call_id))]
    assert problem(stored, heal.event_id) is None
    assert problem(stored, "support-1", call_event_id="e-0001") == (
        "it carries no seal and no ledger digest, so it cannot be told unchanged")
    assert problem(stored, "support-2") == "it was changed after it was written"


def test_a_sealed_row_naming_an_event_it_does_not_answer_is_kept() -> None:
    """A row sealed by the builder itself whose marker names the user's message, or an event
    that is not stored, answers e-0002's call: pairing says so, and it is kept."""
    events, heal, call_id = healed()
    for named in ("e-0001", "no-such-event"):
        forged = dataclasses.replace(heal, plan=dataclasses.replace(
            heal.plan, call_event_id=named, event_id=f"forged-{named}"))
        stored = [*events[:3], forged.data, *events[3:], as_json(answer(call_id))]
        assert row_seal(forged.data) == forged.data["custom_metadata"][HEAL_METADATA_KEY]["seal"]
        assert problem(stored, forged.event_id, call_event_id=named) == (
            f"it does not answer calls of event {named!r} in the session as stored")


def test_an_undo_needs_the_ledger_digest_to_hold() -> None:
    """An undo's digest must match the stored row; "" (none recorded) never does."""
    events, heal, _ = healed()
    digest = event_digest(heal.data)
    assert problem(events, heal.event_id, digest=digest, superseded=False) is None
    assert problem(events, heal.event_id, digest="", superseded=False) == (
        "it is not the row the ledger recorded (changed since)")
    decision = decide_removal(events, late_removal(heal.event_id, reason=RemovalReason.UNDO,
                                                   digest=digest),
                              access=STORED_JSON, stored=dict)
    assert decision == (RemoveOutcome.REMOVED, 2, None)
    assert decide_removal(events, late_removal("gone", reason=RemovalReason.UNDO, digest=digest),
                          access=STORED_JSON, stored=dict).outcome is RemoveOutcome.ABSENT


# -- every layout ---------------------------------------------------------------------------


async def _healed_on(factory: ServiceFactory) -> tuple[BaseSessionService, Session, str, str]:
    """A crashed session stored through the layout's own ADK service and healed by the
    wrapper (through the layout's one writer): the service, session, heal id, call id."""
    inner = await factory()
    history, call_id = crashed(time.time() - 600)
    session = await inner.create_session(app_name=APP, user_id=USER)
    for event in history.events:
        await inner.append_event(session, event)
    read = await HealingSessionService(inner).get_session(
        app_name=APP, user_id=USER, session_id=session.id)
    assert read is not None
    (heal_id,) = [e.id for e in read.events if (e.custom_metadata or {}).get(HEAL_METADATA_KEY)]
    return inner, session, heal_id, call_id


async def _append(inner: BaseSessionService, session: Session, *events: Event) -> None:
    """Appends events through ADK's own service, to the session as stored now."""
    fresh = await inner.get_session(app_name=APP, user_id=USER, session_id=session.id)
    assert fresh is not None
    for event in events:
        await inner.append_event(fresh, event)


def _ids(rows: list[dict[str, Any]]) -> list[str]:
    return [row["id"] for row in rows]


async def test_an_edited_heal_is_kept_by_late_results_resolve_and_undo(
        store_factory: ServiceFactory) -> None:
    """A heal with a support note appended stays, as edited, whoever would take it out: the
    wrapper after a late result, an operator's resolution (nothing written), an undo."""
    inner, session, heal_id, call_id = await _healed_on(store_factory)
    key = SessionKey.of(session)
    original = next(r for r in await stored_events(inner, key) if r["id"] == heal_id)
    await edit_event(inner, key, heal_id, with_note)
    store = store_for_service(inner, session)
    before = await stored_events(inner, key)
    heal, superseded = plan_resolution(before, key, call_id, {"charged": True}, by="alice",
                                       at=time.time())
    result = await store.resolve(heal, late_removal(
        heal_id, reason=RemovalReason.RESOLVED, key=key), ledger=False)
    assert (result.outcome, result.problem) == (
        ResolveOutcome.KEPT, "it was changed after it was written")
    assert superseded["id"] == heal_id and await stored_events(inner, key) == before
    undo = late_removal(heal_id, reason=RemovalReason.UNDO, digest=event_digest(original),
                        key=key)
    assert await store.remove([undo], ledger=False) == [RemoveOutcome.KEPT]

    await _append(inner, session, answer(call_id, timestamp=time.time()))
    read = await HealingSessionService(inner).get_session(
        app_name=APP, user_id=USER, session_id=session.id)
    assert read is not None and heal_id in [e.id for e in read.events]
    rows = await stored_events(inner, key)
    (kept,) = [r for r in rows if r["id"] == heal_id]
    assert kept["error_message"].endswith(NOTE)
    assert await store.remove([late_removal(heal_id, key=key)], ledger=False) == [
        RemoveOutcome.KEPT]


async def test_look_alikes_and_a_marker_naming_a_non_call_event_are_kept(
        store_factory: ServiceFactory) -> None:
    """After the real response, the wrapper takes our heal out but keeps a support row marked
    synthetic naming the user's message, a row wearing a copy of the heal's marker, and a row
    sealed by the builder whose marker names the user's message; so do resolve and undo."""
    inner, session, heal_id, call_id = await _healed_on(store_factory)
    key = SessionKey.of(session)
    (heal_row,) = [r for r in await stored_events(inner, key) if r["id"] == heal_id]
    marker = heal_row["custom_metadata"][HEAL_METADATA_KEY]
    now = time.time()
    _, built, _ = healed()
    forged = dataclasses.replace(built, key=key, plan=dataclasses.replace(
        built.plan, call_event_id="e-0001", event_id="forged-1", timestamp=now - 3,
        calls=tuple(dataclasses.replace(c, call_id=call_id) for c in built.plan.calls)))
    await _append(
        inner, session,
        answer(call_id, event_id="support-1", timestamp=now - 5, marker={
            "synthetic": True, "call_event_id": "e-0001", "call_ids": [call_id]}),
        answer(call_id, event_id="support-2", timestamp=now - 4, marker=dict(marker)),
        forged.event, answer(call_id, timestamp=now - 2))
    store = store_for_service(inner, session)
    looks = {"support-1": "e-0001", "support-2": "e-0002", "forged-1": "e-0001"}
    for event_id, named in looks.items():
        for reason in (RemovalReason.LATE_RESULT, RemovalReason.RESOLVED):
            assert await store.remove([late_removal(event_id, named, reason=reason, key=key)],
                                      ledger=False) == [RemoveOutcome.KEPT]
        row = next(r for r in await stored_events(inner, key) if r["id"] == event_id)
        undo = late_removal(event_id, named, reason=RemovalReason.UNDO, key=key,
                            digest=event_digest(row))
        assert await store.remove([undo], ledger=False) == [RemoveOutcome.KEPT]

    read = await HealingSessionService(inner).get_session(
        app_name=APP, user_id=USER, session_id=session.id)
    assert read is not None
    assert _ids(await stored_events(inner, key)) == [
        "e-0001", "e-0002", "e-0003", "support-1", "support-2", "forged-1", "late-1"]


async def test_a_genuine_unchanged_heal_is_still_taken_out(
        store_factory: ServiceFactory) -> None:
    """Unchanged, the heal goes: by an undo holding its digest, by an operator's resolution
    (written in its place), and by the wrapper once a real response supersedes it."""
    inner, session, heal_id, call_id = await _healed_on(store_factory)
    key = SessionKey.of(session)
    store = store_for_service(inner, session)
    (row,) = [r for r in await stored_events(inner, key) if r["id"] == heal_id]
    undo = late_removal(heal_id, reason=RemovalReason.UNDO, digest=event_digest(row), key=key)
    assert await store.remove([undo], ledger=False) == [RemoveOutcome.REMOVED]
    assert heal_id not in _ids(await stored_events(inner, key))

    read = await HealingSessionService(inner).get_session(
        app_name=APP, user_id=USER, session_id=session.id)
    assert read is not None
    rows = await stored_events(inner, key)
    assert heal_id in _ids(rows)  # healed again
    heal, _ = plan_resolution(rows, key, call_id, {"charged": False}, by="bob", at=time.time())
    result = await store.resolve(heal, late_removal(
        heal_id, reason=RemovalReason.RESOLVED, key=key), ledger=False)
    assert result.outcome is ResolveOutcome.WRITTEN
    assert _ids(await stored_events(inner, key)) == ["e-0001", "e-0002", heal.event_id, "e-0003"]

    await _append(inner, session, answer(call_id, timestamp=time.time()))
    read = await HealingSessionService(inner).get_session(
        app_name=APP, user_id=USER, session_id=session.id)
    assert read is not None
    assert _ids(await stored_events(inner, key)) == ["e-0001", "e-0002", "e-0003", "late-1"]
