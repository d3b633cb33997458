"""One duration grammar for every flag: a bare number is seconds, wherever a duration goes."""

from __future__ import annotations

import datetime
import json
from pathlib import Path

import pytest
from cli_runner import assert_one_line_error, cli
from stores import crashed_histories, fill, make_store


def _reach_back(document: dict[str, object]) -> float:
    """Seconds between a scan's clock and the earliest update time it read (naive, as stored)."""
    since = datetime.datetime.fromisoformat(str(document["since"])).replace(tzinfo=datetime.UTC)
    return float(str(document["scanned_at"])) - since.timestamp()


async def test_since_takes_a_bare_number_of_seconds(tmp_path: Path) -> None:
    """`scan --since 90` reads what changed in the last 90 seconds, as `--since 90s` does."""
    async for store in make_store("db_sqlite", tmp_path):
        await fill(store, crashed_histories())
        bare = cli("scan", store.url, "--since", "90", "--clock-skew", "0", "--json")
        assert bare.exit_code == 0, bare.output
        unit = cli("scan", store.url, "--since", "90s", "--clock-skew", "0", "--json")
        assert unit.exit_code == 0, unit.output
        bare_document, unit_document = json.loads(bare.stdout), json.loads(unit.stdout)
        assert bare_document["sessions_scanned"] == unit_document["sessions_scanned"] == 1
        assert _reach_back(bare_document) == pytest.approx(_reach_back(unit_document), abs=2)
        hour = json.loads(cli("scan", store.url, "--since", "1h", "--clock-skew", "0",
                              "--json").stdout)
        assert _reach_back(hour) - _reach_back(bare_document) == pytest.approx(3510, abs=2)
        assert_one_line_error(cli("scan", store.url, "--since", "90x"), "duration")


async def test_every_duration_flag_reads_the_same_grammar(tmp_path: Path) -> None:
    """--older-than, --clock-skew, --timeout and --since each take 90, 90s and 1h30m."""
    async for store in make_store("db_sqlite", tmp_path):
        await fill(store, crashed_histories())
        for flag in ("--older-than", "--clock-skew", "--timeout", "--since"):
            for value in ("90", "90s", "1h30m"):
                result = cli("scan", store.url, flag, value, "--json")
                assert result.exit_code in (0, 1), (flag, value, result.output)
        refused = cli("scan", store.url, "--timeout", "0")
        assert refused.exit_code == 2 and "0.0 is not in the range x>0" in refused.stderr
