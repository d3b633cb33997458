"""Benchmark: what switching healing on adds to ``adk web`` / ``adk api_server`` startup.

Run: ``.venv/bin/python benchmarks/bench_startup.py``. Not a test: prints a table.
Each sample is a fresh interpreter that first imports ADK's web server
(``google.adk.cli.fast_api``, loaded before ``services.py``), then times, in
that process, (a) ``import adk_session_heal.register`` and (b) building the
session service ADK builds at startup, from the plain URI and from its
``heal+`` form. Best of several samples; wall-clock on a shared machine.
"""

from __future__ import annotations

import subprocess
import sys
import tempfile

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


def main() -> None:
    """Prints the startup table."""
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


if __name__ == "__main__":
    main()
