"""The heal+ session URIs: registered with ADK's service registry, built the way ADK builds.

Every test goes through ADK's own registry and its own
``create_session_service_from_options`` (what ``adk web`` / ``adk api_server``
call), against real services and databases.
"""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
from google.adk.cli import service_registry
from google.adk.cli.service_registry import ServiceRegistry, load_services_module
from google.adk.cli.utils.service_factory import create_session_service_from_options
from google.adk.sessions import (
    BaseSessionService,
    DatabaseSessionService,
    InMemorySessionService,
)
from google.adk.sessions.sqlite_session_service import SqliteSessionService

from adk_session_heal.errors import UnsupportedStoreError
from adk_session_heal.ledger import SqlHealLedger
from adk_session_heal.migrate import upgrade
from adk_session_heal.policy import HealPolicy
from adk_session_heal.runtime.adk_services import (
    HEALABLE_SCHEMES,
    healing_session_service_from_uri,
    inner_session_uri,
    register_healing_session_services,
)
from adk_session_heal.runtime.service import HealingSessionService
from adk_session_heal.testing import History


@pytest.fixture
def fresh_registry(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """ADK's registry singleton and the agents' services module, as in a new process."""
    monkeypatch.setattr(service_registry, "_service_registry_instance", None)
    monkeypatch.delitem(sys.modules, "services", raising=False)
    monkeypatch.delitem(sys.modules, "adk_session_heal.register", raising=False)
    yield


@pytest.fixture
async def opened() -> AsyncIterator[list[BaseSessionService]]:
    services: list[BaseSessionService] = []
    yield services
    for service in services:
        close = getattr(service, "close", None)
        if close is not None:
            await close()


def build(uri: str, agents_dir: Path) -> BaseSessionService:
    """Builds the session service for a URI exactly as `adk api_server` does."""
    return create_session_service_from_options(base_dir=agents_dir, session_service_uri=uri)


@pytest.mark.parametrize(
    ("uri", "inner"),
    [
        ("heal+sqlite+aiosqlite:///s.db", "sqlite+aiosqlite:///s.db"),
        ("heal+postgresql+asyncpg://u:p@h:5432/db?ssl=require",
         "postgresql+asyncpg://u:p@h:5432/db?ssl=require"),
        ("heal+memory://", "memory://"),
        ("heal+sqlite:////abs/s.db", "sqlite:////abs/s.db"),
    ],
)
def test_inner_session_uri_drops_only_the_prefix(uri: str, inner: str) -> None:
    """Everything after heal+ (credentials, query) reaches ADK unchanged."""
    assert inner_session_uri(uri) == inner


@pytest.mark.parametrize("uri", ["sqlite:///s.db", "heal+://x", "heal:sqlite:///s.db", ""])
def test_inner_session_uri_rejects_a_uri_without_the_prefix(uri: str) -> None:
    """A URI that is not heal+<scheme> is refused with an example of one that is."""
    with pytest.raises(UnsupportedStoreError, match=r"heal\+sqlite\+aiosqlite:///sessions.db"):
        inner_session_uri(uri)


def test_register_adds_one_heal_scheme_per_adk_scheme() -> None:
    """Each default scheme is registered as heal+<scheme>, and only those."""
    registry = ServiceRegistry()
    registered = register_healing_session_services(registry=registry)
    assert registered == tuple(f"heal+{scheme}" for scheme in HEALABLE_SCHEMES)
    assert sorted(registry._session_factories) == sorted(registered)


@pytest.mark.parametrize("scheme", ["heal+sqlite", "", "sqlite://"])
def test_register_refuses_a_scheme_that_is_not_plain(scheme: str) -> None:
    """A scheme already prefixed, empty or with :// is a mistake, not a registration."""
    with pytest.raises(ValueError, match="plain URI scheme"):
        register_healing_session_services(schemes=[scheme], registry=ServiceRegistry())


@pytest.mark.parametrize(
    ("scheme", "path", "inner_type"),
    [
        ("heal+sqlite+aiosqlite", "///{dir}/db.sqlite", DatabaseSessionService),
        ("heal+sqlite", "///{dir}/adk.sqlite", SqliteSessionService),
        ("heal+memory", "", InMemorySessionService),
    ],
)
async def test_each_heal_uri_wraps_the_service_adk_builds_for_the_plain_uri(
    fresh_registry: None,
    opened: list[BaseSessionService],
    tmp_path: Path,
    scheme: str,
    path: str,
    inner_type: type[BaseSessionService],
) -> None:
    """heal+X gives HealingSessionService over exactly ADK's service for X, and it works."""
    register_healing_session_services()
    uri = f"{scheme}://{path.format(dir=tmp_path)}"
    service = build(uri, tmp_path)
    opened.append(service)
    assert isinstance(service, HealingSessionService)
    plain = build(inner_session_uri(uri), tmp_path)
    opened.append(plain)
    assert type(service.inner) is type(plain) is inner_type
    session = await service.create_session(app_name="app", user_id="u")
    assert await service.get_session(app_name="app", user_id="u", session_id=session.id)


async def test_heal_uri_over_postgresql(
    fresh_registry: None, opened: list[BaseSessionService], postgres_url: str, tmp_path: Path
) -> None:
    """heal+postgresql+asyncpg:// builds a working healing DatabaseSessionService."""
    register_healing_session_services()
    service = build("heal+" + postgres_url, tmp_path)
    opened.append(service)
    assert isinstance(service, HealingSessionService)
    assert isinstance(service.inner, DatabaseSessionService)
    session = await service.create_session(app_name="app", user_id="u")
    assert await service.get_session(app_name="app", user_id="u", session_id=session.id)


async def test_heal_uri_over_mariadb(
    fresh_registry: None, opened: list[BaseSessionService], mariadb_url: str, tmp_path: Path
) -> None:
    """heal+mysql+aiomysql:// builds a working healing DatabaseSessionService."""
    register_healing_session_services()
    service = build("heal+" + mariadb_url, tmp_path)
    opened.append(service)
    assert isinstance(service, HealingSessionService)
    assert isinstance(service.inner, DatabaseSessionService)
    session = await service.create_session(app_name="app", user_id="u")
    assert await service.get_session(app_name="app", user_id="u", session_id=session.id)


def test_the_registered_policy_reaches_every_service(fresh_registry: None, tmp_path: Path) -> None:
    """register_healing_session_services(policy) configures the services ADK builds."""
    policy = HealPolicy(stale_after=600)
    register_healing_session_services(policy)
    service = build("heal+memory://", tmp_path)
    assert isinstance(service, HealingSessionService)
    assert service.policy is policy


def test_session_db_kwargs_reach_the_inner_database_service(
    fresh_registry: None, tmp_path: Path
) -> None:
    """ADK's session_db_kwargs (engine options) pass through to DatabaseSessionService."""
    register_healing_session_services()
    service = create_session_service_from_options(
        base_dir=tmp_path,
        session_service_uri=f"heal+sqlite+aiosqlite:///{tmp_path / 's.db'}",
        session_db_kwargs={"echo": True},
    )
    assert isinstance(service, HealingSessionService)
    assert isinstance(service.inner, DatabaseSessionService)
    assert service.inner.db_engine.echo is True


def test_without_registration_adk_does_not_know_heal_uris(
    fresh_registry: None, tmp_path: Path
) -> None:
    """A heal+ URI without services.py falls through to SQLAlchemy, which rejects it."""
    with pytest.raises(ValueError, match="heal"):
        build(f"heal+sqlite+aiosqlite:///{tmp_path / 's.db'}", tmp_path)


def test_services_py_with_one_import_switches_healing_on(
    fresh_registry: None, tmp_path: Path
) -> None:
    """An agents folder whose services.py imports adk_session_heal.register heals."""
    (tmp_path / "services.py").write_text("import adk_session_heal.register  # noqa: F401\n")
    load_services_module(str(tmp_path))
    service = build("heal+memory://", tmp_path)
    assert isinstance(service, HealingSessionService)
    assert isinstance(service.inner, InMemorySessionService)


def test_services_yaml_entry_switches_healing_on(fresh_registry: None, tmp_path: Path) -> None:
    """services.yaml can name the documented factory (docs/adk_web.md) as a scheme's class."""
    (tmp_path / "services.yaml").write_text(
        "services:\n"
        "  - scheme: heal+sqlite+aiosqlite\n"
        "    type: session\n"
        "    class: adk_session_heal.register.healing_session_service_from_uri\n"
    )
    load_services_module(str(tmp_path))
    service = build(f"heal+sqlite+aiosqlite:///{tmp_path / 's.db'}", tmp_path)
    assert isinstance(service, HealingSessionService)
    assert isinstance(service.inner, DatabaseSessionService)


def test_relative_sqlite_paths_resolve_as_adk_resolves_them(
    fresh_registry: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """heal+sqlite:///x.db opens the same file ADK's sqlite:///x.db would."""
    monkeypatch.chdir(tmp_path)
    service = healing_session_service_from_uri("heal+sqlite:///rel.db", agents_dir=str(tmp_path))
    assert isinstance(service.inner, SqliteSessionService)
    plain = build("sqlite:///rel.db", tmp_path)
    assert isinstance(plain, SqliteSessionService)
    assert service.inner._db_path == plain._db_path


async def test_a_registered_ledger_records_the_heals_of_uri_built_services(
    fresh_registry: None, opened: list[BaseSessionService], tmp_path: Path
) -> None:
    """register_healing_session_services(ledger=...) audits heals made by adk-built services."""
    url = f"sqlite+aiosqlite:///{tmp_path / 's.db'}"
    bare = DatabaseSessionService(url)
    opened.append(bare)
    history = History(start=time.time() - 60)
    history.user("weather in Paris?")
    history.call("get_weather", {"city": "Paris"})
    session = await bare.create_session(app_name="app", user_id="u")
    for event in history.events:
        await bare.append_event(session, event)
    await upgrade(url)
    ledger = SqlHealLedger.from_url(url)
    try:
        register_healing_session_services(ledger=ledger)
        service = build("heal+" + url, tmp_path)
        opened.append(service)
        fresh = await service.get_session(app_name="app", user_id="u", session_id=session.id)
        assert fresh is not None
        history.user("hello?")
        await service.append_event(fresh, history.events[-1])
        [record] = await ledger.history(session_id=session.id)
        assert (record.trigger.value, record.tool_names) == ("append", ("get_weather",))
    finally:
        await ledger.close()


def test_the_registration_import_loads_no_alembic_rich_or_cli_and_logs_nothing() -> None:
    """`import adk_session_heal.register` (adk web's services.py) stays light and quiet."""
    probe = (
        "import logging, sys\n"
        "import google.adk.cli.fast_api\n"  # adk web has loaded its server before services.py
        "before = set(sys.modules)\n"
        "records = []\n"
        "logging.basicConfig(level=logging.DEBUG)\n"
        "logging.getLogger().addHandler(type('H', (logging.Handler,), "
        "{'emit': lambda self, r: records.append(r)})())\n"
        "import adk_session_heal.register\n"
        "added = set(sys.modules) - before\n"
        "heavy = [m for m in ('alembic', 'rich', 'click', 'adk_session_heal.cli',"
        " 'adk_session_heal.ops.scan', 'adk_session_heal.ops.repair', 'adk_session_heal.ops.apply',"
        " 'adk_session_heal.migrate')"
        " if m in added]\n"
        "print(heavy, [r.name for r in records if r.levelno >= logging.INFO])\n"
    )
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                         check=True, timeout=120).stdout
    assert out.strip() == "[] []"


@pytest.mark.parametrize("uri", ["memory://", "sqlite:///sessions.db"])
def test_building_a_heal_service_for_adk_s_own_schemes_loads_no_sqlalchemy(
        uri: str, tmp_path: Path) -> None:
    """adk web building heal+memory:// or heal+sqlite:// imports no SQLAlchemy, Alembic or rich."""
    probe = (
        "import sys\n"
        "from pathlib import Path\n"
        "import google.adk.cli.fast_api\n"
        "from google.adk.cli.utils.service_factory import create_session_service_from_options\n"
        "before = set(sys.modules)\n"
        "import adk_session_heal.register\n"
        f"service = create_session_service_from_options(base_dir=Path({str(tmp_path)!r}),"
        f" session_service_uri='heal+{uri}')\n"
        "added = {m.split('.')[0] for m in set(sys.modules) - before}\n"
        "print(type(service).__name__, sorted(added & {'sqlalchemy', 'alembic', 'rich', 'click',"
        " 'asyncpg', 'aiomysql', 'redis'}))\n"
    )
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                         check=True, timeout=120, cwd=tmp_path).stdout
    assert out.strip() == "HealingSessionService []"


def test_a_heal_uri_whose_driver_is_not_installed_names_the_extra(tmp_path: Path) -> None:
    """adk web's heal+postgresql+asyncpg:// without asyncpg (a base install) fails in one line
    naming the extra to install, as the CLI does, password masked."""
    from cli_runner import without_packages

    probe = (
        "from adk_session_heal.runtime.adk_services import healing_session_service_from_uri\n"
        "from adk_session_heal.errors import UnsupportedStoreError\n"
        "try:\n"
        "    healing_session_service_from_uri("
        "'heal+postgresql+asyncpg://app:hunter2@127.0.0.1:5432/sessions')\n"
        "except UnsupportedStoreError as exc:\n"
        "    print(exc)\n"
    )
    out = subprocess.run([sys.executable, "-c", probe], env=without_packages(tmp_path, "asyncpg"),
                         capture_output=True, text=True, check=True, timeout=120).stdout
    assert out.strip() == ("postgresql+asyncpg://app:***@127.0.0.1:5432/sessions needs the "
                           "asyncpg driver, which is not installed: pip install "
                           "'adk-session-heal[postgres]'")
