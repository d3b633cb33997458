"""Healing for ``adk web``, ``adk api_server`` and ``adk run``, switched on by a URI.

ADK builds its session service from ``--session_service_uri`` through its
service registry (``google.adk.cli.service_registry``), and loads custom
registrations from a ``services.py`` (or ``services.yaml``) in the folder given
to the command. This module registers one *healing* scheme per session scheme
ADK accepts: the same URI with ``heal+`` in front.

=======================================  =======================================
``--session_service_uri``                Inner service (built the way ADK would)
=======================================  =======================================
``heal+sqlite:///sessions.db``           ADK's ``SqliteSessionService``
``heal+sqlite+aiosqlite:///sessions.db`` ``DatabaseSessionService`` (SQLite)
``heal+postgresql+asyncpg://…``          ``DatabaseSessionService`` (PostgreSQL)
``heal+mysql+aiomysql://…``              ``DatabaseSessionService`` (MySQL)
``heal+memory://``                       ``InMemorySessionService``
=======================================  =======================================

The URI without ``heal+`` is handed to ADK's own factory
(``create_session_service_from_options``), so every option ADK supports for the
plain URI (registered schemes, the ``DatabaseSessionService`` fallback for any
SQLAlchemy URL, ``session_db_kwargs``) works unchanged; the result is wrapped
in :class:`~adk_session_heal.runtime.service.HealingSessionService`.

Switch it on with one line in the folder passed to ``adk web``::

    # services.py
    import adk_session_heal.register  # noqa: F401

    $ adk web --session_service_uri heal+sqlite+aiosqlite:///sessions.db path/to/agents

ADK's registry matches schemes exactly (``urlparse(uri).scheme``), so only the
schemes in :data:`HEALABLE_SCHEMES` (and any passed to
:func:`register_healing_session_services`) are recognised.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

from google.adk.cli.service_registry import ServiceRegistry, get_service_registry

from ..errors import UnsupportedStoreError

if TYPE_CHECKING:
    from ..core.heal_record import HealRecord
    from ..policy import HealPolicy
    from .service import HealingSessionService, HealLedger

# Registering (what `import adk_session_heal.register` does when `adk web`
# loads services.py) imports nothing more than the above: the service, its
# store layer and SQLAlchemy are imported by the factory, when ADK first
# builds a session service from a heal+ URI.

HEAL_PREFIX = "heal+"
"""What turns a session URI ADK accepts into its healing variant."""

_SCHEME = re.compile(r"([A-Za-z][A-Za-z0-9+.\-]*)://")

HEALABLE_SCHEMES: tuple[str, ...] = (
    "memory",
    "sqlite",
    "sqlite+aiosqlite",
    "postgresql",
    "postgresql+asyncpg",
    "postgresql+psycopg",
    "mysql",
    "mysql+aiomysql",
    "mysql+asyncmy",
    "mariadb+aiomysql",
    "mariadb+asyncmy",
    "agentengine",
)
"""The inner schemes registered by default (each as ``heal+<scheme>``).

