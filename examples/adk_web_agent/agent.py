"""The weather agent, on a scripted offline model so it runs without API keys.

In your own folder, this is your agent as usual: healing needs no change here.
Set ``ADK_SESSION_HEAL_DEMO_CRASH=1`` in the server's environment to make the
``get_weather`` tool kill the server process mid-call (a crash to heal).
"""

from __future__ import annotations

from adk_session_heal.testing import offline_weather_model, weather_agent

__all__ = ["root_agent"]

# Your agent would use a real model here, e.g. model="gemini-2.5-flash".
root_agent = weather_agent(offline_weather_model())
