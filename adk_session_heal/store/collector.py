"""The garbage collector's tuning, in one place: fewer collections while a scan decodes a
store (:func:`fewer_collections`), a frozen heap while a repair writes (:func:`frozen_heap`).

A scan decodes every stored event into short-lived dicts and lists, which
reference counting frees; each collection their allocations trigger walks
whatever else is alive (in a process that imported ADK, millions of objects).
On a 100k-event PostgreSQL scan the collector ran 1,717 times and took about
45 % of the CPU time in the command line; through ``scan()`` in a process that
had loaded ADK, the scan took 1.7-1.9 s, and 0.52-0.54 s with one young
collection per 50,000 allocations instead of 700 (measured, BENCHMARKS.md).
Cyclic garbage is still collected, later. Python's own thresholds are put
back when the last scan running in the process ends.
"""

from __future__ import annotations

import gc
import threading
from collections.abc import Iterator
from contextlib import contextmanager

_YOUNG_COLLECTION_EVERY = 50_000
"""Allocations between two young garbage collections while a scan runs (Python: 700)."""

_lock = threading.Lock()
_depth = 0
_saved: tuple[int, ...] = ()


@contextmanager
def fewer_collections() -> Iterator[None]:
    """Raises the young-generation threshold for the block's duration.

    Nested and concurrent blocks (two scans at once, in tasks or threads)
    share one change: the first to enter makes it, the last to leave undoes
    it.
    """
    global _depth, _saved
    with _lock:
        if _depth == 0:
            _saved = gc.get_threshold()
            gc.set_threshold(max(_YOUNG_COLLECTION_EVERY, _saved[0]), *_saved[1:])
        _depth += 1
    try:
        yield
    finally:
        with _lock:
            _depth -= 1
            if _depth == 0:
                gc.set_threshold(*_saved)


@contextmanager
def frozen_heap() -> Iterator[None]:
    """Keeps the collector from walking what is alive on entry, for the block's duration.

    A repair's plan and scan report are long-lived by the time it writes: frozen
    (``gc.freeze``), they are not walked on every collection the writes trigger
    (measured on PostgreSQL: 1,480 -> 1,624 heals/s, against 1,647 for a repair
    that held no plan). Unfrozen when the block ends.
    """
    gc.freeze()
    try:
        yield
    finally:
        gc.unfreeze()
