"""SQLite files a writer killed mid-transaction left behind: recovered as SQLite does, or one line.

Each store is built through ADK's own service (``SqliteSessionService`` or
``DatabaseSessionService`` over aiosqlite), then a child process begins a
transaction that would answer the dead call, spills it to the file and is
SIGKILLed before it commits: a hot rollback journal, or uncommitted frames in
a WAL. The scan must see the file as SQLite's recovery leaves it: without the
uncommitted write.

Making a file or directory read-only for root: ``chmod`` does not stop root,
so these tests use ``chattr +i`` (immutable; needs CAP_LINUX_IMMUTABLE and a
filesystem that has the flag) and skip when it is unavailable.
"""

from __future__ import annotations

import json
import signal
import sqlite3
import subprocess
import sys
from collections.abc import Iterator
from contextlib import closing, contextmanager
from pathlib import Path

import pytest
from cli_runner import assert_one_line_error, cli
from stores import APP, USER, Store, close, crashed_histories, fill, make_store

from adk_session_heal import HealPolicy, ScanOptions
from adk_session_heal.errors import ReadOnlyStoreError
from adk_session_heal.ops.repair import repair
from adk_session_heal.ops.scan import scan

NOW = 1_700_100_000.0

_KILLED_WRITER = """
import sqlite3, sys
ANSWER = "replace(replace(event_data, 'function_call', 'function_response'), '\\"args\\"', "\\
    "'\\"response\\"')"
db = sqlite3.connect(sys.argv[1], isolation_level=None)
db.execute("PRAGMA cache_size = 1")  # spill the transaction into the file before commit
if sys.argv[2] == "commit-then-die":  # one committed write that must stay (WAL only)
    db.execute("INSERT INTO events SELECT id || '-committed', app_name, user_id, session_id, "
               "invocation_id, timestamp, " + ANSWER + " FROM events "
               "WHERE session_id = 'stale' AND event_data LIKE '%function_call%'")
db.execute("BEGIN")
db.execute("INSERT INTO events SELECT id || '-uncommitted', app_name, user_id, session_id, "
           "invocation_id, timestamp, " + ANSWER + " FROM events "
           "WHERE session_id = 'dead' AND event_data LIKE '%function_call%'")
db.execute("CREATE TABLE junk AS WITH RECURSIVE c(i) AS (SELECT 1 UNION ALL SELECT i + 1 "
           "FROM c WHERE i < 3000) SELECT i, randomblob(200) AS b FROM c")
print("ready", flush=True)
sys.stdin.read()
"""
"""Answers the dead call (and, committed, the stale one) in a transaction it never finishes."""


def kill_mid_transaction(path: Path, how: str = "die") -> None:
    """Runs the writer in a child process and SIGKILLs it inside its transaction."""
    with subprocess.Popen([sys.executable, "-c", _KILLED_WRITER, str(path), how],
                          stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True) as child:
        assert child.stdout is not None
        ready = child.stdout.readline()
        child.send_signal(signal.SIGKILL)
    assert ready == "ready\n", ready


async def crashed_file(kind: str, tmp_path: Path, *, wal: bool) -> Store:
    """A store of ``kind`` filled through ADK, left by a writer killed mid-transaction."""
    async for store in make_store(kind, tmp_path):
        await fill(store, crashed_histories())
        assert store.sqlite_path is not None
        if wal:
            with closing(sqlite3.connect(store.sqlite_path)) as db:
                assert db.execute("PRAGMA journal_mode = WAL").fetchone() == ("wal",)
        kill_mid_transaction(store.sqlite_path, "commit-then-die" if wal else "die")
        leftover = Path(f"{store.sqlite_path}-{'wal' if wal else 'journal'}")
        assert leftover.exists() and leftover.stat().st_size > 0
        return store
    raise AssertionError("no store")


