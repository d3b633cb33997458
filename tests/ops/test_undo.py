"""repair --undo RUN_ID on every layout: the run's rows out, recorded, idempotent, killable."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import re
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest
import redis.asyncio as redis_asyncio
from adk_tables import change_one_heal, event_rows
from cli_runner import assert_one_line_error, cli
from conftest import close_redis
from google.adk.integrations.redis import RedisSessionService, RedisSessionServiceConfig
from healed_rows import KEY, healed
from paths import CHILDREN
from servers import REDIS_URL, temporary_redis_prefix
from stores import (
    APP,
    USER,
    Store,
    adk_store_fixture,  # noqa: F401  (the adk_store fixture)
    crashed_histories,
    fill,
    heal_ledger_at,
    make_store,
    snapshot,
)

from adk_session_heal.core.event_access import STORED_JSON
from adk_session_heal.core.heal_record import HealRecord, HealTrigger
from adk_session_heal.core.healing import event_digest
from adk_session_heal.core.session_key import SessionKey
from adk_session_heal.ops.undo import plan_undo
from adk_session_heal.store.base import Removal, RemovalReason, RemoveOutcome, decide_removal
from adk_session_heal.store.urls import parse_store_url


def run_json(*args: str) -> dict[str, Any]:
    """Runs the CLI, checks it exits 0, returns its JSON document."""
    result = cli(*args, "--json")
    assert result.exit_code == 0, result.output
    document: dict[str, Any] = json.loads(result.stdout)
    assert document["version"] == 1
    return document


def runs_of(url: str) -> dict[str, dict[str, Any]]:
    """``history --runs``, by run id."""
    return {r["run_id"]: r for r in run_json("history", url, "--runs")["runs"]}


async def test_undo_takes_the_run_back_byte_for_byte_and_a_later_repair_heals_again(
        adk_store: Store) -> None:
    """After undo ADK's rows equal the pre-repair rows; the ledger records it; a rerun writes
    nothing; a later repair heals the same calls again as a new run."""
    await fill(adk_store, crashed_histories())
    assert cli("db", "upgrade", adk_store.url).exit_code == 0
    before = await event_rows(adk_store)
    repaired = run_json("repair", adk_store.url, "--yes")
    run_id, healed = repaired["run_id"], repaired["healed"]
    assert healed == 3 and len(run_id) == 32
    assert await event_rows(adk_store) != before
    listed = runs_of(adk_store.url)[run_id]
    assert (listed["run_kind"], listed["heals_written"], listed["heals_undone"]) == (
        "repair", 3, 0)
    assert listed["finished_at"] is not None and listed["host"]

    healed_state = await snapshot(adk_store)
    dry = run_json("repair", adk_store.url, "--undo", run_id, "--dry-run")
    assert dry["dry_run"] is True and len(dry["removals"]) == 3
    assert {r["outcome"] for r in dry["removals"]} == {None}
    assert await snapshot(adk_store) == healed_state

    undone = run_json("repair", adk_store.url, "--undo", run_id, "--yes")
    assert (undone["removed"], undone["kept"], undone["absent"]) == (3, 0, 0)
    assert await event_rows(adk_store) == before
    runs = runs_of(adk_store.url)
    assert runs[run_id]["heals_undone"] == 3
    undo_run = runs[undone["undo_run_id"]]
    assert (undo_run["run_kind"], undo_run["undoes"], undo_run["heals_removed"],
            undo_run["heals_kept"]) == ("undo", run_id, 3, 0)
    async with heal_ledger_at(adk_store.url) as ledger:
        removals = await ledger.removals()
        assert {(r.reason, r.detail, r.run_id) for r in removals} == {
            (RemovalReason.UNDO, (run_id,), undone["undo_run_id"])}

    after_undo = await snapshot(adk_store)
    again = cli("repair", adk_store.url, "--undo", run_id, "--yes")
    assert again.exit_code == 0 and "already undone" in again.output
    assert await snapshot(adk_store) == after_undo

    rerun = run_json("repair", adk_store.url, "--yes")
    assert rerun["healed"] == 3 and rerun["run_id"] != run_id
    assert runs_of(adk_store.url)[rerun["run_id"]]["heals_written"] == 3
    assert run_json("repair", adk_store.url, "--undo", rerun["run_id"], "--yes")["removed"] == 3
    assert await event_rows(adk_store) == before


async def test_a_heal_changed_after_the_run_is_kept_and_reported(adk_store: Store) -> None:
    """A heal row edited since the run is not the run's row any more: kept, reported, exit 3."""
    await fill(adk_store, crashed_histories())
    assert cli("db", "upgrade", adk_store.url).exit_code == 0
    run_id = run_json("repair", adk_store.url, "--yes")["run_id"]
    await change_one_heal(adk_store, "dead", "e-0002-heal")
    result = cli("repair", adk_store.url, "--undo", run_id, "--yes", "--json")
    assert result.exit_code == 3, result.output
    report = json.loads(result.stdout)
    assert (report["removed"], report["kept"]) == (2, 1)
    assert [(r["session_id"], r["synthetic_event_id"]) for r in report["removals"]
            if r["outcome"] == "kept"] == [("dead", "e-0002-heal")]
    assert "kept (changed since the run, or not ours): 1" in result.stderr
    rows = await event_rows(adk_store)
    assert "edited by hand" in str(rows["events"])


