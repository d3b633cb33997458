"""Driver errors become one-line :class:`~adk_session_heal.errors.StoreError` here, once.

Every adapter catches its driver's exceptions at the storage boundary and
raises the package's own error, with the URL's password scrubbed from the text.
"""

from __future__ import annotations

from sqlalchemy.exc import SQLAlchemyError

from ..errors import ReadOnlyStoreError, StoreError
from .urls import StoreUrl

__all__ = ["CONNECT_ERRORS", "translate_error"]

CONNECT_ERRORS: tuple[type[Exception], ...] = (SQLAlchemyError, OSError, TypeError, ValueError)
"""What opening a connection can raise: SQLAlchemy's and the network's errors, timeouts
(``OSError``), and a URL query option the driver's ``connect()`` refuses (``TypeError``,
``ValueError``)."""


def translate_error(exc: BaseException, url: StoreUrl, doing: str) -> StoreError:
    """Returns the one-line :class:`StoreError` for a driver error.

    Args:
        exc: The driver or SQLAlchemy error.
        url: The store (for the redacted URL and the password to scrub).
        doing: What was being done, e.g. ``"connect to"``.
    """
    if isinstance(exc, StoreError):
        return exc
    cause: BaseException = getattr(exc, "orig", None) or exc
    detail = url.scrub(str(cause).strip().splitlines()[0] if str(cause).strip() else "")
    detail = detail or type(cause).__name__
    lowered = detail.lower()
    if any(word in lowered for word in ("read-only", "readonly", "read only")):
        return ReadOnlyStoreError(
            f"{url} refuses writes ({detail[:160]}): run repair with a user and database "
            "that may write, or use scan / repair --dry-run"
        )
    if isinstance(cause, TimeoutError) or isinstance(exc, TimeoutError):
        return StoreError(
            f"cannot {doing} {url}: no answer in time (check that the URL's host and port "
            "are the database server's, or allow more time: --timeout SECONDS on the command "
            "line, timeout= in Python)"
        )
    if isinstance(cause, TypeError) and "keyword argument" in lowered:
        hint = "check the URL's query options: the driver does not take this one"
    elif isinstance(cause, ConnectionRefusedError) or "refused" in lowered:
        hint = "check that the server is running and the URL's host and port"
    else:
        hint = "check the URL's host, port, user, password and database"
    return StoreError(f"cannot {doing} {url}: {detail[:200]} ({hint})")
