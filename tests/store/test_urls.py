"""Store URLs: the forms ADK users pass, the one-line refusals, and redaction."""

from __future__ import annotations

import shutil
import sqlite3
import subprocess
import sys
import tempfile
from contextlib import closing
from pathlib import Path

import pytest

from adk_session_heal.errors import UnsupportedStoreError
from adk_session_heal.store.urls import parse_store_url, redact_url


@pytest.fixture
def db_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An existing (empty) file named sessions.db in the current directory."""
    monkeypatch.chdir(tmp_path)
    path = tmp_path / "sessions.db"
    path.write_bytes(b"")
    return path


def test_adk_sqlite_scheme_is_a_relative_file(db_file: Path) -> None:
    """``sqlite:///x.db`` (ADK's SqliteSessionService form) is a file relative to the cwd."""
    url = parse_store_url("sqlite:///sessions.db")
    assert url.backend == "sqlite"
    assert url.adk_sqlite_scheme
    assert url.sqlite_path == Path("sessions.db")
    assert not url.read_only


@pytest.mark.parametrize("prefix", ["heal+", "HEAL+"])
def test_the_uri_given_to_adk_web_names_the_same_store(db_file: Path, prefix: str) -> None:
    """A ``heal+`` URI (what ``adk web --session_service_uri`` takes) parses as its store."""
    from adk_session_heal.runtime.adk_services import HEAL_PREFIX

    assert prefix.lower() == HEAL_PREFIX
    for plain in ("sqlite:///sessions.db", "sqlite+aiosqlite:///sessions.db",
                  "postgresql+asyncpg://u:secret@h/db"):
        assert str(parse_store_url(prefix + plain)) == str(parse_store_url(plain))
    with pytest.raises(UnsupportedStoreError, match=r"ops\.scan\.scan_service"):
        parse_store_url(prefix + "memory://")


def test_aiosqlite_absolute_path_and_read_only(db_file: Path) -> None:
    """Four slashes are absolute, and ``?mode=ro`` asks for read-only access."""
    url = parse_store_url(f"sqlite+aiosqlite:///{db_file}?mode=ro")
    assert url.sqlite_path == db_file
    assert url.read_only
    assert url.sqlite_uri(writable=True).endswith("?mode=ro")


def test_sqlite_connect_uri_never_creates(db_file: Path) -> None:
    """SQLite files are opened by URI with mode=ro or mode=rw, never the creating mode."""
    url = parse_store_url("sqlite+aiosqlite:///sessions.db")
    assert url.sqlite_uri(writable=False).endswith("?mode=ro")
    assert url.sqlite_uri(writable=True).endswith("?mode=rw")
    assert url.sqlalchemy_url(writable=True).query == {"uri": "true"}


@pytest.mark.parametrize(
    ("url", "backend"),
    [
        ("postgresql+asyncpg://u:pw@h/db", "postgresql"),
        ("mysql+aiomysql://u:pw@h/db", "mysql"),
        ("mariadb+asyncmy://u:pw@h/db", "mariadb"),
        ("mysql+asyncmy://u:pw@h/db", "mysql"),
    ],
)
def test_async_server_urls(url: str, backend: str) -> None:
    """Server URLs with an async driver are accepted, and their repr hides the password."""
    parsed = parse_store_url(url)
    assert parsed.backend == backend
    assert "pw" not in repr(parsed) and "pw" not in str(parsed)
    assert parsed.password == "pw"


@pytest.mark.parametrize(
    ("url", "fix"),
    [
        ("postgresql://u:secret@h/db", "postgresql+asyncpg://"),
        ("postgresql+psycopg2://u:secret@h/db", "postgresql+asyncpg://"),
        ("mysql://u:secret@h/db", "mysql+aiomysql://"),
        ("mysql+pymysql://u:secret@h/db", "mysql+aiomysql://"),
        ("mariadb://u:secret@h/db", "mariadb+asyncmy://"),
    ],
)
def test_sync_driver_is_refused_with_the_async_form(url: str, fix: str) -> None:
    """A synchronous driver gets one line naming the async URL to use, without the password."""
    with pytest.raises(UnsupportedStoreError) as caught:
        parse_store_url(url)
    message = str(caught.value)
    assert fix in message
    assert "secret" not in message
    assert "\n" not in message


