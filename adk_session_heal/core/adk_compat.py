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
* **ADK's function-call handler.** A dead call run again
  (:mod:`~adk_session_heal.runtime.rerun_plugin`) goes through the handler ADK runs a
  model's calls with, ``handle_function_calls_async`` and
  ``merge_parallel_function_response_events`` of
  ``google.adk.flows.llm_flows.functions`` (its own module in 1.x, a
  compatibility shim over ``flows/llm_flows/tools/`` from 2.x: same names and
  signature in every supported version), so every plugin's and the agent's
  tool callbacks run as for a live call. :func:`run_function_calls` and
  :func:`merge_function_responses` are the only places this package reaches
  into it.
* **Resuming an invocation.** ``Runner.run_async(invocation_id=...)`` of a
  resumable app resumes the invocation and runs its unanswered calls again in
  every supported version but 2.0 and 2.1, where a root ``LlmAgent`` runs as a
  workflow node that ignores the id and starts a new invocation: the model is
  then sent the dead call unanswered (measured: ``tests/adk_matrix/replay_check.py``).
  :data:`RESUME_REPLAYS_CALLS` says which; the wrapper leaves dead calls to a
  resume (``HealPolicy.resumable_app``) only where it does.
* **Tool callbacks in live mode.** ``Runner.run_live`` runs the plugins'
  before- and after-tool callbacks around each tool from 1.27 (1.27.1, the
  first 1.27 release); 1.22 to 1.26 run only the agent's own there, so a
  plugin sees a live call's event (``on_event_callback``) but never its tool
  run. :data:`LIVE_TOOL_PLUGIN_CALLBACKS` says which (measured:
  ``tests/adk_matrix/live_check.py``).
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
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

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
    from google.adk.agents.invocation_context import InvocationContext
    from google.adk.events.event import Event
    from google.adk.tools.base_tool import BaseTool

    ADK_VERSION: tuple[int, int, int]
    """The installed google-adk as ``(major, minor, patch)``."""
    EVENT_FIELDS: frozenset[str]
    """The fields the installed ADK's ``Event`` has."""
    STORES_LOCAL_TIME: bool
    """Whether the installed ``DatabaseSessionService`` stores naive local time (up to 2.6)."""
    RESUME_REPLAYS_CALLS: bool
    """Whether the installed ``Runner`` resumes an invocation by running its unanswered calls
    again (every supported version but 2.0 and 2.1: :func:`resume_replays_calls`)."""
    LIVE_TOOL_PLUGIN_CALLBACKS: bool
    """Whether the installed ADK's live flow runs plugins' tool callbacks (1.27 and later:
    :func:`live_runs_plugin_tool_callbacks`)."""

PORTABLE_EVENT_FIELDS: frozenset[str] = frozenset({
    "id", "invocation_id", "author", "branch", "timestamp", "content", "custom_metadata",
    "error_code", "error_message",
})
"""The top-level event fields a heal row carries: every supported ``Event`` reads them."""

INVOCATION_ABORTED = "INVOCATION_ABORTED"
"""The ``error_code`` of ADK's abort seal (``google.adk.events._abort_events``, 2.11+)."""


def _stores_local_time() -> bool:
    return _adk_version() < (2, 7)


def resume_replays_calls(version: tuple[int, int, int]) -> bool:
    """Whether ``Runner.run_async(invocation_id=...)`` of that ADK replays unanswered calls.

    2.0 and 2.1 run a root ``LlmAgent`` through ``Runner._run_node_async``,
    which resolves an invocation only from a function response in the new
    message: without one it starts a new invocation. 2.2 takes the id.
    """
    return not (2, 0) <= version[:2] < (2, 2)


def live_runs_plugin_tool_callbacks(version: tuple[int, int, int]) -> bool:
    """Whether that ADK's live flow runs plugins' before- and after-tool callbacks.

    Up to 1.26, ``_execute_single_function_call_live`` runs only the agent's
    canonical tool callbacks; 1.27 added the plugin manager's, which every
    later version (2.x's ``_execute_single_prepared_call`` too) runs.
    """
    return version >= (1, 27)


_LAZY: dict[str, Callable[[], object]] = {
    "ADK_VERSION": _adk_version, "EVENT_FIELDS": _event_fields,
    "STORES_LOCAL_TIME": _stores_local_time,
    "RESUME_REPLAYS_CALLS": lambda: resume_replays_calls(_adk_version()),
    "LIVE_TOOL_PLUGIN_CALLBACKS": lambda: live_runs_plugin_tool_callbacks(_adk_version()),
}


def __getattr__(name: str) -> Any:
    """Computes :data:`ADK_VERSION`, :data:`EVENT_FIELDS`, :data:`STORES_LOCAL_TIME`,
    :data:`RESUME_REPLAYS_CALLS` and :data:`LIVE_TOOL_PLUGIN_CALLBACKS` on use.

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


async def run_function_calls(context: InvocationContext, call_event: Event,
                             tools: Mapping[str, BaseTool]) -> Event | None:
    """Runs the calls of ``call_event`` through ADK's own function-call handler.

    ``handle_function_calls_async``, as ADK's flow runs a model's calls: every
    plugin's ``before_tool_callback``, then the agent's (a dict returned
    answers the call and the tool does not run; arguments rewritten in place
    are what the tool gets), the tool, ``on_tool_error_callback`` if it
    raises, every plugin's and the agent's ``after_tool_callback`` (a dict
    returned replaces the result), then the response event built from it.

    Args:
        context: The invocation context; its ``agent`` is the agent whose
            callbacks run (the one that made the calls).
        call_event: The event holding the calls, all of which run.
        tools: The agent's tools by name.

    Returns:
        The merged function response event, or ``None`` when no call gives a
        response (a long-running tool that returned nothing).

    Raises:
        Exception: What a tool raised when no error callback answered it.
    """
    from google.adk.flows.llm_flows import functions

    return await functions.handle_function_calls_async(context, call_event, dict(tools))


def merge_function_responses(events: Sequence[Event]) -> Event:
    """Merges response events of parallel calls into one, as ADK's handler does.

    Args:
        events: At least one function response event.
    """
    from google.adk.flows.llm_flows import functions

    return functions.merge_parallel_function_response_events(list(events))
