"""Rewrites the transcripts of README.md and docs/*.md from real runs.

Usage: ``python scripts/regen_transcripts.py`` from the repository root, with the
database servers up. Each transcript block runs as ``tests/test_docs.py`` runs it
(``tests/support/doc_blocks.py``, the same code); a command's shown output is replaced
by the real one unless it already matches (so elisions and the shown ages stay).
"""

from __future__ import annotations

import asyncio
import sys
import tempfile
from pathlib import Path
from textwrap import indent

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from doc_blocks import (  # noqa: E402
    all_blocks,
    prepared,
    rewrite_transcript,
    run_transcript,
    write_fixture,
)


async def regenerate() -> int:
    """Reruns every transcript block and rewrites the ones whose output changed."""
    changed = 0
    for block in all_blocks():
        if block.kind != "transcript" or "skip" in block.directive:
            continue
        with tempfile.TemporaryDirectory() as tmp:
            fixture = Path(tmp) / "fixture.db"
            await write_fixture(fixture)
            async with prepared(block, block.servers[0], Path(tmp), fixture) as run:
                outputs = run_transcript(block, run.work, run.env, run.url)
            new = rewrite_transcript(block, outputs)
        if new != block.text:
            text = block.path.read_text()
            old, new = (indent(b, block.indent) for b in (block.text, new))
            assert text.count(old) == 1, f"{block.name}: block text not unique"
            block.path.write_text(text.replace(old, new))
            print(f"rewrote {block.name}")
            changed += 1
    return changed


if __name__ == "__main__":
    print(f"{asyncio.run(regenerate())} transcript(s) rewritten")
