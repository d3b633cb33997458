"""A scripted offline live model: ``Runner.run_live`` with no network and no API key.

:class:`ScriptedLiveModel` is a ``BaseLlm`` whose ``connect()`` opens a
:class:`ScriptedLiveConnection`, the model's side of a live conversation.
Everything the runner does to the connection (opening it, ``send_history``,
``send_content`` with a user's message or function responses, partial or not,
``send_realtime``) is recorded in ``connection.sent`` and handed to the
script, a function that returns what the model sends back: function calls,
text, ``turn_complete``, a resumption handle, ``go_away``. When the runner
closes the connection (it does when its ``LiveRequestQueue`` is closed),
``receive()`` ends with websockets' ``ConnectionClosedOK``, as a real live
connection's end does.

Example::

    def model_side(sent: LiveSent) -> list[LlmResponse]:
        if sent.text == "watch the price":
            return [ScriptedLiveModel.call("watch_price", {"symbol": "X"}, call_id="live-1")]
        return []

    agent = LlmAgent(name="assistant", model=ScriptedLiveModel(script=model_side),
                     tools=[watch_price])   # an async generator function: a streaming tool
    queue = LiveRequestQueue()
    queue.send_content(types.Content(role="user", parts=[types.Part(text="watch the price")]))
    async for event in runner.run_live(user_id="u", session_id=session.id,
                                       live_request_queue=queue,
                                       run_config=RunConfig(response_modalities=["TEXT"])):
        ...   # queue.close() ends the run

Public through :mod:`adk_session_heal.testing`, which re-exports every name here.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator, AsyncIterator, Callable, Iterable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from dataclasses import dataclass
from typing import Any, Literal

from google.adk.models.base_llm_connection import BaseLlmConnection
from google.adk.models.llm_request import LlmRequest
from google.adk.models.llm_response import LlmResponse
from google.genai import types
from pydantic import Field, PrivateAttr
from websockets.exceptions import ConnectionClosedOK
from websockets.frames import Close

from .scripted import ProviderRejected, _ScriptedBase

LiveSentKind = Literal["open", "history", "content", "realtime"]
"""What the runner did to a scripted live connection (:class:`LiveSent`)."""


@dataclass(frozen=True)
class LiveSent:
    """One thing the runner did to a :class:`ScriptedLiveConnection`, as its script sees it.

    Attributes:
        kind: ``"open"`` (the connection was opened; ``connection.index`` says
            which of the model's connections it is, from 0), ``"history"``
            (``send_history``: ``contents``), ``"content"`` (a user's message
            or function responses: ``content``; ``partial`` for a streaming
            tool's chunk on ADK 2.x), ``"realtime"`` (``send_realtime``: ``blob``).
        connection: The connection.
        content: The content sent (``"content"`` only), as a server gets it (through JSON).
        partial: Whether ADK sent the content as a partial update.
        contents: The history sent (``"history"`` only), likewise.
        blob: The realtime input sent (``"realtime"`` only).
    """

    kind: LiveSentKind
    connection: ScriptedLiveConnection
    content: types.Content | None = None
    partial: bool = False
    contents: tuple[types.Content, ...] = ()
    blob: Any = None

    @property
    def text(self) -> str:
        """The text parts of ``content``, joined (``""`` when it has none)."""
        parts = self.content.parts if self.content is not None else None
        return "".join(part.text or "" for part in parts or ())

    @property
    def function_responses(self) -> list[types.FunctionResponse]:
        """The function responses in ``content``, in order."""
        parts = self.content.parts if self.content is not None else None
        return [part.function_response for part in parts or ()
                if part.function_response is not None]


LiveScript = Callable[[LiveSent], Iterable[LlmResponse]]
"""The model's side: what it sends back for each thing the runner does."""


def _silent(sent: LiveSent) -> Iterable[LlmResponse]:
    """The default script: the model never says anything."""
    return ()


_CLOSED = Close(1000, "closed by the client")


def _as_sent(content: types.Content) -> types.Content:
    """The content as a live server receives it: a copy, through its JSON.

    Raises:
        ProviderRejected: It has no JSON form (a real connection fails there too).
    """
    try:
        return types.Content.model_validate_json(content.model_dump_json(exclude_none=True))
    except ValueError as exc:  # pydantic's serialization and validation errors are ValueErrors
        raise ProviderRejected(f"a live model cannot be sent this content: {exc}") from exc


class ScriptedLiveConnection(BaseLlmConnection):
    """One live connection of a :class:`ScriptedLiveModel`: records, and replies by its script.

    Args:
        model: The model whose script replies.
        index: Which of the model's connections this is (0 for the first).
        request: The ``LlmRequest`` it was opened with.
    """

    def __init__(self, model: ScriptedLiveModel, index: int, request: LlmRequest) -> None:
        self.index = index
        self.request = request
        self.sent: list[LiveSent] = []
        self.closed = False
        self._model = model
        self._replies: asyncio.Queue[LlmResponse | None] = asyncio.Queue()

    def _react(self, sent: LiveSent) -> None:
        """Records what the runner did and queues the script's replies to it."""
        self.sent.append(sent)
        if self.closed:
            return
        for reply in self._model.script(sent):
            self._replies.put_nowait(reply)

    async def send_history(self, history: list[types.Content]) -> None:
        """Checks the history as a strict provider would, then records it.

        Raises:
            ProviderRejected: The model's validator found problems (a provider
                would refuse the connection).
        """
        problems = self._model.validate_contents(history)
        if problems:
            raise ProviderRejected("; ".join(problems))
        self._react(LiveSent("history", self, contents=tuple(_as_sent(c) for c in history)))

    async def send_content(self, content: types.Content) -> None:
        """Records a content (ADK 1.x sends every content through here)."""
        await self._send_content(content)

    async def _send_content(self, content: types.Content, *, partial: bool = False) -> None:
        """Records a content and whether ADK 2.x sent it as a partial update.

        Raises:
            ProviderRejected: The content has no JSON form.
        """
        self._react(LiveSent("content", self, content=_as_sent(content), partial=partial))

    async def send_realtime(self, blob: Any) -> None:
        """Records a realtime input (audio, video, activity signals)."""
        self._react(LiveSent("realtime", self, blob=blob))

    async def receive(self) -> AsyncGenerator[LlmResponse, None]:
        """Yields the script's replies; raises ``ConnectionClosedOK`` once the connection closed.

        Raises:
            websockets.exceptions.ConnectionClosedOK: The connection was closed
                (this and every later call).
        """
        while True:
            reply = await self._replies.get()
            if reply is None:
                self._replies.put_nowait(None)  # every later receive() ends as well
                raise ConnectionClosedOK(_CLOSED, _CLOSED, rcvd_then_sent=False)
            yield reply

    async def close(self) -> None:
        """Closes the connection: ``receive()`` ends; later sends are recorded, not answered."""
        if not self.closed:
            self.closed = True
            self._replies.put_nowait(None)


class ScriptedLiveModel(_ScriptedBase):
    """An offline live model: each connection replies to the runner by a script.

    Args:
        script: A function of each :class:`LiveSent` returning the responses
            the model sends back (none by default). Build them with
            :meth:`call`, :meth:`say` and :meth:`turn_complete`.
        validate: Returns the problems of the history a connection is sent;
            defaults to :func:`~adk_session_heal.testing.unpaired_tool_calls`.
    """

    model: str = "scripted-offline-live-model"
    script: LiveScript = Field(default=_silent)
    _connections: list[ScriptedLiveConnection] = PrivateAttr(default_factory=list)

    @property
    def connections(self) -> list[ScriptedLiveConnection]:
        """Every connection opened, in order (a reconnect opens another)."""
        return self._connections

    @staticmethod
    def say(text: str) -> LlmResponse:
        """Returns a model response holding text, completing the model's turn."""
        return _ScriptedBase.say(text).model_copy(update={"turn_complete": True})

    @staticmethod
    def turn_complete() -> LlmResponse:
        """Returns the response that ends the model's turn."""
        return LlmResponse(turn_complete=True)

    def connect(self, llm_request: LlmRequest) -> AbstractAsyncContextManager[BaseLlmConnection]:
        """Opens a scripted connection; its script first sees ``"open"``."""
        return self._open(llm_request)

    @asynccontextmanager
    async def _open(self, llm_request: LlmRequest) -> AsyncIterator[BaseLlmConnection]:
        connection = ScriptedLiveConnection(self, len(self._connections), llm_request)
        self._connections.append(connection)
        connection._react(LiveSent("open", connection))
        try:
            yield connection
        finally:
            await connection.close()

    async def generate_content_async(
        self, llm_request: LlmRequest, stream: bool = False
    ) -> AsyncGenerator[LlmResponse, None]:
        """Refuses: this model answers live connections only (``ScriptedModel`` is for
        ``run_async``).

        Raises:
            NotImplementedError: Always.
        """
        raise NotImplementedError("ScriptedLiveModel answers run_live connections only; "
                                  "use ScriptedModel for run_async")
        yield  # pragma: no cover  (makes this an async generator, as BaseLlm's is)
