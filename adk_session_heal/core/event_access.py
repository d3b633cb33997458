"""The minimal view of a stored event that classification needs, from two sources.

Classification must run both on ADK ``Event`` objects (the wrapper, the plugin)
and straight on stored event JSON (the repair scan, which must not pay for
pydantic validation of healthy rows). Rather than copying every event into a
view object (which would cost more than the classification itself), the
classifier reads events through an :class:`EventAccess`: a small set of
accessor functions. Two implementations exist:

* :data:`ADK_EVENTS` reads ``google.adk.events.Event`` objects.
* :data:`STORED_JSON` reads the dict stored in ADK's ``event_data`` column
  (``Event.model_dump(exclude_none=True, mode="json")``); camelCase keys, as
  served by ADK's HTTP API, are accepted too.

Both answer the same questions with the same types, so the classifier has one
code path. Neither performs I/O.

Stored JSON is not validated on the way in (that would cost every healthy row
a pass over its parts): a row whose fields have the wrong JSON types makes
:data:`STORED_JSON` raise ``TypeError``, ``AttributeError`` or ``ValueError``,
and :func:`stored_event_problem` then says which field of which row is wrong.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Generic, Protocol, TypeVar

from ..policy import HEAL_METADATA_KEY as HEAL_METADATA_KEY
from .pairing import EMPTY_STEP, Ref, Step

if TYPE_CHECKING:  # annotations only: reading stored JSON loads no ADK or google-genai
    from google.adk.events.event import Event
    from google.genai import types


E = TypeVar("E")
E_contra = TypeVar("E_contra", contravariant=True)


class EventAccess(Protocol[E_contra]):
    """Reads the fields classification needs from one kind of event object."""

    def steps(self, events: Sequence[E_contra]) -> tuple[list[Step], list[int]]:
        """Returns each event's call and response parts, and where rewinds are.

        One call for the whole list: this is the only per-event work a session
        whose calls are all answered pays for, so it is a single tight loop.

        Returns:
            ``(steps, rewinds)``: one step per event (empty for partial events
            and events without calls or responses), and the indices of rewind
            events. Rewind events are recognised among content-less events, as
            ADK writes them (``google/adk/sessions/_rewind_utils.py``).
        """
        ...

    def event_id(self, event: E_contra) -> str:
        """Returns the event id."""
        ...

    def invocation_id(self, event: E_contra) -> str:
        """Returns the invocation id ('' when unset)."""
        ...

    def timestamp(self, event: E_contra) -> float:
        """Returns the event time as POSIX seconds."""
        ...

    def author(self, event: E_contra) -> str:
        """Returns the author ('user' or an agent name)."""
        ...

    def branch(self, event: E_contra) -> str | None:
        """Returns the agent branch, if any."""
        ...

    def isolation_scope(self, event: E_contra) -> str | None:
        """Returns ADK's isolation scope tag, if any."""
        ...

    def node_path(self, event: E_contra) -> str | None:
        """Returns the workflow node path, if any."""
        ...

    def is_partial(self, event: E_contra) -> bool:
        """Returns whether the event is a streaming partial (never counts)."""
        ...

    def is_compaction(self, event: E_contra) -> bool:
        """Returns whether the event is a compaction summary."""
        ...

    def rewind_target(self, event: E_contra) -> str | None:
        """Returns the invocation this event rewinds before, if it is a rewind."""
        ...

    def long_running_ids(self, event: E_contra) -> Collection[str]:
        """Returns the ids the event marks as long-running calls."""
        ...

    def pending_ids(self, event: E_contra) -> Collection[str]:
        """Returns the call ids awaiting a tool confirmation or a credential."""
        ...

    def heal_marker(self, event: E_contra) -> Mapping[str, Any] | None:
        """Returns this package's synthetic-event marker, if the event has one."""
        ...

    def speaks(self, event: E_contra) -> bool:
        """Whether the event holds a part a model request shows besides calls and responses.

        Text, inline or file data, code or its result, not marked as a
        thought: what makes ADK put an event without calls in a request as a
        turn of its author (it leaves out events without such parts).
        """
        ...


