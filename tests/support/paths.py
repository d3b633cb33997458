"""Where the test suite's folders are, for tests that run a child script or the checkout."""

from __future__ import annotations

from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]
"""The tests/ folder."""
ROOT = TESTS.parent
"""The repository's root (the checkout)."""
SUPPORT = TESTS / "support"
"""Helper modules, importable by tests and by child scripts (tests/conftest.py puts this
folder on ``sys.path`` and on the ``PYTHONPATH`` children inherit)."""
CHILDREN = TESTS / "children"
"""Scripts the tests run as child processes."""
