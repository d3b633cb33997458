"""Session-store URLs as ADK users write them: parsed, checked, and redacted.

Accepted forms (the same ones ADK's services and ``adk web
--session_service_uri`` take):

=====================================  ==========================================
``sqlite:///sessions.db``              a SQLite file (ADK's ``SqliteSessionService``)
``sqlite+aiosqlite:///sessions.db``    a SQLite file (``DatabaseSessionService``)
``postgresql+asyncpg://u:p@host/db``   PostgreSQL
``mysql+aiomysql://u:p@host/db``       MySQL / MariaDB
``mariadb+asyncmy://u:p@host/db``      MariaDB (``mysql+asyncmy`` works too)
=====================================  ==========================================

Three slashes make a path relative to the current directory, four an absolute
one. ``?mode=ro`` on a SQLite URL opens the file read-only. Which ADK service
wrote a SQLite file is read from the file itself (see
:mod:`adk_session_heal.store.database`), not from the scheme.

A password never leaves this module in clear: :attr:`StoreUrl.redacted` (also
the ``str`` and ``repr`` of a :class:`StoreUrl`) masks it and every query
value, and every error message uses that form.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from sqlalchemy.engine import URL, make_url
from sqlalchemy.exc import ArgumentError

from ..errors import UnsupportedStoreError

__all__ = ["EXAMPLE_URLS", "REDIS_KEY_PREFIX", "StoreUrl", "parse_store_url", "redact_url"]

EXAMPLE_URLS = (
    "sqlite:///.adk/session.db, sqlite+aiosqlite:///sessions.db, "
    "postgresql+asyncpg://user:pass@host/db, mysql+aiomysql://user:pass@host/db, "
    "redis://host:6379/0"
)
"""Shown in errors about the URL form."""

_ASYNC_DRIVERS = {
    "sqlite": ("aiosqlite",),
    "postgresql": ("asyncpg",),
    "mysql": ("aiomysql", "asyncmy"),
    "mariadb": ("asyncmy", "aiomysql"),
}
_REDIS_SCHEMES = ("redis", "rediss")
REDIS_KEY_PREFIX = "adk:session:"
"""``RedisSessionServiceConfig.key_prefix``'s default: where ADK keeps sessions."""
_KEY_PREFIX_QUERY = "key_prefix"
_USERINFO = re.compile(r"(?P<scheme>[^:/?#]+://)(?P<user>[^:@/]*):(?P<password>[^@/]*)@")


def redact_url(url: str) -> str:
    """Returns ``url`` with its password and query values masked; never raises."""
    try:
        parsed = make_url(url)
        if parsed.query:
            parsed = parsed.set(query={key: "REDACTED" for key in parsed.query})
        return parsed.render_as_string(hide_password=True)
    except Exception:  # the URL is being reported because it is broken
        return _USERINFO.sub(r"\g<scheme>\g<user>:***@", url.split("?", 1)[0])


@dataclass(frozen=True)
class StoreUrl:
    """A checked session-store URL.

    Attributes:
        backend: ``"sqlite"``, ``"postgresql"``, ``"mysql"``, ``"mariadb"`` or ``"redis"``.
        sqlite_path: The SQLite file (``None`` for servers).
        read_only: The URL asked for read-only access (``?mode=ro``).
        adk_sqlite_scheme: The URL was ``sqlite://`` (ADK's ``SqliteSessionService``).
        redacted: The URL with its password masked, for every message.
    """

    backend: str
    sqlite_path: Path | None
    read_only: bool
    adk_sqlite_scheme: bool
    redacted: str
    _async_url: URL = field(repr=False, compare=False)

    def __str__(self) -> str:
        return self.redacted

    def __repr__(self) -> str:
        return f"StoreUrl({self.redacted!r})"

    @property
    def password(self) -> str | None:
        """The password in the URL, so that error texts can be scrubbed of it."""
        return self._async_url.password

    def sqlalchemy_url(self, *, writable: bool) -> URL:
        """Returns the async SQLAlchemy URL to connect with.

        For SQLite, the file is opened through a ``file:`` URI with
        ``mode=ro`` (or ``mode=rw`` when ``writable``), so connecting never
        creates a missing file.

        Raises:
            UnsupportedStoreError: A Redis URL (it has no SQL tables: its heal
                ledger lives in Redis and needs no ``db upgrade``).
        """
        if self.backend == "redis":
            raise UnsupportedStoreError(
                f"{self} is a Redis session store: it has no SQL tables, and its heal ledger "
                "is a Redis hash that needs no `db upgrade` (read it with "
                "adk_session_heal.store.redis_sessions.RedisHealLedger)"
            )
        if self.sqlite_path is None:
            return self._async_url
        return make_url("sqlite+aiosqlite:///").set(
            database=self.sqlite_uri(writable=writable), query={"uri": "true"}
        )

    def sqlite_uri(self, *, writable: bool) -> str:
        """Returns the ``file:`` URI of the SQLite file (read-only unless ``writable``)."""
        assert self.sqlite_path is not None
        mode = "rw" if writable and not self.read_only else "ro"
        return f"{self.sqlite_path.resolve().as_uri()}?mode={mode}"

    @property
    def redis_key_prefix(self) -> str:
        """The ADK key prefix a Redis URL names (``?key_prefix=``, default ``adk:session:``)."""
        value = self._async_url.query.get(_KEY_PREFIX_QUERY, REDIS_KEY_PREFIX)
        return value if isinstance(value, str) else value[-1]

    def redis_url(self) -> str:
        """Returns the URL to hand redis-py: password in clear, so never print it."""
        connect = self._async_url.difference_update_query([_KEY_PREFIX_QUERY])
        return connect.render_as_string(hide_password=False)

    def scrub(self, text: str) -> str:
        """Returns ``text`` with this URL's password (if any) masked."""
        password = self.password
        if password:
            text = text.replace(password, "***")
        return text