async def test_an_undo_killed_midway_is_finished_by_a_rerun(adk_store: Store) -> None:
    """SIGKILL after the first removal batch: the rerun takes out only the rest, exactly."""
    await fill(adk_store, crashed_histories())
    assert cli("db", "upgrade", adk_store.url).exit_code == 0
    before = await event_rows(adk_store)
    run_id = run_json("repair", adk_store.url, "--yes")["run_id"]
    killed = await asyncio.create_subprocess_exec(
        sys.executable, str(CHILDREN / "undo_kill.py"), adk_store.url, run_id,
        stderr=asyncio.subprocess.PIPE)
    _, stderr = await killed.communicate()
    assert killed.returncode == -9, stderr.decode()[-2000:]
    half = runs_of(adk_store.url)
    assert half[run_id]["heals_undone"] == 1
    (dead,) = [r for r in half.values() if r["run_kind"] == "undo"]
    assert dead["finished_at"] is None and dead["heals_removed"] == 1

    finished = run_json("repair", adk_store.url, "--undo", run_id, "--yes")
    assert (finished["removed"], finished["already_undone"], finished["absent"]) == (2, 1, 0)
    assert await event_rows(adk_store) == before
    assert runs_of(adk_store.url)[run_id]["heals_undone"] == 3


async def test_undo_and_repair_below_0004_refuse_in_one_line(tmp_path: Path) -> None:
    """A ledger below 0004 has no runs: repair and undo refuse, exit 2, nothing written."""
    async for store in make_store("db_sqlite", tmp_path):
        await fill(store, crashed_histories())
        assert cli("db", "upgrade", store.url, "--revision", "0003").exit_code == 0
        before = await snapshot(store)
        assert_one_line_error(cli("repair", store.url, "--yes"), "db upgrade")
        assert_one_line_error(cli("repair", store.url, "--undo", "0" * 32, "--yes"), "db upgrade")
        assert await snapshot(store) == before


async def test_an_unknown_or_undo_run_id_is_one_line(tmp_path: Path) -> None:
    """Undo names a repair run of this ledger, or says in one line that it cannot."""
    async for store in make_store("db_sqlite", tmp_path):
        await fill(store, crashed_histories())
        assert cli("db", "upgrade", store.url).exit_code == 0
        shown = cli("repair", store.url, "--yes", "--format", "table").stdout
        found = re.search(r"Run ([0-9a-f]{32}):", shown)
        assert found is not None, shown
        run_id = found[1]
        assert f"--undo {run_id}` takes it back" in shown
        before = await snapshot(store)
        assert_one_line_error(cli("repair", store.url, "--undo", "f" * 32, "--yes"),
                              "history", "--runs")
        assert await snapshot(store) == before
        undo_id = run_json("repair", store.url, "--undo", run_id, "--yes")["undo_run_id"]
        assert_one_line_error(cli("repair", store.url, "--undo", undo_id, "--yes"),
                              "only repair runs")
        runs = cli("history", store.url, "--runs", "--format", "tsv")
        assert runs.exit_code == 0
        header, *lines = runs.stdout.splitlines()
        assert header.split("\t")[:3] == ["kind", "run_id", "run_kind"] and len(lines) == 2
        *records, summary = [json.loads(line) for line in cli(
            "history", store.url, "--runs", "--format", "jsonl").stdout.splitlines()]
        assert [r["run_kind"] for r in records] == ["repair", "undo"]
        assert {r["version"] for r in records} == {1} and summary["runs"] == 2
        table = cli("history", store.url, "--runs", "--format", "table")
        assert table.exit_code == 0 and f"undo of {run_id}" in table.stdout
        assert "already undone" in cli("repair", store.url, "--undo", run_id, "--dry-run",
                                       "--format", "table").stdout
        assert_one_line_error(cli("history", store.url, "--runs", "--session", "dead"), "--runs")
        assert_one_line_error(cli("repair", store.url, "--undo", run_id, "--no-ledger", "--yes"),
                              "--undo")


