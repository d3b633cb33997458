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

import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import unquote

from sqlalchemy.engine import URL, make_url
from sqlalchemy.exc import ArgumentError

from ..errors import UnsupportedStoreError

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
_SCHEME = re.compile(r"\s*[A-Za-z][A-Za-z0-9+.\-]*:/+")
_QUERY_VALUE = re.compile(r"=[^&]*")
_PORTS = range(1, 65536)


def _mask_by_hand(url: str) -> tuple[str, str]:
    """Masks what could be a password in a URL, without parsing it.

    The user info is everything before the *last* ``@`` (a password may hold
    ``@``, ``/``, ``?`` or ``:``); all of it after its first ``:`` is masked.
    Without any ``@``, a "port" that is not a number is masked too
    (``u:password/host`` is a password with ``@host`` forgotten). Query
    values are masked.

    Returns:
        The masked URL, and the text masked as the password (``""``: none).
    """
    match = _SCHEME.match(url)
    prefix = match.group(0) if match else ""
    rest = url[len(prefix):]
    secret = ""
    if "@" in rest:
        userinfo, _, rest = rest.rpartition("@")
        user, colon, secret = userinfo.partition(":")
        prefix += f"{user}:***@" if colon else f"{userinfo}@"
    rest, question, query = rest.partition("?")
    if not secret:
        authority, slash, path = rest.partition("/")
        host, colon, port = authority.rpartition(":")
        if colon and port and not port.isdigit():
            secret, rest = port, f"{host}:***{slash}{path}"
    query = _QUERY_VALUE.sub("=REDACTED", query)
    return f"{prefix}{rest}{question}{query}", secret


def redact_url(url: str) -> str:
    """Returns ``url`` with its password and query values masked; never raises.

    A URL SQLAlchemy parses is shown as it renders it (password ``***``, query
    values ``REDACTED``); one it cannot parse, or parses into something that
    still shows the password (a stray ``@`` in it, a third slash before the
    user), is masked by hand.
    """
    masked, secret = _mask_by_hand(url)
    try:
        parsed = make_url(url)
        if parsed.query:
            parsed = parsed.set(query={key: "REDACTED" for key in parsed.query})
        shown = parsed.render_as_string(hide_password=True)
    except Exception:  # the URL is being reported because it is broken
        return masked
    if (secret and secret in shown) or "@" in (parsed.host or ""):
        return masked
    return shown


@dataclass(frozen=True)
class StoreUrl:
    """A checked session-store URL.

    Attributes:
        backend: ``"sqlite"``, ``"postgresql"``, ``"mysql"``, ``"mariadb"`` or ``"redis"``.
        sqlite_path: The SQLite file (``None`` for servers).
        read_only: The URL asked for read-only access (``?mode=ro``).
        adk_sqlite_scheme: The URL was ``sqlite://`` (ADK's ``SqliteSessionService``).
        redacted: The URL with its password masked, for every message.
        immutable: Read the SQLite file with ``immutable=1``: set by
            :func:`~adk_session_heal.store.sqlite_recovery.readable_sqlite` for a
            WAL file in a folder that refuses its ``-shm`` file.
    """

    backend: str
    sqlite_path: Path | None
    read_only: bool
    adk_sqlite_scheme: bool
    redacted: str
    _async_url: URL = field(repr=False, compare=False)
    immutable: bool = False

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
                "adk_session_heal.store.layouts.redis_sessions.RedisHealLedger)"
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
        frozen = "&immutable=1" if self.immutable and mode == "ro" else ""
        return f"{self.sqlite_path.resolve().as_uri()}?mode={mode}{frozen}"

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


_HEAL_PREFIX = "heal+"
"""``adk_services.HEAL_PREFIX``: a ``--session_service_uri`` of ``adk web`` names the same store."""


def parse_store_url(url: str) -> StoreUrl:
    """Parses and checks a session-store URL.

    Args:
        url: A URL in one of the forms in the module docstring, optionally
            with the ``heal+`` prefix of the URI given to ``adk web``.

    Returns:
        The checked URL.

    Raises:
        UnsupportedStoreError: The URL is malformed, names a synchronous
            driver or an unsupported scheme, or a SQLite file that does not
            exist. The message says what to pass instead.
    """
    if url[:len(_HEAL_PREFIX)].lower() == _HEAL_PREFIX:
        url = url[len(_HEAL_PREFIX):]  # the URI given to `adk web`, pasted as it is
    parsed, redacted = parse_url_syntax(url)
    backend = parsed.get_backend_name()
    driver = parsed.drivername.partition("+")[2]
    if backend in _REDIS_SCHEMES:
        return _parse_redis(parsed, driver, redacted)
    if backend not in _ASYNC_DRIVERS:
        raise UnsupportedStoreError(
            f"{redacted!r} has the unsupported URL scheme {parsed.drivername!r}: the CLI "
            f"reads ADK's SQL and Redis session stores ({EXAMPLE_URLS}); for other session "
            "services use adk_session_heal.ops.scan.scan_service()"
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
    if driver == "asyncpg" and "sslmode" in parsed.query:
        raise UnsupportedStoreError(
            f"{redacted!r} has ?sslmode=, which asyncpg does not take: write ?ssl= instead "
            "(e.g. ?ssl=require)"
        )
    return StoreUrl(backend, None, False, False, redacted, parsed)


def parse_url_syntax(url: str) -> tuple[URL, str]:
    """Parses any database URL's syntax, whatever its scheme.

    Refuses what would put a password where it can be shown: SQLAlchemy ends
    the password at the first ``@`` (URL syntax at the last) and reads
    ``scheme:///u:pw@h/db`` as database ``u:pw@h/db``, so the password would
    reach the server, and its error texts, as a host or database name. Also
    refuses a port outside 1-65535.

    Args:
        url: The URL.

    Returns:
        The parsed URL and its redacted form (:func:`redact_url`).

    Raises:
        UnsupportedStoreError: One line, with the URL redacted.
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
    if parsed.host and "@" in parsed.host:
        raise UnsupportedStoreError(
            f"{redacted!r} has more than one '@' before the host: write an '@' in the user "
            "name or password as %40"
        )
    secret = _mask_by_hand(url)[1]
    if secret and unquote(secret) != parsed.password:
        raise UnsupportedStoreError(
            f"cannot parse database URL {redacted!r}: write user and password as "
            "scheme://user:password@host/database (characters such as @ / ? # as %40 %2F "
            "%3F %23)"
        )
    if parsed.port is not None and parsed.port not in _PORTS:
        raise UnsupportedStoreError(
            f"{redacted!r} has port {parsed.port}, outside 1-65535: check the URL's port"
        )
    return parsed, redacted


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
    try:
        found = path.is_file()
    except OSError as exc:  # a folder on the way this user may not search
        raise UnsupportedStoreError(
            f"cannot reach the SQLite file {str(path)!r} (from {redacted!r}): "
            f"{exc.strerror or exc}: run as a user that may open every folder on its path"
        ) from exc
    if found and not os.access(path, os.R_OK):
        raise UnsupportedStoreError(
            f"this user may not read the SQLite file {str(path)!r} (from {redacted!r}): run as "
            "a user that may, or give read access to it"
        )
    if not found:
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
