"""Converters from ADK histories to each provider's request format.

A history is a session's events (``google.adk.events.Event`` objects or the
JSON dicts ADK stores in ``event_data``) or a request's contents
(``google.genai.types.Content`` objects or their dicts). Each converter renders
it the way ADK's model classes do, closely enough for the validators in
:mod:`adk_session_heal.providers.validators` to say what the provider would reject:

* :func:`to_openai_chat`: as ``LiteLlm`` does: a content holding function
  responses becomes one ``tool`` message per response (plus a message for any
  other parts), model contents become ``assistant`` messages with
  ``tool_calls``.
* :func:`to_openai_responses`: ``message``, ``function_call`` and
  ``function_call_output`` items.
* :func:`to_anthropic`: as ``AnthropicLlm`` does: one message per content,
  ``tool_use`` / ``tool_result`` blocks.
* :func:`to_gemini`: ``contents`` dicts.

Events are taken as stored: partial events and events without content are
skipped; nothing is rearranged, dropped or healed (that is what ADK's request
builder would do, and what this package wants you to see). Text-free media
parts are omitted. The module is pure: no I/O, and the input is never modified.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any, NamedTuple

from google.adk.events.event import Event
from google.genai import types


class Turn(NamedTuple):
    """One content of a history, in a provider-neutral form.

    Attributes:
        role: ``"user"`` or ``"model"``.
        texts: The text parts (thoughts excluded), in order.
        calls: ``(id or None, name, args)`` per function call.
        responses: ``(id or None, name, response)`` per function response.
    """

    role: str
    texts: tuple[str, ...]
    calls: tuple[tuple[str | None, str, Mapping[str, Any]], ...]
    responses: tuple[tuple[str | None, str, Any], ...]


def _get(data: Mapping[str, Any], snake: str, camel: str) -> Any:
    value = data.get(snake)
    return data.get(camel) if value is None else value


def _turn_from_content(content: types.Content) -> Turn:
    texts: list[str] = []
    calls: list[tuple[str | None, str, Mapping[str, Any]]] = []
    responses: list[tuple[str | None, str, Any]] = []
    for part in content.parts or ():
        if part.function_call is not None:
            call = part.function_call
            calls.append((call.id or None, call.name or "", call.args or {}))
        elif part.function_response is not None:
            response = part.function_response
            responses.append((response.id or None, response.name or "", response.response or {}))
        elif part.text and not part.thought:
            texts.append(part.text)
    return Turn(content.role or "user", tuple(texts), tuple(calls), tuple(responses))


def _turn_from_dict(content: Mapping[str, Any]) -> Turn:
    texts: list[str] = []
    calls: list[tuple[str | None, str, Mapping[str, Any]]] = []
    responses: list[tuple[str | None, str, Any]] = []
    for part in content.get("parts") or ():
        call = _get(part, "function_call", "functionCall")
        response = _get(part, "function_response", "functionResponse")
        if call is not None:
            calls.append((call.get("id") or None, call.get("name") or "", call.get("args") or {}))
        elif response is not None:
            responses.append((response.get("id") or None, response.get("name") or "",
                              response.get("response") or {}))
        elif part.get("text") and not part.get("thought"):
            texts.append(part["text"])
    return Turn(content.get("role") or "user", tuple(texts), tuple(calls), tuple(responses))


def turns(history: Sequence[Any]) -> list[Turn]:
    """Normalises a history into :class:`Turn` objects.

    Args:
        history: ``Event`` objects, stored event JSON dicts, ``types.Content``
            objects or content dicts (``{"role", "parts"}``), oldest first;
            kinds may be mixed.

    Returns:
        One turn per content (partial and content-less events are skipped).

    Raises:
        TypeError: For an item of another kind.
    """
    result: list[Turn] = []
    for item in history:
        if isinstance(item, types.Content):
            result.append(_turn_from_content(item))
        elif isinstance(item, Event):
            if item.partial or item.content is None or not item.content.parts:
                continue
            result.append(_turn_from_content(item.content))
        elif isinstance(item, Mapping):
            if "parts" in item:
                result.append(_turn_from_dict(item))
                continue
            content = item.get("content")
            if item.get("partial") or not content or not content.get("parts"):
                continue
            result.append(_turn_from_dict(content))
        else:
            raise TypeError(
                f"cannot read a history item of type {type(item).__name__}: pass ADK "
                "Events, stored event dicts, or types.Content objects"
            )
    return result


def _json(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value, default=str)


def to_openai_chat(history: Sequence[Any]) -> list[dict[str, Any]]:
    """Renders a history as Chat Completions ``messages`` (as ``LiteLlm`` does)."""
    messages: list[dict[str, Any]] = []
    for turn in turns(history):
        for call_id, _name, response in turn.responses:
            messages.append({"role": "tool", "tool_call_id": call_id or "",
                             "content": _json(response)})
        text = "\n".join(turn.texts) or None
        if turn.role == "user":
            if text is not None or not (turn.responses or turn.calls):
                messages.append({"role": "user", "content": text or ""})
            continue
        if text is None and not turn.calls:
            continue
        message: dict[str, Any] = {"role": "assistant", "content": text}
        if turn.calls:
            message["tool_calls"] = [
                {"id": call_id or "", "type": "function",
                 "function": {"name": name, "arguments": _json(args)}}
                for call_id, name, args in turn.calls
            ]
        messages.append(message)
    return messages


def to_openai_responses(history: Sequence[Any]) -> list[dict[str, Any]]:
    """Renders a history as Responses API ``input`` items."""
    items: list[dict[str, Any]] = []
    for turn in turns(history):
        for call_id, _name, response in turn.responses:
            items.append({"type": "function_call_output", "call_id": call_id or "",
                          "output": _json(response)})
        if turn.texts:
            items.append({"type": "message",
                          "role": "user" if turn.role == "user" else "assistant",
                          "content": "\n".join(turn.texts)})
        for call_id, name, args in turn.calls:
            items.append({"type": "function_call", "call_id": call_id or "", "name": name,
                          "arguments": _json(args)})
    return items


def to_anthropic(history: Sequence[Any]) -> list[dict[str, Any]]:
    """Renders a history as Messages API ``messages`` (as ``AnthropicLlm`` does)."""
    messages: list[dict[str, Any]] = []
    for turn in turns(history):
        blocks: list[dict[str, Any]] = [{"type": "text", "text": text} for text in turn.texts]
        blocks.extend({"type": "tool_use", "id": call_id or "", "name": name,
                       "input": dict(args)} for call_id, name, args in turn.calls)
        blocks.extend({"type": "tool_result", "tool_use_id": call_id or "",
                       "content": _json(response)}
                      for call_id, _name, response in turn.responses)
        messages.append({"role": "user" if turn.role == "user" else "assistant",
                         "content": blocks})
    return messages


def to_gemini(history: Sequence[Any]) -> list[dict[str, Any]]:
    """Renders a history as Gemini ``contents`` dicts."""
    contents: list[dict[str, Any]] = []
    for turn in turns(history):
        parts: list[dict[str, Any]] = [{"text": text} for text in turn.texts]
        for call_id, name, args in turn.calls:
            call: dict[str, Any] = {"name": name, "args": dict(args)}
            if call_id:
                call["id"] = call_id
            parts.append({"function_call": call})
        for call_id, name, response in turn.responses:
            answer: dict[str, Any] = {"name": name, "response": response}
            if call_id:
                answer["id"] = call_id
            parts.append({"function_response": answer})
        contents.append({"role": "user" if turn.role == "user" else "model", "parts": parts})
    return contents


_CONVERTERS = {
    "openai_chat": to_openai_chat,
    "openai_responses": to_openai_responses,
    "anthropic": to_anthropic,
    "gemini": to_gemini,
}


def convert(history: Sequence[Any], provider: str) -> list[dict[str, Any]]:
    """Renders a history in one provider's format.

    Args:
        history: See :func:`turns`.
        provider: ``"openai_chat"``, ``"openai_responses"``, ``"anthropic"`` or
            ``"gemini"``.

    Returns:
        The provider-format list.

    Raises:
        ValueError: For an unknown provider.
    """
    try:
        converter = _CONVERTERS[provider]
    except KeyError:
        raise ValueError(
            f"unknown provider {provider!r}; expected one of {', '.join(_CONVERTERS)}"
        ) from None
    return converter(history)
