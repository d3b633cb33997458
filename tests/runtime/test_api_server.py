"""ADK's own API server with healing switched on by the example agent folder's services.py.

The real thing, end to end: ``adk api_server --session_service_uri heal+…`` runs
as a child process on 127.0.0.1 and is killed mid-tool by the agent's
``get_weather`` (``os._exit``), leaving an unanswered call in the session
database. A second server (ADK's ``get_fast_api_app``, served by uvicorn on
127.0.0.1 in this process so the scripted model's requests can be read) then
takes the user's next message through ADK's HTTP API. The dead call must be
healed in storage, and the model's request in that very turn must hold the
synthetic response.
"""

from __future__ import annotations

import asyncio
import logging
import os
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest
import uvicorn
from google.adk.cli import service_registry
from google.adk.cli.fast_api import get_fast_api_app
from google.adk.cli.utils.agent_loader import AgentLoader
from google.adk.cli.utils.service_factory import create_session_service_from_options
from paths import ROOT
from servers import temporary_database

from adk_session_heal.core.event_access import HEAL_METADATA_KEY
from adk_session_heal.policy import DEFAULT_PAYLOAD
from adk_session_heal.testing import CRASH_ENV, CRASH_EXIT_CODE, ScriptedModel

EXAMPLE_AGENT = ROOT / "examples" / "adk_web_agent"
APP = EXAMPLE_AGENT.name
USER = "u1"
pytestmark = pytest.mark.slow


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def user_message(text: str) -> dict[str, Any]:
    return {"role": "user", "parts": [{"text": text}]}


async def wait_healthy(
    client: httpx.AsyncClient, process: subprocess.Popen[str], log_path: Path
) -> None:
    deadline = time.monotonic() + 45
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise AssertionError(f"adk api_server exited early:\n{log_path.read_text()}")
        try:
            if (await client.get("/health")).status_code == 200:
                return
        except httpx.TransportError:
            pass
        await asyncio.sleep(0.2)
    raise AssertionError("adk api_server did not become healthy in 45 s")


async def crash_through_adk_api_server(agent_dir: Path, uri: str, workdir: Path) -> str:
    """Runs `adk api_server` whose tool kills it mid-call; returns the session id."""
    port = free_port()
    command = [
        sys.executable, "-m", "google.adk.cli", "api_server",
        "--host", "127.0.0.1", "--port", str(port),
        "--artifact_service_uri", "memory://",
        "--session_service_uri", uri,
        str(agent_dir),
    ]
    log_path = workdir / "crashed_api_server.log"
    with log_path.open("w") as log:
        process = subprocess.Popen(
            command, cwd=workdir, env={**os.environ, CRASH_ENV: "1"},
            stdout=log, stderr=subprocess.STDOUT, text=True,
        )
    try:
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=30) as client:
            await wait_healthy(client, process, log_path)
            created = await client.post(f"/apps/{APP}/users/{USER}/sessions", json={})
            assert created.status_code == 200, created.text
            session_id: str = created.json()["id"]
            with pytest.raises(httpx.TransportError):  # the server dies mid-request
                await client.post("/run", json={
                    "app_name": APP, "user_id": USER, "session_id": session_id,
                    "new_message": user_message("What's the weather in Paris?"),
                })
        assert process.wait(timeout=30) == CRASH_EXIT_CODE, log_path.read_text()
        return session_id
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()


@asynccontextmanager
async def adk_server_in_process(
    agent_dir: Path, uri: str, *, web: bool
) -> AsyncIterator[tuple[httpx.AsyncClient, AgentLoader]]:
    """Serves ADK's FastAPI app (as `adk web`/`adk api_server` builds it) on 127.0.0.1."""
    loader = AgentLoader(str(agent_dir))
    app = get_fast_api_app(
        agents_dir=str(agent_dir),
        agent_loader=loader,
        session_service_uri=uri,
        artifact_service_uri="memory://",
        web=web,
        host="127.0.0.1",
        bind_host="127.0.0.1",
    )
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=0, log_level="warning"))
    serving = asyncio.create_task(server.serve())
    try:
        while not server.started:
            if serving.done():
                serving.result()
            await asyncio.sleep(0.02)
        port = server.servers[0].sockets[0].getsockname()[1]
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=30) as client:
            yield client, loader
    finally:
        server.should_exit = True
        await serving


