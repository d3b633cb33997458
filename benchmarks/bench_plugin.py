"""Benchmark: tool-aware context filter vs ADK's ContextFilterPlugin; validator throughput.

Run: ``.venv/bin/python benchmarks/bench_plugin.py``. Not a test: prints a table.
Each figure is the best of several runs, each after a full ``gc.collect()``:
both plugins allocate little, but a collection of the large pydantic object
graph landing inside one sample otherwise dominates it.
"""

from __future__ import annotations

import asyncio
import gc
import time
from collections.abc import Callable
from typing import Any

from google.adk.models.llm_request import LlmRequest
from google.adk.plugins.context_filter_plugin import ContextFilterPlugin
from google.genai import types

from adk_session_heal.formats import to_anthropic, to_openai_chat, to_openai_responses
from adk_session_heal.plugin import ToolAwareContextFilterPlugin
from adk_session_heal.validators import (
    validate_anthropic,
    validate_gemini,
    validate_openai_chat,
    validate_openai_responses,
)


def history(size: int) -> list[types.Content]:
    """ADK-shaped contents: invocations of user, call, response, answer (4 each)."""
    contents: list[types.Content] = []
    n = 0
    while len(contents) < size:
        n += 1
        contents.append(types.Content(role="user", parts=[types.Part(text=f"question {n}")]))
        contents.append(types.Content(role="model", parts=[types.Part(
            function_call=types.FunctionCall(id=f"c{n}", name="lookup", args={"q": n}))]))
        contents.append(types.Content(role="user", parts=[types.Part(
            function_response=types.FunctionResponse(id=f"c{n}", name="lookup",
                                                     response={"r": n}))]))
        contents.append(types.Content(role="model", parts=[types.Part(text=f"answer {n}")]))
    return contents[:size]


def _every_fifth_dropped(contents: list[types.Content]) -> list[types.Content]:
    """A custom filter that breaks pairs: drops every fifth content."""
    return [c for i, c in enumerate(contents) if i % 5 != 4]


class _Context:
    class session:  # noqa: N801
        events: list[Any] = []


def _time_plugin(plugin: Any, contents: list[types.Content], repeat: int) -> float:
    samples = []
    for _ in range(repeat):
        request = LlmRequest(contents=list(contents))
        gc.collect()
        start = time.perf_counter()
        asyncio.run(plugin.before_model_callback(callback_context=_Context(),
                                                 llm_request=request))
        samples.append(time.perf_counter() - start)
    return min(samples)


def _time(fn: Callable[[], object], repeat: int) -> float:
    samples = []
    for _ in range(repeat):
        gc.collect()
        start = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - start)
    return min(samples)


def main() -> None:
    """Prints the plugin comparison and validator throughput tables."""
    print("| contents | ADK ContextFilterPlugin | ToolAwareContextFilterPlugin | ratio |")
    print("|---:|---:|---:|---:|")
    for size in (1_000, 10_000, 40_000):
        contents = history(size)
        adk = _time_plugin(ContextFilterPlugin(num_invocations_to_keep=10), contents, 15)
        ours = _time_plugin(ToolAwareContextFilterPlugin(num_invocations_to_keep=10),
                            contents, 15)
        print(f"| {size:,} | {adk * 1e3:.2f} ms | {ours * 1e3:.2f} ms | {ours / adk:.2f}x |")

    contents = history(10_000)
    print()
    print("| plugin, 10,000 contents, no trim | time |")
    print("|---|---:|")
    lossy = [c for i, c in enumerate(contents) if i % 40 != 2]  # every 10th response lost
    repairs: list[tuple[str, Any, list[types.Content]]] = [
        ("custom_filter dropping every 5th content (widen)",
         ToolAwareContextFilterPlugin(custom_filter=_every_fifth_dropped), contents),
        ("custom_filter dropping every 5th content (drop)",
         ToolAwareContextFilterPlugin(custom_filter=_every_fifth_dropped, repair="drop"),
         contents),
        ("heal=True, every 10th response lost", ToolAwareContextFilterPlugin(heal=True), lossy),
    ]
    for label, plugin, given in repairs:
        print(f"| {label} | {_time_plugin(plugin, given, 9) * 1e3:.2f} ms |")

    print()
    print("| 10,000 contents | time | contents/s |")
    print("|---|---:|---:|")
    chat, items, anthropic = (to_openai_chat(contents), to_openai_responses(contents),
                              to_anthropic(contents))
    cases: list[tuple[str, Callable[[], object]]] = [
        ("validate_gemini (types.Content)", lambda: validate_gemini(contents)),
        ("validate_openai_chat (dicts)", lambda: validate_openai_chat(chat)),
        ("validate_openai_responses (dicts)", lambda: validate_openai_responses(items)),
        ("validate_anthropic (dicts)", lambda: validate_anthropic(anthropic)),
        ("to_openai_chat + validate", lambda: validate_openai_chat(to_openai_chat(contents))),
    ]
    for label, fn in cases:
        seconds = _time(fn, 9)
        print(f"| {label} | {seconds * 1e3:.2f} ms | {len(contents) / seconds:,.0f} |")


if __name__ == "__main__":
    main()
