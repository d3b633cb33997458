"""ADK's web UI (``adk web``, in a real headless Chromium) shows a healed call as interrupted.

What ADK's bundled UI (``google/adk/cli/browser/main-*.js``, ADK 2.13) draws:

* a ``function_response`` part is always a chip with the ``check`` icon, whatever
  its payload holds (the chip's template binds ``icon`` to the literal ``"check"``);
* an event with ``errorCode`` or ``errorMessage`` also gets a red error bubble
  (``app-content-bubble`` with class ``type-error``, tooltip "Error Details")
  showing ``{errorCode, errorMessage}``.

A heal carries ADK's abort ``error_code`` and its own ``error_message``
(``adk_session_heal/core/healing.py``), so its row shows the tool's check chip *and*
the red error bubble saying the call was interrupted. Clicking the row opens the
event's detail: its Info tab shows the ``{"error": "Tool execution was
interrupted."}`` response, its Raw JSON tab the ``adk_session_heal`` marker.

The session is written through ADK's own ``DatabaseSessionService``: one
answered call (the UI's plain success, for contrast), then a crash (user
message, model call, no response, a later user turn). ``adk web`` runs as a
child process on 127.0.0.1 over ``heal+sqlite+aiosqlite``, with the example
agent and a ``services.py`` importing ``adk_session_heal.register`` in its
agents folder; opening the session in the UI heals the call on read. Chromium
is driven over the DevTools protocol. The screenshots (the heal's Info tab,
then its Raw JSON tab) stay in ``tmp_path`` and are copied to
``$ADK_SESSION_HEAL_ARTIFACTS`` when that is set. Without Chromium the test
skips, or fails under ``ADK_SESSION_HEAL_REQUIRE_SERVERS=1`` (CI).
"""

from __future__ import annotations

import asyncio
import base64
import itertools
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager, suppress
from pathlib import Path
from typing import Any

import httpx
import pytest
from google.adk.sessions import DatabaseSessionService
from paths import ROOT
from servers import REQUIRE_SERVERS
from websockets.asyncio.client import ClientConnection, connect

from adk_session_heal.core.adk_compat import INVOCATION_ABORTED
from adk_session_heal.core.event_access import HEAL_METADATA_KEY
from adk_session_heal.core.healing import HEAL_ERROR_MESSAGE
from adk_session_heal.testing import History

EXAMPLE_AGENT = ROOT / "examples" / "adk_web_agent"
APP = EXAMPLE_AGENT.name
USER = "u1"
ARTIFACTS_ENV = "ADK_SESSION_HEAL_ARTIFACTS"
CHROMIUM_ENV = "ADK_SESSION_HEAL_CHROMIUM"
WAIT = 30.0
"""Seconds any one step (server start, browser start, page render) may take."""

pytestmark = pytest.mark.slow


def chromium_path() -> str:
    """Debian's ``chromium`` (or ``$ADK_SESSION_HEAL_CHROMIUM``); skips, or fails in CI."""
    found = os.environ.get(CHROMIUM_ENV) or shutil.which("chromium")
    if found:
        return found
    reason = (
        "chromium not found on PATH (apt-get install -y chromium, "
        f"or set {CHROMIUM_ENV} to a Chromium binary)"
    )
    if REQUIRE_SERVERS:
        pytest.fail(f"{reason}, and ADK_SESSION_HEAL_REQUIRE_SERVERS=1 requires it")
    pytest.skip(reason)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


async def store_crashed_session(url: str) -> tuple[str, str]:
    """Writes a crashed run through ADK's own service; returns (session id, dead call id).

    One answered call first (the UI's plain success, for contrast), then the crash:
    a question, the model's call, no response, and the user's next message.
    """
    history = History(agent="weather_agent", start=time.time() - 60)
    history.user("What's the weather in Berlin?")
    answered = history.call("get_weather", {"city": "Berlin"})
    history.respond((answered, "get_weather", {"forecast": "Sunny, 21 °C"}))
    history.text("Sunny in Berlin, 21 °C.")
    history.user("And in Paris?")
    call_id = history.call("get_weather", {"city": "Paris"})
    history.user("hello?")
    service = DatabaseSessionService(url)
    try:
        session = await service.create_session(app_name=APP, user_id=USER)
        for event in history.events:
            await service.append_event(session, event)
    finally:
        await service.close()
    return session.id, call_id


