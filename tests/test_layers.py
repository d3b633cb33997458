"""The package's layers hold: storage code only under store/, a pure core without I/O."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).parents[1] / "adk_session_heal"

STORAGE = ("sqlalchemy", "aiosqlite", "asyncpg", "aiomysql", "asyncmy", "redis", "sqlite3",
           "google.adk.sessions.schemas", "google.adk.sessions.sqlite_session_service",
           "google.adk.sessions.database_session_service", "google.adk.sessions.migration")
"""Drivers and ADK's storage internals: imported only by the store layouts."""

IO = ("asyncio", "click", "rich", "alembic", "opentelemetry", "socket", "subprocess")
"""What a pure module never needs."""

PURE = ("session_key", "event_access", "pairing", "invocations", "findings", "policy",
        "heal_plan", "healing", "heal_record", "adk_compat", "formats", "validators",
        "provider_rules", "request_repair", "messages")
"""The pure core: decisions on plain data."""


def _imports(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module)
    return names


def _offending(path: Path, banned: tuple[str, ...]) -> list[str]:
    return sorted(n for n in _imports(path) if any(n == b or n.startswith(b + ".")
                                                   for b in banned))


@pytest.mark.parametrize(
    "path",
    [p for p in sorted(PACKAGE.rglob("*.py")) if "store" not in p.relative_to(PACKAGE).parts],
    ids=lambda p: str(p.relative_to(PACKAGE)),
)
def test_storage_is_reached_only_through_store(path: Path) -> None:
    """No driver, SQLAlchemy or ADK storage internal is imported outside store/."""
    assert _offending(path, STORAGE) == []


@pytest.mark.parametrize("name", PURE)
def test_the_core_does_no_io(name: str) -> None:
    """Pure modules import no storage, CLI, event loop or telemetry code."""
    assert _offending(PACKAGE / f"{name}.py", STORAGE + IO) == []


VERSION_SPECIFIC = ("google.adk.version", "google.adk.sessions.schemas.shared",
                    "google.adk.events._abort_events")
"""ADK modules whose contents differ across the supported versions (1.22 to 2.x)."""


def _adk_names(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("google"):
            names.update(f"{node.module}.{alias.name}" for alias in node.names)
            names.add(node.module)
        elif isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
    return names


@pytest.mark.parametrize(
    "path",
    [p for p in sorted(PACKAGE.rglob("*.py")) if p.name != "adk_compat.py"],
    ids=lambda p: str(p.relative_to(PACKAGE)),
)
def test_version_specific_adk_names_live_in_adk_compat(path: Path) -> None:
    """Only adk_compat imports what differs between ADK versions (2.x's NodeInfo, say).

    ADK's Redis service (2.7+) is the one exception by design: its layout's own
    adapter imports it lazily, with a one-line error where ADK lacks it.
    """
    names = _adk_names(path)
    assert not [n for n in names if n.startswith(VERSION_SPECIFIC)]
    assert "google.adk.events.event.NodeInfo" not in names


def test_the_checks_can_fail() -> None:
    """The import scan sees what a storage module imports (the rules above are not vacuous)."""
    assert "sqlalchemy" in {n.split(".")[0] for n in _imports(PACKAGE / "store" / "sql_tables.py")}
    assert _offending(PACKAGE / "store" / "sql_tables.py", STORAGE) != []
    assert "google.adk.version" in _adk_names(PACKAGE / "adk_compat.py")
