"""Incremental scans: read only the sessions that changed, and those left unsettled.

A full scan reads every session. An incremental one (``scan --incremental``,
``repair --incremental``) reads only:

* the sessions whose ``update_time`` is at or after the *watermark* the
  previous run of the same *scope* (app, user and shard filters) recorded,
  less a margin (the policy's ``clock_skew``) for writers whose clocks run
  behind and for transactions that commit after the watermark was read;
* the sessions the previous run left *unsettled*: any its report lists (a
  dead, in-flight, pending or id-less call, an orphaned response, a heal a
  late result superseded, a damaged row; see
  :meth:`~adk_session_heal.ops.scan_report.ScanReport.unsettled_sessions`).
  Those are the only sessions whose findings can change without a write (an
  in-flight call goes stale as time passes), and re-reading them keeps each
  incremental report equal to the full scan's.

A session ADK writes to gets a new ``update_time`` (its ``append_event`` sets
it to the event's timestamp); the heals we write leave it as it was, and
settle the session. The watermark is read *before* the sessions are streamed,
so a write committed during the run is read again by the next one.

Times are compared in the column's own terms (*column seconds*): a naive
``DATETIME`` is read as if it were UTC, whatever zone the writer meant (ADK up
to 2.6 stores local time, later versions UTC), and ``SqliteSessionService``'s
``REAL`` column already holds POSIX seconds. The watermark never goes past the
scan's own clock read as UTC, so a fleet whose ADK moves from local-time to
UTC columns (east of Greenwich: the new values are smaller) is still read
whole from there on. Everything here is pure: the store reads and writes the
state (:class:`~adk_session_heal.store.ledger.heal_ledger.SqlHealLedger`).
"""

from __future__ import annotations

import datetime
import hashlib
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..core.durations import parse_duration

if TYPE_CHECKING:
    from ..core.session_key import SessionKey
    from .base import SessionFilter

UNSETTLED_TABLE_NAME = "adk_session_heal_unsettled"
"""Our table of the sessions each scope's last incremental run left unsettled (``0005``)."""

WATERMARKS_TABLE_NAME = "adk_session_heal_watermarks"
"""Our table of each scope's watermark (``0005``)."""

_EPOCH = datetime.datetime(1970, 1, 1)

@dataclass(frozen=True, slots=True)
class Since:
    """Which sessions a scan reads: those updated from ``after`` on, and a scope's unsettled.

    Attributes:
        after: The earliest ``update_time`` read, in column seconds.
        recheck: The scope (:func:`scope_of`) whose unsettled sessions are read
            too (``None``: none; ``--since`` reads only what changed).
    """

    after: float
    recheck: str | None = None


@dataclass(frozen=True, slots=True)
class Watermark:
    """An incremental run: where it started from, and the watermark it leaves for the next one.

    Attributes:
        scope: The scope (:func:`scope_of`) the state belongs to.
        previous: The previous run's watermark (``None``: first run, all read).
        value: The watermark this run records (column seconds).
        unsettled: The sessions this run leaves unsettled (what its report
            lists, once each), set once its scan is complete: the next run
            reads them again.
    """

    scope: str
    previous: float | None
    value: float
    unsettled: tuple[SessionKey, ...] = ()

    def to_json(self) -> dict[str, Any]:
        """Returns the JSON form."""
        return {"scope": self.scope, "previous": self.previous, "watermark": self.value}


def scope_of(where: SessionFilter) -> str:
    """Returns the scope an incremental run of ``where`` keeps its state under.

    Raises:
        ValueError: ``where`` names one session (nothing to be incremental about).
    """
    if where.session_id is not None:
        raise ValueError("--incremental scans many sessions: it does not go with --session")
    shard = "" if where.shard is None else f"{where.shard.number}/{where.shard.count}"
    return "\x1f".join(("app", where.app_name or "*", "user", where.user_id or "*",
                        "shard", shard or "*"))


def check_request(where: SessionFilter, *, since: bool, incremental: bool) -> None:
    """Refuses what cannot be read incrementally, before anything is read.

    Raises:
        ValueError: Both ``since`` and ``incremental``, or ``incremental`` for one session.
    """
    if since and incremental:
        raise ValueError("--since and --incremental both choose what to read: pass one")
    if incremental:
        scope_of(where)


def scope_id(scope: str) -> str:
    """Returns the scope's 40-character key (the unsettled table's column)."""
    return hashlib.sha1(scope.encode(), usedforsecurity=False).hexdigest()


def column_seconds(value: Any) -> float | None:
    """Returns an ``update_time`` value in column seconds (``None`` for NULL or junk).

    Args:
        value: As the driver returns it: a ``datetime`` (naive read as UTC), a
            number (POSIX seconds), or SQLite's text form of a ``DATETIME``.
    """
    if value is None or isinstance(value, bool):
        return None
    if isinstance(value, int | float):
        return float(value)
    if isinstance(value, str):
        try:
            value = datetime.datetime.fromisoformat(value)
        except ValueError:
            return None
    if isinstance(value, datetime.datetime):
        if value.tzinfo is not None:
            return value.timestamp()
        return (value - _EPOCH).total_seconds()
    return None


def column_text(seconds: float) -> str:
    """Returns column seconds as a naive ``DATETIME`` literal (SQLAlchemy's SQLite form)."""
    moment = _EPOCH + datetime.timedelta(seconds=max(seconds, 0.0))
    return moment.strftime("%Y-%m-%d %H:%M:%S.%f")


def watermark_of(newest: float | None, now: float) -> float:
    """Returns the watermark a run records: the newest ``update_time``, at most ``now``.

    Args:
        newest: The newest matching ``update_time`` when the run began (column
            seconds; ``None``: no session, so the next run reads every session:
            the first writer's convention, local or UTC, is not known yet).
        now: The run's clock (POSIX seconds), read as UTC like a naive column.
    """
    return 0.0 if newest is None else min(newest, now)


def since_column(timestamp: float, *, naive: bool) -> float:
    """Returns a point in time (POSIX seconds) as the earliest column seconds to read.

    A naive column may hold UTC or this host's local time (ADK up to 2.6): the
    earlier of the two readings is taken, so neither kind of row is missed.
    """
    if not naive:
        return timestamp
    offset = datetime.datetime.fromtimestamp(timestamp).astimezone().utcoffset()
    return timestamp + min(0.0, offset.total_seconds() if offset is not None else 0.0)


def parse_since(text: str, now: float) -> float:
    """Returns the POSIX seconds ``--since`` names.

    Args:
        text: A duration before ``now`` in the one grammar
            (:func:`~adk_session_heal.core.durations.parse_duration`: ``90``,
            ``15m``, ``1h30m``) or an ISO 8601 time (without an offset: this
            host's local time).
        now: The clock.

    Raises:
        ValueError: ``text`` is neither (the message says what to write).
    """
    try:
        return now - parse_duration(text)
    except ValueError:
        pass  # not a duration: an ISO 8601 time, or the one line saying what to write
    try:
        moment = datetime.datetime.fromisoformat(text.strip())
    except ValueError:
        raise ValueError(f"--since {text!r}: give a duration (90, 15m, 2h, 3d) or an ISO "
                         "8601 time (2026-11-26T09:00:00+00:00)") from None
    return moment.timestamp()