def test_plan_undo_skips_what_an_undo_took_out_and_needs_the_digest() -> None:
    """Pure planning: one removal per heal not undone yet, each bound to its stored digest;
    the one removal rule then takes the row out only while that digest holds."""
    key = SessionKey("a", "u", "s")

    def record(event_id: str) -> HealRecord:
        return HealRecord("a", "u", "s", event_id, f"{event_id}-heal", "i", ("c",), ("t",),
                          "superseded", HealTrigger.REPAIR, 1.0, run_id="r1")

    planned = plan_undo([(record("e1"), "d1"), (record("e2"), None)], [(key, "e1-heal")],
                        undoes="r1", run_id="r2", at=5.0, by="me")
    assert [(r.event_id, r.digest, r.detail, r.run_id, r.reason) for r in planned] == [
        ("e2-heal", "", ("r1",), "r2", RemovalReason.UNDO)]
    events, heal, _ = healed()
    removal = Removal(KEY, heal.event_id, "e-0002", ("call-1",), RemovalReason.UNDO, 5.0, "me",
                      digest=event_digest(heal.data))

    def outcome(rows: list[dict[str, Any]], undo: Removal = removal) -> RemoveOutcome:
        return decide_removal(rows, undo, access=STORED_JSON, stored=dict).outcome

    reordered = [dict(reversed(list(e.items()))) for e in events]
    assert outcome(reordered) is RemoveOutcome.REMOVED  # JSONB reorders keys
    assert outcome([{**e, "author": "x"} if e["id"] == heal.event_id else e
                    for e in events]) is RemoveOutcome.KEPT
    no_digest = dataclasses.replace(removal, digest="")  # what plan_undo sets without one
    assert outcome(events, no_digest) is RemoveOutcome.KEPT


@pytest.fixture
async def redis_store() -> AsyncIterator[tuple[str, RedisSessionService, Any]]:
    """A fresh key prefix on the real Redis: its URL, an ADK service over it, a raw client."""
    async with temporary_redis_prefix() as prefix:
        service = RedisSessionService(RedisSessionServiceConfig(uri=REDIS_URL,
                                                                key_prefix=prefix))
        raw = redis_asyncio.from_url(REDIS_URL, decode_responses=True)
        try:
            yield f"{REDIS_URL}?key_prefix={quote(prefix, safe='')}", service, raw
        finally:
            await raw.aclose()
            await close_redis(service)


async def _redis_sessions(raw: Any, url: str) -> dict[str, str]:
    """Every session value of the prefix, as stored (bytes kept)."""
    prefix = parse_store_url(url).redis_key_prefix
    keys = [k async for k in raw.scan_iter(match=f"{prefix}*")]
    return {k: await raw.get(k) for k in sorted(keys)}


async def test_a_redis_heal_changed_after_the_run_is_kept(
        redis_store: tuple[str, RedisSessionService, Any]) -> None:
    """Redis: a heal edited inside its session value is kept and reported; the others go."""
    url, service, raw = redis_store
    for session_id, history in crashed_histories().items():
        session = await service.create_session(app_name=APP, user_id=USER,
                                               session_id=session_id)
        for event in history.events:
            await service.append_event(session, event)
    run_id = run_json("repair", url, "--yes")["run_id"]
    key = f"{parse_store_url(url).redis_key_prefix}{APP}:{USER}:dead"
    value = json.loads(await raw.get(key))
    (heal,) = [e for e in value["events"] if e["id"] == "e-0002-heal"]
    heal["error_message"] = "edited by hand"
    await raw.set(key, json.dumps(value))
    result = cli("repair", url, "--undo", run_id, "--yes", "--json")
    assert result.exit_code == 3, result.output
    report = json.loads(result.stdout)
    assert (report["removed"], report["kept"]) == (2, 1)
    assert "edited by hand" in await raw.get(key)


async def test_undo_on_redis_restores_every_value_and_survives_a_kill(
        redis_store: tuple[str, RedisSessionService, Any]) -> None:
    """Redis: undo (killed once midway, then rerun) leaves each session value as before repair."""
    url, service, raw = redis_store
    for session_id, history in crashed_histories().items():
        session = await service.create_session(app_name=APP, user_id=USER,
                                               session_id=session_id)
        for event in history.events:
            await service.append_event(session, event)
    before = await _redis_sessions(raw, url)
    run_id = run_json("repair", url, "--yes")["run_id"]
    assert await _redis_sessions(raw, url) != before
    killed = await asyncio.create_subprocess_exec(
        sys.executable, str(CHILDREN / "undo_kill.py"), url, run_id, stderr=asyncio.subprocess.PIPE)
    _, stderr = await killed.communicate()
    assert killed.returncode == -9, stderr.decode()[-2000:]
    finished = run_json("repair", url, "--undo", run_id, "--yes")
    assert (finished["removed"], finished["already_undone"]) == (2, 1)
    assert await _redis_sessions(raw, url) == before
    assert runs_of(url)[run_id]["heals_undone"] == 3
    again = cli("repair", url, "--undo", run_id, "--yes")
    assert again.exit_code == 0 and "already undone" in again.output
    rerun = run_json("repair", url, "--yes")
    assert rerun["healed"] == 3 and rerun["run_id"] != run_id
    assert run_json("repair", url, "--undo", rerun["run_id"], "--yes")["removed"] == 3
    assert await _redis_sessions(raw, url) == before