ADK's in-memory (``memory``), SQLite (``sqlite``), database (every SQLAlchemy
async URL) and Agent Engine (``agentengine``) session services. Healing over
Agent Engine goes through ``append_event`` only (see
:attr:`HealPolicy.quiet_after`).
"""


_NOT_SQLALCHEMY = frozenset({"memory", "sqlite", "agentengine"})
"""Schemes ADK serves without SQLAlchemy (in memory, ``SqliteSessionService``, Agent Engine)."""


def inner_session_uri(uri: str) -> str:
    """Returns the URI ADK would accept: ``uri`` without its ``heal+`` prefix.

    Args:
        uri: A healing session URI, e.g. ``heal+sqlite+aiosqlite:///s.db``.

    Returns:
        The inner URI, e.g. ``sqlite+aiosqlite:///s.db``.

    Raises:
        UnsupportedStoreError: ``uri`` has no ``heal+`` scheme prefix, or nothing after it.
    """
    found = _SCHEME.match(uri)
    scheme = found.group(1).lower() if found else ""
    if not scheme.startswith(HEAL_PREFIX) or len(scheme) == len(HEAL_PREFIX):
        from ..store.urls import redact_url

        raise UnsupportedStoreError(
            f"not a healing session URI: {redact_url(uri)!r}; expected "
            f"'{HEAL_PREFIX}' before a scheme ADK accepts, e.g. "
            f"'{HEAL_PREFIX}sqlite+aiosqlite:///sessions.db'"
        )
    return uri[len(HEAL_PREFIX):]


def healing_session_service_from_uri(
    uri: str,
    *,
    policy: HealPolicy | None = None,
    on_heal: Callable[[HealRecord], object] | None = None,
    ledger: HealLedger | None = None,
    agents_dir: str | None = None,
    **kwargs: Any,
) -> HealingSessionService:
    """Builds the service a ``heal+…`` URI names: ADK's own service, healing.

    This is the factory registered for every healing scheme; it also works as
    the ``class`` of a ``services.yaml`` entry (ADK calls it with ``uri=`` and
    ``agents_dir=``).

    Args:
        uri: The healing URI (``heal+`` and a URI ADK accepts).
        policy: What to heal (default: :class:`HealPolicy`).
        on_heal: Called once per heal written (see :class:`HealingSessionService`).
        ledger: Where to record heals for audit, e.g.
            :class:`~adk_session_heal.ledger.SqlHealLedger`.
        agents_dir: The agents folder ADK passes; relative SQLite paths and
            Agent Engine settings are resolved as ADK resolves them.
        **kwargs: ADK's ``session_db_kwargs``, passed to the inner service.

    Returns:
        The inner service ADK would build for the plain URI, wrapped.

    Raises:
        UnsupportedStoreError: ``uri`` is not a healing URI, is malformed (see
            :func:`~adk_session_heal.store.urls.parse_url_syntax`), or ADK
            refuses it; the message shows it with its password masked.
    """
    from pathlib import Path

    from google.adk.cli.utils.service_factory import create_session_service_from_options

    from .service import HealingSessionService

    inner_uri = inner_session_uri(uri)
    scheme = uri[len(HEAL_PREFIX):].split(":", 1)[0].lower()
    # A SQLAlchemy URL is checked before ADK sees it (a misplaced password must
    # never reach a server or a log); ADK loads SQLAlchemy for it anyway. ADK's
    # own schemes do not need SQLAlchemy, so it is not imported for them.
    checked = None if scheme in _NOT_SQLALCHEMY else _checked_syntax(inner_uri)
    try:
        inner = create_session_service_from_options(
            base_dir=Path(agents_dir) if agents_dir is not None else Path.cwd(),
            session_service_uri=inner_uri,
            session_db_kwargs=dict(kwargs) or None,
        )
    except (ValueError, TypeError, ImportError) as exc:  # ADK's (and SQLAlchemy's) refusals
        password, redacted = checked or _checked_syntax(inner_uri)
        # A driver not installed (ADK re-raises the import's error as ValueError): its extra.
        cause = exc if isinstance(exc, ModuleNotFoundError) else exc.__cause__
        if isinstance(cause, ModuleNotFoundError):
            from ..store.driver_errors import missing_driver_error

            if (missing := missing_driver_error(cause, redacted)) is not None:
                raise missing from exc
        detail = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        if password:
            detail = detail.replace(password, "***")
        raise UnsupportedStoreError(
            f"ADK cannot build a session service from {redacted!r}: {detail[:200]}"
        ) from exc
    return HealingSessionService(inner, policy, on_heal=on_heal, ledger=ledger)


def _checked_syntax(url: str) -> tuple[str | None, str]:
    """Returns ``url``'s password and its masked form, refusing a malformed URL.

    :func:`~adk_session_heal.store.urls.parse_url_syntax`, whose module (and
    SQLAlchemy) is imported only here, when first needed.
    """
    from ..store.urls import parse_url_syntax

    parsed, redacted = parse_url_syntax(url)
    return parsed.password, redacted


def register_healing_session_services(
    policy: HealPolicy | None = None,
    *,
    on_heal: Callable[[HealRecord], object] | None = None,
    ledger: HealLedger | None = None,
    schemes: Iterable[str] = HEALABLE_SCHEMES,
    registry: ServiceRegistry | None = None,
) -> tuple[str, ...]:
    """Registers ``heal+<scheme>`` session URIs with ADK's service registry.

    Call it from the ``services.py`` next to your agents (or import
    :mod:`adk_session_heal.register`, which calls it with the defaults).
    Calling it again replaces the earlier registrations (e.g. with another
    policy).

    Example::

        # services.py, in the folder given to `adk web` / `adk api_server`
        from adk_session_heal import HealPolicy
        from adk_session_heal.runtime.adk_services import register_healing_session_services

        register_healing_session_services(HealPolicy(stale_after=600))

    Args:
        policy: The policy of every service built (default: :class:`HealPolicy`).
        on_heal: Called once per heal written, e.g. to count heals.
        ledger: Where every service built records its heals, e.g.
            ``SqlHealLedger.from_url(url)`` on the session database (install
            it first: ``adk-session-heal db upgrade URL``).
        schemes: The inner schemes to register (default: :data:`HEALABLE_SCHEMES`);
            add your own SQLAlchemy ``dialect+driver`` if ADK accepts it.
        registry: The registry (default: ADK's singleton).

    Returns:
        The healing schemes registered, e.g. ``("heal+memory", ...)``.

    Raises:
        ValueError: A scheme is empty or already starts with ``heal+``.
    """
    target = registry if registry is not None else get_service_registry()
    factory = functools.partial(
        healing_session_service_from_uri, policy=policy, on_heal=on_heal, ledger=ledger
    )
    registered: list[str] = []
    for scheme in schemes:
        if not scheme or scheme.startswith(HEAL_PREFIX) or "://" in scheme:
            raise ValueError(
                f"expected a plain URI scheme such as 'sqlite+aiosqlite', got {scheme!r}"
            )
        target.register_session_service(HEAL_PREFIX + scheme, factory)
        registered.append(HEAL_PREFIX + scheme)
    return tuple(registered)
