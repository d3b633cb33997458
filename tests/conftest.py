"""Shared fixtures: real session services over every supported store."""

from __future__ import annotations

import gc
import os
import sys
import warnings
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from pathlib import Path

import pytest
from google.adk.sessions import (
    BaseSessionService,
    DatabaseSessionService,
    InMemorySessionService,
)
from google.adk.sessions.sqlite_session_service import SqliteSessionService
from hypothesis import settings

# Helper modules live in tests/support/; child scripts (tests/children/) find them through
# the PYTHONPATH they inherit.
_SUPPORT = str(Path(__file__).resolve().parent / "support")
sys.path.insert(0, _SUPPORT)
os.environ["PYTHONPATH"] = os.pathsep.join(
    [_SUPPORT, *filter(None, os.environ.get("PYTHONPATH", "").split(os.pathsep))])

from servers import (  # noqa: E402
    REDIS_URL,
    SERVERS_USED,
    temporary_database,
    temporary_redis_prefix,
)

# CI (CI=true, set by the CI runner) replays the same generated examples every run, so a
# landing never depends on the draw; local runs keep drawing new ones to find new bugs.
settings.register_profile("ci", derandomize=True, database=None)
if os.environ.get("CI") == "true":
    settings.load_profile("ci")

_SERVER_WORDS = {
    "postgres": ("postgres", "pg_"),
    "mariadb": ("mariadb", "mysql"),
    "redis": ("redis",),
}
"""Words in a test's id or fixture names that say it uses a server (its marker's name first)."""


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Marks each test that uses a database server with that server's marker.

    So ``pytest -m postgres`` (or ``mariadb``, ``redis``) selects them, and
    ``-m "not postgres and not mariadb and not redis"`` runs without servers. A
    test is marked when its id (module, name, parameters) or a fixture it uses
    names the server; :func:`_servers_match_markers` fails a test that used a
    server its markers do not name, so the rule cannot silently fall behind.

    Also marks ``slow`` each variant of a test on ADK's own ``SqliteSessionService`` file
    (``adk_sqlite`` in its id), the slowest layout to write through by far: its 135 variants
    took 621 s of a 2,730 s full run. The default run covers the same code on the other
    layouts; ``pytest -m slow`` (and CI) runs them.
    """
    for item in items:
        text = " ".join([item.nodeid.lower(), *getattr(item, "fixturenames", ())])
        for marker, words in _SERVER_WORDS.items():
            if any(word in text for word in words):
                item.add_marker(marker)
        if "adk_sqlite" in item.nodeid:
            item.add_marker("slow")


@pytest.fixture(autouse=True)
def _servers_match_markers(request: pytest.FixtureRequest) -> Iterator[None]:
    """Fails a test that asked for a server (``servers.require_server``) it is not marked with."""
    SERVERS_USED.clear()
    yield
    marked = {kind for kind in SERVERS_USED if request.node.get_closest_marker(kind) is not None}
    unmarked = sorted(SERVERS_USED - marked)
    SERVERS_USED.clear()
    if unmarked:
        pytest.fail(f"{request.node.nodeid} uses the {', '.join(unmarked)} server(s) but is not "
                    f"marked so: add pytest.mark.{unmarked[0]} (or name it in the test's id)")


STORES = ["memory", "adk_sqlite", "db_sqlite", "db_postgres", "db_mariadb", "redis"]
"""Every inner session service the contract tests run against."""

ServiceFactory = Callable[[], Awaitable[BaseSessionService]]

_adk_migration_probe = SqliteSessionService._is_migration_needed


def _migration_probe_collected(self: SqliteSessionService) -> bool:
    """ADK's probe opens ``with sqlite3.connect(...)``, which never closes the
    connection; Python 3.13 reports it as an unclosed database (ResourceWarning)
    whenever the garbage collector frees it, failing an unrelated test. Free it
    here, where the warning is known to be ADK's."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", "unclosed database", ResourceWarning)
        try:
            return bool(_adk_migration_probe(self))
        finally:
            gc.collect()


SqliteSessionService._is_migration_needed = _migration_probe_collected  # type: ignore[method-assign]


@pytest.fixture
async def postgres_url() -> AsyncIterator[str]:
    """A fresh PostgreSQL database (asyncpg URL), dropped after the test."""
    async with temporary_database("postgres") as url:
        yield url


@pytest.fixture
async def mariadb_url() -> AsyncIterator[str]:
    """A fresh MariaDB database (aiomysql URL), dropped after the test."""
    async with temporary_database("mariadb") as url:
        yield url


@pytest.fixture(params=STORES, ids=STORES)
async def store_factory(
    request: pytest.FixtureRequest, tmp_path: Path
) -> AsyncIterator[ServiceFactory]:
    """Opens new services over one shared store of the parametrized kind.

    Each call of the factory returns a *new* service instance over the same
    storage, as a second process would see it (for the in-memory store, the
    same instance: it has no storage outside the process).
    """
    kind: str = request.param
    opened: list[BaseSessionService] = []

    if kind == "memory":
        shared = InMemorySessionService()

        async def factory() -> BaseSessionService:
            return shared

        yield factory
        return

    if kind == "redis":
        from google.adk.integrations.redis import RedisSessionService, RedisSessionServiceConfig

        async with temporary_redis_prefix() as prefix:
            config = RedisSessionServiceConfig(uri=REDIS_URL, key_prefix=prefix)

            async def factory() -> BaseSessionService:
                service = RedisSessionService(config)
                opened.append(service)
                return service

            yield factory
            for service in opened:
                await close_redis(service)
        return

    async def make(url: str) -> BaseSessionService:
        service: BaseSessionService
        if kind == "adk_sqlite":
            service = SqliteSessionService(str(tmp_path / "adk.db"))
        else:
            service = DatabaseSessionService(url)
        opened.append(service)
        return service

    if kind in ("adk_sqlite", "db_sqlite"):
        url = f"sqlite+aiosqlite:///{tmp_path / 'sessions.db'}"

        async def factory() -> BaseSessionService:
            return await make(url)

        yield factory
    else:
        server = "postgres" if kind == "db_postgres" else "mariadb"
        async with temporary_database(server) as url:

            async def factory() -> BaseSessionService:
                return await make(url)

            yield factory
            for service in opened:
                await _close(service)
            opened.clear()
    for service in opened:
        await _close(service)


async def close_redis(service: BaseSessionService) -> None:
    """Closes the client a ``RedisSessionService`` opened (ADK's service has no ``close``)."""
    client = getattr(service, "_redis_client", None)
    if client is not None:
        await client.aclose()


async def _close(service: BaseSessionService) -> None:
    close = getattr(service, "close", None)
    if close is not None:
        await close()
