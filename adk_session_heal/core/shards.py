"""Shards: a stable split of a store's sessions among parallel scan or repair jobs.

``--shard 2/4`` takes the sessions whose key hashes to the second of four
buckets. The hash is the first 32 bits of the MD5 of
``app_name \\x1f user_id \\x1f session_id`` (UTF-8), so every job, every host
and every engine agrees on it: PostgreSQL and MySQL/MariaDB compute it in the
query (:meth:`Shard.sql`), SQLite through a function registered on its
connection (:data:`SQLITE_FUNCTION`), Redis in Python (:meth:`Shard.holds`).
Together the ``n`` shards cover every session exactly once. On PostgreSQL,
SQLite and MySQL/MariaDB (with ADK's events index) a shard reads the sessions
that have their row in ``sessions``, as ADK does; events rows left without one
(ADK's foreign key forbids them) are read only without a shard. Shards are
numbered from 1, as in ``--shard 1/2`` and ``--shard 2/2``.
"""

from __future__ import annotations

import functools
import hashlib
from dataclasses import dataclass

from .session_key import SessionKey

SQLITE_FUNCTION = "adk_session_heal_bucket"
"""The SQL function (3 text arguments) registered on SQLite connections: :func:`bucket`."""


@functools.lru_cache(maxsize=4096)
def bucket(app_name: str, user_id: str, session_id: str) -> int:
    """Returns a session key's 32-bit hash (the same in every engine's query).

    Remembered for the last 4,096 keys: SQLite's reads that filter ``events``
    rows call it once per row, and rows come session by session (a sharded
    100k-event scan spent 0.08 s hashing the same keys again, measured).

    Args:
        app_name: The app.
        user_id: The user.
        session_id: The session.
    """
    digest = hashlib.md5(f"{app_name}\x1f{user_id}\x1f{session_id}".encode(),
                         usedforsecurity=False)
    return int.from_bytes(digest.digest()[:4], "big")


@dataclass(frozen=True, slots=True)
class Shard:
    """One of ``count`` shards (numbered from 1).

    Attributes:
        number: Which shard, ``1 <= number <= count``.
        count: How many shards the sessions are split into.
    """

    number: int
    count: int

    def __post_init__(self) -> None:
        """Checks ``1 <= number <= count``.

        Raises:
            ValueError: The numbers are out of range.
        """
        if not 1 <= self.number <= self.count:
            raise ValueError(f"shard {self.number}/{self.count}: want 1 <= i <= n, as in 1/2")

    @classmethod
    def parse(cls, text: str) -> Shard:
        """Reads ``"i/n"``.

        Raises:
            ValueError: ``text`` is not two whole numbers ``i/n`` with ``1 <= i <= n``.
        """
        number, slash, count = text.strip().partition("/")
        if not slash or not number.isdigit() or not count.isdigit():
            raise ValueError(f"shard {text!r}: write it as i/n, e.g. 1/2 (shards count from 1)")
        return cls(int(number), int(count))

    def __str__(self) -> str:
        """Returns ``i/n``."""
        return f"{self.number}/{self.count}"

    def holds(self, key: SessionKey) -> bool:
        """Whether the session belongs to this shard."""
        return bucket(key.app_name, key.user_id, key.session_id) % self.count == self.number - 1

    def sql(self, dialect: str, session_column: str) -> str:
        """Returns a SQL condition true exactly for this shard's rows.

        Args:
            dialect: SQLAlchemy's dialect name: ``postgresql``, ``mysql``,
                ``mariadb`` or ``sqlite`` (whose connection must have
                :data:`SQLITE_FUNCTION` registered).
            session_column: The session id's column.

        Raises:
            ValueError: Another dialect.
        """
        if dialect == "postgresql":
            hashed = (f"('x' || substr(md5(app_name || chr(31) || user_id || chr(31) || "
                      f"{session_column}), 1, 8))::bit(32)::bigint")
        elif dialect in ("mysql", "mariadb"):
            hashed = (f"CAST(CONV(SUBSTRING(MD5(CONCAT_WS(CHAR(31), app_name, user_id, "
                      f"{session_column})), 1, 8), 16, 10) AS UNSIGNED)")
        elif dialect == "sqlite":
            hashed = f"{SQLITE_FUNCTION}(app_name, user_id, {session_column})"
        else:
            raise ValueError(f"cannot shard a {dialect} database")
        return f"{hashed} % {self.count} = {self.number - 1}"