@contextmanager
def child(command: list[str], log_path: Path, **kwargs: Any) -> Iterator[subprocess.Popen[bytes]]:
    """Runs a child process in a process group of its own, logging to a file.

    On exit it is terminated (killed after 10 s), then whatever is left of its
    group (Chromium's renderer and zygote helpers) is killed.
    """
    with log_path.open("wb") as log:
        process = subprocess.Popen(
            command, stdout=log, stderr=subprocess.STDOUT, start_new_session=True, **kwargs
        )
    try:
        yield process
    finally:
        if process.poll() is None:
            process.terminate()
            try:
                process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        with suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)


async def wait_for(what: str, probe: Any, process: subprocess.Popen[bytes], log: Path) -> Any:
    """Polls ``probe()`` until it returns something truthy, for at most WAIT seconds."""
    deadline = time.monotonic() + WAIT
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise AssertionError(f"{what}: process exited early:\n{log.read_text()[-4000:]}")
        found = await probe()
        if found:
            return found
        await asyncio.sleep(0.2)
    raise AssertionError(f"{what}: not ready in {WAIT:.0f} s:\n{log.read_text()[-4000:]}")


class Page:
    """A minimal DevTools-protocol client for one Chromium page."""

    def __init__(self, socket: ClientConnection) -> None:
        self._socket = socket
        self._ids = itertools.count(1)

    async def send(self, method: str, **params: Any) -> dict[str, Any]:
        message_id = next(self._ids)
        await self._socket.send(json.dumps({"id": message_id, "method": method, "params": params}))
        async with asyncio.timeout(WAIT):
            while True:
                reply = json.loads(await self._socket.recv())
                if reply.get("id") != message_id:
                    continue  # an event: nothing here waits on them
                if "error" in reply:
                    raise AssertionError(f"{method} failed: {reply['error']}")
                result: dict[str, Any] = reply["result"]
                return result

    async def evaluate(self, expression: str) -> Any:
        result = await self.send(
            "Runtime.evaluate", expression=expression, returnByValue=True, awaitPromise=True
        )
        if "exceptionDetails" in result:
            raise AssertionError(f"page script failed: {result['exceptionDetails']}")
        return result["result"].get("value")

    async def click(self, selector: str) -> None:
        """Clicks the middle of the first element matching a CSS selector, as a mouse would."""
        box = await self.evaluate(
            f"(() => {{ const e = document.querySelector({json.dumps(selector)});"
            " if (!e) return null; const r = e.getBoundingClientRect();"
            " return {x: r.x + r.width / 2, y: r.y + r.height / 2}; })()"
        )
        assert box is not None, f"nothing matches {selector!r}"
        for kind in ("mousePressed", "mouseReleased"):
            await self.send("Input.dispatchMouseEvent", type=kind, x=box["x"], y=box["y"],
                            button="left", clickCount=1)
        # Park the pointer in a corner so no hover tooltip covers the screenshot.
        await self.send("Input.dispatchMouseEvent", type="mouseMoved", x=1, y=899)

    async def text_with(self, needle: str) -> str | None:
        """The page's visible text, once it contains ``needle``."""
        text: str = await self.evaluate("document.body.innerText")
        return text if needle in text else None

    async def screenshot(self, path: Path) -> None:
        shot = await self.send("Page.captureScreenshot", format="png")
        path.write_bytes(base64.b64decode(shot["data"]))


