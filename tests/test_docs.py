"""The docs are tested claims: every command and Python block of README.md and docs/ runs.

How a block is run, its directives and the transcript normaliser are described
in ``tests/doc_blocks.py``; ``scripts/regen_transcripts.py`` rewrites the
transcripts from real runs with the same code.
"""

from __future__ import annotations

import asyncio
import re
import tomllib
from pathlib import Path

import pytest
from doc_blocks import (
    DOCS,
    ILLUSTRATION_LANGS,
    ROOT,
    SHELL_LANGS,
    Block,
    all_blocks,
    matches,
    prepared,
    run_python,
    run_script,
    run_transcript,
    steps,
    write_fixture,
)

pytestmark = pytest.mark.slow

BLOCKS = all_blocks()
RUN = [b for b in BLOCKS if b.kind != "illustration" and "skip" not in b.directive]
CASES = [pytest.param(b, server, id=f"{b.name}-{server}") for b in RUN for server in b.servers]


@pytest.fixture(scope="module")
def sessions_db(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A SQLite ``DatabaseSessionService`` file holding the docs' crashed sessions."""
    path = tmp_path_factory.mktemp("fixture") / "sessions.db"
    asyncio.run(write_fixture(path))
    return path


@pytest.mark.parametrize(("block", "server"), CASES)
async def test_block_runs(block: Block, server: str, sessions_db: Path, tmp_path: Path) -> None:
    """The block runs as written; a transcript prints what it shows."""
    async with prepared(block, server, tmp_path, sessions_db) as run:
        if block.kind == "transcript":
            outputs = run_transcript(block, run.work, run.env, run.url)
            for step, output in zip(steps(block), outputs, strict=True):
                assert matches(step.expected, output), (
                    f"{block.name}: `$ {step.command}` printed\n{output}\nnot\n{step.expected}"
                    "(scripts/regen_transcripts.py rewrites it from a real run)"
                )
        else:
            completed = (run_python if block.kind == "python" else run_script)(
                block, run.work, run.env, run.url)
            shown = completed.stdout + completed.stderr
            assert completed.returncode == 0, f"{block.name} failed:\n{shown}"
            assert "Traceback" not in shown
            assert not re.search(r"^Error:", shown, re.MULTILINE), shown


def test_every_block_runs_or_says_why_not() -> None:
    """Every Python and shell block runs, or is skipped with a reason naming its covering test."""
    for block in BLOCKS:
        reason = block.directive.get("skip")
        if reason is not None:
            assert re.search(r"tests/\S+|\.ci/\S+", reason), f"{block.name}: {reason}"
        elif block.lang in ("python", *SHELL_LANGS):
            assert block.kind != "illustration", block.name
        else:
            assert block.kind == "illustration", block.name
            assert block.lang in ILLUSTRATION_LANGS, f"{block.name}: {block.lang}"
    assert len(RUN) >= 15


def test_named_extras_exist() -> None:
    """Every ``adk-session-heal[extra]`` the docs name is in pyproject.toml."""
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"][
        "optional-dependencies"]
    text = "".join(path.read_text() for path in DOCS)
    named = set(re.findall(r"adk-session-heal\[([\w,]+)\]", text))
    for group in named:
        for extra in group.split(","):
            assert extra in extras, f"the docs name an extra pyproject.toml lacks: {extra}"
