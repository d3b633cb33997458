"""Benchmark: tool-aware context filter vs ADK's ContextFilterPlugin; validator throughput.

Run: ``.venv/bin/python benchmarks/bench_plugin.py`` (``--full-pass`` for the
first table alone). Not a test: prints tables. The first compares both plugins
with the same custom filter at 10,000 contents, alternating them in one
process, and reports the best and the median of the per-run ratios. The
others give the best of several runs. Every run follows a full ``gc.collect()``:
both plugins allocate little, but a collection of the large pydantic object
graph landing inside one sample otherwise dominates it.
"""

from __future__ import annotations

import asyncio
import gc
import statistics
import sys
import time
from collections.abc import Callable
from typing import Any

from google.adk.models.llm_request import LlmRequest
from google.adk.plugins.context_filter_plugin import ContextFilterPlugin
from google.genai import types

from adk_session_heal.providers.formats import to_anthropic, to_openai_chat, to_openai_responses
from adk_session_heal.providers.validators import (
    validate_anthropic,
    validate_gemini,
    validate_openai_chat,
    validate_openai_responses,
)
from adk_session_heal.runtime.context_filter import ToolAwareContextFilterPlugin


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


def late_answer_history(size: int) -> list[types.Content]:
    """:func:`history` with the call of the 12th newest invocation answered 6 invocations later.

    The kept tail of ``num_invocations_to_keep=10`` then holds a response whose
    call is before the cut, so both plugins widen back to the call (ours from
    the tail, without its full pass).
    """
    contents = history(size)
    newest = len(contents) - 4
    call_at = newest - 11 * 4 + 1
    late = contents.pop(call_at + 1)  # the response, moved into a later invocation
    contents.insert(newest - 5 * 4 + 1 - 1, late)
    return contents


def chained_late_history(size: int, links: int = 6) -> list[types.Content]:
    """:func:`history` whose tail must widen ``links`` times, over late answers chained back.

    Link ``k`` moves the response of the call ``11 + 2k`` invocations before
    the newest three invocations later, into the stretch the previous
    widening took in. The tail of ``num_invocations_to_keep=10`` widens to each
    call in turn, reading only what each widening takes in. (ADK's plugin
    keeps one content less: it starts at the oldest call kept, ours at the
    start of that call's invocation.) With ``links=1200`` at 10,000 contents
    the chain reaches back to the first invocations: both plugins keep almost
    everything, ours reading every content once.
    """
    contents = history(size)
    invocations = len(contents) // 4
    for k in range(links):
        back = 11 + 2 * k
        start = (invocations - 1 - back) * 4
        response = contents[start + 2]
        target = contents[(invocations - 1 - (back - 3)) * 4 + 2]  # a later turn's response
        contents.remove(response)
        contents.insert(contents.index(target) + 1, response)
    return contents


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


def _sample(plugin: Any, contents: list[types.Content], loop: asyncio.AbstractEventLoop) -> float:
    """One run of ``plugin``'s callback on a fresh request, after a full collection."""
    request = LlmRequest(contents=list(contents))
    gc.collect()
    start = time.perf_counter()
    loop.run_until_complete(plugin.before_model_callback(callback_context=_Context(),
                                                         llm_request=request))
    return time.perf_counter() - start


def compare(ours: Any, adk: Any, contents: list[types.Content],
            runs: int) -> tuple[float, float, float, float]:
    """Alternates the two plugins ``runs`` times each on the same contents.

    Returns:
        ``(adk best, ours best, ours best / adk best, median of the per-pair
        ratios)``, times in seconds.
    """
    loop = asyncio.new_event_loop()
    try:
        adk_times: list[float] = []
        our_times: list[float] = []
        for run in range(runs):
            first, second = (ours, adk) if run % 2 else (adk, ours)
            a, b = _sample(first, contents, loop), _sample(second, contents, loop)
            adk_times.append(a if first is adk else b)
            our_times.append(b if first is adk else a)
    finally:
        loop.close()
    ratios = [o / a for o, a in zip(our_times, adk_times, strict=True)]
    return (min(adk_times), min(our_times), min(our_times) / min(adk_times),
            statistics.median(ratios))


def _keep_last_20(contents: list[types.Content]) -> list[types.Content]:
    """A custom filter keeping the last 20 contents."""
    return contents[-20:]


def _copies(contents: list[types.Content]) -> list[types.Content]:
    """A custom filter returning deep copies of every content."""
    return [c.model_copy(deep=True) for c in contents]


def full_pass_table(runs: int = 41) -> None:
    """Prints ours vs ADK's plugin, each with the same custom filter, at 10,000 contents."""
    print(f"| 10,000 contents, same custom filter, n={runs} alternating | ADK best "
          "| ours best | best ratio | median ratio |")
    print("|---|---:|---:|---:|---:|")
    late = late_answer_history(10_000)
    plain = history(10_000)
    chained = chained_late_history(10_000)
    whole = chained_late_history(10_000, links=1200)
    filters: list[tuple[str, Any]] = [
        ("identity", lambda contents: contents), ("keep last 20", _keep_last_20),
        ("drop every 5th", _every_fifth_dropped)]
    cases: list[tuple[str, int | None, int, list[types.Content], Any]] = [
        # A protected prefix that opens a tool cycle (user, call): the tail cut, then
        # everything below it paired to close the prefix's cycles.
        *((f"prefix opening a cycle (keep 10, protected_prefix=2), {name}", 10, 2, plain, f)
          for name, f in filters),
        *((f"call-free prefix, from the tail (keep 10, protected_prefix=1), {name}", 10, 1,
           plain, f) for name, f in filters[2:]),
        *((f"tail widened to a late answer (keep 10), {name}", 10, 0, late, f)
          for name, f in filters),
        *((f"tail cut (keep 10), {name}", 10, 0, plain, f) for name, f in filters[2:]),
        # Late answers chained one behind the other: six widenings, each reading only
        # what it takes in; then a chain through the whole history (every content read).
        *((f"tail widened 6 times (keep 10, answers chained 6 deep), {name}", 10, 0, chained,
           f) for name, f in filters),
        *((f"widened through the whole history (keep 10, 1,200 chained answers), {name}", 10,
           0, whole, f) for name, f in filters),
        *((f"no trim, {name}", None, 0, plain, f) for name, f in filters),
    ]
    for label, keep, prefix, contents, custom in cases:
        adk, ours, best, median = compare(
            ToolAwareContextFilterPlugin(num_invocations_to_keep=keep, custom_filter=custom,
                                         protected_prefix=prefix),
            ContextFilterPlugin(num_invocations_to_keep=keep, custom_filter=custom),
            contents, runs)
        print(f"| {label} | {adk * 1e3:.2f} ms | {ours * 1e3:.2f} ms | {best:.2f}x "
              f"| {median:.2f}x |")


def _time(fn: Callable[[], object], repeat: int) -> float:
    samples = []
    for _ in range(repeat):
        gc.collect()
        start = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - start)
    return min(samples)


def main() -> None:
    """Prints the plugin comparison and validator throughput tables.

    ``--full-pass`` prints only the same-filter comparison at 10,000 contents.
    """
    full_pass_table()
    if "--full-pass" in sys.argv:
        return
    print()
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