@asynccontextmanager
async def chromium_page(binary: str, workdir: Path) -> AsyncIterator[Page]:
    """Starts headless Chromium (fresh profile, no network but 127.0.0.1); yields its page."""
    profile = workdir / "chromium-profile"
    command = [
        binary, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
        "--no-first-run", "--disable-background-networking", "--disable-component-update",
        "--disable-sync", f"--user-data-dir={profile}", "--remote-debugging-address=127.0.0.1",
        "--remote-debugging-port=0", "--window-size=1400,900",
        # The UI links Google Fonts; fail those lookups at once instead of waiting on DNS.
        "--host-resolver-rules=MAP * ~NOTFOUND, EXCLUDE 127.0.0.1",
        "about:blank",
    ]
    log = workdir / "chromium.log"
    with child(command, log) as process:
        port_file = profile / "DevToolsActivePort"

        async def devtools_port() -> int | None:
            lines = port_file.read_text().split() if port_file.exists() else []
            return int(lines[0]) if lines else None

        port = await wait_for("chromium", devtools_port, process, log)
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=WAIT) as http:

            async def page_target() -> str | None:
                targets = (await http.get("/json/list")).json()
                pages = [t["webSocketDebuggerUrl"] for t in targets if t["type"] == "page"]
                return pages[0] if pages else None

            address = await wait_for("chromium page", page_target, process, log)
        async with connect(address, max_size=None, open_timeout=WAIT) as socket:
            yield Page(socket)


@contextmanager
def adk_web(agents_dir: Path, uri: str, workdir: Path) -> Iterator[tuple[str, Path, Any]]:
    """Runs ``adk web`` on 127.0.0.1; yields its base URL, log path and process.

    Its HOME is a fresh folder whose ``~/.adk/config.json`` records telemetry
    declined, as ``adk telemetry disable`` would: the UI then shows no consent
    dialog over the events, and the real home is left alone.
    """
    home = workdir / "home"
    (home / ".adk").mkdir(parents=True)
    (home / ".adk" / "config.json").write_text(json.dumps({"telemetry": False}))
    port = free_port()
    command = [
        sys.executable, "-m", "google.adk.cli", "web", "--no-reload",
        "--host", "127.0.0.1", "--port", str(port),
        "--artifact_service_uri", "memory://",
        "--session_service_uri", uri,
        str(agents_dir),
    ]
    log = workdir / "adk_web.log"
    with child(command, log, cwd=workdir, env={**os.environ, "HOME": str(home)}) as process:
        yield f"http://127.0.0.1:{port}", log, process


ROWS_SCRIPT = """
[...document.querySelectorAll('app-event-row')].map(row => ({
  text: row.innerText,
  icons: [...row.querySelectorAll('app-hover-info-button mat-icon')]
    .map(icon => icon.innerText.trim()),
  errors: [...row.querySelectorAll('.content-bubble.type-error')].map(bubble => {
    const box = bubble.getBoundingClientRect();
    return {
      text: bubble.innerText,
      background: getComputedStyle(bubble).backgroundColor,
      x: box.x + box.width / 2, y: box.y + box.height / 2,
    };
  }),
}))
"""
"""Each event row of the chat: its text, chip icons, and error bubbles (where, what colour)."""

SHOWN = {
    "question": "What's the weather in Berlin?",
    "answered call": 'get_weather("Berlin")',
    "answer": "get_weather",
    "reply": "Sunny in Berlin",
    "next question": "And in Paris?",
    "dead call": 'get_weather("Paris")',
    "heal": "get_weather",
    "next message": "hello?",
}
"""The rows the UI shows for the stored session (its events, in order): a text each holds."""
HEAL_ROW = list(SHOWN).index("heal")


def rgb(css_color: str) -> tuple[int, ...]:
    """``rgb(147, 0, 10)`` -> (147, 0, 10)."""
    return tuple(int(v) for v in css_color[css_color.index("(") + 1:-1].split(",")[:3])


def keep_artifact(path: Path) -> Path:
    """Copies a test artifact to ``$ADK_SESSION_HEAL_ARTIFACTS`` when set; returns the copy."""
    target_dir = os.environ.get(ARTIFACTS_ENV)
    if not target_dir:
        return path
    Path(target_dir).mkdir(parents=True, exist_ok=True)
    return Path(shutil.copy2(path, Path(target_dir) / path.name))


