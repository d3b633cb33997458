"""The fenced blocks of README.md and docs/*.md, and how each is run.

Used by ``tests/test_docs.py`` (which runs every block) and by
``scripts/regen_transcripts.py`` (which rewrites transcripts from real runs),
so both run a block the same way.

**Kinds.** A block with ``$ `` lines is a *transcript*: each ``$ `` command runs
in one bash session (stdout and stderr together) and what follows it, up to the
next ``$ ``, is its output. A ``bash``/``sh`` block without ``$ `` lines is a
*script*: it must exit 0 and print no ``Traceback`` and no ``Error:`` line. A
``python`` block runs as a file in a child process (a top-level ``await``
runs in an event loop) and must exit 0 without a traceback. Any other block
(diagrams, log lines, JSON, YAML) is an illustration and is not run.

**Directives.** An HTML comment right before a block, ``<!-- docs-test: ITEM; ITEM -->``:

- ``skip: REASON``: not run; REASON names the test or CI step that covers it.
- ``prelude=NAME,...``: Python source from :data:`PRELUDES` runs first (defines
  ``agent``, ``session``, ...).
- ``server=postgres,mariadb,redis``: the block runs once per server, against a
  fresh database holding :func:`write_sessions`'s sessions (default: SQLite only).
- ``url=LITERAL``: LITERAL in the block stands for that database's URL; it is
  replaced in the block, and the URL replaced back by LITERAL in the output.
  Without it the URL is in ``$URL``. (The URL as the CLI shows it, query values
  masked, is replaced back too.)
- ``env NAME=VALUE``: an environment variable for the block.
- ``before COMMAND``: a shell command run first in the block's directory.

Every block runs in a fresh directory holding ``sessions.db``: a SQLite
``DatabaseSessionService`` database with the sessions of :func:`write_sessions`.

**Normaliser.** In a transcript's expected output, a decimal number (an age or
a timestamp, in seconds) matches any decimal number, and a line containing ``elided
here`` matches any run of lines; everything else must be equal.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path

from google.adk.events.event import Event
from google.adk.sessions import BaseSessionService, DatabaseSessionService
from google.genai import types
from paths import ROOT, SUPPORT
from servers import REDIS_URL, temporary_database, temporary_redis_prefix

from adk_session_heal.store.urls import redact_url

DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
SHELL_LANGS = {"bash", "sh", "shell", "console"}
ILLUSTRATION_LANGS = {"", "text", "json", "yaml"}
MARKER = "@@docs-test@@"

PRELUDES = {
    "agent": (
        "from adk_session_heal.testing import offline_weather_model, weather_agent\n"
        "agent = weather_agent(offline_weather_model())\n"
    ),
    "session_service": (
        "from google.adk.sessions import InMemorySessionService\n"
        "from adk_session_heal import HealingSessionService\n"
        "session_service = HealingSessionService(InMemorySessionService())\n"
    ),
    "service": (
        "from google.adk.sessions import InMemorySessionService\n"
        "service = InMemorySessionService()\n"
    ),
    "inner": (
        "from google.adk.sessions import InMemorySessionService\n"
        "inner = InMemorySessionService()\n"
    ),
    "session": (
        "from google.adk.sessions import Session\n"
        "from adk_session_heal.testing import History\n"
        "history = History()\n"
        "history.user('weather?')\n"
        "history.call('get_weather')\n"
        "history.user('hello?')\n"
        "session = Session(id='s-1', app_name='app', user_id='u', events=history.events)\n"
    ),
    "llm_request": (
        "from google.adk.models.llm_request import LlmRequest\n"
        "from adk_session_heal.testing import History\n"
        "history = History()\n"
        "history.user('weather?')\n"
        "history.call('get_weather')\n"
        "llm_request = LlmRequest(contents=[e.content for e in history.events])\n"
    ),
    "chat": (
        "chat = [\n"
        "    {'role': 'system', 'content': 'Be brief.'},\n"
        "    {'role': 'user', 'content': 'weather?'},\n"
        "    {'role': 'assistant', 'tool_calls': [\n"
        "        {'id': 'a', 'type': 'function', 'function': {'name': 'w', 'arguments': '{}'}},\n"
        "        {'id': 'b', 'type': 'function', 'function': {'name': 'w', 'arguments': '{}'}}]},\n"
        "    {'role': 'tool', 'tool_call_id': 'a', 'content': 'sun'},\n"
        "    {'role': 'tool', 'tool_call_id': 'b', 'content': 'rain'},\n"
        "    {'role': 'assistant', 'content': 'Sun, then rain.'},\n"
        "    {'role': 'user', 'content': 'thanks'},\n"
        "]\n"
    ),
    "telemetry": (
        "from opentelemetry.sdk.metrics import MeterProvider\n"
        "from opentelemetry.sdk.trace import TracerProvider\n"
        "my_meter_provider, my_tracer_provider = MeterProvider(), TracerProvider()\n"
    ),
}
"""Named Python sources a ``prelude=`` directive runs before a block."""


@dataclass
class Block:
    """One fenced block: where it is, its language, text and directive."""

    path: Path
    line: int  # 1-based line of the opening fence
    lang: str
    text: str
    directive: dict[str, str] = field(default_factory=dict)
    indent: str = ""  # the fence's indentation (a block in a list item), stripped from text

    @property
    def name(self) -> str:
        return f"{self.path.relative_to(ROOT)}:{self.line}"

    @property
    def kind(self) -> str:
        """``transcript``, ``script``, ``python`` or ``illustration``."""
        if any(line.startswith("$ ") for line in self.text.splitlines()):
            return "transcript"
        if self.lang in SHELL_LANGS:
            return "script"
        if self.lang == "python":
            return "python"
        return "illustration"

    @property
    def servers(self) -> list[str]:
        return self.directive.get("server", "sqlite").split(",")


_FENCE = re.compile(r"^(\s*)```(\w*)\s*$")
_DIRECTIVE = re.compile(r"^\s*<!-- docs-test: (.*) -->\s*$")


def parse_directive(text: str) -> dict[str, str]:
    """Parses ``skip: R``, ``prelude=a,b``, ``env N=V``, ... into a dict."""
    if text.startswith("skip:"):
        return {"skip": text[len("skip:"):].strip()}
    directive: dict[str, str] = {}
    for item in (i.strip() for i in text.split(";")):
        if item.startswith("env "):
            directive["env"] = " ".join(filter(None, [directive.get("env"), item[4:]]))
        elif item.startswith("before "):
            directive["before"] = item[len("before "):]
        else:
            key, _, value = item.partition("=")
            directive[key.strip()] = value.strip()
    return directive


def blocks(path: Path) -> list[Block]:
    """Returns the fenced blocks of one Markdown file, with their directives."""
    found: list[Block] = []
    lines = path.read_text().splitlines()
    i = 0
    while i < len(lines):
        opening = _FENCE.match(lines[i])
        if not opening:
            i += 1
            continue
        indent, lang = opening.groups()
        end = i + 1
        while not lines[end].strip().startswith("```"):
            end += 1
        body = [line[len(indent):] for line in lines[i + 1:end]]
        previous = lines[i - 1] if i else ""
        comment = _DIRECTIVE.match(previous)
        found.append(Block(path, i + 1, lang, "\n".join(body) + "\n",
                           parse_directive(comment.group(1)) if comment else {}, indent))
        i = end + 1
    return found


def all_blocks() -> list[Block]:
    """Every fenced block of README.md and docs/*.md."""
    return [block for path in DOCS for block in blocks(path)]


# -- transcripts ------------------------------------------------------------


@dataclass
class Step:
    """One ``$ `` command of a transcript and the output shown under it."""

    command: str
    expected: str


def steps(block: Block) -> list[Step]:
    """Splits a transcript into its commands and their shown outputs."""
    result: list[Step] = []
    for line in block.text.splitlines():
        if line.startswith("$ "):
            result.append(Step(line[2:], ""))
        elif result:
            result[-1].expected += line + "\n"
    return result


def matches(expected: str, actual: str) -> bool:
    """Whether a real output matches a shown one, under the normaliser."""
    pattern = []
    for line in expected.splitlines():
        if "elided here" in line:
            pattern.append(r"(?:[^\n]*\n)*?")
        else:
            escaped = re.escape(line)
            pattern.append(re.sub(r"\d+\\\.\d+", r"\\d+\\.\\d+", escaped) + r"\n")
    return re.fullmatch("".join(pattern), actual) is not None


def run_transcript(block: Block, cwd: Path, env: dict[str, str],
                   url: str | None = None) -> list[str]:
    """Runs a transcript's commands in one bash session; returns each one's output."""
    literal = block.directive.get("url")
    script = ["exec 2>&1"]
    for step in steps(block):
        command = step.command
        if literal and url:
            command = command.replace(literal, url)
        script += [command, f"printf '\\n{MARKER} %d\\n' \"$?\""]
    completed = subprocess.run(["bash", "-c", "\n".join(script)], cwd=cwd, env=env,
                               stdin=subprocess.DEVNULL, capture_output=True, text=True,
                               timeout=300, check=False)
    outputs = re.split(rf"\n{MARKER} \d+\n", completed.stdout)[:-1]
    if literal and url:
        outputs = [out.replace(url, literal).replace(redact_url(url), redact_url(literal))
                   for out in outputs]
    return [out if out.endswith("\n") or not out else out + "\n" for out in outputs]


def rewrite_transcript(block: Block, outputs: list[str]) -> str:
    """The block's text with each command's shown output replaced by a real one."""
    text = ""
    for step, output in zip(steps(block), outputs, strict=True):
        text += f"$ {step.command}\n" + (step.expected if matches(step.expected, output)
                                         else output)
    return text


# -- scripts and Python -------------------------------------------------------


def run_script(block: Block, cwd: Path, env: dict[str, str],
               url: str | None = None) -> subprocess.CompletedProcess[str]:
    """Runs a bash/sh block as one script."""
    text = block.text
    literal = block.directive.get("url")
    if literal and url:
        text = text.replace(literal, url)
    shell = "sh" if block.lang == "sh" else "bash"
    return subprocess.run([shell, "-c", text], cwd=cwd, env=env, stdin=subprocess.DEVNULL,
                          capture_output=True, text=True, timeout=300, check=False)


_TOP_LEVEL_AWAIT = """
import ast, asyncio, sys
path = sys.argv[1]
code = compile(open(path).read(), path, "exec", flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT)
result = eval(code, {"__name__": "__main__", "__file__": path})
if asyncio.iscoroutine(result):
    asyncio.run(result)
"""
"""Runs a file whose top level may ``await`` (as a snippet in the docs may)."""


def run_python(block: Block, cwd: Path, env: dict[str, str],
               url: str | None = None) -> subprocess.CompletedProcess[str]:
    """Runs a Python block, after its preludes, as a file in a child process."""
    names = [n for n in block.directive.get("prelude", "").split(",") if n]
    text = block.text
    literal = block.directive.get("url")
    if literal and url:
        text = text.replace(literal, url)
    source = "".join(PRELUDES[name] for name in names) + text
    script = cwd / "docs_block.py"
    script.write_text(source)
    return subprocess.run([sys.executable, "-c", _TOP_LEVEL_AWAIT, str(script)], cwd=cwd, env=env,
                          stdin=subprocess.DEVNULL, capture_output=True, text=True,
                          timeout=120, check=False)


# -- what the blocks expect ------------------------------------------------------


def command_dir(tmp: Path) -> Path:
    """A directory holding ``adk-session-heal`` for PATH.

    The console script beside ``sys.executable`` when it imports this checkout's
    code (CI's fresh install), otherwise a shim running ``python -m
    adk_session_heal`` with this checkout importable (a dev venv whose editable
    install points elsewhere).
    """
    bin_dir = tmp / "bin"
    bin_dir.mkdir(exist_ok=True)
    installed = Path(sys.executable).parent / "adk-session-heal"
    target = bin_dir / "adk-session-heal"
    if installed.exists() and _imports_this_checkout(tmp):
        target.symlink_to(installed)
    else:
        target.write_text(
            "#!/bin/sh\n"
            f'PYTHONPATH="{ROOT}${{PYTHONPATH:+:$PYTHONPATH}}" '
            f'exec "{sys.executable}" -m adk_session_heal "$@"\n'
        )
        target.chmod(0o755)
    return bin_dir


def _imports_this_checkout(cwd: Path) -> bool:
    """Whether the installed package's modules are this checkout's, byte for byte."""
    completed = subprocess.run(
        [sys.executable, "-I", "-c", "import adk_session_heal; print(adk_session_heal.__file__)"],
        cwd=cwd, capture_output=True, text=True, check=False,
    )
    if completed.returncode != 0:
        return False
    installed = Path(completed.stdout.strip()).parent
    ours = ROOT / "adk_session_heal"
    sources = sorted(p.relative_to(ours) for p in ours.rglob("*.py"))
    return all((installed / p).is_file() and (installed / p).read_bytes() == (ours / p).read_bytes()
               for p in sources)


SESSIONS = {
    # session id: (tool, long-running, the call's age in seconds, the user came back)
    "3f0c9a52-7d1e-4b8a-9c61-2e4f5a6b7c80": ("get_weather", False, 10_890.0, True),
    "8b2d4e61-0a9f-4c3b-8e7d-1f2a3b4c5d6e": ("book_table", False, 93_690.0, False),
    "c47e1b90-5f2a-4d6c-b3e8-9a0b1c2d3e4f": ("get_weather", False, 2_490.0, False),
    "e91a3c2d-6b4f-4e5a-a7c8-0d1e2f3a4b5c": ("approve_expense", True, 18_090.0, False),
}
"""The sessions the docs' transcripts show: superseded, stale, in flight, pending."""


async def write_sessions(service: BaseSessionService) -> None:
    """Stores the crashed sessions of :data:`SESSIONS` through an ADK session service."""
    now = time.time()

    def event(number: int, invocation: str, author: str, ts: float,
              part: types.Part, long_running: set[str] | None = None) -> Event:
        role = "user" if author == "user" else "model"
        return Event(id=f"e-{number:04d}", invocation_id=invocation, author=author,
                     timestamp=ts, content=types.Content(role=role, parts=[part]),
                     long_running_tool_ids=long_running)

    for session_id, (tool, long_running, age, came_back) in SESSIONS.items():
        session = await service.create_session(app_name="weather_app", user_id="u-42",
                                               session_id=session_id)
        call_id = f"adk-{session_id[:8]}"
        call = types.Part(function_call=types.FunctionCall(id=call_id, name=tool, args={}))
        events = [
            event(1, "inv-1", "user", now - age - 10, types.Part(text="Can you help?")),
            event(2, "inv-1", "weather_agent", now - age, call,
                  {call_id} if long_running else None),
        ]
        if came_back:
            events += [
                event(3, "inv-2", "user", now - 200, types.Part(text="hello?")),
                event(4, "inv-2", "weather_agent", now - 199, types.Part(text="Hello!")),
            ]
        for item in events:
            await service.append_event(session, item)


async def write_fixture(path: Path) -> None:
    """Writes the SQLite ``DatabaseSessionService`` file every block finds as ``sessions.db``."""
    service = DatabaseSessionService(f"sqlite+aiosqlite:///{path}")
    await write_sessions(service)
    await service.close()


@asynccontextmanager
async def server_url(server: str) -> AsyncIterator[str | None]:
    """A fresh database on ``server`` holding the docs' sessions (None for SQLite)."""
    if server == "sqlite":
        yield None
    elif server == "redis":
        from google.adk.integrations.redis import RedisSessionService, RedisSessionServiceConfig

        async with temporary_redis_prefix() as prefix:
            config = RedisSessionServiceConfig(uri=REDIS_URL, key_prefix=prefix)
            redis_service = RedisSessionService(config)
            await write_sessions(redis_service)
            await redis_service._redis_client.aclose()
            yield f"{REDIS_URL}?key_prefix={prefix}"
    else:
        async with temporary_database(server) as url:
            service = DatabaseSessionService(url)
            await write_sessions(service)
            await service.close()
            yield url


@dataclass
class Prepared:
    """Where and how a block runs."""

    work: Path
    env: dict[str, str]
    url: str | None


@asynccontextmanager
async def prepared(block: Block, server: str, tmp: Path, fixture: Path) -> AsyncIterator[Prepared]:
    """A fresh directory holding ``sessions.db``, the environment, the server's URL.

    Runs the block's ``before`` command there first.
    """
    work = tmp / "work"
    work.mkdir()
    shutil.copy(fixture, work / "sessions.db")
    async with server_url(server) as url:
        env = {**os.environ, "PATH": f"{command_dir(tmp)}{os.pathsep}{os.environ['PATH']}",
               "PYTHONPATH": f"{ROOT}{os.pathsep}{SUPPORT}", "COLUMNS": "120"}
        if url:
            env["URL"] = url
        for assignment in block.directive.get("env", "").split():
            name, _, value = assignment.partition("=")
            env[name] = value
        if "before" in block.directive:
            before = subprocess.run(["bash", "-c", block.directive["before"]], cwd=work,
                                    env=env, capture_output=True, text=True, check=False)
            assert before.returncode == 0, f"{block.name}: before: {before.stderr}"
        yield Prepared(work, env, url)