@contextmanager
def immutable(path: Path) -> Iterator[None]:
    """Makes ``path`` immutable (even for root) for the block, or skips the test."""
    made = subprocess.run(["chattr", "+i", str(path)], capture_output=True, text=True,
                          check=False)
    if made.returncode != 0:
        pytest.skip(f"chattr +i is not available here: {made.stderr.strip()}")
    try:
        yield
    finally:
        subprocess.run(["chattr", "-i", str(path)], check=True)


async def sessions_as_adk_reads_them(store: Store) -> dict[str, list[str]]:
    """Every session's event ids, through ADK's own service."""
    service = store.service()
    try:
        return {
            session_id: [e.id for e in session.events]
            for session_id in crashed_histories()
            if (session := await service.get_session(app_name=APP, user_id=USER,
                                                     session_id=session_id)) is not None
        }
    finally:
        await close(service)


@pytest.mark.parametrize("kind", ["adk_sqlite", "db_sqlite"])
async def test_a_hot_journal_is_rolled_back_then_scanned_and_repaired(
    kind: str, tmp_path: Path
) -> None:
    """scan opens a file with a hot journal (read-only it is refused), rolls the killed
    writer's transaction back as SQLite does, and neither it nor repair sees that write."""
    store = await crashed_file(kind, tmp_path, wal=False)
    assert store.sqlite_path is not None
    with closing(sqlite3.connect(f"{store.sqlite_path.as_uri()}?mode=ro", uri=True)) as db, \
            pytest.raises(sqlite3.OperationalError, match="readonly"):
        db.execute("SELECT count(*) FROM events").fetchone()

    found = cli("scan", store.url, "--json", "--older-than", "1h")
    assert found.exit_code == 1, found.output
    dead = {(c["session_id"], c["status"]) for c in json.loads(found.stdout)["dead_calls"]}
    assert ("dead", "superseded") in dead
    assert not Path(f"{store.sqlite_path}-journal").exists()
    with closing(sqlite3.connect(store.sqlite_path)) as db:
        tables = {r[0] for r in db.execute("SELECT name FROM sqlite_master")}
        assert "junk" not in tables
        assert db.execute("SELECT count(*) FROM events WHERE id LIKE '%-uncommitted'"
                          ).fetchone() == (0,)
    healed = cli("repair", store.url, "--yes", "--no-ledger", "--older-than", "1h")
    assert healed.exit_code == 0, healed.output
    read = await sessions_as_adk_reads_them(store)
    assert any(event_id.endswith("-heal") for event_id in read["dead"])
    assert not any(event_id.endswith("-uncommitted") for event_id in read["dead"])


@pytest.mark.parametrize("kind", ["adk_sqlite", "db_sqlite"])
async def test_a_wal_left_by_a_killed_writer_keeps_only_committed_writes(
    kind: str, tmp_path: Path
) -> None:
    """A WAL file with a committed and an uncommitted transaction: the scan and repair see
    the committed answer (the stale call is answered), not the uncommitted one."""
    store = await crashed_file(kind, tmp_path, wal=True)
    report = await scan(store.url, ScanOptions(policy=HealPolicy(stale_after=3600)), now=NOW)
    assert {(c.session_id, c.status) for c in report.dead_calls} == {
        ("dead", "superseded"), ("parallel", "superseded")}
    assert cli("repair", store.url, "--yes", "--no-ledger").exit_code == 0
    read = await sessions_as_adk_reads_them(store)
    assert any(event_id.endswith("-heal") for event_id in read["dead"])
    assert store.sqlite_path is not None
    with closing(sqlite3.connect(store.sqlite_path)) as db:
        assert db.execute("SELECT count(*) FROM events WHERE id LIKE '%-committed'"
                          ).fetchone() == (1,)
        assert db.execute("SELECT count(*) FROM events WHERE id LIKE '%-uncommitted'"
                          ).fetchone() == (0,)


