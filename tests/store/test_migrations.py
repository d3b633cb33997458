"""Our Alembic migrations: up, down, up again on every backend, beside a host's Alembic."""

from __future__ import annotations

import asyncio
import json
import random
import signal
import sqlite3
import subprocess
import sys
from contextlib import closing
from pathlib import Path
from typing import Any

import pytest
from cli_runner import assert_one_line_error, cli
from paths import CHILDREN
from sqlalchemy import inspect, make_url, text
from sqlalchemy.ext.asyncio import create_async_engine
from stores import (
    Store,
    adk_store_fixture,  # noqa: F401  (the adk_store fixture)
    crashed_histories,
    fill,
    make_store,
    snapshot,
    table_names,
)

import adk_session_heal
from adk_session_heal import migrate


async def _host_alembic_version(store: Store, value: str | None = None) -> str:
    """Creates (with ``value``) or reads a host application's own alembic_version row."""
    engine = create_async_engine(store.url if store.sqlite_path is None
                                 else f"sqlite+aiosqlite:///{store.sqlite_path}")
    try:
        async with engine.begin() as conn:
            if value is not None:
                await conn.execute(text(
                    "CREATE TABLE alembic_version (version_num VARCHAR(32) NOT NULL)"))
                await conn.execute(text("INSERT INTO alembic_version VALUES (:v)"), {"v": value})
            result = await conn.execute(text("SELECT version_num FROM alembic_version"))
            return str(result.scalar_one())
    finally:
        await engine.dispose()


@pytest.mark.slow
async def test_upgrade_downgrade_upgrade(adk_store: Store) -> None:
    """The ledger migrates up, down to base (table gone) and up again; the host's table stays."""
    await fill(adk_store, {"ok": crashed_histories()["ok"]})
    await _host_alembic_version(adk_store, "host_rev_42")
    adk_tables = await table_names(adk_store)
    assert await migrate.current(adk_store.url) is None
    assert await migrate.upgrade(adk_store.url) == migrate.head_revision() == "0006"
    assert await migrate.current(adk_store.url) == "0006"
    assert {"adk_session_heal_ledger", "adk_session_heal_alembic_version",
            "adk_session_heal_tool_runs", "adk_session_heal_removals", "adk_session_heal_runs",
            "adk_session_heal_watermarks", "adk_session_heal_unsettled",
            "adk_session_heal_resolutions"} <= await table_names(adk_store)
    assert await migrate.upgrade(adk_store.url) == "0006"  # a second upgrade is a no-op
    assert await migrate.downgrade(adk_store.url, "0005") == "0005"
    assert "adk_session_heal_resolutions" not in await table_names(adk_store)
    assert "adk_session_heal_watermarks" in await table_names(adk_store)
    assert await migrate.upgrade(adk_store.url) == "0006"  # 0006's own down and up
    assert await migrate.downgrade(adk_store.url, "0004") == "0004"
    assert "adk_session_heal_watermarks" not in await table_names(adk_store)
    assert "adk_session_heal_unsettled" not in await table_names(adk_store)
    assert await migrate.downgrade(adk_store.url, "0003") == "0003"
    assert "adk_session_heal_runs" not in await table_names(adk_store)
    assert await migrate.upgrade(adk_store.url) == "0006"  # 0004's to 0006's own down and up
    assert await migrate.downgrade(adk_store.url, "0002") == "0002"
    assert "adk_session_heal_removals" not in await table_names(adk_store)
    assert "adk_session_heal_tool_runs" in await table_names(adk_store)
    assert await migrate.downgrade(adk_store.url, "0001") == "0001"
    assert "adk_session_heal_tool_runs" not in await table_names(adk_store)
    assert "adk_session_heal_ledger" in await table_names(adk_store)
    assert await migrate.downgrade(adk_store.url, "base") is None
    assert "adk_session_heal_ledger" not in await table_names(adk_store)
    assert await migrate.upgrade(adk_store.url) == "0006"
    assert await _host_alembic_version(adk_store) == "host_rev_42"
    assert adk_tables <= await table_names(adk_store)


async def test_db_current_is_read_only(adk_store: Store) -> None:
    """db current on a database without the ledger creates nothing."""
    await fill(adk_store, {"ok": crashed_histories()["ok"]})
    before = await table_names(adk_store)
    assert await migrate.current(adk_store.url) is None
    assert await table_names(adk_store) == before


def test_migrations_ship_inside_the_package() -> None:
    """The Alembic scripts are found inside the imported package (CI installs a wheel, so
    this also shows the wheel carries them)."""
    directory = migrate.migrations_dir()
    assert directory.is_relative_to(Path(adk_session_heal.__file__).parent)
    assert (directory / "env.py").is_file() and (directory / "script.py.mako").is_file()
    assert (directory / "versions" / "0001_heal_ledger.py").is_file()


