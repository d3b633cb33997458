"""fewer_collections: fewer young collections while scans run, Python's own settings after."""

from __future__ import annotations

import gc
import threading
from pathlib import Path

from damage_histories import answered_then_superseded, dead
from stores import fill, make_store

from adk_session_heal.ops.scan import scan
from adk_session_heal.store.collector import fewer_collections


class _Thresholds:
    """A scan progress that notes the collector's thresholds while sessions are read."""

    def __init__(self) -> None:
        self.seen: list[tuple[int, ...]] = []

    def start(self, total_sessions: int) -> None:
        """Notes them before the first session."""
        self.seen.append(gc.get_threshold())

    def advance(self, sessions: int) -> None:
        """Notes them after each session."""
        self.seen.append(gc.get_threshold())


def test_the_threshold_is_raised_inside_and_restored_after() -> None:
    """Inside the block young collections are rarer; after it, the settings are as before."""
    before = gc.get_threshold()
    with fewer_collections():
        inside = gc.get_threshold()
    assert inside[0] >= 50_000 and inside[1:] == before[1:]
    assert gc.get_threshold() == before


def test_overlapping_blocks_restore_only_when_the_last_one_ends() -> None:
    """Two scans at once (tasks or threads): the first to end leaves the setting to the other,
    the last one restores Python's."""
    before = gc.get_threshold()
    first, second = fewer_collections(), fewer_collections()
    first.__enter__()
    second.__enter__()
    first.__exit__(None, None, None)
    assert gc.get_threshold()[0] >= 50_000
    second.__exit__(None, None, None)
    assert gc.get_threshold() == before

    ready, done = threading.Barrier(2), []

    def scan_like() -> None:
        with fewer_collections():
            ready.wait()
            done.append(gc.get_threshold()[0])

    threads = [threading.Thread(target=scan_like) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert min(done) >= 50_000 and gc.get_threshold() == before


def test_an_error_inside_still_restores() -> None:
    """A scan that fails leaves Python's thresholds as they were."""
    before = gc.get_threshold()
    try:
        with fewer_collections():
            raise RuntimeError("the database went away")
    except RuntimeError:
        pass
    assert gc.get_threshold() == before


async def test_scan_through_the_api_collects_less_while_it_reads(tmp_path: Path) -> None:
    """scan() raises the threshold while it reads sessions and restores it when it returns."""
    before = gc.get_threshold()
    async for store in make_store("db_sqlite", tmp_path):
        await fill(store, {"ok": answered_then_superseded(), "dead": dead()})
        progress = _Thresholds()
        report = await scan(store.url, now=1_700_100_000.0, progress=progress)
        assert [c.session_id for c in report.dead_calls] == ["dead"]
    assert progress.seen and all(seen[0] >= 50_000 for seen in progress.seen[1:])
    assert gc.get_threshold() == before
