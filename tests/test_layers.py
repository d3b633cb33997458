"""The package's layers hold: each imports only the layers below it, storage code only under
store/, a pure core and provider layer without I/O."""

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

PURE = sorted([*(p.relative_to(PACKAGE) for p in (PACKAGE / "core").rglob("*.py")),
               *(p.relative_to(PACKAGE) for p in (PACKAGE / "providers").rglob("*.py")),
               Path("policy.py"), Path("messages.py"), Path("validators.py"), Path("errors.py")])
"""The pure core and the provider formats: decisions on plain data."""

LEVELS = {"errors": 0, "policy": 0, "core": 1, "providers": 2, "store": 3, "observe": 4,
          "runtime": 5, "ops": 5, "testing": 6, "cli": 7, "plugins": 8, "validators": 8,
          "messages": 8, "ledger": 8, "migrate": 8, "register": 8, "__init__": 9, "__main__": 9}
"""Each top-level module or layer folder, and its level: a module imports only lower levels
(or its own folder). The public faces sit on top, over the layers they name."""


def _level_of(module: str) -> int:
    return LEVELS[module.split(".")[0]]


def _package_imports(path: Path) -> list[tuple[str, str]]:
    """Each relative import of a package module, as (importer, imported) dotted names."""
    parts = list(path.relative_to(PACKAGE).with_suffix("").parts)
    is_package = parts[-1] == "__init__"
    here = parts[:-1]
    me = ".".join(here if is_package else parts) or "__init__"
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.ImportFrom) and node.level > 0:
            base = here[: len(here) - (node.level - 1)]
            target = ".".join([*base, *(node.module.split(".") if node.module else [])])
            for alias in node.names if not target else [None]:
                found.append((me, target or (alias.name if alias else "")))
    return found


@pytest.mark.parametrize(
    "path",
    [p for p in sorted(PACKAGE.rglob("*.py")) if "alembic" not in p.parts],
    ids=lambda p: str(p.relative_to(PACKAGE)),
)
def test_each_module_imports_only_lower_layers(path: Path) -> None:
    """The arrows go one way: core never imports store, store never imports ops, and so on."""
    wrong = [f"{me} -> {target}" for me, target in _package_imports(path)
             if me.split(".")[0] != target.split(".")[0] and _level_of(target) >= _level_of(me)]
    assert wrong == []


def test_every_top_level_module_has_a_level() -> None:
    """A new module or folder at the root is placed in the layering on purpose."""
    top = {p.stem for p in PACKAGE.glob("*.py")} | {p.name for p in PACKAGE.iterdir()
                                                  if (p / "__init__.py").is_file()}
    assert top == set(LEVELS)


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


@pytest.mark.parametrize("path", PURE, ids=str)
def test_the_core_does_no_io(path: Path) -> None:
    """Pure modules import no storage, CLI, event loop or telemetry code."""
    assert _offending(PACKAGE / path, STORAGE + IO) == []


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
    sql_tables = PACKAGE / "store" / "layouts" / "sql_tables.py"
    assert "sqlalchemy" in {n.split(".")[0] for n in _imports(sql_tables)}
    assert _offending(sql_tables, STORAGE) != []
    assert "google.adk.version" in _adk_names(PACKAGE / "core" / "adk_compat.py")
    assert "google.adk.flows.llm_flows.functions" in _adk_names(PACKAGE / "core" / "adk_compat.py")
    store_base = [t for _, t in _package_imports(PACKAGE / "store" / "base.py")]
    assert any(t.startswith("core.") for t in store_base)  # an import the arrows test reads
    assert _level_of("core.pairing") < _level_of("store.base")


SCAN_PATH = ("ops/scan", "ops/repair", "ops/apply", "ops/scan_report", "ops/repair_report",
             "ops/text_output", "ops/ledger_documents", "core/session_decision", "core/durations",
             "core/findings", "core/healing", "core/heal_plan",
             "core/event_access", "core/adk_compat", "core/late_results", "observe",
             "core/pairing", "core/invocations", "policy", "core/tool_runs", "store/base",
             "store/opening", "store/layouts/sql_tables", "store/layouts/adk_sqlite",
             "store/streaming", "store/layouts/redis_sessions", "store/ledger/tool_run_redis",
             "store/ledger/tool_run_sql", "store/ledger/heal_ledger", "store/ledger/heal_table",
             "store/ledger/revisions", "store/session_filter_sql",
             "store/urls")
"""Modules a scan by URL loads before its first row (tests/cli/test_startup.py runs them)."""

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
    service, healing = PACKAGE / "runtime" / "service.py", PACKAGE / "core" / "healing.py"
    assert "google.adk.events.event" in _module_level_imports(service)
    assert "google.adk.events.event" not in _module_level_imports(healing)
    assert "google.adk.events.event" in _imports(healing)
