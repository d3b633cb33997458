"""Reading what tools do from their MCP annotations, for ``HealPolicy(tool_effects=...)``.

An MCP server may annotate each tool with hints (``readOnlyHint``,
``idempotentHint``, ``destructiveHint``; spec defaults false, false, true).
ADK's ``McpToolset.get_tools`` wraps each listed tool in an ``McpTool`` whose
``raw_mcp_tool`` property is the MCP SDK's ``Tool`` as the server listed it;
its ``annotations`` field holds the hints (camelCase attributes in MCP SDK
1.x, snake_case in 2.x; both are read). ADK itself reads none of them.

The mapping, following the hints' meaning in the MCP spec:

* ``readOnlyHint`` true: :attr:`~adk_session_heal.policy.ToolEffect.READ_ONLY`;
* otherwise ``idempotentHint`` true: ``IDEMPOTENT``;
* otherwise (``destructiveHint`` true, or no hints at all): ``SIDE_EFFECT``.

Listing a toolset's tools talks to its server, so this is the one async,
I/O-doing part of effect handling; the policy and the heals stay pure.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from google.adk.agents.readonly_context import ReadonlyContext
from google.adk.tools.base_tool import BaseTool
from google.adk.tools.base_toolset import BaseToolset

from ..policy import ToolEffect

_CAUTION = {ToolEffect.READ_ONLY: 0, ToolEffect.IDEMPOTENT: 1, ToolEffect.UNKNOWN: 2,
            ToolEffect.SIDE_EFFECT: 3}


def _hint(annotations: Any, camel: str, snake: str) -> bool | None:
    """Reads one hint under either spelling (or key, for a dict); ``None`` when unset."""
    for name in (camel, snake):
        if isinstance(annotations, Mapping):
            value = annotations.get(name)
        else:
            value = getattr(annotations, name, None)
        if value is not None:
            return bool(value)
    return None


def effect_from_annotations(annotations: Any) -> ToolEffect:
    """Returns the effect an MCP tool's annotations declare.

    Args:
        annotations: An MCP ``ToolAnnotations`` (SDK 1.x or 2.x), a dict of
            its wire form, or ``None`` (no annotations).

    Returns:
        ``READ_ONLY`` if ``readOnlyHint`` is true; else ``IDEMPOTENT`` if
        ``idempotentHint`` is true; else ``SIDE_EFFECT`` (the spec's defaults
        make an unannotated tool a destructive, non-idempotent one).
    """
    if annotations is None:
        return ToolEffect.SIDE_EFFECT
    if _hint(annotations, "readOnlyHint", "read_only_hint"):
        return ToolEffect.READ_ONLY
    if _hint(annotations, "idempotentHint", "idempotent_hint"):
        return ToolEffect.IDEMPOTENT
    return ToolEffect.SIDE_EFFECT


async def _listed(item: Any, context: ReadonlyContext | None) -> list[Any]:
    if isinstance(item, BaseToolset):
        # The names the model calls: with the toolset's ``tool_name_prefix`` applied.
        with_prefix = getattr(item, "get_tools_with_prefix", None)
        tools = await (with_prefix(context) if with_prefix is not None
                       else item.get_tools(context))
        return list(tools)
    return [item]


async def tool_effects_from(
    tools: BaseToolset | BaseTool | Iterable[Any],
    readonly_context: ReadonlyContext | None = None,
) -> dict[str, ToolEffect]:
    """Reads the effects of the MCP tools among ``tools`` from their annotations.

    Pass what you give your agent (``agent.tools``: ``McpToolset``\\ s, tools,
    plain functions) or one toolset. Each toolset is listed (for an
    ``McpToolset`` that asks its server, as ADK does on every turn); every
    tool exposing ``raw_mcp_tool`` (ADK's ``McpTool``) is read. Other tools
    and plain functions are left out: the policy treats them as ``UNKNOWN``
    unless you declare them.

    Example::

        effects = await tool_effects_from(agent.tools)
        policy = HealPolicy(tool_effects={**effects, "charge_card": ToolEffect.SIDE_EFFECT})

    Args:
        tools: Toolsets, tools, or an iterable of them.
        readonly_context: Passed to each toolset's ``get_tools`` (its tool
            filter and headers may depend on it); ``None`` lists every tool.

    Returns:
        A new dict from the name the model calls (``tool_name_prefix``
        applied) to the tool's effect. When two tools share a name, the more
        cautious effect wins.
    """
    items: Iterable[Any] = (
        [tools] if isinstance(tools, BaseToolset | BaseTool) else tools
    )
    effects: dict[str, ToolEffect] = {}
    for item in items:
        for tool in await _listed(item, readonly_context):
            raw = getattr(tool, "raw_mcp_tool", None)
            if raw is None:
                continue
            effect = effect_from_annotations(getattr(raw, "annotations", None))
            name = str(tool.name)
            known = effects.get(name)
            if known is None or _CAUTION[effect] > _CAUTION[known]:
                effects[name] = effect
    return effects
