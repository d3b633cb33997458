"""Driver errors become one-line :class:`~adk_session_heal.errors.StoreError` here, once.

Every adapter catches its driver's exceptions at the storage boundary and
raises the package's own error, with the URL's password scrubbed from the text.
A hint about the URL (host, port, user, password, database) is given only for
a problem connecting; an error in a statement names the statement's problem.
A driver that is not installed is named with the extra that installs it
(:func:`import_driver`), for every backend alike.
"""

from __future__ import annotations

import importlib
from types import ModuleType
from typing import Any

from sqlalchemy.exc import DisconnectionError, SQLAlchemyError

from ..errors import ReadOnlyStoreError, StoreError, UnsupportedStoreError
from .urls import StoreUrl

CONNECT_ERRORS: tuple[type[Exception], ...] = (SQLAlchemyError, OSError, TypeError, ValueError)
"""What opening a connection can raise: SQLAlchemy's and the network's errors, timeouts
(``OSError``), and a URL query option the driver's ``connect()`` refuses (``TypeError``,
``ValueError``)."""

DRIVER_EXTRAS: dict[str, str | None] = {
    "asyncpg": "postgres",
    "aiomysql": "mysql",
    "asyncmy": "mysql",
    "redis": "redis",
    "aiosqlite": None,  # a dependency of the base install
}
"""Each driver package a store URL can need, and the extra of ``adk-session-heal`` that
installs it (``None``: the base install)."""

_LONGEST_DETAIL = 300
"""Characters of a driver's message kept; a longer one is cut between words, marked ``...``."""


def import_driver(module: str, url: StoreUrl | None = None) -> ModuleType:
    """Imports a store's driver, or raises the one line that says how to install it.

    Args:
        module: The module, e.g. ``"asyncpg"`` or ``"redis.asyncio"``.
        url: The store that needs it, named in the message.

    Raises:
        UnsupportedStoreError: The driver's package is not installed.
    """
    try:
        return importlib.import_module(module)
    except ModuleNotFoundError as exc:
        error = missing_driver_error(exc, url)
        if error is None:
            raise
        raise error from exc


def missing_driver_error(exc: ModuleNotFoundError, url: StoreUrl | str | None = None,
                         ) -> UnsupportedStoreError | None:
    """Returns the one-line error for a driver package that is missing (``None``: not one).

    Only a driver named in :data:`DRIVER_EXTRAS` counts; a module missing
    inside an installed driver is a broken installation, not a missing extra.

    Args:
        exc: The import's error.
        url: The store that needs the driver (redacted), named in the message.
    """
    package = (exc.name or "").partition(".")[0]
    if package not in DRIVER_EXTRAS:
        return None
    extra = DRIVER_EXTRAS[package]
    install = "adk-session-heal" if extra is None else f"adk-session-heal[{extra}]"
    needs = f"{url} needs" if url is not None else "this store needs"
    return UnsupportedStoreError(
        f"{needs} the {package} driver, which is not installed: pip install '{install}'")


def _first_line(text: str) -> str:
    """The first line of a driver's message, cut between words if it is very long."""
    line = text.strip().splitlines()[0] if text.strip() else ""
    if len(line) <= _LONGEST_DETAIL:
        return line
    cut = line[:_LONGEST_DETAIL]
    for separator in (", ", " "):
        if separator in cut:
            return cut[:cut.rindex(separator)].rstrip(",") + " ..."
    return cut + " ..."


def _is_connection_problem(exc: BaseException, cause: BaseException, doing: str) -> bool:
    """Whether the URL's host, port, credentials or database are worth checking."""
    return (doing == "connect to"
            or isinstance(cause, OSError | ConnectionError)
            or isinstance(exc, DisconnectionError)
            or bool(getattr(exc, "connection_invalidated", False)))


_RACE_SQLSTATES = frozenset({"40001", "40P01", "23503"})
"""PostgreSQL: serialization failure, deadlock detected, foreign key violation."""
_RACE_MYSQL_CODES = frozenset({1205, 1213, 1452})
"""MySQL/MariaDB: lock wait timeout, deadlock (the transaction was rolled back), a child
row whose parent is gone."""


def lost_race(exc: BaseException) -> bool:
    """Whether a write failed only because a concurrent transaction got there first.

    A deadlock or serialization failure (the database rolled the transaction
    back), a lock wait that timed out, or a foreign key naming a session that
    was deleted after the write re-counted it: run again, the transaction
    re-checks what it writes and skips what is gone.

    Args:
        exc: The driver or SQLAlchemy error.
    """
    cause = getattr(exc, "orig", None) or exc
    if getattr(cause, "sqlstate", None) in _RACE_SQLSTATES:
        return True
    args: tuple[Any, ...] = tuple(getattr(cause, "args", ()))
    return bool(args) and isinstance(args[0], int) and args[0] in _RACE_MYSQL_CODES


def translate_error(exc: BaseException, url: StoreUrl, doing: str) -> StoreError:
    """Returns the one-line :class:`StoreError` for a driver error.

    Args:
        exc: The driver or SQLAlchemy error.
        url: The store (for the redacted URL and the password to scrub).
        doing: What was being done, e.g. ``"connect to"``, ``"write to"``.
    """
    if isinstance(exc, StoreError):
        return exc
    cause: BaseException = getattr(exc, "orig", None) or exc
    if isinstance(cause, ModuleNotFoundError) and (
            missing := missing_driver_error(cause, url)) is not None:
        return missing
    detail = url.scrub(_first_line(str(cause))) or type(cause).__name__
    extra = getattr(cause, "detail", None)  # PostgreSQL's DETAIL line (asyncpg)
    if isinstance(extra, str) and extra.strip():
        detail = f"{detail} ({url.scrub(_first_line(extra))})"
    lowered = detail.lower()
    if any(word in lowered for word in ("read-only", "readonly", "read only")):
        return ReadOnlyStoreError(
            f"{url} refuses writes ({detail}): run repair with a user and database "
            "that may write, or use scan / repair --dry-run"
        )
    if isinstance(cause, TimeoutError) or isinstance(exc, TimeoutError):
        return StoreError(
            f"cannot {doing} {url}: no answer in time (check that the URL's host and port "
            "are the database server's, or allow more time: --timeout SECONDS on the command "
            "line, timeout= in Python)"
        )
    if not _is_connection_problem(exc, cause, doing):
        return StoreError(f"cannot {doing} {url}: {detail}")
    if isinstance(cause, TypeError) and "keyword argument" in lowered:
        hint = "check the URL's query options: the driver does not take this one"
    elif isinstance(cause, ConnectionRefusedError) or "refused" in lowered:
        hint = "check that the server is running and the URL's host and port"
    else:
        hint = "check the URL's host, port, user, password and database"
    return StoreError(f"cannot {doing} {url}: {detail} ({hint})")