def test_adk_sqlite_file_stays_adk_sqlite(tmp_path: Path) -> None:
    """Upgrading a SqliteSessionService file adds only our tables (no ADK metadata)."""
    path = tmp_path / "adk.db"
    store = Store("adk_sqlite", f"sqlite:///{path}")
    asyncio.run(fill(store, {"ok": crashed_histories()["ok"]}))
    asyncio.run(migrate.upgrade(store.url))
    with closing(sqlite3.connect(path)) as db, db:
        tables = {r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    assert tables == {"app_states", "user_states", "sessions", "events",
                      "adk_session_heal_ledger", "adk_session_heal_alembic_version",
                      "adk_session_heal_tool_runs", "adk_session_heal_removals",
                      "adk_session_heal_runs", "adk_session_heal_watermarks",
                      "adk_session_heal_unsettled", "adk_session_heal_resolutions"}


def test_the_head_revision_known_without_alembic_is_the_scripts_head() -> None:
    """LEDGER_HEAD_REVISION (read where Alembic is not loaded) names the newest migration script."""
    from adk_session_heal.store.ledger.revisions import LEDGER_HEAD_REVISION

    assert migrate.head_revision() == LEDGER_HEAD_REVISION


def test_the_ordered_revision_list_is_the_scripts_order() -> None:
    """The one list every feature check reads (store/ledger/revisions.py) is the Alembic
    scripts' chain, oldest first."""
    from adk_session_heal.store.ledger.revisions import REVISIONS, Feature, has

    assert list(REVISIONS) == [r.id for r in reversed(migrate.revisions())]
    assert {f.value for f in Feature} <= set(REVISIONS)
    for feature in Feature:
        assert has(REVISIONS[-1], feature) and not has(None, feature)
        assert [has(r, feature) for r in REVISIONS] == [r >= feature.value for r in REVISIONS]


# ---- the db commands: --sql, downgrade, current/history --json (issue 14, point 5) ----


def _client(store: Store) -> list[str]:
    """Returns the engine's own command-line client, reading SQL from stdin, as a DBA runs it."""
    if store.sqlite_path is not None:
        return ["sqlite3", "-bail", str(store.sqlite_path)]
    url = make_url(store.url)
    if store.kind == "postgres":
        return ["psql", "-X", "-q", "-v", "ON_ERROR_STOP=1", "-h", str(url.host), "-p",
                str(url.port or 5432), "-U", str(url.username), "-d", str(url.database)]
    return ["mariadb", "-h", str(url.host), "-P", str(url.port or 3306), "-u",
            str(url.username), str(url.database)]


def run_sql(store: Store, script: str) -> None:
    """Executes a printed SQL script on the store with the engine's own client."""
    child = subprocess.run(_client(store), input=script, capture_output=True, text=True,
                           timeout=60, check=False)
    assert child.returncode == 0 and "ERROR" not in child.stderr, child.stderr


async def ledger_schema(store: Store) -> dict[str, Any]:
    """Our tables as the database describes them (columns, keys, DDL) and the version rows."""
    if store.sqlite_path is not None:
        with closing(sqlite3.connect(store.sqlite_path)) as db, db:
            ddl = sorted((kind, name, table, " ".join((sql or "").split()))  # tabs vs spaces
                         for kind, name, table, sql in db.execute(
                "SELECT type, name, tbl_name, sql FROM sqlite_master "
                "WHERE tbl_name LIKE 'adk_session_heal%'"))
    engine = create_async_engine(store.url if store.sqlite_path is None
                                 else f"sqlite+aiosqlite:///{store.sqlite_path}")

    def describe(sync: Any) -> dict[str, Any]:
        inspector = inspect(sync)
        found: dict[str, Any] = {}
        for table in sorted(inspector.get_table_names()):
            if not table.startswith("adk_session_heal"):
                continue
            found[table] = {
                "columns": [{key: str(value) for key, value in column.items()}
                            for column in inspector.get_columns(table)],
                "primary_key": inspector.get_pk_constraint(table),
                "unique": sorted(inspector.get_unique_constraints(table), key=str),
                "indexes": sorted(inspector.get_indexes(table), key=str),
            }
            if store.kind == "mariadb":
                found[table]["ddl"] = sync.execute(text(f"SHOW CREATE TABLE {table}")).one()[1]
        version = "adk_session_heal_alembic_version"
        found["version_rows"] = (sorted(sync.execute(text(f"SELECT * FROM {version}")).all())
                                 if version in found else None)
        return found

    try:
        async with engine.connect() as conn:
            described = await conn.run_sync(describe)
    finally:
        await engine.dispose()
    if store.sqlite_path is not None:
        described["sqlite_master"] = ddl
    return described


async def events_rows(store: Store) -> list[str]:
    """Every stored event row, as text (heals included)."""
    engine = create_async_engine(store.url if store.sqlite_path is None
                                 else f"sqlite+aiosqlite:///{store.sqlite_path}")
    try:
        async with engine.connect() as conn:
            return sorted(repr(tuple(r)) for r in (await conn.execute(
                text("SELECT * FROM events"))).all())
    finally:
        await engine.dispose()


async def test_upgrade_sql_writes_nothing_and_builds_what_db_upgrade_builds(
        adk_store: Store) -> None:
    """db upgrade --sql prints the engine's CREATE TABLEs and writes nothing; run by the engine's
    own client, that SQL leaves exactly the tables and version row that db upgrade leaves."""
    await fill(adk_store, {"ok": crashed_histories()["ok"]})
    before = await snapshot(adk_store)
    printed = cli("db", "upgrade", adk_store.url, "--sql")
    assert printed.exit_code == 0, printed.output
    assert "CREATE TABLE adk_session_heal_ledger (" in printed.stdout
    assert "CREATE TABLE adk_session_heal_alembic_version (" in printed.stdout
    assert "CREATE TABLE adk_session_heal_tool_runs (" in printed.stdout
    assert "INSERT INTO adk_session_heal_alembic_version (version_num) VALUES ('0001')" in (
        printed.stdout)
    assert "UPDATE adk_session_heal_alembic_version SET version_num='0002'" in printed.stdout
    assert "CREATE TABLE adk_session_heal_removals (" in printed.stdout
    assert "UPDATE adk_session_heal_alembic_version SET version_num='0003'" in printed.stdout
    assert "CREATE TABLE adk_session_heal_runs (" in printed.stdout
    assert "UPDATE adk_session_heal_alembic_version SET version_num='0004'" in printed.stdout
    assert "CREATE TABLE adk_session_heal_watermarks (" in printed.stdout
    assert "UPDATE adk_session_heal_alembic_version SET version_num='0005'" in printed.stdout
    assert "CREATE TABLE adk_session_heal_resolutions (" in printed.stdout
    assert "UPDATE adk_session_heal_alembic_version SET version_num='0006'" in printed.stdout
    quoted = {"postgres": " trigger VARCHAR", "mariadb": "`trigger` VARCHAR"}
    assert quoted.get(adk_store.kind, '"trigger" VARCHAR') in printed.stdout  # the dialect's SQL
    assert await snapshot(adk_store) == before  # SQLite: the same bytes
    run_sql(adk_store, printed.stdout)
    assert await migrate.current(adk_store.url) == "0006"
    from_script = await ledger_schema(adk_store)
    assert cli("db", "downgrade", adk_store.url, "base", "--yes").exit_code == 0
    assert cli("db", "upgrade", adk_store.url).exit_code == 0
    assert await ledger_schema(adk_store) == from_script
    assert from_script["version_rows"] == [("0006",)]


async def test_downgrade_sql_prints_drops_and_writes_nothing(adk_store: Store) -> None:
    """db downgrade base --sql prints the DROPs and writes nothing; run by the engine's client,
    it leaves none of our tables, and the upgrade script then runs again."""
    await fill(adk_store, {"ok": crashed_histories()["ok"]})
    assert cli("db", "upgrade", adk_store.url).exit_code == 0
    before = await snapshot(adk_store)
    printed = cli("db", "downgrade", adk_store.url, "base", "--sql")
    assert printed.exit_code == 0, printed.output
    assert "DROP TABLE adk_session_heal_ledger;" in printed.stdout
    assert "DROP TABLE adk_session_heal_tool_runs;" in printed.stdout
    assert "DROP TABLE adk_session_heal_removals;" in printed.stdout
    assert "DROP TABLE adk_session_heal_runs;" in printed.stdout
    assert "DROP TABLE adk_session_heal_unsettled;" in printed.stdout
    assert "DROP TABLE adk_session_heal_resolutions;" in printed.stdout
    assert "DROP TABLE adk_session_heal_alembic_version;" in printed.stdout
    assert await snapshot(adk_store) == before
    run_sql(adk_store, printed.stdout)
    assert await migrate.current(adk_store.url) is None
    assert not {t for t in await table_names(adk_store) if t.startswith("adk_session_heal")}
    run_sql(adk_store, cli("db", "upgrade", adk_store.url, "--sql").stdout)
    assert await migrate.current(adk_store.url) == "0006"


async def test_downgrade_to_base_drops_only_our_tables_then_upgrade_again(
        adk_store: Store) -> None:
    """db downgrade base --yes drops our seven tables only; the heals written into sessions stay,
    db upgrade recreates an empty ledger, and nothing is healed twice."""
    await fill(adk_store, crashed_histories())
    assert cli("db", "upgrade", adk_store.url).exit_code == 0
    assert cli("repair", adk_store.url, "--yes").exit_code == 0
    assert json.loads(cli("history", adk_store.url, "--json").stdout)["heals"]
    healed = await events_rows(adk_store)
    down = cli("db", "downgrade", adk_store.url, "base", "--yes", "--json")
    assert down.exit_code == 0, down.output
    assert json.loads(down.stdout)["revision"] is None
    assert not {t for t in await table_names(adk_store) if t.startswith("adk_session_heal")}
    assert await events_rows(adk_store) == healed
    assert "revision none" in cli("db", "current", adk_store.url).stdout
    assert "revision 0006" in cli("db", "upgrade", adk_store.url).stdout
    assert json.loads(cli("history", adk_store.url, "--json").stdout)["heals"] == []
    assert json.loads(cli("repair", adk_store.url, "--yes", "--json").stdout)["healed"] == 0
    assert await events_rows(adk_store) == healed


@pytest.mark.parametrize("url", [
    "postgresql+asyncpg://postgres:hunter2@127.0.0.1:5432/heal_no_such_database",
    "postgresql+asyncpg://postgres:hunter2@127.0.0.1:1/nothing_listens_here",
    "mysql+aiomysql://root:hunter2@127.0.0.1:1/x",
    "mariadb+asyncmy://root:hunter2@127.0.0.1:1/x",
])
@pytest.mark.parametrize("command", [["upgrade"], ["downgrade", "base"]])
def test_sql_connects_to_nothing(url: str, command: list[str]) -> None:
    """--sql prints SQL for a database that does not exist or a port nothing listens on."""
    printed = cli("db", command[0], url, *command[1:], "--sql")
    assert printed.exit_code == 0, printed.output
    assert ("CREATE TABLE" if command[0] == "upgrade" else "DROP TABLE") in printed.stdout
    document = json.loads(cli("db", command[0], url, *command[1:], "--sql", "--json").stdout)
    assert document["sql"] == printed.stdout
    assert document["dialect"] == url.split("+")[0]
    assert document["revision"] == ("0006" if command[0] == "upgrade" else None)
    assert "hunter2" not in json.dumps(document)


def test_sql_for_every_engine_is_its_own() -> None:
    """PostgreSQL's script is one transaction with SERIAL, MySQL's uses AUTO_INCREMENT and no
    BEGIN (its DDL commits), SQLite's is one transaction too."""
    pg = migrate.sql_script("postgresql+asyncpg://u@h/db", "upgrade", "head")
    my = migrate.sql_script("mysql+aiomysql://u@h/db", "upgrade", "head")
    assert pg.startswith("BEGIN;") and "COMMIT;" in pg and "id SERIAL NOT NULL" in pg
    assert "BEGIN" not in my and "id INTEGER NOT NULL AUTO_INCREMENT" in my


def test_sqlite_sql_is_one_transaction(tmp_path: Path) -> None:
    """SQLite's script runs in one transaction, and the file is not opened to print it."""
    path = tmp_path / "sessions.db"
    path.write_bytes(b"not even a database")
    script = migrate.sql_script(f"sqlite+aiosqlite:///{path}", "upgrade", "head")
    assert script.startswith("BEGIN;") and script.rstrip().endswith("COMMIT;")
    assert path.read_bytes() == b"not even a database"


async def test_current_and_history_json(tmp_path: Path) -> None:
    """db current --json and db history --json parse, carry version 1, and mark head and current."""
    async for store in make_store("db_sqlite", tmp_path):
        await fill(store, {"ok": crashed_histories()["ok"]})
        offline = json.loads(cli("db", "history", "--json").stdout)
        assert offline["version"] == offline["format"] == 1 and offline["command"] == "db history"
        assert offline["url"] is None and offline["current"] is None
        assert [(r["id"], r["head"], r["current"]) for r in offline["revisions"]] == [
            ("0006", True, None), ("0005", False, None), ("0004", False, None),
            ("0003", False, None), ("0002", False, None), ("0001", False, None)]
        assert offline["head"] == "0006" and offline["revisions"][5]["down_revision"] is None
        assert offline["revisions"][5]["message"].startswith("The heal ledger")
        assert offline["revisions"][4]["message"].startswith("The tool-run ledger")
        assert offline["revisions"][3]["message"].startswith("The removals ledger")
        assert offline["revisions"][2]["message"].startswith("Repair runs")
        assert offline["revisions"][1]["message"].startswith("Incremental scans")
        assert offline["revisions"][0]["message"].startswith("Resolutions")
        before = json.loads(cli("db", "current", store.url, "--json").stdout)
        assert before == {"version": 1, "format": 1, "command": "db current", "url": store.url,
                          "dialect": "sqlite", "revision": None, "head": "0006",
                          "up_to_date": False}
        assert json.loads(cli("db", "history", store.url, "--json").stdout)["revisions"][0][
            "current"] is False
        up = json.loads(cli("db", "upgrade", store.url, "--json").stdout)
        assert up == {"version": 1, "format": 1, "command": "db upgrade", "url": store.url,
                      "dialect": "sqlite", "target": "head", "revision": "0006",
                      "head": "0006", "sql": None}
        after = json.loads(cli("db", "current", store.url, "--json").stdout)
        assert after["revision"] == "0006" and after["up_to_date"] is True
        history = json.loads(cli("db", "history", store.url, "--json").stdout)
        assert history["current"] == "0006" and history["revisions"][0]["current"] is True
        assert "(head) (current)" in cli("db", "history", store.url).stdout


@pytest.mark.parametrize("args", [
    ["upgrade", "{url}", "--revision", "nope"],
    ["upgrade", "{url}", "--revision", "nope", "--sql"],
    ["upgrade", "{url}", "--revision", "0001:base", "--sql"],
    ["downgrade", "{url}", "nope", "--yes"],
    ["downgrade", "{url}", "nope", "--sql"],
    ["downgrade", "{url}", "0001", "--yes"],  # above the current revision (base)
], ids=" ".join)
async def test_bad_revision_is_one_line(args: list[str], tmp_path: Path) -> None:
    """An unknown revision, a range the wrong way, or a downgrade upwards: one line, exit 2,
    nothing written."""
    async for store in make_store("db_sqlite", tmp_path):
        await fill(store, {"ok": crashed_histories()["ok"]})
        before = await snapshot(store)
        assert_one_line_error(cli("db", *(a.format(url=store.url) for a in args)), "revision")
        assert await snapshot(store) == before


async def test_downgrade_needs_yes_off_a_terminal(tmp_path: Path) -> None:
    """Without a terminal, db downgrade refuses to drop the ledger unless --yes (or --sql)."""
    async for store in make_store("db_sqlite", tmp_path):
        await fill(store, {"ok": crashed_histories()["ok"]})
        assert cli("db", "upgrade", store.url).exit_code == 0
        before = await snapshot(store)
        assert_one_line_error(cli("db", "downgrade", store.url, "base"), "--yes", "--sql")
        assert await snapshot(store) == before


@pytest.mark.parametrize("command", [["upgrade"], ["upgrade", "--sql"],
                                     ["downgrade", "base", "--yes"],
                                     ["downgrade", "base", "--sql"]])
def test_redis_url_is_refused_alike_without_connecting(command: list[str]) -> None:
    """Every db command that migrates, --sql or not, refuses a Redis URL with the same line,
    before connecting (nothing listens on port 1); `db current` reports the Redis ledger's
    revision (tests/store/test_redis_store.py)."""
    result = cli("db", command[0], "redis://127.0.0.1:1/0", *command[1:])
    assert_one_line_error(result, "Redis session store", "needs no `db upgrade`")


async def test_a_no_op_migration_writes_nothing(adk_store: Store) -> None:
    """On a database without the ledger, downgrade to base and upgrade to base change nothing
    (Alembic would create its version table first, and that DDL commits on SQLite and MariaDB)."""
    await fill(adk_store, {"ok": crashed_histories()["ok"]})
    before = await snapshot(adk_store)
    assert "revision none" in cli("db", "downgrade", adk_store.url, "base", "--yes").stdout
    assert "revision none" in cli("db", "upgrade", adk_store.url, "--revision", "base").stdout
    assert_one_line_error(cli("db", "downgrade", adk_store.url, "0001", "--yes"), "wrong way")
    assert await snapshot(adk_store) == before


def test_a_bad_revision_is_refused_before_connecting() -> None:
    """An unknown revision is named as such even where no server listens."""
    url = "postgresql+asyncpg://postgres:hunter2@127.0.0.1:1/x"
    assert_one_line_error(cli("db", "upgrade", url, "--revision", "nope"), "'nope'", "0001")
    assert_one_line_error(cli("db", "downgrade", url, "nope", "--yes"), "'nope'", "0001")


async def test_a_revision_from_a_newer_release_is_one_line(tmp_path: Path) -> None:
    """A ledger at a revision this release does not know: upgrade and downgrade say so in one
    line, exit 2, and write nothing."""
    async for store in make_store("db_sqlite", tmp_path):
        await fill(store, {"ok": crashed_histories()["ok"]})
        assert cli("db", "upgrade", store.url).exit_code == 0
        assert store.sqlite_path is not None
        with closing(sqlite3.connect(store.sqlite_path)) as db, db:
            db.execute("UPDATE adk_session_heal_alembic_version SET version_num = '0099'")
        before = await snapshot(store)
        assert_one_line_error(cli("db", "upgrade", store.url), "'0099'", "newer")
        assert_one_line_error(cli("db", "downgrade", store.url, "base", "--yes"), "'0099'")
        assert await snapshot(store) == before


async def test_a_ledger_left_at_0001_keeps_recording_heals_until_upgraded(adk_store: Store) -> None:
    """At 0001 the ledger keeps its heals readable and repair (a run: 0004) asks for db upgrade,
    as the tool-run ledger does; the wrapper's heals are still recorded there."""
    from adk_session_heal.core.heal_record import HealRecord, HealTrigger
    from adk_session_heal.errors import LedgerError
    from adk_session_heal.ledger import SqlHealLedger
    from adk_session_heal.store.ledger.tool_run_sql import SqlToolRunLedger

    await fill(adk_store, crashed_histories())
    assert await migrate.upgrade(adk_store.url, "0001") == "0001"
    assert_one_line_error(cli("repair", adk_store.url, "--yes"), "db upgrade")
    heals = SqlHealLedger.from_url(adk_store.url)
    try:
        await heals.record([HealRecord("app", "user", "dead", "e-0002", "e-0002-heal", "inv",
                                       ("c",), ("t",), "superseded", HealTrigger.GET_SESSION,
                                       1.0)])
    finally:
        await heals.close()
    assert json.loads(cli("history", adk_store.url, "--json").stdout)["heals"]
    runs = SqlToolRunLedger.from_url(adk_store.url)
    try:
        with pytest.raises(LedgerError, match="db upgrade"):
            await runs.check()
        assert cli("db", "upgrade", adk_store.url).exit_code == 0
        await runs.check()
    finally:
        await runs.close()
    assert "adk_session_heal_tool_runs" in await table_names(adk_store)


# ---- migrations survive real use, failures and kills (issue 28, point 6) ----

VERSION_TABLE = "adk_session_heal_alembic_version"
OUR_TABLES: dict[str | None, set[str]] = {None: set()}
for _revision, _added in (
        ("0001", {"adk_session_heal_ledger", VERSION_TABLE}),
        ("0002", {"adk_session_heal_tool_runs"}),
        ("0003", {"adk_session_heal_removals"}),
        ("0004", {"adk_session_heal_runs"}),
        ("0005", {"adk_session_heal_watermarks", "adk_session_heal_unsettled"}),
        ("0006", {"adk_session_heal_resolutions"})):
    OUR_TABLES[_revision] = OUR_TABLES[list(OUR_TABLES)[-1]] | _added
"""Our tables at each revision, written out here independently of the package's own map."""

HEAL_KEY = ("app_name", "user_id", "session_id", "synthetic_event_id")
LEDGER_0003_COLUMNS = ("id", *HEAL_KEY, "call_event_id", "invocation_id", "call_ids",
                       "tool_names", "reason", "trigger", "healed_at")


async def ours(store: Store) -> set[str]:
    """Our tables in the store (anything named adk_session_heal*)."""
    return {t for t in await table_names(store) if t.startswith("adk_session_heal")}


async def ledger_rows(store: Store) -> list[dict[str, Any]]:
    """Every heal-ledger row, oldest first, as the database holds it."""
    engine = create_async_engine(store.url if store.sqlite_path is None
                                 else f"sqlite+aiosqlite:///{store.sqlite_path}")
    try:
        async with engine.connect() as conn:
            result = await conn.execute(text("SELECT * FROM adk_session_heal_ledger ORDER BY id"))
            return [dict(row._mapping) for row in result]
    finally:
        await engine.dispose()


def run_id(*args: str) -> str:
    """Runs a repair command with --json and returns its run id."""
    result = cli(*args, "--json")
    assert result.exit_code == 0, result.output
    return str(json.loads(result.stdout)["run_id"])


def real_use(store: Store, *, app: str = "app") -> None:
    """The README's operator commands: repair, undo it, repair again (the same heals, recorded
    by two runs), incremental scan and repair, and an operator's resolution."""
    url = store.url
    assert cli("db", "upgrade", url).exit_code == 0
    first = run_id("repair", url, "--app", app, "--yes")
    assert cli("repair", url, "--undo", first, "--yes").exit_code == 0
    run_id("repair", url, "--app", app, "--yes")
    assert cli("scan", url, "--incremental").exit_code in (0, 1)
    assert cli("repair", url, "--incremental", "--yes").exit_code == 0
    resolved = cli("review", "resolve", "call-1", url, "--app", app, "--session", "dead",
                   "--result", '{"temperature": 21}', "--by", "alice", "--yes")
    assert resolved.exit_code == 0, resolved.output


@pytest.mark.slow
async def test_downgrade_to_base_and_back_up_after_real_use(adk_store: Store) -> None:
    """After repair, undo, repair, incremental runs and a resolution, db downgrade goes to 0003
    (a heal recorded by two runs keeps its newest row: 0003 holds one per heal) and to base,
    db current tells the truth at each, the session events never change, and db upgrade, scan
    --incremental and repair work again."""
    await fill(adk_store, crashed_histories())
    real_use(adk_store)
    events = await events_rows(adk_store)
    rows = await ledger_rows(adk_store)
    newest = {tuple(r[c] for c in HEAL_KEY): r for r in rows}
    assert len(newest) < len(rows), "no heal was recorded twice: nothing to test"

    down = cli("db", "downgrade", adk_store.url, "0003", "--yes")
    assert down.exit_code == 0, down.output
    assert "revision 0003" in cli("db", "current", adk_store.url).stdout
    assert await ours(adk_store) == OUR_TABLES["0003"]
    kept = await ledger_rows(adk_store)
    assert [{c: r[c] for c in LEDGER_0003_COLUMNS} for r in kept] == sorted(
        ({c: r[c] for c in LEDGER_0003_COLUMNS} for r in newest.values()),
        key=lambda r: r["id"])
    assert set(kept[0]) == set(LEDGER_0003_COLUMNS)

    down = cli("db", "downgrade", adk_store.url, "base", "--yes")
    assert down.exit_code == 0, down.output
    assert "revision none" in cli("db", "current", adk_store.url).stdout
    assert await ours(adk_store) == set()
    assert cli("db", "downgrade", adk_store.url, "base", "--yes").exit_code == 0  # again: no-op
    assert await events_rows(adk_store) == events

    assert "revision 0006" in cli("db", "upgrade", adk_store.url).stdout
    assert await ours(adk_store) == OUR_TABLES["0006"]
    assert cli("scan", adk_store.url, "--incremental").exit_code in (0, 1)
    assert cli("repair", adk_store.url, "--incremental", "--yes").exit_code == 0
    assert cli("repair", adk_store.url, "--yes").exit_code == 0
    assert await events_rows(adk_store) == events  # nothing healed twice


@pytest.mark.parametrize("kind", ["db_sqlite", "postgres"])
async def test_a_failed_step_is_rolled_back_whole_and_the_line_says_where_it_stays(
        kind: str, tmp_path: Path) -> None:
    """A DBA's view on a ledger column makes 0004's downgrade fail: the steps before it stay
    done, that one is rolled back whole (SQLite and PostgreSQL have transactional DDL), the
    error is one line naming the step and the revision kept, without a URL hint, and once the
    view is gone the same command finishes."""
    async for store in make_store(kind, tmp_path):
        await fill(store, crashed_histories())
        real_use(store)
        rows = await ledger_rows(store)
        run_sql(store, "CREATE VIEW heal_runs AS SELECT run_id FROM adk_session_heal_ledger;")
        failed = cli("db", "downgrade", store.url, "base", "--yes")
        assert_one_line_error(failed, "from 0004 to 0003", "stays at revision 0004")
        assert "check the URL" not in failed.stderr
        assert "revision 0004" in cli("db", "current", store.url).stdout
        assert await ours(store) == OUR_TABLES["0004"]
        assert await ledger_rows(store) == rows  # the dedupe of the failed step rolled back too
        run_sql(store, "DROP VIEW heal_runs;")
        assert cli("db", "downgrade", store.url, "base", "--yes").exit_code == 0
        assert await ours(store) == set()


def killed(kill_at: int, *args: str) -> tuple[int, int]:
    """Runs a CLI command in a child SIGKILLed after its ``kill_at``-th write (0: never);
    returns its exit code and the writes it counted (when it was not killed)."""
    child = subprocess.run([sys.executable, str(CHILDREN / "migration_kill.py"),
                            str(kill_at), *args], capture_output=True, text=True, timeout=180,
                           check=False)
    writes = [line for line in child.stderr.splitlines() if line.startswith("writes: ")]
    if child.returncode != -signal.SIGKILL:
        assert child.returncode == 0, child.stderr
    return child.returncode, int(writes[0].split()[1]) if writes else 0


async def assert_told_truly(store: Store, *, finish: bool) -> None:
    """db current after a kill: a revision whose tables are all there (SQLite, PostgreSQL:
    always), or, on MariaDB, one line naming the interrupted step and the command that
    finishes it; with ``finish``, that command is run and must finish the step."""
    from adk_session_heal.errors import LedgerError

    try:
        revision = await migrate.current(store.url)
    except LedgerError as exc:
        assert store.kind == "mariadb", exc  # DDL commits statement by statement only there
        message = str(exc)
        assert "part-way" in message and "\n" not in message, message
        if not finish:
            return
        command = message.split("`")[1].split()
        assert command[0] == "adk-session-heal", message
        finished = cli(*command[1:])
        assert finished.exit_code == 0, finished.output
        revision = await migrate.current(store.url)
    found = await ours(store)
    if revision is None and store.kind == "mariadb":
        # Alembic creates its version table first, and MariaDB commits that at once: empty,
        # it still means base (the next db command uses it, or drops it going to base).
        found.discard(VERSION_TABLE)
    assert found == OUR_TABLES[revision]


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["db_sqlite", "postgres", "mariadb"])
async def test_a_migration_killed_at_any_write_is_told_truly_and_a_rerun_finishes(
        kind: str, tmp_path: Path) -> None:
    """SIGKILL after a random write statement of `db downgrade URL base` and of `db upgrade`
    (one point in each quarter of the run, over the data real use leaves): db current names a
    revision whose tables are all there, or (MariaDB) the interrupted step and the command that
    finishes it (run every other time); the same command rerun then finishes; session events
    never change."""
    chooser = random.Random()
    seed = chooser.randrange(2**32)
    chooser.seed(seed)
    async for store in make_store(kind, tmp_path):
        await fill(store, crashed_histories())
        real_use(store)
        events = await events_rows(store)
        _, writes_down = killed(0, "db", "downgrade", store.url, "base", "--yes")
        _, writes_up = killed(0, "db", "upgrade", store.url)
        assert writes_down > 10 and writes_up > 10
        for quarter in range(4):
            app = f"app{quarter}"
            await fill(store, crashed_histories(), app=app)
            real_use(store, app=app)
            events = await events_rows(store)
            for command, writes in ((["db", "downgrade", store.url, "base", "--yes"],
                                     writes_down), (["db", "upgrade", store.url], writes_up)):
                kill_at = 1 + int((quarter + chooser.random()) * writes / 4)
                code, _ = killed(kill_at, *command)
                context = f"seed {seed}: {command[1]} killed at write {kill_at} of {writes}"
                assert code == -signal.SIGKILL, context
                await assert_told_truly(store, finish=quarter % 2 == 0)
                rerun = cli(*command)
                assert rerun.exit_code == 0, (context, rerun.output)
                target = None if command[1] == "downgrade" else "0006"
                assert await migrate.current(store.url) == target, context
                assert await ours(store) == OUR_TABLES[target], context
                assert await events_rows(store) == events, context


