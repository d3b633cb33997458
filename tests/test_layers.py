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
        "healing", "heal_record", "formats", "validators", "provider_rules", "request_repair",
        "messages")
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


def test_the_checks_can_fail() -> None:
    """The import scan sees what a storage module imports (the rules above are not vacuous)."""
    assert "sqlalchemy" in {n.split(".")[0] for n in _imports(PACKAGE / "store" / "sql_tables.py")}
    assert _offending(PACKAGE / "store" / "sql_tables.py", STORAGE) != []