def parse_store_url(url: str) -> StoreUrl:
    """Parses and checks a session-store URL.

    Args:
        url: A URL in one of the forms in the module docstring.

    Returns:
        The checked URL.

    Raises:
        UnsupportedStoreError: The URL is malformed, names a synchronous
            driver or an unsupported scheme, or a SQLite file that does not
            exist. The message says what to pass instead.
    """
    redacted = redact_url(url)
    if "://" not in url:
        raise UnsupportedStoreError(
            f"{redacted!r} is not a database URL: pass one such as {EXAMPLE_URLS}"
        )
    try:
        parsed = make_url(url)
    except (ArgumentError, ValueError) as exc:
        raise UnsupportedStoreError(
            f"cannot parse database URL {redacted!r}: pass one such as {EXAMPLE_URLS}"
        ) from exc
    backend = parsed.get_backend_name()
    driver = parsed.drivername.partition("+")[2]
    if backend in _REDIS_SCHEMES:
        return _parse_redis(parsed, driver, redacted)
    if backend not in _ASYNC_DRIVERS:
        raise UnsupportedStoreError(
            f"unsupported URL scheme {parsed.drivername!r}: the CLI reads ADK's SQL and Redis "
            f"session stores ({EXAMPLE_URLS}); for other session services use "
            "adk_session_heal.repair.scan_service()"
        )
    if backend == "sqlite":
        return _parse_sqlite(parsed, driver, redacted)
    if driver not in _ASYNC_DRIVERS[backend]:
        suggestion = f"{backend}+{_ASYNC_DRIVERS[backend][0]}"
        shown = f"the synchronous driver {driver!r}" if driver else "a synchronous driver"
        raise UnsupportedStoreError(
            f"{redacted!r} uses {shown}; ADK's DatabaseSessionService needs an async one: "
            f"use a {suggestion}:// URL"
        )
    if not parsed.database:
        raise UnsupportedStoreError(f"{redacted!r} names no database: add /DATABASE to the URL")
    return StoreUrl(backend, None, False, False, redacted, parsed)


def _parse_sqlite(parsed: URL, driver: str, redacted: str) -> StoreUrl:
    adk_scheme = driver == ""
    if not adk_scheme and driver != "aiosqlite":
        raise UnsupportedStoreError(
            f"{redacted!r} uses the SQLite driver {driver!r}: use sqlite:/// "
            "(ADK's SqliteSessionService) or sqlite+aiosqlite:/// (DatabaseSessionService)"
        )
    database = parsed.database or ""
    if database.startswith("file:"):
        database = database[len("file:"):]
    if database in ("", ":memory:"):
        raise UnsupportedStoreError(
            f"{redacted!r} is an in-memory database, which no other process can see: "
            "pass the path of the SQLite file your ADK app uses"
        )
    query = dict(parsed.query)
    read_only = query.pop("mode", None) == "ro"
    query.pop("uri", None)
    path = Path(database)
    if not path.is_file():
        raise UnsupportedStoreError(
            f"no SQLite file at {str(path)!r} (from {redacted!r}): check the path; "
            "sqlite:///x.db is relative to the current directory, sqlite:////abs/x.db absolute"
        )
    return StoreUrl("sqlite", path, read_only, adk_scheme, redacted, parsed)


def _parse_redis(parsed: URL, driver: str, redacted: str) -> StoreUrl:
    if driver:
        raise UnsupportedStoreError(
            f"{redacted!r} names a driver ({driver!r}) after the Redis scheme: use "
            f"{parsed.get_backend_name()}://host:port/db"
        )
    if parsed.database and not parsed.database.isdigit():
        raise UnsupportedStoreError(
            f"{redacted!r} names database {parsed.database!r}: a Redis URL ends in a "
            "database number, as in redis://host:6379/0"
        )
    return StoreUrl("redis", None, False, False, redacted, parsed)