@pytest.mark.parametrize(
    ("url", "words"),
    [
        ("sessions.db", "not a database URL"),
        ("sqlite://", "in-memory"),
        ("sqlite:///:memory:", "in-memory"),
        ("sqlite+aiosqlite:///no/such/file.db", "no SQLite file"),
        ("memory://", "unsupported URL scheme"),
        ("memory://", "adk_session_heal.ops.scan.scan_service()"),
        ("agentengine://123", "scan_service"),
        ("postgresql+asyncpg://u:secret@h", "names no database"),
        ("sqlite+pysqlcipher:///x.db", "SQLite driver"),
    ],
)
def test_bad_urls_get_one_line_with_the_fix(url: str, words: str, tmp_path: Path,
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    """Each malformed or unsupported URL is refused with one line saying what to pass."""
    monkeypatch.chdir(tmp_path)
    with pytest.raises(UnsupportedStoreError) as caught:
        parse_store_url(url)
    assert words in str(caught.value)
    assert "\n" not in str(caught.value)
    assert "secret" not in str(caught.value)
    assert not (tmp_path / "no").exists()


def test_redaction_masks_password_and_query_values() -> None:
    """Passwords and every query value are masked, even in URLs that do not parse."""
    assert redact_url("postgresql+asyncpg://u:secret@h/db?sslpassword=x") == (
        "postgresql+asyncpg://u:***@h/db?sslpassword=REDACTED"
    )
    assert "secret" not in redact_url("weird://u:secret@h:notaport/db")


@pytest.mark.parametrize(("folder_mode", "file_mode", "words"), [
    (0o700, 0o644, "cannot reach the SQLite file"),  # a folder on the way it may not open
    (0o755, 0o600, "this user may not read the SQLite file"),
], ids=["folder", "file"])
def test_a_sqlite_file_this_user_may_not_reach_is_one_line(
        folder_mode: int, file_mode: int, words: str) -> None:
    """Run as an unprivileged user (root reads everything), a SQLite file behind a folder it
    may not open, or one it may not read, is one line saying so, exit 2, not an
    unexpected PermissionError."""
    top = Path(tempfile.mkdtemp(prefix="heal-urls-", dir="/tmp"))
    try:
        top.chmod(0o755)
        (top / "folder").mkdir()
        path = top / "folder" / "sessions.db"
        with closing(sqlite3.connect(path)) as db, db:
            db.execute("CREATE TABLE sessions (id TEXT)")
        path.chmod(file_mode)
        (top / "folder").chmod(folder_mode)
        nobody = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"]
        denied = subprocess.run([*nobody, "cat", str(path)], capture_output=True, check=False)
        if denied.returncode != 0 and not denied.stderr:
            pytest.skip("setpriv cannot run a command as nobody here")
        assert denied.returncode != 0, "nobody can read the file: nothing to test"
        starts = subprocess.run([*nobody, sys.executable, "-c", "import adk_session_heal"],
                                capture_output=True, text=True, check=False, cwd="/")
        if starts.returncode != 0:
            # pyenv's 3.12 and 3.13 load libpython from under /root, which nobody may not
            # enter; the first leg of .ci/run (python3) runs this test.
            pytest.skip(f"user nobody cannot start {sys.executable}: {starts.stderr.strip()[:120]}")
        child = subprocess.run([*nobody, sys.executable, "-m", "adk_session_heal", "scan",
                                f"sqlite+aiosqlite:///{path}"], capture_output=True, text=True,
                               timeout=120, check=False, cwd="/")
        assert child.returncode == 2, child.stdout + child.stderr
        line = child.stderr.strip()
        assert "\n" not in line and words in line and "unexpected" not in line, line
    finally:
        (top / "folder").chmod(0o755)
        shutil.rmtree(top)
