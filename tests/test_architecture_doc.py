"""docs/architecture.md names every module of the package by its path, and no path that is gone."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).parents[1]
PACKAGE = ROOT / "adk_session_heal"
DOC = ROOT / "docs" / "architecture.md"

BACKTICKED_PATH = re.compile(r"`(?:adk_session_heal/)?([\w./-]+\.py)`")
"""A backticked Python path, e.g. `core/findings.py` or `policy.py` (a package prefix dropped)."""

ELSEWHERE = ("tests/", "benchmarks/", "examples/", "docs/")
"""Paths outside the package, which the doc may name without them being modules of it."""


def named_paths(text: str) -> set[str]:
    """Every backticked ``something.py`` path in ``text``, relative to the package."""
    return set(BACKTICKED_PATH.findall(text))


def package_modules(package: Path) -> set[str]:
    """Every module the doc must name: sub-folder ``__init__.py``, ``__main__.py`` and the
    Alembic scripts left out."""
    modules: set[str] = set()
    for path in package.rglob("*.py"):
        relative = path.relative_to(package)
        if relative.parts[:3] == ("store", "ledger", "alembic"):
            continue
        if relative.name == "__main__.py":
            continue
        if relative.name == "__init__.py" and len(relative.parts) > 1:
            continue
        modules.add(relative.as_posix())
    return modules


def unnamed_modules(text: str, package: Path) -> list[str]:
    """The modules of ``package`` that ``text`` does not name by their path."""
    return sorted(package_modules(package) - named_paths(text))


def missing_paths(text: str, package: Path) -> list[str]:
    """The package paths ``text`` names that do not exist under ``package``."""
    return sorted(
        path
        for path in named_paths(text)
        if not path.startswith(ELSEWHERE) and not (package / path).is_file()
    )


def test_every_module_is_named_by_its_path() -> None:
    """Each module of the package appears in the doc as its path, e.g. `core/findings.py`."""
    assert unnamed_modules(DOC.read_text(), PACKAGE) == []


def test_every_path_the_doc_names_exists() -> None:
    """No backticked `x.py` path in the doc points at a module that moved or is gone."""
    assert missing_paths(DOC.read_text(), PACKAGE) == []


def test_the_checks_can_fail() -> None:
    """The extraction finds known paths, and both checks report what is wrong."""
    text = DOC.read_text()
    assert {"core/findings.py", "policy.py", "store/layouts/sql_tables.py"} <= named_paths(text)
    assert "store/layouts/sql_tables.py" in package_modules(PACKAGE)
    assert "core/__init__.py" not in package_modules(PACKAGE)
    assert not any("alembic" in module for module in package_modules(PACKAGE))
    made_up = text + "\nSee `core/no_such_module.py` and `tests/not_checked.py`.\n"
    assert missing_paths(made_up, PACKAGE) == ["core/no_such_module.py"]
    dropped = text.replace("`core/findings.py`", "findings")
    assert unnamed_modules(dropped, PACKAGE) == ["core/findings.py"]
