"""The docs are tested claims: every command and Python block of README.md and docs/ runs.

How a block is run, its directives and the transcript normaliser are described
in ``tests/support/doc_blocks.py``; ``scripts/regen_transcripts.py`` rewrites the
transcripts from real runs with the same code.
"""

from __future__ import annotations

import asyncio
import os
import re
import subprocess
import sys
import tomllib
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from pathlib import Path

import pytest
from doc_blocks import (
    DOCS,
    ILLUSTRATION_LANGS,
    PRELUDES,
    ROOT,
    Block,
    all_blocks,
    command_dir,
    matches,
    prepared,
    run_python,
    run_script,
    run_transcript,
    server_url,
    steps,
    write_fixture,
    write_sessions,
)
from google.adk.sessions.sqlite_session_service import SqliteSessionService

pytestmark = pytest.mark.slow

BLOCKS = all_blocks()
RUN = [b for b in BLOCKS if b.kind != "illustration" and "skip" not in b.directive]
DOCS_TEXT = "".join(path.read_text() for path in DOCS)
DIRECTIVES = {"skip", "prelude", "server", "url", "env", "before"}
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
        assert set(block.directive) <= DIRECTIVES, f"{block.name}: {block.directive}"
        assert set(block.directive.get("prelude", "").split(",")) - {""} <= set(PRELUDES)
        assert set(block.servers) <= {"sqlite", "postgres", "mariadb", "redis"}, block.name
        reason = block.directive.get("skip")
        if reason is not None:
            assert re.search(r"tests/\S+|\.ci/\S+", reason), f"{block.name}: {reason}"
        elif block.kind == "illustration":
            # A block in any other language (pycon, toml, ...) would be neither run nor skipped.
            assert block.lang in ILLUSTRATION_LANGS, f"{block.name}: {block.lang}"
    # A guard against the parser silently finding nothing.
    assert len(RUN) >= 15


def test_named_extras_exist() -> None:
    """Every ``adk-session-heal[extra]`` the docs name is in pyproject.toml."""
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"][
        "optional-dependencies"]
    named = set(re.findall(r"adk-session-heal\[([\w,]+)\]", DOCS_TEXT))
    for group in named:
        for extra in group.split(","):
            assert extra in extras, f"the docs name an extra pyproject.toml lacks: {extra}"


SCHEMES = sorted(set(re.findall(r"\b([a-z][a-z0-9+]*)://", DOCS_TEXT)))
TESTED_ELSEWHERE = {
    "rediss": "tests/store/test_redis_store.py::test_redis_urls_parse_and_hide_their_password "
              "(parsed only: no TLS Redis server here)",
}
"""URL schemes the docs name that this file does not run, and what covers them."""


@asynccontextmanager
async def store_url(scheme: str, tmp: Path) -> AsyncIterator[str]:
    """A URL of ``scheme`` for a store holding the docs' sessions."""
    if scheme == "memory":
        yield "memory://"
    elif scheme == "sqlite+aiosqlite":
        await write_fixture(tmp / "sessions.db")
        yield f"sqlite+aiosqlite:///{tmp / 'sessions.db'}"
    elif scheme == "sqlite":
        service = SqliteSessionService(str(tmp / "adk.db"))
        await write_sessions(service)
        yield f"sqlite:///{tmp / 'adk.db'}"
    elif scheme == "redis":
        async with server_url("redis") as url:
            assert url is not None
            yield url
    else:
        server = "postgres" if scheme.startswith("postgresql") else "mariadb"
        async with server_url(server) as url:
            assert url is not None
            yield scheme + url[url.index("://"):]


def test_every_url_scheme_the_docs_name_is_run_or_covered() -> None:
    """Each scheme the docs name is run below or named in TESTED_ELSEWHERE."""
    runnable = {"memory", "sqlite", "sqlite+aiosqlite", "redis", "postgresql+asyncpg",
                "mysql+aiomysql", "mysql+asyncmy", "mariadb+aiomysql", "mariadb+asyncmy"}
    for scheme in SCHEMES:
        inner = scheme.removeprefix("heal+")
        assert inner in runnable or inner in TESTED_ELSEWHERE, f"untested URL form {scheme}://"


@pytest.mark.parametrize("scheme", [s for s in SCHEMES if not s.startswith("heal+")
                                    and s not in TESTED_ELSEWHERE and s != "memory"])
async def test_the_cli_scans_each_url_scheme_the_docs_name(scheme: str, tmp_path: Path) -> None:
    """`adk-session-heal scan` reads the docs' sessions over every URL scheme the docs name."""
    async with store_url(scheme, tmp_path) as url:
        completed = subprocess.run(
            ["adk-session-heal", "scan", url], capture_output=True, text=True, timeout=120,
            env={**os.environ, "PATH": f"{command_dir(tmp_path)}{os.pathsep}{os.environ['PATH']}"},
            check=False,
        )
    assert completed.returncode == 1, completed.stderr
    assert "Scanned 4 sessions (10 events)" in completed.stderr


