"""A SQLite file a killed writer left behind, recovered the way SQLite itself does.

A writer killed in the middle of a transaction leaves a *hot journal*
(``<file>-journal`` in rollback-journal mode) or uncommitted frames in
``<file>-wal`` (WAL mode). SQLite recovers either on the next read by a
connection that may write: it rolls the hot journal back (the uncommitted
write disappears) or rebuilds the WAL index from the committed frames only. A
read-only connection (``mode=ro``, what scan uses) cannot, and refuses the file
(``SQLITE_READONLY_ROLLBACK`` and friends) rather than show half a transaction.

:func:`recover_sqlite` does exactly what the next ADK process would: when a
journal or WAL file sits beside the database and a read-only read is refused,
it opens the file read-write once and reads its schema, which makes SQLite
recover it; then the scan proceeds read-only. Nothing else is written. When the
file or its directory refuses writes, recovery is impossible and the error says
so in one line.
"""

from __future__ import annotations

import sqlite3
from contextlib import closing
from pathlib import Path

from ..errors import ReadOnlyStoreError
from .urls import StoreUrl

__all__ = ["recover_sqlite"]

_NEEDS_RECOVERY = frozenset({
    "SQLITE_READONLY_ROLLBACK",  # a hot rollback journal
    "SQLITE_READONLY_RECOVERY",  # a WAL whose index must be rebuilt
    "SQLITE_READONLY_CANTINIT",  # a WAL whose shared-memory file cannot be set up
    "SQLITE_READONLY_DIRECTORY",  # ... because the directory refuses writes
    "SQLITE_READONLY",
    "SQLITE_CANTOPEN",  # a WAL without a -shm file that a read-only open could create
})
"""SQLite's answers to a read-only read of a file that needs recovering first."""


def _leftovers(path: Path) -> list[Path]:
    return [p for p in (Path(f"{path}-journal"), Path(f"{path}-wal")) if p.exists()]


def _read_schema(uri: str) -> None:
    with closing(sqlite3.connect(uri, uri=True)) as db:
        db.execute("SELECT count(*) FROM sqlite_master").fetchone()


def recover_sqlite(url: StoreUrl) -> None:
    """Lets SQLite recover a file a killed writer left mid-transaction, if it needs it.

    Costs two ``stat`` calls when no journal or WAL file is present.

    Args:
        url: A SQLite store URL.

    Raises:
        ReadOnlyStoreError: The file needs recovering, but the URL says
            ``mode=ro`` or the file or its directory refuses writes.
    """
    assert url.sqlite_path is not None
    leftovers = _leftovers(url.sqlite_path)
    if not leftovers:
        return
    try:
        _read_schema(url.sqlite_uri(writable=False))
        return
    except sqlite3.Error as exc:
        if getattr(exc, "sqlite_errorname", None) not in _NEEDS_RECOVERY:
            return  # not ours to handle: reported where the file is inspected
        refused: sqlite3.Error = exc
    names = " and ".join(p.name for p in leftovers)
    problem = (f"{url} was left mid-transaction by a writer that was killed ({names} "
               "remains), and SQLite must roll that back before anyone can read it")
    if url.read_only:
        raise ReadOnlyStoreError(
            f"{problem}, which needs write access: drop ?mode=ro from the URL (only the "
            "interrupted transaction is undone), or open the file once with any SQLite client"
        ) from refused
    try:
        _read_schema(url.sqlite_uri(writable=True))
        _read_schema(url.sqlite_uri(writable=False))
    except sqlite3.Error as exc:
        raise ReadOnlyStoreError(
            f"{problem}, but the file or its directory {url.sqlite_path.parent} refuses writes "
            f"({exc}): run as a user that may write to both, or copy the file with its "
            f"{names} to a writable directory and point the URL there"
        ) from exc
