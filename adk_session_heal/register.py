"""Importing this module switches healing on for ``adk web`` / ``adk api_server``.

It registers the ``heal+…`` session URI schemes with the default :class:`HealPolicy`.
:func:`healing_session_service_from_uri` is the factory for ADK's ``services.yaml``
(docs/adk_web.md); ``HEALABLE_SCHEMES`` are the schemes registered by default.
Put the import in the ``services.py`` of the folder you pass to ``adk``::

    # services.py
    import adk_session_heal.register  # noqa: F401

    $ adk web --session_service_uri heal+sqlite+aiosqlite:///sessions.db .
"""

from __future__ import annotations

from .runtime.adk_services import (
    HEALABLE_SCHEMES,
    healing_session_service_from_uri,
    register_healing_session_services,
)

__all__ = ["HEALABLE_SCHEMES", "REGISTERED_SCHEMES", "healing_session_service_from_uri"]

REGISTERED_SCHEMES: tuple[str, ...] = register_healing_session_services()
"""The healing schemes this import registered."""
