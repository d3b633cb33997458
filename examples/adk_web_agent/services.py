"""Loaded by `adk web` / `adk api_server` / `adk run`: registers the heal+ session URIs."""

import adk_session_heal.register  # noqa: F401
