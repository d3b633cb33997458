"""The histories the damaged-row tests store: a call answered by the row they damage, and a
dead call that must be healed whatever else is damaged."""

from __future__ import annotations

from adk_session_heal.testing import History


def answered_then_superseded() -> History:
    """A call answered by the response row the tests damage, then a next turn."""
    history = History()
    history.user("weather?")
    call = history.call("get_weather", {"city": "Paris"})
    history.respond((call, "get_weather", {"temp": 21}))
    history.text("21 degrees")
    history.user("thanks")
    return history


def dead() -> History:
    """A healthy session with one dead call, which must be healed whatever else is damaged."""
    history = History()
    history.user("weather?")
    history.call("get_weather", {"city": "Rome"})
    history.user("hello?")
    return history
