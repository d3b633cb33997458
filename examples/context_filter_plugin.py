"""The tool-aware context filter in an ADK App, next to ADK's own ContextFilterPlugin.

Run it (offline, no API key)::

    python examples/context_filter_plugin.py

A three-turn weather conversation, each turn a tool call and its response, runs
twice with the same context filter settings: keep the last two invocations,
then a custom filter that keeps only the last three contents (a common way to
cap a prompt). The scripted model rejects any request a strict provider would
reject (OpenAI, Anthropic and Gemini answer such a request with HTTP 400).

* ADK's ``ContextFilterPlugin`` sends what the custom filter returns: a tool
  response whose call was cut off. The model rejects the request.
* ``ToolAwareContextFilterPlugin`` repairs what the custom filter broke (it
  puts the call back), so every request is valid.

Exit code 0 when ADK's plugin was rejected and ours was not.
"""

from __future__ import annotations

import asyncio
import logging

from google.adk.apps import App
from google.adk.plugins.base_plugin import BasePlugin
from google.adk.plugins.context_filter_plugin import ContextFilterPlugin
from google.adk.runners import Runner
from google.adk.sessions import InMemorySessionService
from google.genai import types

from adk_session_heal.plugins import ToolAwareContextFilterPlugin
from adk_session_heal.testing import ProviderRejected, offline_weather_model, weather_agent

TURNS = ["What's the weather in Paris?", "And the weather tomorrow?", "Weather next week?"]


def last_three(contents: list[types.Content]) -> list[types.Content]:
    """A naive custom filter: keep the last three contents, whatever they are."""
    return contents[-3:]


async def conversation(plugin: BasePlugin) -> str:
    """Runs the conversation in an App with ``plugin``; returns how it went."""
    model = offline_weather_model()
    app = App(name="weather_app", root_agent=weather_agent(model), plugins=[plugin])
    runner = Runner(app=app, session_service=InMemorySessionService())
    session = await runner.session_service.create_session(app_name=app.name, user_id="u")
    try:
        for text in TURNS:
            message = types.Content(role="user", parts=[types.Part(text=text)])
            async for _ in runner.run_async(
                user_id="u", session_id=session.id, new_message=message
            ):
                pass
    except ProviderRejected as rejected:
        return f"rejected after {len(model.requests)} request(s): {rejected}"
    sizes = [len(request.contents) for request in model.requests]
    return f"ok: {len(sizes)} valid requests, contents per request {sizes}"


async def compare() -> bool:
    adk = await conversation(ContextFilterPlugin(num_invocations_to_keep=2,
                                                 custom_filter=last_three))
    print(f"ADK ContextFilterPlugin:       {adk}")
    ours = await conversation(ToolAwareContextFilterPlugin(num_invocations_to_keep=2,
                                                           custom_filter=last_three))
    print(f"ToolAwareContextFilterPlugin:  {ours}")
    return adk.startswith("rejected") and ours.startswith("ok")


def main() -> int:
    # ADK logs the (expected) rejection with its traceback; keep the output short.
    logging.getLogger("google_adk").setLevel(logging.CRITICAL)
    return 0 if asyncio.run(compare()) else 1


if __name__ == "__main__":
    raise SystemExit(main())