async def test_a_hot_journal_in_a_read_only_directory_fails_in_one_line(tmp_path: Path) -> None:
    """Rolling back needs to delete the journal: an immutable directory makes that
    impossible, and scan says so in one line, exit 2, leaving the journal in place."""
    store = await crashed_file("db_sqlite", tmp_path, wal=False)
    assert store.sqlite_path is not None
    with immutable(store.sqlite_path.parent):
        assert_one_line_error(cli("scan", store.url), "killed", "refuses writes")
    assert Path(f"{store.sqlite_path}-journal").exists()


async def test_a_hot_journal_on_a_read_only_file_fails_in_one_line(tmp_path: Path) -> None:
    """An immutable file cannot be rolled back: one line (scan and repair), exit 2, and
    the Python API raises ReadOnlyStoreError; nothing changes."""
    store = await crashed_file("adk_sqlite", tmp_path, wal=False)
    assert store.sqlite_path is not None
    before = store.sqlite_path.read_bytes()
    with immutable(store.sqlite_path):
        assert_one_line_error(cli("scan", store.url), "killed", "refuses writes")
        assert_one_line_error(cli("repair", store.url, "--dry-run"), "refuses writes")
        with pytest.raises(ReadOnlyStoreError):
            await scan(store.url)
    assert store.sqlite_path.read_bytes() == before


async def test_mode_ro_on_a_hot_journal_says_to_drop_it(tmp_path: Path) -> None:
    """?mode=ro forbids the rollback recovery needs: the line says to drop it."""
    store = await crashed_file("db_sqlite", tmp_path, wal=False)
    assert_one_line_error(cli("scan", store.url + "?mode=ro"), "mode=ro")


async def test_a_wal_without_its_shm_in_a_read_only_directory_fails_in_one_line(
    tmp_path: Path
) -> None:
    """A WAL whose -shm file is gone needs a new one: an immutable directory refuses it,
    in one line, exit 2."""
    store = await crashed_file("db_sqlite", tmp_path, wal=True)
    assert store.sqlite_path is not None
    Path(f"{store.sqlite_path}-shm").unlink()
    with immutable(store.sqlite_path.parent):
        assert_one_line_error(cli("scan", store.url), "refuses writes")


async def test_a_read_only_file_without_a_journal_scans_but_repair_fails_in_one_line(
    tmp_path: Path
) -> None:
    """With nothing to recover, an immutable file still scans (read-only); repair, which
    must write, gives one line and exit 2."""
    async for store in make_store("db_sqlite", tmp_path):
        await fill(store, crashed_histories())
        assert store.sqlite_path is not None
        with immutable(store.sqlite_path):
            assert cli("scan", store.url).exit_code == 1
            assert_one_line_error(cli("repair", store.url, "--yes", "--no-ledger"),
                                  "refuses writes")


# ---- read-only files and folders with nothing to recover (issue 28, point 7) ----


def files_in(folder: Path) -> dict[str, bytes]:
    """Every file in ``folder`` with its bytes."""
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir()) if p.is_file()}


def assert_denies_writes(folder: Path) -> None:
    """Checks for real that root cannot create a file in ``folder``."""
    with pytest.raises(OSError):
        (folder / "probe").write_bytes(b"x")


@contextmanager
def read_only_folder(folder: Path, how: str) -> Iterator[Path]:
    """Yields ``folder`` made read-only for root: ``bind``, a read-only bind mount of it
    (yielded at the mount point), or ``chattr``, its immutable flag; skips if unavailable."""
    if how == "chattr":
        with immutable(folder):
            assert_denies_writes(folder)
            yield folder
        return
    mount_point = folder.with_name(f"{folder.name}-ro")
    mount_point.mkdir()
    made = subprocess.run(["mount", "--bind", "-o", "ro", str(folder), str(mount_point)],
                          capture_output=True, text=True, check=False)
    if made.returncode != 0:
        pytest.skip(f"a read-only bind mount is not available here: {made.stderr.strip()}")
    try:
        assert_denies_writes(mount_point)
        yield mount_point
    finally:
        subprocess.run(["umount", str(mount_point)], check=True)


