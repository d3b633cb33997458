"""The heal ledger: idempotent records, history filters, and its use by the wrapper's API."""

from __future__ import annotations

from pathlib import Path

import pytest
from sqlalchemy.ext.asyncio import create_async_engine
from stores import (
    Store,
    adk_store_fixture,  # noqa: F401  (the adk_store fixture)
    crashed_histories,
    fill,
)

from adk_session_heal import migrate
from adk_session_heal.core.heal_record import HealRecord, HealTrigger
from adk_session_heal.errors import LedgerError
from adk_session_heal.ledger import SqlHealLedger
from adk_session_heal.runtime.service import HealLedger


def record(session: str, event: str = "e-0002", *, trigger: HealTrigger = HealTrigger.APPEND,
           at: float = 1.0) -> HealRecord:
    """A heal record of one call event."""
    return HealRecord(app_name="app", user_id="user", session_id=session, call_event_id=event,
                      synthetic_event_id=f"{event}-heal", invocation_id="inv-1",
                      call_ids=("call-1", "call-2"), tool_names=("a", "b"),
                      reason="superseded", trigger=trigger, healed_at=at)


async def test_record_is_idempotent_and_history_filters(adk_store: Store) -> None:
    """Recording the same heal twice keeps one row; history reads back exact records."""
    await fill(adk_store, {"s": crashed_histories()["dead"]})
    await migrate.upgrade(adk_store.url)
    ledger = SqlHealLedger.from_url(adk_store.url)
    try:
        first, second = record("s", at=10.5), record("t", "e-0009", at=11.25,
                                                      trigger=HealTrigger.GET_SESSION)
        await ledger.record([first, second])
        await ledger.record([first, record("s", at=99.0, trigger=HealTrigger.REPAIR)])
        await ledger.record([])
        assert await ledger.history() == [first, second]
        assert await ledger.history(session_id="t") == [second]
        assert await ledger.history(user_id="nobody") == []
        assert await ledger.history(limit=1) == [first]
    finally:
        await ledger.close()


async def test_record_inside_the_callers_transaction(tmp_path: Path) -> None:
    """With conn=, records commit or roll back with the caller's transaction."""
    url = f"sqlite+aiosqlite:///{tmp_path / 'db.db'}"
    await fill(Store("db_sqlite", url), {"s": crashed_histories()["dead"]})
    await migrate.upgrade(url)
    engine = create_async_engine(url)
    ledger = SqlHealLedger(engine)
    try:
        with pytest.raises(RuntimeError):
            async with engine.begin() as conn:
                await ledger.record([record("s")], conn=conn)
                raise RuntimeError("the heal write failed")
        assert await ledger.history() == []
        async with engine.begin() as conn:
            await ledger.record([record("s")], conn=conn)
        assert len(await ledger.history()) == 1
    finally:
        await ledger.close()
        await engine.dispose()


async def test_missing_ledger_says_how_to_install_it(tmp_path: Path) -> None:
    """Without db upgrade, record and history raise LedgerError naming the command."""
    url = f"sqlite+aiosqlite:///{tmp_path / 'db.db'}"
    await fill(Store("db_sqlite", url), {"s": crashed_histories()["dead"]})
    ledger = SqlHealLedger.from_url(url)
    try:
        with pytest.raises(LedgerError, match="db upgrade"):
            await ledger.record([record("s")])
        with pytest.raises(LedgerError, match="db upgrade"):
            await ledger.history()
        assert await ledger.revision() is None
    finally:
        await ledger.close()


def test_sql_ledger_satisfies_the_wrappers_protocol() -> None:
    """SqlHealLedger is what HealingSessionService(ledger=...) expects."""
    ledger: HealLedger = SqlHealLedger(create_async_engine("sqlite+aiosqlite://"))
    assert callable(ledger.record)


async def test_wrapper_records_and_repair_does_not_heal_twice(adk_store: Store) -> None:
    """A heal written by the wrapper is in the ledger once, and repair then heals nothing."""
    from adk_session_heal.ops.repair import repair
    from adk_session_heal.runtime.service import HealingSessionService

    await fill(adk_store, {"dead": crashed_histories()["dead"]})
    await migrate.upgrade(adk_store.url)
    ledger = SqlHealLedger.from_url(adk_store.url)
    inner = adk_store.service()
    try:
        service = HealingSessionService(inner, ledger=ledger)
        session = await service.get_session(app_name="app", user_id="user", session_id="dead")
        assert session is not None
        (healed,) = await ledger.history()
        assert healed.trigger is HealTrigger.GET_SESSION
        assert healed.synthetic_event_id == "e-0002-heal"
        report = await repair(adk_store.url)
        assert report.heals == [] and not report.scan.needs_healing
        assert len(await ledger.history()) == 1
    finally:
        closer = getattr(inner, "close", None)
        if closer:
            await closer()
        await ledger.close()
