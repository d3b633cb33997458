"""No password, ever: malformed URLs and silent servers are one line, exit 2, URL masked.

Every shape below once printed its password somewhere (CLI error, traceback,
log) or crashed with a traceback. Each goes through every command that takes
a URL and every Python entry point that does, with a distinctive password that
must appear nowhere: stdout, stderr, log records, exception texts.
"""

from __future__ import annotations

import logging
import socket
import subprocess
import sys
import threading
from collections.abc import Awaitable, Callable, Iterator
from typing import Any

import pytest
from click.testing import CliRunner

from adk_session_heal import ScanOptions, migrate
from adk_session_heal.cli import main
from adk_session_heal.errors import HealError, StoreError
from adk_session_heal.ledger import SqlHealLedger
from adk_session_heal.ops.repair import repair
from adk_session_heal.ops.scan import plan_repair, scan
from adk_session_heal.runtime.adk_services import healing_session_service_from_uri

PW = "Zq9xPw-never-shown"
"""The password every URL here carries."""

MALFORMED = {
    "scheme typo": f"postgressql+asyncpg://u:{PW}@127.0.0.1/db",
    "stray @ in the password": f"postgresql+asyncpg://u:p@{PW}@127.0.0.1/db",
    "port overflow": f"postgresql+asyncpg://u:{PW}@127.0.0.1:99999/db",
    "port zero": f"mysql+aiomysql://u:{PW}@127.0.0.1:0/db",
    "port not a number": f"postgresql+asyncpg://u:{PW}@127.0.0.1:abc/db",
    "sslmode with asyncpg": f"postgresql+asyncpg://u:{PW}@127.0.0.1/db?sslmode=require",
    "option the driver refuses": f"mysql+aiomysql://u:{PW}@127.0.0.1:1/db?ssl_mode=REQUIRED",
    "unknown scheme": f"foo://u:{PW}@127.0.0.1/db",
    "no database": f"postgresql+asyncpg://u:{PW}@127.0.0.1",
    "no colon after the scheme": f"postgresql+asyncpg//u:{PW}@127.0.0.1/db",
    "one slash": f"postgresql+asyncpg:/u:{PW}@127.0.0.1/db",
    "three slashes": f"postgresql+asyncpg:///u:{PW}@127.0.0.1/db",
    "no scheme": f"u:{PW}@127.0.0.1/db",
    "@host forgotten": f"postgresql+asyncpg://u:{PW}/127.0.0.1/db",
    "broken IPv6 host": f"postgresql+asyncpg://u:{PW}@[::1/db",
    "synchronous driver": f"postgresql+psycopg2://u:{PW}@127.0.0.1/db",
    "Redis database name": f"redis://u:{PW}@127.0.0.1/abc",
}
"""Malformed or refused URLs, by what is wrong with them."""

COMMANDS = {
    "scan": ["scan", "{url}"],
    "repair": ["repair", "{url}", "--yes"],
    "history": ["history", "{url}"],
    "db upgrade": ["db", "upgrade", "{url}"],
    "db current": ["db", "current", "{url}"],
    "db downgrade": ["db", "downgrade", "{url}", "base", "--yes"],
    "db history": ["db", "history", "{url}"],
}
"""Every CLI command that takes a URL."""

API: dict[str, Callable[[str], Awaitable[Any]]] = {
    "scan": lambda url: scan(url),
    "plan_repair": lambda url: plan_repair(url),
    "plan_repair(writing)": lambda url: plan_repair(url, writing=True),
    "repair": lambda url: repair(url),
    "migrate.upgrade": lambda url: migrate.upgrade(url),
    "migrate.current": lambda url: migrate.current(url),
    "migrate.downgrade": lambda url: migrate.downgrade(url, "base"),
}
"""Every Python entry point that opens a URL."""


def run_cli(command: str, url: str, *extra: str) -> Any:
    """Runs one CLI command on ``url`` in-process and returns click's result."""
    args = [arg.format(url=url) for arg in COMMANDS[command]]
    return CliRunner().invoke(main, [*args, *extra])


def assert_one_masked_line(result: Any) -> str:
    """Exit 2, one line on stderr, no traceback, nothing on stdout, the password masked."""
    assert result.exit_code == 2, (result.exit_code, result.output, result.exception)
    assert result.stdout == ""
    message = result.stderr.strip()
    assert message.count("\n") == 0 and "Traceback" not in message, message
    assert PW not in result.output
    assert "u:***" in message, message
    return message


def assert_no_password_logged(caplog: pytest.LogCaptureFixture) -> None:
    """No log record (message, arguments or traceback) holds the password."""
    for record in caplog.records:
        assert PW not in record.getMessage()
        assert PW not in (caplog.text or "")


@pytest.mark.parametrize("command", COMMANDS)
@pytest.mark.parametrize("url", MALFORMED.values(), ids=MALFORMED.keys())
def test_every_command_refuses_a_malformed_url_in_one_masked_line(
    command: str, url: str, caplog: pytest.LogCaptureFixture
) -> None:
    """Each malformed URL, through each command: exit 2, one line, the password as ***."""
    caplog.set_level(logging.DEBUG)
    assert_one_masked_line(run_cli(command, url))
    assert_no_password_logged(caplog)