async def ledgered_store(kind: str, tmp_path: Path, *, wal: bool) -> Store:
    """A store of ``kind`` in a folder of its own, filled through ADK, with the ledger
    installed and (``wal``) in WAL mode, no writer left: nothing to recover."""
    folder = tmp_path / "sessions"
    folder.mkdir()
    async for store in make_store(kind, folder):
        await fill(store, crashed_histories())
        assert cli("db", "upgrade", store.url).exit_code == 0
        assert store.sqlite_path is not None
        if wal:
            with closing(sqlite3.connect(store.sqlite_path)) as db:
                assert db.execute("PRAGMA journal_mode = WAL").fetchone() == ("wal",)
        assert files_in(folder).keys() == {store.sqlite_path.name}
        return store
    raise AssertionError("no store")


def moved(store: Store, folder: Path) -> Store:
    """The same store, reached through ``folder`` (a mount point of its folder)."""
    assert store.sqlite_path is not None
    scheme = store.url.split(":///", 1)[0]
    return Store(store.kind, f"{scheme}:///{folder / store.sqlite_path.name}")


@pytest.mark.parametrize("how", ["bind", "chattr"])
@pytest.mark.parametrize("wal", [False, True], ids=["rollback-journal", "wal"])
@pytest.mark.parametrize("kind", ["adk_sqlite", "db_sqlite"])
async def test_a_read_only_folder_is_scanned_and_each_write_is_refused_in_one_line(
    kind: str, wal: bool, how: str, tmp_path: Path
) -> None:
    """A folder root cannot write to (read-only mount, immutable flag), with nothing to
    recover: scan reads it (a WAL file as immutable, since no -shm can be made there) and
    finds the dead calls; repair, scan --incremental and db downgrade each say in one line
    that the file cannot be written there and what to do, exit 2; no byte changes."""
    store = await ledgered_store(kind, tmp_path, wal=wal)
    assert store.sqlite_path is not None
    before = files_in(store.sqlite_path.parent)
    with read_only_folder(store.sqlite_path.parent, how) as folder:
        seen = moved(store, folder)
        found = cli("scan", seen.url, "--json")
        assert found.exit_code == 1, found.output
        assert len(json.loads(found.stdout)["dead_calls"]) == 3
        assert len((await scan(seen.url, now=NOW)).dead_calls) == 3
        for command in (["repair", seen.url, "--yes"], ["repair", seen.url, "--yes",
                                                        "--no-ledger"],
                        ["scan", seen.url, "--incremental"],
                        ["db", "downgrade", seen.url, "base", "--yes"]):
            assert_one_line_error(cli(*command), "cannot be written", "only read")
        with pytest.raises(ReadOnlyStoreError, match="cannot be written"):
            await repair(seen.url)
    assert files_in(store.sqlite_path.parent) == before


@pytest.mark.parametrize("wal", [False, True], ids=["rollback-journal", "wal"])
@pytest.mark.parametrize("kind", ["adk_sqlite", "db_sqlite"])
async def test_a_read_only_file_with_its_ledger_is_scanned_and_repair_refused_in_one_line(
    kind: str, wal: bool, tmp_path: Path
) -> None:
    """An immutable file in a writable folder, ledger installed: scan reads it; repair (which
    would first record its run), repair --no-ledger and scan --incremental each say in one
    line that the file refuses writes, exit 2; the file keeps every byte."""
    store = await ledgered_store(kind, tmp_path, wal=wal)
    assert store.sqlite_path is not None
    before = store.sqlite_path.read_bytes()
    with immutable(store.sqlite_path):
        assert cli("scan", store.url).exit_code == 1
        for command in (["repair", store.url, "--yes"],
                        ["repair", store.url, "--yes", "--no-ledger"],
                        ["scan", store.url, "--incremental"]):
            assert_one_line_error(cli(*command), "cannot be written", "refuses writes")
    assert store.sqlite_path.read_bytes() == before
