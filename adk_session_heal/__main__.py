"""``python -m adk_session_heal``: the same command line as ``adk-session-heal``."""

from __future__ import annotations

from .cli import main

if __name__ == "__main__":
    main(prog_name="adk-session-heal")
