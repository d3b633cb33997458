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
        "provider_rules", "request_repair", "messages", "unhealable", "removal_rule")
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
                    "google.adk.events._abort_events", "google.adk.flows.llm_flows.functions")
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
    assert "google.adk.flows.llm_flows.functions" in _adk_names(PACKAGE / "adk_compat.py")


SCAN_PATH = ("bulk", "scan_report", "findings", "healing", "heal_plan", "event_access",
             "adk_compat", "late_results", "observe", "pairing", "invocations", "policy",
             "tool_runs", "store/base", "store/opening", "store/sql_tables", "store/adk_sqlite",
             "store/streaming", "store/redis_sessions", "store/redis_tool_runs",
             "store/tool_runs", "store/ledger", "store/ledger_table", "store/urls")
"""Modules a scan by URL loads before its first row (tests/test_startup.py runs them)."""

LOADED_WHEN_NEEDED = ("google", "alembic", "rich", "aiohttp", "opentelemetry", "pydantic",
                      "pydantic_core")
"""Imported inside the functions that need them (or for annotations only), never on load."""


def _module_level_imports(path: Path) -> set[str]:
    """Names a module imports as it loads: not inside a function, not under TYPE_CHECKING."""
    names: set[str] = set()

    def visit(body: list[ast.stmt]) -> None:
        for node in body:
            if isinstance(node, ast.Import):
                names.update(alias.name for alias in node.names)
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names.add(node.module)
            elif isinstance(node, ast.If) and "TYPE_CHECKING" not in ast.unparse(node.test):
                visit(node.body)
                visit(node.orelse)
            elif isinstance(node, ast.Try):
                visit(node.body)

    visit(ast.parse(path.read_text(), str(path)).body)
    return names


@pytest.mark.parametrize("name", SCAN_PATH)
def test_the_scan_path_loads_no_adk_genai_rich_or_telemetry(name: str) -> None:
    """A module on the scan path imports ADK, google-genai, rich, OpenTelemetry, pydantic
    and Alembic only where they are used (issue 13: the first row before 0.5 s)."""
    found = _module_level_imports(PACKAGE / f"{name}.py")
    assert sorted(n for n in found if n.split(".")[0] in LOADED_WHEN_NEEDED) == []


def test_the_load_time_scan_can_fail() -> None:
    """The load-time import scan sees a module-level ADK import (service.py has several)."""
    assert "google.adk.events.event" in _module_level_imports(PACKAGE / "service.py")
    assert "google.adk.events.event" not in _module_level_imports(PACKAGE / "healing.py")
    assert "google.adk.events.event" in _imports(PACKAGE / "healing.py")
