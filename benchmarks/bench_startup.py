"""Benchmark: what switching healing on adds to ``adk web`` startup, and the CLI's own start.

Run: ``.venv/bin/python benchmarks/bench_startup.py``. Not a test: prints tables.

1. Each sample is a fresh interpreter that first imports ADK's web server
   (``google.adk.cli.fast_api``, loaded before ``services.py``), then times, in
   that process, (a) ``import adk_session_heal.register`` and (b) building the
   session service ADK builds at startup, from the plain URI and from its
   ``heal+`` form.
2. Whole processes of the command line (``python -m adk_session_heal --help``
   and ``scan --help``): wall time and peak RSS, beside a bare interpreter and
   one that only imports ``google.adk.sessions`` (what the CLI loaded before
   answering ``--help`` until its imports became lazy).

Best of several samples; wall-clock on a shared machine.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time

PROBE = """
import sys, time
from pathlib import Path
import google.adk.cli.fast_api
from google.adk.cli.utils.service_factory import create_session_service_from_options
start = time.perf_counter()
if sys.argv[1] == "register":
    import adk_session_heal.register
else:
    if sys.argv[1] == "heal":
        import adk_session_heal.register
    create_session_service_from_options(base_dir=Path(sys.argv[3]),
                                        session_service_uri=sys.argv[2])
print(time.perf_counter() - start)
"""


def sample(kind: str, uri: str, folder: str, runs: int = 5) -> float:
    """The best of ``runs`` fresh interpreters, in seconds."""
    return min(float(subprocess.run([sys.executable, "-c", PROBE, kind, uri, folder],
                                    capture_output=True, text=True, check=True).stdout)
               for _ in range(runs))


def process(argv: list[str], runs: int = 5) -> tuple[float, float]:
    """The best wall time (s) and peak RSS (MB) of ``runs`` whole processes."""
    best_time, best_rss = float("inf"), float("inf")
    for _ in range(runs):
        start = time.perf_counter()
        child = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        _, status, usage = os.wait4(child.pid, 0)
        elapsed = time.perf_counter() - start
        child.returncode = os.waitstatus_to_exitcode(status)
        assert child.returncode == 0, argv
        best_time, best_rss = min(best_time, elapsed), min(best_rss, usage.ru_maxrss / 1024)
    return best_time, best_rss


def cli_table() -> None:
    """Prints the command line's start: whole processes."""
    print("| process | wall time | peak RSS |")
    print("|---|---:|---:|")
    for label, argv in (
        ("`python -c pass`", [sys.executable, "-c", "pass"]),
        ("`python -c 'import google.adk.sessions'`",
         [sys.executable, "-c", "import google.adk.sessions"]),
        ("`adk-session-heal --help`", [sys.executable, "-m", "adk_session_heal", "--help"]),
        ("`adk-session-heal scan --help`",
         [sys.executable, "-m", "adk_session_heal", "scan", "--help"]),
    ):
        wall, rss = process(argv)
        print(f"| {label} | {wall * 1e3:.0f} ms | {rss:.0f} MB |")


def main() -> None:
    """Prints the startup tables."""
    with tempfile.TemporaryDirectory() as folder:
        registering = sample("register", "", folder)
        print(f"import adk_session_heal.register after ADK's server: {registering * 1e3:.1f} ms")
        print()
        print("| session service URI | ADK's service | heal+ service | added |")
        print("|---|---:|---:|---:|")
        for uri in ("memory://", f"sqlite:///{folder}/a.db",
                    f"sqlite+aiosqlite:///{folder}/b.db"):
            plain = sample("plain", uri, folder)
            healing = sample("heal", "heal+" + uri, folder)
            shown = uri.replace(folder, "DIR")
            print(f"| `{shown}` | {plain * 1e3:.1f} ms | {healing * 1e3:.1f} ms "
                  f"| {(healing - plain) * 1e3:+.1f} ms |")
    print()
    cli_table()


if __name__ == "__main__":
    main()