def content_step(content: types.Content | None) -> Step:
    """Returns the call and response parts of one ``types.Content`` (or ``None``)."""
    return content_steps((content,))[0][0]


def content_steps(
        contents: Iterable[types.Content | None]) -> tuple[list[Step], list[str]]:
    """Returns the call and response parts, and the role, of each ``types.Content``.

    The only loop over genai parts in the package: event accessors, the context
    filter and the Gemini validator all read parts through it. It runs on every
    ``get_session`` and every model request, over whole histories, so it is one
    tight loop: a content of one part (the usual case) is read without a
    list, and lists are only allocated for contents that hold calls or
    responses.

    Args:
        contents: Contents, oldest first; ``None`` reads as an empty step.

    Returns:
        ``(steps, roles)``, one entry per content (role ``""`` when unset).
    """
    steps: list[Step] = []
    roles: list[str] = []
    step = steps.append
    role = roles.append
    for content in contents:
        if content is None:
            step(EMPTY_STEP)
            role("")
            continue
        role(content.role or "")
        parts = content.parts
        if not parts:
            step(EMPTY_STEP)
            continue
        if len(parts) == 1:
            part = parts[0]
            call = part.function_call
            if call is not None:
                step(([(call.id or None, call.name or "")], ()))
                continue
            response = part.function_response
            if response is not None:
                step(((), [(response.id or None, response.name or "")]))
            else:
                step(EMPTY_STEP)
            continue
        calls: list[Ref] | None = None
        responses: list[Ref] | None = None
        for part in parts:
            call = part.function_call
            if call is not None:
                if calls is None:
                    calls = []
                calls.append((call.id or None, call.name or ""))
                continue
            response = part.function_response
            if response is not None:
                if responses is None:
                    responses = []
                responses.append((response.id or None, response.name or ""))
        if calls is None and responses is None:
            step(EMPTY_STEP)
        else:
            step((calls or (), responses or ()))
    return steps, roles


def json_content_step(content: Mapping[str, Any] | None) -> Step:
    """Returns the call and response parts of one content dict (snake or camel case)."""
    return json_content_steps((content,))[0]


def json_content_steps(contents: Iterable[Mapping[str, Any] | None]) -> list[Step]:
    """Returns the call and response parts of each content dict (snake or camel case).

    The loop over stored parts, the counterpart of :func:`content_steps`: a
    scan reads every stored event's parts through it, so it is one loop for
    a whole history, and lists are only allocated for contents that hold
    calls or responses.

    Args:
        contents: Content dicts, oldest first; ``None`` (or an empty one)
            reads as an empty step.
    """
    steps: list[Step] = []
    step = steps.append
    for content in contents:
        parts = content.get("parts") if content else None
        if not parts:
            step(EMPTY_STEP)
            continue
        calls: list[Ref] | None = None
        responses: list[Ref] | None = None
        for part in parts:
            if not part and type(part) is dict:  # as a scan's partial decoding leaves a text
                continue
            call = part.get("function_call") or part.get("functionCall")
            if call is not None:
                (calls := calls or []).append(_json_ref(call))
                continue
            response = part.get("function_response") or part.get("functionResponse")
            if response is not None:
                (responses := responses or []).append(_json_ref(response))
        if calls is None and responses is None:
            step(EMPTY_STEP)
        else:
            step((calls or (), responses or ()))
    return steps


def _json_ref(function: Mapping[str, Any]) -> Ref:
    """Returns a stored function call's or response's ``(id, name)``.

    Raises:
        TypeError: The id or the name is not a string (only function parts pay
            for this check).
    """
    call_id, name = function.get("id") or None, function.get("name") or ""
    if (call_id is not None and type(call_id) is not str) or type(name) is not str:
        raise TypeError("a function call or response has a non-string id or name")
    return call_id, name