@pytest.fixture
def agent_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A copy of examples/adk_web_agent, loaded as in a fresh `adk` process."""
    target = tmp_path / "agents" / APP
    shutil.copytree(EXAMPLE_AGENT, target, ignore=shutil.ignore_patterns("__pycache__", ".adk"))
    monkeypatch.setattr(service_registry, "_service_registry_instance", None)
    monkeypatch.setattr(sys, "path", list(sys.path))
    for module in ("services", "adk_session_heal.register", APP, f"{APP}.agent"):
        monkeypatch.delitem(sys.modules, module, raising=False)
    return target


async def session_uri(kind: str, tmp_path: Path, stack: AsyncExitStack) -> str:
    """The plain session URI of one store kind (server databases dropped after the test)."""
    if kind == "db_sqlite":
        return f"sqlite+aiosqlite:///{tmp_path / 'sessions.db'}"
    if kind == "adk_sqlite":
        return f"sqlite:///{tmp_path / 'adk_sessions.db'}"
    server = "postgres" if kind == "db_postgres" else "mariadb"
    url: str = await stack.enter_async_context(temporary_database(server))
    return url


def parts(event: dict[str, Any]) -> list[dict[str, Any]]:
    return list((event.get("content") or {}).get("parts") or [])


@pytest.mark.parametrize(
    ("kind", "web"),
    [
        ("db_sqlite", False),
        ("adk_sqlite", False),
        ("db_postgres", False),
        ("db_mariadb", False),
        ("db_sqlite", True),
    ],
    ids=["sqlite+aiosqlite", "adk-sqlite", "postgresql+asyncpg", "mysql+aiomysql", "adk-web"],
)
async def test_api_server_heals_a_run_crashed_mid_tool(
    kind: str,
    web: bool,
    agent_dir: Path,
    tmp_path: Path,
    request: pytest.FixtureRequest,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """After a crash mid-tool, ADK's HTTP API stores a heal and the model sees it that turn."""
    async with AsyncExitStack() as stack:
        plain_uri = await session_uri(kind, tmp_path, stack)
        await crash_and_resume(kind, web, plain_uri, agent_dir, tmp_path, request, caplog)


async def crash_and_resume(
    kind: str,
    web: bool,
    plain_uri: str,
    agent_dir: Path,
    tmp_path: Path,
    request: pytest.FixtureRequest,
    caplog: pytest.LogCaptureFixture,
) -> None:
    uri = "heal+" + plain_uri
    started = time.monotonic()
    session_id = await crash_through_adk_api_server(agent_dir, uri, tmp_path)
    crashed_after = time.monotonic() - started

    caplog.set_level(logging.WARNING, logger="adk_session_heal")
    async with adk_server_in_process(agent_dir, uri, web=web) as (client, loader):
        path = f"/apps/{APP}/users/{USER}/sessions/{session_id}"
        before = (await client.get(path)).json()["events"]
        assert [p["functionCall"]["name"] for e in before for p in parts(e)
                if "functionCall" in p] == ["get_weather"]
        assert not any("functionResponse" in p for e in before for p in parts(e)), (
            "the crashed call is the newest invocation's: in flight, not healed on read"
        )

        run = await client.post("/run", json={
            "app_name": APP, "user_id": USER, "session_id": session_id,
            "new_message": user_message("hello?"),
        })
        assert run.status_code == 200, run.text
        replies = [p["text"] for e in run.json() for p in parts(e) if "text" in p]
        assert replies == ["Sorry, fetching the weather failed. Shall I try again?"]

        after = (await client.get(path)).json()["events"]
        model = loader.load_agent(APP).model  # type: ignore[union-attr]
        assert isinstance(model, ScriptedModel)
    resumed_after = time.monotonic() - started

    # Storage: call, synthetic response, the new message, the model's reply.
    call_index = next(i for i, e in enumerate(after) if any("functionCall" in p for p in parts(e)))
    call = parts(after[call_index])[0]["functionCall"]
    healed = after[call_index + 1]
    [response_part] = parts(healed)
    assert response_part["functionResponse"]["id"] == call["id"]
    assert response_part["functionResponse"]["response"] == dict(DEFAULT_PAYLOAD)
    assert healed["customMetadata"][HEAL_METADATA_KEY]["synthetic"] is True
    assert healed["customMetadata"][HEAL_METADATA_KEY]["reason"] == "superseded"
    assert [parts(e)[0].get("text") for e in after[call_index + 2:]] == [
        "hello?", "Sorry, fetching the weather failed. Shall I try again?"
    ]

    # The model's one request of this turn held the call and its synthetic response
    # (ADK strips its own "adk-" call ids from requests, so they pair by position).
    [turn_request] = model.requests
    shown = [
        ("call", p.function_call.name) if p.function_call is not None
        else ("response", p.function_response.name, p.function_response.response)
        for c in turn_request.contents for p in c.parts or ()
        if p.function_call is not None or p.function_response is not None
    ]
    assert shown == [
        ("call", "get_weather"),
        ("response", "get_weather", dict(DEFAULT_PAYLOAD)),
    ]

    # A plain ADK service (another process's view) reads the healed history.
    bare = create_session_service_from_options(base_dir=tmp_path, session_service_uri=plain_uri)
    try:
        stored = await bare.get_session(app_name=APP, user_id=USER, session_id=session_id)
    finally:
        close = getattr(bare, "close", None)
        if close is not None:
            await close()
    assert stored is not None
    assert [e.id for e in stored.events] == [e["id"] for e in after]

    heals = [r for r in caplog.records if getattr(r, "adk_session_heal", None)]
    assert [(r.adk_session_heal["trigger"], r.adk_session_heal["session_id"])  # type: ignore[attr-defined]
            for r in heals] == [("append", session_id)]
    print(
        f"\n[{request.node.callspec.id}] {uri.split('://')[0]}: adk api_server crashed "
        f"mid-tool (exit {CRASH_EXIT_CODE}) in {crashed_after:.1f}s; resumed through "
        f"{'adk web' if web else 'api_server'} HTTP API, healed {call['id']} "
        f"(synthetic event {healed['id']}), model saw {shown[-1][-1]} "
        f"in {resumed_after:.1f}s total"
    )
