"""A SQLite file opened as far as the file system lets us: recovered, read-only, or refused.

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

A file with nothing to recover is read where its permissions allow
(:func:`readable_sqlite`): ``mode=ro`` first; a WAL-mode file in a folder that
refuses SQLite's shared-memory file (``-shm``) is opened ``immutable``, which
is exact while no ``-wal`` file exists (every committed write is in the file
itself), though a writer starting during that scan is not seen. A command that
writes first checks that SQLite may write there (:func:`check_sqlite_writable`):
a write it rolls back, so a read-only file or folder is one line before
anything is read or written.
"""

from __future__ import annotations

import sqlite3
from contextlib import closing
from dataclasses import replace
from pathlib import Path

from ..errors import ReadOnlyStoreError
from .urls import StoreUrl

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


_NO_SHARED_MEMORY = frozenset({
    "SQLITE_CANTOPEN",  # a read-only file system or folder: no -shm can be made
    "SQLITE_READONLY_DIRECTORY",
    "SQLITE_READONLY_CANTINIT",
})
"""SQLite's answers to a read-only read of a WAL file whose ``-shm`` cannot be created."""

_FOLDER_REFUSES = frozenset({"SQLITE_CANTOPEN", "SQLITE_READONLY_DIRECTORY"})
"""SQLite's answers to a write whose journal the folder refuses (the file itself may write)."""


def readable_sqlite(url: StoreUrl) -> StoreUrl:
    """Returns the URL to read a file with nothing to recover: ``mode=ro``, else ``immutable``.

    Call after :func:`recover_sqlite`. Costs one read of the schema.

    Args:
        url: A SQLite store URL.
    """
    assert url.sqlite_path is not None
    if _leftovers(url.sqlite_path):
        return url  # recover_sqlite found it readable; a -wal must never be bypassed
    try:
        _read_schema(url.sqlite_uri(writable=False))
        return url
    except sqlite3.Error as exc:
        if getattr(exc, "sqlite_errorname", None) not in _NO_SHARED_MEMORY:
            return url  # not ours to handle: reported where the file is inspected
    frozen = replace(url, immutable=True)
    try:
        _read_schema(frozen.sqlite_uri(writable=False))
    except sqlite3.Error:
        return url
    return frozen


def check_sqlite_writable(url: StoreUrl) -> None:
    """Raises the one line for a file SQLite cannot write to; writes nothing.

    SQLite opens a read-only file read-only without a word, and a folder that
    refuses the journal shows only at the first write: so this begins a write
    transaction, rewrites the header's ``user_version`` with its own value and
    rolls back.

    Args:
        url: A SQLite store URL to be written to.

    Raises:
        ReadOnlyStoreError: The file, its file system or its folder refuses writes.
    """
    assert url.sqlite_path is not None
    try:
        with closing(sqlite3.connect(url.sqlite_uri(writable=True), uri=True,
                                     isolation_level=None, timeout=5)) as db:
            db.execute("BEGIN IMMEDIATE")
            try:
                (version,) = db.execute("PRAGMA user_version").fetchone()
                db.execute(f"PRAGMA user_version = {int(version)}")
            finally:
                db.execute("ROLLBACK")
    except sqlite3.Error as exc:
        name = getattr(exc, "sqlite_errorname", "")
        if not name.startswith("SQLITE_READONLY") and name not in _FOLDER_REFUSES:
            return  # busy, locked, damaged: the write itself reports it
        folder = url.sqlite_path.resolve().parent
        where = (f"its folder {folder} refuses the files SQLite writes beside it (-journal, "
                 "-wal, -shm)"
                 if name in _FOLDER_REFUSES else
                 f"the file {url.sqlite_path} (or its file system) refuses writes")
        raise ReadOnlyStoreError(
            f"{url} cannot be written: {where} ({exc}): run as a user that may write to the "
            "file and its folder, or copy the file to a writable folder; scan (without "
            "--incremental) and repair --dry-run only read"
        ) from exc
