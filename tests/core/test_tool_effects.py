"""Tests for adk_session_heal.core.tool_effects: tool effects read from MCP annotations.

The server is real (tests/children/mcp_effects_server.py, over stdio, started by ADK's
own ``McpToolset``); nothing here is mocked.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import pytest

pytest.importorskip("mcp", reason="the MCP SDK (dev extra: mcp) is not installed")

from google.adk.tools.function_tool import FunctionTool  # noqa: E402
from google.adk.tools.mcp_tool import McpToolset, StdioConnectionParams  # noqa: E402
from mcp import StdioServerParameters  # noqa: E402
from mcp.types import ToolAnnotations  # noqa: E402
from paths import CHILDREN, ROOT

from adk_session_heal.core.event_access import HEAL_METADATA_KEY  # noqa: E402
from adk_session_heal.core.findings import classify  # noqa: E402
from adk_session_heal.core.healing import build_heal_event, plan_heals  # noqa: E402
from adk_session_heal.core.tool_effects import effect_from_annotations, tool_effects_from  # noqa: E402
from adk_session_heal.policy import HealPolicy, ToolEffect, effect_payload  # noqa: E402
from adk_session_heal.testing import History  # noqa: E402

SERVER = CHILDREN / "mcp_effects_server.py"

SERVED = {
    "get_weather": ToolEffect.READ_ONLY,
    "lookup_order": ToolEffect.READ_ONLY,
    "set_thermostat": ToolEffect.IDEMPOTENT,
    "charge_card": ToolEffect.SIDE_EFFECT,
    "send_email": ToolEffect.SIDE_EFFECT,
    "add_note": ToolEffect.SIDE_EFFECT,
}
"""What each annotated tool of the test server maps to (see its docstrings)."""


@asynccontextmanager
async def served(prefix: str | None = None) -> AsyncIterator[McpToolset]:
    """ADK's McpToolset connected to the test server over stdio."""
    params = StdioServerParameters(command=sys.executable, args=[str(SERVER)],
                                   env=dict(os.environ))  # MCP's default env drops PYTHONPATH
    toolset = McpToolset(connection_params=StdioConnectionParams(server_params=params,
                                                                 timeout=30),
                         tool_name_prefix=prefix)
    try:
        yield toolset
    finally:
        await toolset.close()


async def test_effects_are_read_from_a_real_mcp_server_through_adk_s_toolset() -> None:
    """readOnlyHint wins, then idempotentHint; destructive or unannotated tools have side
    effects."""
    async with served() as toolset:
        assert await tool_effects_from(toolset) == SERVED


def local_lookup(city: str) -> str:
    """A plain function tool: no annotations to read."""
    return city


async def test_prefixed_names_are_the_model_s_and_non_mcp_tools_are_left_out() -> None:
    """Names carry the toolset's prefix (what the model calls); function tools and plain
    functions are not declared, so the policy keeps them unknown."""
    async with served(prefix="shop") as toolset:
        tools: list[object] = [local_lookup, FunctionTool(local_lookup), toolset]
        effects = await tool_effects_from(tools)
    assert effects == {f"shop_{name}": effect for name, effect in SERVED.items()}
    assert HealPolicy(tool_effects=effects).effect_of("local_lookup") is ToolEffect.UNKNOWN


async def test_a_heal_of_mcp_tools_is_worded_from_their_annotations() -> None:
    """End to end: a crashed parallel call of an MCP read-only and an MCP destructive tool is
    healed with a retry-safe answer for the first only."""
    async with served() as toolset:
        tools = await toolset.get_tools()
        policy = HealPolicy(tool_effects=await tool_effects_from(tools))
    h = History()
    h.user("weather, then pay")
    h.calls(("get_weather", {"city": "Rome"}), ("charge_card", {"amount": 12.5}))
    h.user("hello?")
    (plan,) = plan_heals(h.events, classify(h.events, now=h.events[-1].timestamp), app_name="a",
                         user_id="u", session_id="s")
    event = build_heal_event(plan, policy, healed_at=0.0)
    assert [r.response for r in event.get_function_responses()] == [
        effect_payload(ToolEffect.READ_ONLY), effect_payload(ToolEffect.SIDE_EFFECT)]
    assert [r.response["safe_to_retry"] for r in event.get_function_responses()  # type: ignore[index]
            ] == [True, False]
    marker = (event.custom_metadata or {})[HEAL_METADATA_KEY]
    assert marker["effects"] == ["read_only", "side_effect"]



@pytest.mark.parametrize(("annotations", "effect"), [
    (None, ToolEffect.SIDE_EFFECT),
    (ToolAnnotations(), ToolEffect.SIDE_EFFECT),
    (ToolAnnotations(readOnlyHint=True), ToolEffect.READ_ONLY),
    (ToolAnnotations(readOnlyHint=True, idempotentHint=False), ToolEffect.READ_ONLY),
    (ToolAnnotations(idempotentHint=True), ToolEffect.IDEMPOTENT),
    (ToolAnnotations(idempotentHint=True, destructiveHint=True), ToolEffect.IDEMPOTENT),
    (ToolAnnotations(destructiveHint=False), ToolEffect.SIDE_EFFECT),
    ({"readOnlyHint": True}, ToolEffect.READ_ONLY),
    ({"idempotent_hint": True}, ToolEffect.IDEMPOTENT),
    ({"readOnlyHint": False, "destructiveHint": True}, ToolEffect.SIDE_EFFECT),
])
def test_effect_from_annotations_follows_the_mcp_hints(annotations: object,
                                                       effect: ToolEffect) -> None:
    """The MCP SDK's annotations (either spelling) or their wire dict map as the spec reads."""
    assert effect_from_annotations(annotations) is effect


README = ROOT / "README.md"


def side_effects_blocks() -> list[str]:
    """The Python blocks of README's "Side effects and retries" section (not its subsections)."""
    section = README.read_text().split("\n## Side effects and retries\n", 1)[1].split("\n## ")[0]
    section = section.split("\n### ")[0]
    return re.findall(r"```python\n(.*?)```", section, re.S)


@pytest.mark.parametrize("index", [0, 1], ids=["declared", "mcp"])
def test_the_readme_s_side_effects_blocks_run(index: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """README's examples run as shown, from a checkout (the MCP one starts the tests' server)."""
    blocks = side_effects_blocks()
    assert len(blocks) == 2
    monkeypatch.chdir(README.parent)
    exec(compile(blocks[index], f"README.md block {index}", "exec"), {"__name__": "readme"})


@pytest.mark.slow
def test_the_readme_s_payment_example_prints_what_it_shows() -> None:
    """The tool-run ledger's payment example prints exactly the lines the README shows."""
    section = README.read_text().split("\n### Recording tool runs", 1)[1].split("\n## ")[0]
    (code,) = [block for block in re.findall(r"```python\n(.*?)```", section, re.S)
               if "crash_then_heal" in block]
    (shown,) = re.findall(r"```text\n(.*?)```", section, re.S)
    ran = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=120, check=False, cwd=README.parent,
                         env={**os.environ, "PYTHONPATH": str(README.parent)})
    assert ran.returncode == 0, ran.stderr[-2000:]
    assert ran.stdout == shown
