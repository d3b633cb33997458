"""The scan path's start (issue 13): no ADK, google-genai, Alembic, rich or aiohttp is loaded.

Each test runs the real command in a child interpreter over a real store
built through ADK's own services, then lists which of those packages the
child had loaded by the time it exited: a package that was never loaded was
not loaded before the first row was read either. Timings are measured in
``benchmarks/bench_startup.py``, never asserted here.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import AsyncIterator
from urllib.parse import quote

import pytest
from conftest import close_redis
from paths import ROOT, SUPPORT
from servers import REDIS_URL, temporary_redis_prefix
from stores import (
    Store,
    adk_store_fixture,  # noqa: F401  (the adk_store fixture)
    crashed_histories,
    fill,
    fill_service,
)

HEAVY = ("google.adk", "google.genai", "alembic", "rich", "aiohttp")
"""What the scan path must not import (``--help`` is covered in test_cli.py)."""

PROBE = """
import json, sys
from adk_session_heal.cli import main
code = 0
try:
    main(sys.argv[2:])
except SystemExit as exit:
    code = exit.code
heavy = sorted({m.split(".")[0] if not m.startswith("google.") else ".".join(m.split(".")[:2])
                for m in sys.modules if m.startswith(tuple(sys.argv[1].split(",")))})
print(json.dumps({"exit": code, "loaded": heavy}), file=sys.stderr)
"""
"""Runs the CLI in-process, then prints its exit code and the heavy packages loaded."""


def run_cli(*args: str) -> tuple[int, list[str], str]:
    """Runs ``adk-session-heal ARGS`` in a fresh interpreter.

    Returns:
        The exit code, the heavy packages it loaded, and its stdout.
    """
    ran = subprocess.run(
        [sys.executable, "-c", PROBE, ",".join(HEAVY), *args], capture_output=True, text=True,
        check=False, cwd=ROOT, timeout=120,
        env={**os.environ, "PYTHONPATH": f"{ROOT}{os.pathsep}{SUPPORT}"},
    )
    result = json.loads(ran.stderr.strip().splitlines()[-1])
    return result["exit"], result["loaded"], ran.stdout


@pytest.mark.parametrize("output", [["--format", "tsv"], ["--json"]])
async def test_scan_loads_no_adk_genai_alembic_rich_or_aiohttp(adk_store: Store,
                                                               output: list[str]) -> None:
    """`scan URL` over each SQL layout reads every row and prints it with none of them loaded."""
    await fill(adk_store, crashed_histories())
    code, loaded, stdout = run_cli("scan", adk_store.url, *output)
    assert code == 1, stdout  # the crashed histories hold dead calls: the rows were read
    assert loaded == []
    if output == ["--json"]:
        assert json.loads(stdout)["sessions_scanned"] == len(crashed_histories())


async def test_repair_dry_run_loads_no_adk_genai_alembic_rich_or_aiohttp(
        adk_store: Store) -> None:
    """`repair --dry-run` plans and prints every heal's row with none of them loaded."""
    await fill(adk_store, crashed_histories())
    code, loaded, stdout = run_cli("repair", adk_store.url, "--dry-run", "--json")
    assert code == 0, stdout
    assert len(json.loads(stdout)["heals"]) == 3
    assert loaded == []


@pytest.fixture
async def redis_url() -> AsyncIterator[str]:
    """A Redis store of ADK's RedisSessionService holding the crashed histories."""
    from google.adk.integrations.redis import RedisSessionService, RedisSessionServiceConfig

    async with temporary_redis_prefix() as prefix:
        service = RedisSessionService(RedisSessionServiceConfig(uri=REDIS_URL, key_prefix=prefix))
        try:
            await fill_service(service, crashed_histories())
        finally:
            await close_redis(service)
        yield f"{REDIS_URL}?key_prefix={quote(prefix, safe='')}"


@pytest.mark.parametrize("command", [["scan", "--format", "tsv"],
                                     ["repair", "--dry-run", "--json"]])
def test_redis_scan_and_plan_load_no_adk_genai_alembic_rich_or_aiohttp(
        redis_url: str, command: list[str]) -> None:
    """`scan` and `repair --dry-run` over a redis:// URL load none of them either."""
    code, loaded, stdout = run_cli(command[0], redis_url, *command[1:])
    assert code == (1 if command[0] == "scan" else 0), stdout
    assert loaded == []


def test_the_check_can_fail() -> None:
    """The probe does list the heavy packages a command loads (the tests above are not vacuous)."""
    probe = PROBE.replace("main(sys.argv[2:])", "import rich.console, google.adk.sessions")
    ran = subprocess.run([sys.executable, "-c", probe, ",".join(HEAVY)], capture_output=True,
                         text=True, check=False, timeout=120,
                         env={**os.environ, "PYTHONPATH": f"{ROOT}{os.pathsep}{SUPPORT}"})
    loaded = json.loads(ran.stderr.strip().splitlines()[-1])["loaded"]
    assert {"google.adk", "google.genai", "rich"} <= set(loaded)