HEAL_URIS_CHILD = """
import asyncio, sys
from google.adk.cli.utils.service_factory import create_session_service_from_options
from adk_session_heal import HealingSessionService
from adk_session_heal.runtime.adk_services import register_healing_session_services

async def main() -> None:
    register_healing_session_services()
    for uri in sys.argv[1:]:
        service = create_session_service_from_options(base_dir=".", session_service_uri=uri)
        assert isinstance(service, HealingSessionService), uri
        if uri == "heal+memory://":
            session = await service.create_session(app_name="weather_app", user_id="u-42")
            assert await service.get_session(app_name="weather_app", user_id="u-42",
                                             session_id=session.id)
            continue
        session = await service.get_session(app_name="weather_app", user_id="u-42",
                                            session_id="3f0c9a52-7d1e-4b8a-9c61-2e4f5a6b7c80")
        assert session and "e-0002-heal" in [e.id for e in session.events], uri
        print("healed over", uri.split("://")[0])

asyncio.run(main())
"""


@pytest.mark.postgres
@pytest.mark.mariadb
@pytest.mark.redis
async def test_every_heal_uri_the_docs_name_builds_a_healing_service(tmp_path: Path) -> None:
    """ADK's own factory builds a healing service for each heal+ URI form the docs name."""
    schemes = [s for s in SCHEMES if s.startswith("heal+")
               and s.removeprefix("heal+") not in TESTED_ELSEWHERE]
    async with AsyncExitStack() as stack:
        uris = []
        for number, scheme in enumerate(schemes):
            folder = tmp_path / str(number)
            folder.mkdir()
            uris.append("heal+" + await stack.enter_async_context(
                store_url(scheme.removeprefix("heal+"), folder)))
        completed = subprocess.run([sys.executable, "-c", HEAL_URIS_CHILD, *uris], cwd=tmp_path,
                                   env={**os.environ, "PYTHONPATH": str(ROOT)},
                                   capture_output=True, text=True, timeout=120, check=False)
    assert completed.returncode == 0, completed.stderr
    assert completed.stdout.count("healed over") == len(schemes) - ("heal+memory" in schemes)


CONTENTS = re.compile(r"<!-- contents -->\n(.*?)<!-- /contents -->\n", re.S)


def _headings(text: str) -> list[tuple[int, str]]:
    """The ``##`` and ``###`` headings of a Markdown text, outside fenced blocks, in order."""
    found: list[tuple[int, str]] = []
    fenced = False
    for line in text.splitlines():
        if line.startswith("```"):
            fenced = not fenced
        elif not fenced and (heading := re.match(r"(#{2,3}) (.+)", line)):
            found.append((len(heading[1]), heading[2].strip()))
    return found


def _anchor(heading: str) -> str:
    """GitHub's anchor of a heading: lower case, punctuation dropped, spaces as hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.lower()).replace(" ", "-")


def readme_contents(text: str) -> str:
    """The README's table of contents as it must read: every section, in order, linked."""
    return "".join(f"{'  ' * (level - 2)}- [{title}](#{_anchor(title)})\n"
                   for level, title in _headings(text))


def test_no_placeholder_is_left_in_the_docs() -> None:
    """Every figure the docs state is filled in (a ``@@NAME@@`` placeholder is not)."""
    assert re.findall(r"@@\w+@@", DOCS_TEXT) == []


def test_readme_contents_list_every_section() -> None:
    """The README's table of contents names every ## and ### section, in order, linked right."""
    text = (ROOT / "README.md").read_text()
    shown = CONTENTS.search(text)
    assert shown is not None, "README.md needs its contents between <!-- contents --> lines"
    assert shown[1] == readme_contents(text), f"README.md's contents should read:\n" \
        f"{readme_contents(text)}"


def test_every_link_inside_the_docs_reaches_a_heading() -> None:
    """Every ``(#anchor)`` and ``(file.md#anchor)`` link of the docs names a heading that exists."""
    anchors = {path.name: {_anchor(title) for _, title in _headings(path.read_text())}
               | {_anchor(line.lstrip("# ").strip()) for line in path.read_text().splitlines()
                  if line.startswith("# ")} for path in DOCS}
    broken = []
    for path in DOCS:
        for target, anchor in re.findall(r"\]\(([\w./-]*?)#([\w-]+)\)", path.read_text()):
            name = Path(target).name if target else path.name
            if name in anchors and anchor not in anchors[name]:
                broken.append(f"{path.name}: ({target}#{anchor})")
    assert broken == []
