"""The CLI run in-process, its one-line errors checked, and a child Python without some packages.

Shared by every test that drives the CLI (``cli``, ``assert_one_line_error``) and by those
that check what a base install without a server driver says (``without_packages``).
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from click.testing import CliRunner, Result

from adk_session_heal.cli import URL_ENV, main


def cli(*args: str, env: Mapping[str, str | None] | None = None) -> Result:
    """Runs the CLI in-process (stdin and stdout are not terminals).

    In a thread of its own, since the CLI runs its own event loop and async
    tests already have one. ``ADK_SESSION_HEAL_URL`` is unset unless ``env`` sets it.
    """
    environment = {URL_ENV: None, **(env or {})}
    with ThreadPoolExecutor(1) as pool:
        return pool.submit(CliRunner().invoke, main, list(args), env=environment,
                           catch_exceptions=False).result()


def assert_one_line_error(result: Result, *words: str) -> None:
    """Exit 2 with one line on stderr containing ``words`` and no password."""
    assert result.exit_code == 2, result.output
    message = result.stderr.strip()
    assert message.count("\n") == 0, message
    for word in words:
        assert word in message, message
    assert "hunter2" not in result.output


_HIDE_DRIVERS = '''
import os, sys

_HIDDEN = frozenset(os.environ["ADK_HEAL_TEST_UNINSTALLED"].split(","))


class _Uninstalled:
    """Finds nothing for the hidden packages, as when they were never installed."""

    @staticmethod
    def find_spec(name, path=None, target=None):
        if name.partition(".")[0] in _HIDDEN:
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None


sys.meta_path.insert(0, _Uninstalled())
'''
"""A ``sitecustomize`` that makes packages unimportable in a child Python, as in an install
without them (the base install has none of the server drivers)."""


def without_packages(tmp_path: Path, *packages: str) -> dict[str, str]:
    """Returns a child's environment in which ``packages`` cannot be imported, checked for
    real: importing each in that environment fails with ModuleNotFoundError."""
    (tmp_path / "sitecustomize.py").write_text(_HIDE_DRIVERS)
    env = {**os.environ, "ADK_HEAL_TEST_UNINSTALLED": ",".join(packages),
           "PYTHONPATH": os.pathsep.join(filter(None, [str(tmp_path),
                                                       os.environ.get("PYTHONPATH")]))}
    env.pop(URL_ENV, None)
    for package in packages:
        probe = subprocess.run([sys.executable, "-c", f"import {package}"], env=env,
                               capture_output=True, text=True, timeout=60, check=False)
        assert "ModuleNotFoundError" in probe.stderr, probe.stderr
    return env
