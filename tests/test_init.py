"""Tests for the public face of adk_session_heal: the root's names and the public modules."""

from __future__ import annotations

import importlib
import pkgutil
import re
from pathlib import Path

import pytest

import adk_session_heal

API_DOC = Path(__file__).resolve().parent.parent / "docs" / "api.md"

PUBLIC_API = [
    "CallStatus",
    "HealError",
    "HealPolicy",
    "HealRecord",
    "HealingSessionService",
    "RepairPlan",
    "RepairReport",
    "ScanOptions",
    "ScanReport",
    "SessionFilter",
    "SessionFindings",
    "SessionKey",
    "StoreError",
    "ToolAwareContextFilterPlugin",
    "ToolEffect",
    "ToolRunLedgerPlugin",
    "apply_plan",
    "classify",
    "plan_repair",
    "provider_problems",
    "register_healing_session_services",
    "repair",
    "scan",
    "tool_effects_from",
    "validate",
]

PUBLIC_MODULES = ["errors", "ledger", "messages", "migrate", "observe", "plugins", "policy",
                  "register", "testing", "validators"]
"""The only import paths besides the root that users may rely on (docs/api.md)."""

PRIVATE_LAYERS = ["cli", "core", "ops", "providers", "runtime", "store"]


def test_all_is_sorted_and_every_name_exists() -> None:
    """__all__ is a sorted literal, and each name it lists is importable."""
    assert adk_session_heal.__all__ == sorted(adk_session_heal.__all__)
    missing = [n for n in adk_session_heal.__all__ if not hasattr(adk_session_heal, n)]
    assert missing == []


def test_public_api_is_pinned() -> None:
    """The root exports at most 25 names, and they change only on purpose."""
    assert adk_session_heal.__all__ == PUBLIC_API
    assert len(PUBLIC_API) <= 25


def test_the_package_holds_public_modules_and_private_layers_only() -> None:
    """Each module at the root is a documented public one or a private layer, and no
    exported name is also a module name."""
    found = {m.name for m in pkgutil.iter_modules(adk_session_heal.__path__)}
    assert found == {*PUBLIC_MODULES, *PRIVATE_LAYERS, "__main__"}
    assert found & set(adk_session_heal.__all__) == set()


@pytest.mark.parametrize("layer", PRIVATE_LAYERS)
def test_each_layer_says_it_is_private(layer: str) -> None:
    """A layer's docstring tells a reader its modules may change without notice."""
    doc = importlib.import_module(f"adk_session_heal.{layer}").__doc__ or ""
    assert "private" in doc.lower(), doc


@pytest.mark.parametrize("name", PUBLIC_MODULES)
def test_each_public_module_is_documented_with_every_name(name: str) -> None:
    """docs/api.md names each public module and every name in its ``__all__``."""
    module = importlib.import_module(f"adk_session_heal.{name}")
    text = API_DOC.read_text()
    section = re.search(rf"^## `adk_session_heal\.{name}`\n(.*?)(?=^## |\Z)", text, re.S | re.M)
    assert section is not None, f"docs/api.md has no section for adk_session_heal.{name}"
    names = getattr(module, "__all__", [])
    assert [n for n in names if not hasattr(module, n)] == []
    undocumented = [n for n in names if f"`{n}`" not in section.group(1)]
    assert undocumented == []


def test_docs_api_lists_the_root_names() -> None:
    """docs/api.md lists each root name, and only public modules."""
    text = API_DOC.read_text()
    root = re.search(r"^## `adk_session_heal`\n(.*?)(?=^## |\Z)", text, re.S | re.M)
    assert root is not None
    assert [n for n in PUBLIC_API if f"`{n}`" not in root.group(1)] == []
    sections = re.findall(r"^## `adk_session_heal\.(\w+)`", text, re.M)
    assert sorted(sections) == sorted(PUBLIC_MODULES)


def test_unknown_names_raise_attribute_error() -> None:
    """The lazy loader serves only the public names."""
    with pytest.raises(AttributeError):
        adk_session_heal.no_such_name  # noqa: B018