async def test_db_current_notices_any_table_of_ours_missing(tmp_path: Path) -> None:
    """With any one of our tables dropped by hand, db current says in one line that the tables
    do not match the revision (or which step was interrupted), never just the revision."""
    async for store in make_store("db_sqlite", tmp_path):
        await fill(store, {"ok": crashed_histories()["ok"]})
        assert cli("db", "upgrade", store.url).exit_code == 0
        assert store.sqlite_path is not None
        pristine = store.sqlite_path.read_bytes()
        for table in sorted(OUR_TABLES["0006"] - {VERSION_TABLE}):
            store.sqlite_path.write_bytes(pristine)
            with closing(sqlite3.connect(store.sqlite_path)) as db, db:
                db.execute(f"DROP TABLE {table}")
            assert_one_line_error(cli("db", "current", store.url), "0006", table)


async def test_tables_changed_by_hand_are_one_line_and_downgrade_base_rebuilds(
        tmp_path: Path) -> None:
    """A table dropped by hand that no interrupted step explains: db current and db upgrade
    say so in one line (the fix named), and db downgrade base then upgrade rebuild them."""
    async for store in make_store("db_sqlite", tmp_path):
        await fill(store, {"ok": crashed_histories()["ok"]})
        assert cli("db", "upgrade", store.url).exit_code == 0
        assert store.sqlite_path is not None
        with closing(sqlite3.connect(store.sqlite_path)) as db, db:
            db.execute("DROP TABLE adk_session_heal_tool_runs")
        assert_one_line_error(cli("db", "current", store.url), "do not match", "0006",
                              "missing adk_session_heal_tool_runs", "db downgrade")
        assert_one_line_error(cli("db", "upgrade", store.url), "do not match")
        assert cli("db", "downgrade", store.url, "base", "--yes").exit_code == 0
        assert await ours(store) == set()
        assert "revision 0006" in cli("db", "upgrade", store.url).stdout


async def test_relative_revisions_step_from_the_current_one(tmp_path: Path) -> None:
    """-1, +1 and head-2 count from the current revision (or the one named); a step past
    either end is one line (``--`` lets click take ``-1`` as an argument)."""
    async for store in make_store("db_sqlite", tmp_path):
        await fill(store, {"ok": crashed_histories()["ok"]})
        assert cli("db", "upgrade", store.url).exit_code == 0
        assert "revision 0005" in cli("db", "downgrade", "--yes", store.url, "--", "-1").stdout
        assert "revision 0006" in cli("db", "upgrade", store.url, "--revision", "+1").stdout
        assert "revision 0004" in cli("db", "downgrade", store.url, "head-2", "--yes").stdout
        assert "revision 0002" in cli("db", "downgrade", store.url, "0003-1", "--yes").stdout
        assert_one_line_error(cli("db", "downgrade", "--yes", store.url, "--", "-3"), "'-3'",
                              "past the first revision")
        assert_one_line_error(cli("db", "upgrade", store.url, "--revision", "+5"), "'+5'")
        assert_one_line_error(cli("db", "upgrade", store.url, "--revision=-1"), "wrong way")
        assert "revision 0002" in cli("db", "current", store.url).stdout