async def test_adk_web_shows_a_healed_call_as_interrupted(tmp_path: Path) -> None:
    """The healed call's row carries ADK's error bubble; its detail shows the marker."""
    binary = chromium_path()
    started = time.monotonic()
    agents_dir = tmp_path / "agents"
    shutil.copytree(
        EXAMPLE_AGENT, agents_dir / APP, ignore=shutil.ignore_patterns("__pycache__", ".adk")
    )
    # `adk web AGENTS_DIR` loads AGENTS_DIR/services.py (docs/adk_web.md).
    (agents_dir / "services.py").write_text("import adk_session_heal.register  # noqa: F401\n")
    url = f"sqlite+aiosqlite:///{tmp_path / 'sessions.db'}"
    session_id, call_id = await store_crashed_session(url)

    with adk_web(agents_dir, "heal+" + url, tmp_path) as (base, log, server):
        async with httpx.AsyncClient(base_url=base, timeout=WAIT) as http:

            async def healthy() -> bool:
                try:
                    return (await http.get("/health")).status_code == 200
                except httpx.TransportError:
                    return False

            await wait_for("adk web", healthy, server, log)
            async with chromium_page(binary, tmp_path) as page:
                await page.send("Page.navigate", url=(
                    f"{base}/dev-ui/?app={APP}&session={session_id}&userId={USER}"
                ))

                async def all_rows() -> list[dict[str, Any]] | None:
                    rows: list[dict[str, Any]] = await page.evaluate(ROWS_SCRIPT) or []
                    return rows if len(rows) >= len(SHOWN) else None

                rows = await wait_for("the session's events in the UI", all_rows, server, log)
                shots = [tmp_path / f"adk_web_healed_{tab}.png" for tab in ("event", "json")]
                try:
                    # Open the heal's detail as a user would: click its row, then "Raw JSON".
                    await page.click("app-event-row .content-bubble.type-error")
                    info = await wait_for("the heal's detail", lambda: page.text_with(
                        "Tool execution was interrupted; it may have completed."), server, log)
                    await page.screenshot(shots[0])
                    await page.click('button[mattooltip="Raw JSON"]')
                    raw = await wait_for("the heal's raw JSON", lambda: page.text_with(
                        HEAL_METADATA_KEY), server, log)
                    await page.screenshot(shots[1])
                finally:
                    (tmp_path / "adk_web_healed_session.html").write_text(
                        await page.evaluate("document.documentElement.outerHTML")
                    )
            stored = (await http.get(f"/apps/{APP}/users/{USER}/sessions/{session_id}")).json()
    kept = [keep_artifact(shot) for shot in shots if shot.exists()]

    # Storage: the UI's read healed the superseded call (get_session heals on read).
    healed = stored["events"][HEAL_ROW]
    assert healed["content"]["parts"][0]["functionResponse"]["id"] == call_id
    assert healed["customMetadata"][HEAL_METADATA_KEY]["call_ids"] == [call_id]

    # The UI: one row per stored event, in order.
    assert len(rows) == len(SHOWN), json.dumps(rows, indent=1)
    for row, (kind, needle) in zip(rows, SHOWN.items(), strict=True):
        assert needle in row["text"], (kind, row)
        assert ("bolt" in row["icons"]) == kind.endswith("call"), (kind, row)
        assert ("check" in row["icons"]) == (kind in ("answer", "heal")), (kind, row)
        assert bool(row["errors"]) == (kind == "heal"), (kind, row)
    # ADK's chip for a function response has no error form: the real answer and the
    # heal both carry the check icon (asserted above) ... but the heal's
    # error_code/error_message draw ADK's red error bubble on its row, and only there.
    [error] = rows[HEAL_ROW]["errors"]
    assert INVOCATION_ABORTED in error["text"]
    assert HEAL_ERROR_MESSAGE in error["text"] and "interrupted" in error["text"]
    red, green, blue = rgb(error["background"])
    assert red > green and red > blue, f"error bubble is not red: {error['background']}"
    # The heal's detail: its id and the interrupted payload on the Info tab, ...
    assert healed["id"] in info and "get_weather" in info
    # ... the marker in its raw JSON.
    assert "synthetic" in raw and call_id in raw and "superseded" in raw
    print(
        f"\nadk web showed heal {healed['id']} as an error bubble ({error['background']}); "
        f"screenshots {[str(k) for k in kept]}; {time.monotonic() - started:.1f}s"
    )
