"""Importing this module switches healing on for ``adk web`` / ``adk api_server``.

It registers the ``heal+…`` session URI schemes (see
:mod:`adk_session_heal.adk_services`) with the default :class:`HealPolicy`.
Put the import in the ``services.py`` of the folder you pass to ``adk``::

    # services.py
    import adk_session_heal.register  # noqa: F401

    $ adk web --session_service_uri heal+sqlite+aiosqlite:///sessions.db .
"""

from __future__ import annotations

from .adk_services import register_healing_session_services

__all__ = ["REGISTERED_SCHEMES"]

REGISTERED_SCHEMES: tuple[str, ...] = register_healing_session_services()
"""The healing schemes this import registered."""
