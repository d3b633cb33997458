"""Builders for ADK event histories, for this package's tests and for yours.

Example::

    history = History()
    history.user("weather in Paris?")
    history.call("get_weather", {"city": "Paris"})   # the process dies here
    history.user("hello?")                           # next turn, new invocation
    events = history.events                          # list[google.adk.events.Event]

Each :meth:`History.user` starts a new invocation; events get deterministic
ids (``e-0001``, ...) and strictly increasing timestamps, so histories compare
equal across runs.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from google.adk.auth.auth_tool import AuthConfig
from google.adk.events.event import Event
from google.adk.events.event_actions import EventActions, EventCompaction
from google.adk.tools.tool_confirmation import ToolConfirmation
from google.genai import types

__all__ = ["History"]


class History:
    """Builds a session's event list turn by turn.

    Args:
        agent: Author of model events.
        start: Timestamp of the first event.
        step: Seconds between consecutive events.
    """

    def __init__(self, *, agent: str = "assistant", start: float = 1_700_000_000.0,
                 step: float = 1.0) -> None:
        self.agent = agent
        self.events: list[Event] = []
        self._clock = start
        self._step = step
        self._invocations = 0
        self._calls = 0
        self.invocation_id = ""

    # -- plumbing ---------------------------------------------------------

    def _add(self, **fields: Any) -> Event:
        fields.setdefault("invocation_id", self.invocation_id)
        fields.setdefault("author", self.agent)
        event = Event(id=f"e-{len(self.events) + 1:04d}", timestamp=self._clock, **fields)
        self._clock += self._step
        self.events.append(event)
        return event

    def new_call_id(self) -> str:
        """Returns a fresh call id (``call-1``, ``call-2``, ...)."""
        self._calls += 1
        return f"call-{self._calls}"

    # -- turns ------------------------------------------------------------

    def user(self, text: str, *, invocation_id: str | None = None) -> Event:
        """Appends a user message, starting a new invocation unless one is given."""
        if invocation_id is None:
            self._invocations += 1
            invocation_id = f"inv-{self._invocations}"
        self.invocation_id = invocation_id
        return self._add(
            author="user",
            content=types.Content(role="user", parts=[types.Part(text=text)]),
        )

    def text(self, text: str, *, author: str | None = None) -> Event:
        """Appends a model text reply."""
        return self._add(
            author=author or self.agent,
            content=types.Content(role="model", parts=[types.Part(text=text)]),
        )

    def calls(
        self,
        *calls: tuple[str, Mapping[str, Any]] | str,
        ids: Iterable[str | None] | None = None,
        long_running: bool = False,
        author: str | None = None,
        branch: str | None = None,
    ) -> list[str | None]:
        """Appends one model event holding one or more function calls.

        Args:
            *calls: ``name`` or ``(name, args)`` per call.
            ids: Explicit call ids (``None`` for an id-less call); fresh ids
                otherwise.
            long_running: Mark every call long-running.
            author: Author of the event (default: the agent).
            branch: Branch of the event.

        Returns:
            The call ids, in order.
        """
        normalized = [(c, {}) if isinstance(c, str) else c for c in calls]
        call_ids: list[str | None] = (
            list(ids) if ids is not None else [self.new_call_id() for _ in normalized]
        )
        parts = [
            types.Part(function_call=types.FunctionCall(id=call_id, name=name, args=dict(args)))
            for (name, args), call_id in zip(normalized, call_ids, strict=True)
        ]
        self._add(
            author=author or self.agent,
            branch=branch,
            content=types.Content(role="model", parts=parts),
            long_running_tool_ids={i for i in call_ids if i} if long_running else None,
        )
        return call_ids

    def call(self, name: str, args: Mapping[str, Any] | None = None, *,
             call_id: str | None = None, long_running: bool = False) -> str:
        """Appends a model event with one function call and returns its id."""
        ids = [call_id] if call_id is not None else None
        (result,) = self.calls((name, args or {}), ids=ids, long_running=long_running)
        assert result is not None
        return result

    def respond(
        self,
        *answers: tuple[str | None, str] | tuple[str | None, str, Mapping[str, Any]],
        author: str | None = None,
        pending: bool = False,
    ) -> Event:
        """Appends one event holding function responses.

        Args:
            *answers: ``(call_id, name)`` or ``(call_id, name, response)``.
            author: Author of the event (default: the agent).
            pending: Mark each answered id as awaiting a tool confirmation (ADK's
                placeholder response for a tool that asked for confirmation).

        Returns:
            The event.
        """
        parts = []
        for answer in answers:
            call_id, name = answer[0], answer[1]
            response = dict(answer[2]) if len(answer) > 2 else {"result": "ok"}
            parts.append(
                types.Part(
                    function_response=types.FunctionResponse(id=call_id, name=name,
                                                             response=response)
                )
            )
        actions = EventActions()
        if pending:
            actions.requested_tool_confirmations = {
                a[0]: ToolConfirmation(hint="confirm?") for a in answers if a[0]
            }
        return self._add(
            author=author or self.agent,
            content=types.Content(role="user", parts=parts),
            actions=actions,
        )

    def request_credential(self, call_id: str) -> Event:
        """Appends a response event whose call awaits a credential (ADK auth flow)."""
        from google.adk.auth.auth_credential import AuthCredentialTypes  # noqa: F401

        actions = EventActions(
            requested_auth_configs={call_id: AuthConfig.model_construct()},
        )
        return self._add(actions=actions)

    def rewind(self, before_invocation_id: str) -> Event:
        """Appends a rewind event annulling ``before_invocation_id`` and after."""
        self._invocations += 1
        self.invocation_id = f"inv-{self._invocations}"
        return self._add(
            author="user",
            actions=EventActions(rewind_before_invocation_id=before_invocation_id),
        )

    def compaction(self, summary: str = "summary") -> Event:
        """Appends a compaction summary event over everything so far."""
        first = self.events[0].timestamp if self.events else self._clock
        return self._add(
            author="user",
            actions=EventActions(
                compaction=EventCompaction(
                    start_timestamp=first,
                    end_timestamp=self._clock,
                    compacted_content=types.Content(
                        role="model", parts=[types.Part(text=summary)]
                    ),
                )
            ),
        )