def _kind(value: Any) -> str:
    """Names a decoded JSON value's type the way JSON does."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, (int, float)):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "a list"
    return "an object" if isinstance(value, dict) else type(value).__name__


def _typed(value: Any, expected: type | tuple[type, ...], what: str) -> str | None:
    """Returns the problem of an optional field that is not ``expected``, or ``None``."""
    if value is None or (isinstance(value, expected) and not isinstance(value, bool)):
        return None
    return f"{what} is {_kind(value)}, not {_EXPECTED[expected]}"


_EXPECTED: dict[type | tuple[type, ...], str] = {
    dict: "an object", list: "a list", str: "a string", (int, float): "a number",
}


def stored_event_problem(event: Any) -> str | None:
    """Returns what makes one stored event unreadable by :data:`STORED_JSON`, or ``None``.

    Checks every field :data:`STORED_JSON` (and the heal built from a call
    event) reads: the event is an object; ``content`` an object whose
    ``parts`` is a list of objects; each ``function_call`` /
    ``function_response`` an object with a string ``id`` and ``name``;
    ``timestamp`` a number; ids, author, branch and scope strings; ``actions``,
    ``custom_metadata`` and ``node_info`` objects; ``long_running_tool_ids``
    a list. Slow next to classification: called only for a session whose
    classification failed.

    Args:
        event: One decoded ``event_data`` value.

    Returns:
        One short line naming the field and its wrong type (never its value).
    """
    if not isinstance(event, dict):
        return f"event_data is {_kind(event)}, not an object"
    for snake, camel, expected in _EVENT_FIELDS:
        value = _get(event, snake, camel)
        problem = _typed(value, expected, snake)
        if problem is not None:
            return problem
    content = event.get("content")
    parts = content.get("parts") if content else None
    problem = _typed(parts, list, "content.parts")
    if problem is not None:
        return problem
    for index, part in enumerate(parts or ()):
        if not isinstance(part, dict):
            return f"content.parts[{index}] is {_kind(part)}, not an object"
        for snake, camel in (("function_call", "functionCall"),
                             ("function_response", "functionResponse")):
            function = _get(part, snake, camel)
            what = f"content.parts[{index}].{snake}"
            problem = _typed(function, dict, what)
            if problem is None and function:
                problem = (_typed(function.get("id"), str, f"{what}.id")
                           or _typed(function.get("name"), str, f"{what}.name"))
            if problem is not None:
                return problem
    actions = event.get("actions") or {}
    for snake, camel, expected in _ACTION_FIELDS:
        problem = _typed(_get(actions, snake, camel), expected, f"actions.{snake}")
        if problem is not None:
            return problem
    node_info = _get(event, "node_info", "nodeInfo") or {}
    return _typed(node_info.get("path"), str, "node_info.path")


_EVENT_FIELDS: tuple[tuple[str, str, type | tuple[type, ...]], ...] = (
    ("id", "id", str),
    ("invocation_id", "invocationId", str),
    ("timestamp", "timestamp", (int, float)),
    ("author", "author", str),
    ("branch", "branch", str),
    ("isolation_scope", "isolationScope", str),
    ("content", "content", dict),
    ("actions", "actions", dict),
    ("node_info", "nodeInfo", dict),
    ("long_running_tool_ids", "longRunningToolIds", list),
    ("custom_metadata", "customMetadata", dict),
)
"""Top-level fields of a stored event and the JSON type each must have when present."""

_ACTION_FIELDS: tuple[tuple[str, str, type | tuple[type, ...]], ...] = (
    ("rewind_before_invocation_id", "rewindBeforeInvocationId", str),
    ("requested_tool_confirmations", "requestedToolConfirmations", dict),
    ("requested_auth_configs", "requestedAuthConfigs", dict),
)
"""Fields of ``actions`` the classifier reads and the JSON type each must have."""


class AdkEventAccess:
    """Reads ``google.adk.events.Event`` objects."""

    def steps(self, events: Sequence[Event]) -> tuple[list[Step], list[int]]:
        """Returns each event's call and response parts, and where rewinds are."""
        contents: list[types.Content | None] = []
        rewinds: list[int] = []
        for index, event in enumerate(events):  # one pass: this runs on every get_session
            content = event.content
            if content is None:
                if event.actions.rewind_before_invocation_id:
                    rewinds.append(index)
            elif event.partial:
                content = None
            contents.append(content)
        return content_steps(contents)[0], rewinds

    def event_id(self, event: Event) -> str:
        """Returns the event id."""
        return event.id

    def invocation_id(self, event: Event) -> str:
        """Returns the invocation id ('' when unset)."""
        return event.invocation_id or ""

    def timestamp(self, event: Event) -> float:
        """Returns the event time as POSIX seconds."""
        return float(event.timestamp)

    def author(self, event: Event) -> str:
        """Returns the author."""
        return event.author

    def branch(self, event: Event) -> str | None:
        """Returns the agent branch, if any."""
        return event.branch

    def isolation_scope(self, event: Event) -> str | None:
        """Returns ADK's isolation scope tag, if any (ADK 1.x events have none)."""
        scope: str | None = getattr(event, "isolation_scope", None)
        return scope

    def node_path(self, event: Event) -> str | None:
        """Returns the workflow node path, if any (ADK 1.x events have none)."""
        node_info = getattr(event, "node_info", None)
        return (node_info.path or None) if node_info is not None else None

    def is_partial(self, event: Event) -> bool:
        """Returns whether the event is a streaming partial."""
        return bool(event.partial)

    def is_compaction(self, event: Event) -> bool:
        """Returns whether the event is a compaction summary."""
        return event.actions.compaction is not None

    def rewind_target(self, event: Event) -> str | None:
        """Returns the invocation this event rewinds before, if any."""
        return event.actions.rewind_before_invocation_id or None

    def long_running_ids(self, event: Event) -> Collection[str]:
        """Returns the ids the event marks as long-running calls."""
        return event.long_running_tool_ids or ()

    def pending_ids(self, event: Event) -> Collection[str]:
        """Returns the call ids awaiting a tool confirmation or a credential."""
        actions = event.actions
        confirmations = actions.requested_tool_confirmations
        auth = actions.requested_auth_configs
        if not confirmations and not auth:
            return ()
        return {*confirmations, *auth}

    def heal_marker(self, event: Event) -> Mapping[str, Any] | None:
        """Returns this package's synthetic-event marker, if any."""
        metadata = event.custom_metadata
        if not metadata:
            return None
        marker = metadata.get(HEAL_METADATA_KEY)
        return marker if isinstance(marker, Mapping) else None

    def speaks(self, event: Event) -> bool:
        """Whether the event holds a visible part besides calls and responses."""
        content = event.content
        if content is None or not content.parts or event.partial:
            return False
        return any(not part.thought and (part.text or part.inline_data or part.file_data
                                         or part.executable_code or part.code_execution_result)
                   for part in content.parts)


