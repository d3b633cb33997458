"""Everything that differs between the ADK versions this package supports, in one place.

Supported: google-adk 1.22 through 2.x (``>=1.22,<3``). 1.22 is the first
release whose ``DatabaseSessionService`` stores events as JSON (schema "1"); an
older store is the pickled "v0" layout, which ADK's own ``adk migrate session``
converts. 3.0 does not exist yet: a new major release is admitted only after
the reader matrix (``.ci/adk-matrix``) passes against it.

What differs, and what this module answers for the rest of the package:

* **Event fields.** ``Event`` forbids unknown fields up to 1.27 and ignores
  them from 1.28; 2.0 added ``isolation_scope``, ``node_info`` and ``output``.
  A heal row therefore carries only :data:`PORTABLE_EVENT_FIELDS` (what every
  supported reader accepts), plus ``isolation_scope`` / ``node_info`` copied
  from a call row that has them (a store written by 2.x, which no reader
  before 2.0 can read anyway). :func:`readable_event_data` keeps what the
  installed ADK accepts.
* **Aborted invocations.** From 2.11 ADK seals an invocation cancelled in
  process with error responses carrying ``error_code="INVOCATION_ABORTED"``
  (:data:`INVOCATION_ABORTED`); its runner then treats every task scope of
  that invocation as closed and never replays a sealed call. A heal carries the
  same code, so a crashed invocation is closed the same way; earlier versions
  ignore the code on an event that has content.
* **Timestamp columns.** ``DatabaseSessionService`` up to 2.6 stores
  ``events.timestamp`` as naive *local* time (``datetime.fromtimestamp``) and
  reads it back the same way; 2.7 and later store naive UTC. Writers place a
  heal's column value relative to its call row's own value (whatever wrote
  it), so these conversions serve only rows with nothing to be relative to.

This module imports no ADK name that a supported version lacks, and imports
ADK only when one of its answers is first needed (:data:`ADK_VERSION`,
:data:`STORES_LOCAL_TIME`, :data:`EVENT_FIELDS`, or a function that reads
them): a scan reads stored JSON and never needs ADK before its first row.
"""

from __future__ import annotations

import datetime
import functools
import re
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

__all__ = [
    "ADK_VERSION",
    "EVENT_FIELDS",
    "INVOCATION_ABORTED",
    "PORTABLE_EVENT_FIELDS",
    "STORES_LOCAL_TIME",
    "SUPPORTED_ADK",
    "column_to_timestamp",
    "readable_event_data",
    "timestamp_to_column",
]

SUPPORTED_ADK = ">=1.22,<3"
"""The google-adk versions this release is tested against (the reader matrix)."""


def _parse_version(text: str) -> tuple[int, int, int]:
    match = re.match(r"(\d+)\.(\d+)(?:\.(\d+))?", text)
    if match is None:  # pragma: no cover - every release has a numeric version
        raise ImportError(f"cannot read the installed google-adk version {text!r}")
    return int(match[1]), int(match[2]), int(match[3] or 0)


@functools.cache
def _adk_version() -> tuple[int, int, int]:
    from google.adk import version

    return _parse_version(version.__version__)


@functools.cache
def _event_fields() -> frozenset[str]:
    from google.adk.events.event import Event

    return frozenset(Event.model_fields)


if TYPE_CHECKING:  # module attributes computed on first access, by __getattr__ below
    ADK_VERSION: tuple[int, int, int]
    """The installed google-adk as ``(major, minor, patch)``."""
    EVENT_FIELDS: frozenset[str]
    """The fields the installed ADK's ``Event`` has."""
    STORES_LOCAL_TIME: bool
    """Whether the installed ``DatabaseSessionService`` stores naive local time (up to 2.6)."""

PORTABLE_EVENT_FIELDS: frozenset[str] = frozenset({
    "id", "invocation_id", "author", "branch", "timestamp", "content", "custom_metadata",
    "error_code", "error_message",
})
"""The top-level event fields a heal row carries: every supported ``Event`` reads them."""

INVOCATION_ABORTED = "INVOCATION_ABORTED"
"""The ``error_code`` of ADK's abort seal (``google.adk.events._abort_events``, 2.11+)."""


def _stores_local_time() -> bool:
    return _adk_version() < (2, 7)


_LAZY: dict[str, Callable[[], object]] = {
    "ADK_VERSION": _adk_version, "EVENT_FIELDS": _event_fields,
    "STORES_LOCAL_TIME": _stores_local_time,
}


def __getattr__(name: str) -> Any:
    """Computes :data:`ADK_VERSION`, :data:`EVENT_FIELDS` and :data:`STORES_LOCAL_TIME` on use.

    Raises:
        AttributeError: ``name`` is not one of them.
    """
    if name in _LAZY:
        return _LAZY[name]()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def readable_event_data(data: Mapping[str, Any]) -> dict[str, Any]:
    """Returns ``data`` without the top-level fields the installed ``Event`` lacks.

    Args:
        data: An event's JSON object (snake_case keys).
    """
    fields = _event_fields()
    return {key: value for key, value in data.items() if key in fields}


def timestamp_to_column(timestamp: float) -> datetime.datetime:
    """Returns ``events.timestamp`` as the installed ``DatabaseSessionService`` stores it.

    Args:
        timestamp: POSIX seconds.
    """
    if _stores_local_time():
        return datetime.datetime.fromtimestamp(timestamp)
    return datetime.datetime.fromtimestamp(timestamp, tz=datetime.UTC).replace(
        tzinfo=None
    )


def column_to_timestamp(value: datetime.datetime) -> float:
    """Returns the POSIX seconds of an ``events.timestamp`` value, as the installed ADK reads it.

    Args:
        value: The column's value; an aware value is taken as it is.
    """
    if value.tzinfo is not None or _stores_local_time():
        return value.timestamp()
    return value.replace(tzinfo=datetime.UTC).timestamp()