OFFLINE_REFUSED = {name: url for name, url in MALFORMED.items()
                   if name != "option the driver refuses"}
"""What ``--sql`` refuses: it connects to nothing, so an option only the driver checks passes."""


@pytest.mark.parametrize("command", [["upgrade"], ["downgrade", "base"]])
@pytest.mark.parametrize("url", OFFLINE_REFUSED.values(), ids=OFFLINE_REFUSED.keys())
def test_sql_refuses_a_malformed_url_in_one_masked_line(command: list[str], url: str) -> None:
    """db upgrade --sql and db downgrade --sql: exit 2, one line, the password as ***."""
    assert_one_masked_line(CliRunner().invoke(
        main, ["db", command[0], url, *command[1:], "--sql"]))


@pytest.mark.parametrize(("url", "words"), [
    (MALFORMED["port overflow"], "outside 1-65535"),
    (MALFORMED["sslmode with asyncpg"], "?ssl=require"),
    (MALFORMED["unknown scheme"], "unsupported URL scheme 'foo'"),
    (MALFORMED["stray @ in the password"], "%40"),
    (MALFORMED["option the driver refuses"], "ssl_mode"),
])
def test_the_message_says_what_to_fix(url: str, words: str) -> None:
    """Port overflow, asyncpg's ?ssl= form, unknown schemes: the line names the fix."""
    assert words in assert_one_masked_line(run_cli("scan", url))


@pytest.mark.parametrize("entry", API)
@pytest.mark.parametrize("url", MALFORMED.values(), ids=MALFORMED.keys())
async def test_the_python_api_raises_its_own_errors_without_the_password(
    entry: str, url: str, caplog: pytest.LogCaptureFixture
) -> None:
    """scan, repair, migrate... raise a StoreError (never a driver's or a ValueError), masked."""
    caplog.set_level(logging.DEBUG)
    with pytest.raises(StoreError) as caught:
        await API[entry](url)
    assert PW not in str(caught.value) and "\n" not in str(caught.value)
    assert_no_password_logged(caplog)


@pytest.mark.parametrize("url", MALFORMED.values(), ids=MALFORMED.keys())
async def test_ledger_and_heal_uris_take_a_malformed_url_without_showing_it(
    url: str, caplog: pytest.LogCaptureFixture
) -> None:
    """SqlHealLedger.from_url and the heal+ factory (register, adk web) raise a HealError or build
    nothing that leaks; ADK may build its lazy service for a URL it only tries later."""
    caplog.set_level(logging.DEBUG)
    with pytest.raises(StoreError) as caught:
        ledger = SqlHealLedger.from_url(url)
        try:  # a URL only the driver refuses is refused on first use
            await ledger.history()
        finally:
            await ledger.close()
    assert PW not in str(caught.value)
    try:
        service = healing_session_service_from_uri(f"heal+{url}")
    except HealError as exc:
        assert PW not in str(exc) and "\n" not in str(exc)
    else:
        await service.close()
    assert_no_password_logged(caplog)


@pytest.fixture
def silent_server() -> Iterator[int]:
    """A TCP listener on 127.0.0.1 that accepts every connection and never answers."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(32)
    held: list[socket.socket] = []

    def accept() -> None:
        while True:
            try:
                held.append(listener.accept()[0])
            except OSError:
                return

    threading.Thread(target=accept, daemon=True).start()
    yield listener.getsockname()[1]
    listener.close()
    for connection in held:
        connection.close()


SERVER_SCHEMES = ["postgresql+asyncpg", "mysql+aiomysql", "mariadb+asyncmy"]


@pytest.mark.parametrize("scheme", SERVER_SCHEMES)
def test_a_server_that_never_answers_is_one_line_and_exit_2(scheme: str,
                                                             silent_server: int) -> None:
    """The real CLI process gives up after --timeout: one masked line on stderr, exit 2."""
    url = f"{scheme}://u:{PW}@127.0.0.1:{silent_server}/db"
    child = subprocess.run(
        [sys.executable, "-m", "adk_session_heal", "scan", url, "--timeout", "1"],
        capture_output=True, text=True, timeout=120, check=False)
    assert child.returncode == 2, child.stdout + child.stderr
    assert child.stderr.count("\n") == 1 and "Traceback" not in child.stderr, child.stderr
    assert "no answer in time" in child.stderr and "u:***@" in child.stderr
    assert PW not in child.stdout + child.stderr


@pytest.mark.parametrize("command", COMMANDS)
def test_every_command_times_out_on_a_silent_server(command: str, silent_server: int) -> None:
    """scan, repair, history and the db commands all take --timeout."""
    url = f"postgresql+asyncpg://u:{PW}@127.0.0.1:{silent_server}/db"
    assert "no answer in time" in assert_one_masked_line(run_cli(command, url, "--timeout", "0.5"))


async def test_the_python_api_times_out_with_a_store_error(silent_server: int) -> None:
    """scan(url, timeout=...) raises StoreError after the timeout; a bad timeout is refused."""
    url = f"mysql+aiomysql://u:{PW}@127.0.0.1:{silent_server}/db"
    with pytest.raises(StoreError, match="no answer in time"):
        await scan(url, ScanOptions(timeout=0.5))
    with pytest.raises(StoreError, match="positive"):
        await scan(url, ScanOptions(timeout=0))