_VISIBLE_PARTS = (("text", "text"), ("inline_data", "inlineData"), ("file_data", "fileData"),
                  ("executable_code", "executableCode"),
                  ("code_execution_result", "codeExecutionResult"))
"""Keys of a stored part that show in a model request (see :meth:`EventAccess.speaks`)."""


def _get(data: Mapping[str, Any], snake: str, camel: str) -> Any:
    value = data.get(snake)
    if value is None:
        value = data.get(camel)
    return value


class StoredJsonAccess:
    """Reads stored event JSON (``event_data``) as plain dicts, without pydantic."""

    def steps(self, events: Sequence[Mapping[str, Any]]) -> tuple[list[Step], list[int]]:
        """Returns each event's call and response parts, and where rewinds are."""
        contents: list[Mapping[str, Any] | None] = []
        rewinds: list[int] = []
        content_of = contents.append
        for index, event in enumerate(events):  # a scan reads every event: two flat loops
            content = event.get("content")
            if not content:
                content_of(None)
                if self.rewind_target(event):
                    rewinds.append(index)
            elif event.get("partial"):
                content_of(None)
            else:
                content_of(content)
        return json_content_steps(contents), rewinds

    def event_id(self, event: Mapping[str, Any]) -> str:
        """Returns the event id."""
        return str(event.get("id") or "")

    def invocation_id(self, event: Mapping[str, Any]) -> str:
        """Returns the invocation id ('' when unset)."""
        return str(_get(event, "invocation_id", "invocationId") or "")

    def timestamp(self, event: Mapping[str, Any]) -> float:
        """Returns the event time as POSIX seconds."""
        return float(event.get("timestamp") or 0.0)

    def author(self, event: Mapping[str, Any]) -> str:
        """Returns the author."""
        return str(event.get("author") or "")

    def branch(self, event: Mapping[str, Any]) -> str | None:
        """Returns the agent branch, if any."""
        return event.get("branch") or None

    def isolation_scope(self, event: Mapping[str, Any]) -> str | None:
        """Returns ADK's isolation scope tag, if any."""
        return _get(event, "isolation_scope", "isolationScope") or None

    def node_path(self, event: Mapping[str, Any]) -> str | None:
        """Returns the workflow node path, if any."""
        node_info = _get(event, "node_info", "nodeInfo")
        return (node_info.get("path") or None) if node_info else None

    def is_partial(self, event: Mapping[str, Any]) -> bool:
        """Returns whether the event is a streaming partial."""
        return bool(event.get("partial"))

    def is_compaction(self, event: Mapping[str, Any]) -> bool:
        """Returns whether the event is a compaction summary."""
        actions = event.get("actions")
        return bool(actions and actions.get("compaction"))

    def rewind_target(self, event: Mapping[str, Any]) -> str | None:
        """Returns the invocation this event rewinds before, if any."""
        actions = event.get("actions")
        if not actions:
            return None
        return _get(actions, "rewind_before_invocation_id", "rewindBeforeInvocationId") or None

    def long_running_ids(self, event: Mapping[str, Any]) -> Collection[str]:
        """Returns the ids the event marks as long-running calls."""
        return _get(event, "long_running_tool_ids", "longRunningToolIds") or ()

    def pending_ids(self, event: Mapping[str, Any]) -> Collection[str]:
        """Returns the call ids awaiting a tool confirmation or a credential."""
        actions = event.get("actions")
        if not actions:
            return ()
        get = actions.get  # _get's reads, inline: this runs for every call and response event
        confirmations = get("requested_tool_confirmations")
        if confirmations is None:
            confirmations = get("requestedToolConfirmations")
        auth = get("requested_auth_configs")
        if auth is None:
            auth = get("requestedAuthConfigs")
        if not confirmations and not auth:
            return ()
        return {*(confirmations or ()), *(auth or ())}

    def heal_marker(self, event: Mapping[str, Any]) -> Mapping[str, Any] | None:
        """Returns this package's synthetic-event marker, if any."""
        metadata = _get(event, "custom_metadata", "customMetadata")
        if not metadata:
            return None
        marker = metadata.get(HEAL_METADATA_KEY)
        return marker if isinstance(marker, Mapping) else None

    def speaks(self, event: Mapping[str, Any]) -> bool:
        """Whether the event holds a visible part besides calls and responses."""
        content = event.get("content")
        parts = content.get("parts") if content and not event.get("partial") else None
        return any(isinstance(part, Mapping) and not part.get("thought")
                   and any(_get(part, snake, camel) for snake, camel in _VISIBLE_PARTS)
                   for part in parts or ())


class _Checked(Generic[E]):
    """Type-level assertion that both adapters satisfy :class:`EventAccess`."""

    def __init__(self, access: EventAccess[E]) -> None:
        self.access = access


ADK_EVENTS = AdkEventAccess()
"""Accessor for ``google.adk.events.Event`` objects."""

STORED_JSON = StoredJsonAccess()
"""Accessor for stored event JSON dicts."""

if TYPE_CHECKING:
    _Checked[Event](ADK_EVENTS)
    _Checked[Mapping[str, Any]](STORED_JSON)
