"""Benchmark: what `apply_evolve` costs beside the sandbox, against a bare QuickJS JSON.parse +
JSON.stringify of the same State, at 10 KiB, 100 KiB and 1 MiB, side by side in one run.

The edit rewrites the first item (the worst case for prompt caching; every other item is
unchanged). Columns, each a median and its ratio to bare QuickJS:
- run_evolve: the sandbox round trip (worker process, QuickJS, JSON both ways);
- validate x2: `validate_state` of the State before and after (apply_evolve checks both);
- receipt: `edit_metrics` with the env's warm counter (the before-State was counted for the
  previous model turn), o200k estimate: token counts before and after, their prefix;
- apply_evolve: the whole protocol with that warm counter (as `CompactionEnv` calls it);
- cold: apply_evolve with a fresh counter (it tokenises both States whole).

    python scripts/bench_evolve.py [--repeats 7]
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from collections.abc import Callable

from bench_sandbox import bare_quickjs, make_state

from rl_compaction.accounting import TiktokenCounter, edit_metrics
from rl_compaction.core.sandbox import run_evolve
from rl_compaction.core.state import validate_state
from rl_compaction.protocol.evolve import apply_evolve

EDIT = "state[0].content = 'Task (edited).'; return state;"


def median_times(fns: list[Callable[[], object]], repeats: int) -> list[float]:
    """Median seconds of each function, timed in turns (one call of each per round), so load from
    elsewhere on the machine falls on all columns alike."""
    times: list[list[float]] = [[] for _ in fns]
    for _ in range(repeats):
        for fn, spent in zip(fns, times, strict=True):
            start = time.perf_counter()
            fn()
            spent.append(time.perf_counter() - start)
    return [statistics.median(t) for t in times]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=7)
    args = parser.parse_args()
    columns = ("run_evolve", "validate x2", "receipt", "apply_evolve", "cold")
    print(f"{'State':>8} {'bare QuickJS':>12}" + "".join(f" {c:>19}" for c in columns))
    for label, size in (("10 KiB", 10 * 1024), ("100 KiB", 100 * 1024), ("1 MiB", 1024 * 1024)):
        state = make_state(size)
        state_json = json.dumps(state, ensure_ascii=False)
        pending = {"type": "function_call", "call_id": "ev", "name": "evolve", "arguments": json.dumps({"code": EDIT})}
        counter = TiktokenCounter("o200k_base")
        counter.input_ids("", [], state)  # what the env did when it rendered the previous turn
        after = run_evolve(state, EDIT).state
        bare, *times = median_times(
            [
                lambda: bare_quickjs(state_json),  # noqa: B023
                lambda: run_evolve(state, EDIT),  # noqa: B023
                lambda: [validate_state(s + [pending], pending_call_id="ev") for s in (state, after)],  # noqa: B023
                lambda: edit_metrics(counter, "", [], state, after, 20, 1.0),  # noqa: B023
                lambda: apply_evolve(state + [pending], counter=counter, tools=[]),  # noqa: B023
                lambda: apply_evolve(state + [pending], counter=TiktokenCounter(), tools=[]),  # noqa: B023
            ],
            args.repeats,
        )
        print(f"{label:>8} {bare * 1e3:10.2f}ms" + "".join(f" {t * 1e3:9.2f}ms ({t / bare:5.2f}x)" for t in times))


if __name__ == "__main__":
    main()
