"""Per-turn accounting cost at ~100k tokens of context: incremental vs full re-tokenisation.

Builds a long agent episode (tool calls with large, varied outputs), then times accounting
of one more appended turn (a call and its output) with both counters: the tiktoken o200k
estimate and a tiny Hugging Face tokenizer with a ChatML template (rl_compaction.models.tiny). Each
row shows the median time of the incremental path (piece cache warm from the previous
turn), of the full path (no cache) and their ratio, plus the Ledger's per-turn time and
the prefix check. For the chat template it also shows the Jinja rendering alone, which both
paths pay in full (templates are not decomposable): render / full is the floor of the HF
ratio. Timings depend on the machine; the ratios are what to look at.

    python scripts/bench_accounting.py [--tokens 100000] [--repeats 5]
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import tempfile
import time
from collections.abc import Callable

from rl_compaction.accounting import (
    ChatTemplateCounter,
    Ledger,
    TiktokenCounter,
    TokenCounter,
    get_cache_model,
    reusable_prefix,
)
from rl_compaction.core.state import State
from rl_compaction.harness.tasks import SUBMIT_TOOL, function_tool
from rl_compaction.models.tiny import build_tiny_tokenizer

INSTRUCTIONS = "You are a research agent. Use the tools, keep exact identifiers, then submit the answer."
TOOLS = [
    function_tool("search", "Search the archive.", {"query": {"type": "string"}}, ["query"]),
    function_tool("open", "Open a document by id.", {"id": {"type": "string"}}, ["id"]),
    SUBMIT_TOOL,
]
WORDS = "ledger invoice account refund approved pending total amount customer order date report note".split()


def turn(rng: random.Random, n: int) -> State:
    """One tool call and a ~1k-character output with ids, numbers and prose."""
    rows = [
        {
            "id": f"INV-{rng.randrange(10**5):05d}",
            "amount": round(rng.uniform(1, 9999), 2),
            "note": " ".join(rng.choices(WORDS, k=8)),
        }
        for _ in range(8)
    ]
    call = {
        "type": "function_call",
        "call_id": f"call_{n}",
        "name": "search",
        "arguments": json.dumps({"query": " ".join(rng.choices(WORDS, k=3))}),
    }
    return [call, {"type": "function_call_output", "call_id": f"call_{n}", "output": json.dumps({"results": rows})}]


def episode(counter: TokenCounter, tokens: int, rng: random.Random) -> State:
    state: State = [{"type": "message", "role": "user", "content": "Find the invoice that was refunded twice."}]
    while True:
        for _ in range(20):
            state += turn(rng, len(state))
        if counter.count(INSTRUCTIONS, TOOLS, state) >= tokens:
            return state


def median_time(fn: Callable[[], object], repeats: int) -> float:
    times = []
    for _ in range(repeats):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def bench(label: str, counter: TokenCounter, tokens: int, repeats: int) -> None:
    rng = random.Random(0)
    state = episode(counter, tokens, rng)
    ledger = Ledger(get_cache_model("openai"))
    old = counter.input_ids(INSTRUCTIONS, TOOLS, state)
    ledger.record(old, 50)
    extra = [turn(rng, 10**6 + i) for i in range(repeats)]

    # Each repeat appends a new turn to the warm cache: exactly the per-turn work of an episode.
    grown = list(state)
    increments = iter(extra)

    def incremental() -> None:
        grown.extend(next(increments))
        counter.input_ids(INSTRUCTIONS, TOOLS, grown)

    t_inc = median_time(incremental, repeats)
    new_state = state + extra[0]
    t_full = median_time(lambda: counter.input_ids_full(INSTRUCTIONS, TOOLS, new_state), repeats)
    new = counter.input_ids(INSTRUCTIONS, TOOLS, new_state)
    assert new == counter.input_ids_full(INSTRUCTIONS, TOOLS, new_state), "incremental ids differ from full ids"
    t_prefix = median_time(lambda: reusable_prefix(old, new), repeats)
    t_ledger = median_time(lambda: Ledger(ledger.cache_model).record(new, 50), 1)  # cold: hashes every block
    t_record = median_time(lambda: ledger.record(new, 50), repeats)  # warm: extends the previous request
    render = getattr(counter, "render", None)
    t_render = median_time(lambda: render(INSTRUCTIONS, TOOLS, new_state), repeats) if render else 0.0
    print(
        f"{label:<22} {len(new):>8} {t_inc * 1e3:>10.2f} {t_full * 1e3:>10.2f} {t_inc / t_full:>7.3f}x"
        f" {t_prefix * 1e3:>9.3f} {t_record * 1e3:>9.3f} {t_ledger * 1e3:>9.2f}"
        + (f" {t_render * 1e3:>9.2f} {t_render / t_full:>7.3f}x" if render else "")
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tokens", type=int, default=100_000, help="context size to build (default 100000)")
    parser.add_argument("--repeats", type=int, default=5, help="timed repeats per figure (median)")
    args = parser.parse_args()
    print(
        f"{'counter':<22} {'tokens':>8} {'incr ms':>10} {'full ms':>10} {'incr/full':>8}"
        f" {'prefix ms':>9} {'record ms':>9} {'cold ms':>9} {'render ms':>9} {'rend/full':>8}"
    )
    bench("tiktoken o200k_base", TiktokenCounter("o200k_base"), args.tokens, args.repeats)
    with tempfile.TemporaryDirectory() as tmp:
        tiny = ChatTemplateCounter(build_tiny_tokenizer(tmp, "chatml"), name="hf:tiny-chatml")
        bench("hf tiny chatml", tiny, args.tokens, args.repeats)


if __name__ == "__main__":
    main()
