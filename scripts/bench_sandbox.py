"""Benchmark: the evolve round trip against a bare QuickJS JSON.parse + JSON.stringify of the
same State, at 10 KiB, 100 KiB and 1 MiB, side by side in one run, printed as ratios; and how
quickly a runaway loop is stopped relative to the time limit.

    python scripts/bench_sandbox.py [--repeats 7]
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import quickjs

from rl_compaction.evolve import apply_evolve
from rl_compaction.sandbox import SandboxLimits, run_evolve

EDIT = "state[0].content = 'Task (edited).'; return state;"


def make_state(target_bytes: int) -> list[dict]:
    state: list[dict] = [{"type": "message", "role": "user", "content": "Task: reconcile the records ’ 😀."}]
    i = 0
    while len(json.dumps(state, ensure_ascii=False).encode()) < target_bytes:
        i += 1
        state.append(
            {"type": "function_call", "call_id": f"c{i}", "name": "read", "arguments": json.dumps({"page": i})}
        )
        rows = [
            {"id": f"R-{i}-{j}", "amount": f"{(i * 37 + j) % 9973}.{j:02d}", "memo": "invoice ’ " * 3}
            for j in range(20)
        ]
        state.append({"type": "function_call_output", "call_id": f"c{i}", "output": json.dumps(rows)})
    return state


def bare_quickjs(state_json: str) -> None:
    ctx = quickjs.Context()
    ctx.set("s", state_json)
    ctx.eval("JSON.stringify(JSON.parse(s))")


def median_time(fn, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=7)
    args = parser.parse_args()

    print(f"{'State':>8}  {'bare QuickJS':>12}  {'run_evolve':>10}  {'ratio':>6}  {'apply_evolve*':>13}  {'ratio':>6}")
    for label, size in (("10 KiB", 10 * 1024), ("100 KiB", 100 * 1024), ("1 MiB", 1024 * 1024)):
        state = make_state(size)
        state_json = json.dumps(state, ensure_ascii=False)
        pending = {"type": "function_call", "call_id": "ev", "name": "evolve", "arguments": json.dumps({"code": EDIT})}
        bare = median_time(lambda: bare_quickjs(state_json), args.repeats)  # noqa: B023
        sandbox = median_time(lambda: run_evolve(state, EDIT), args.repeats)  # noqa: B023
        protocol = median_time(lambda: apply_evolve(state + [pending]), args.repeats)  # noqa: B023
        print(
            f"{label:>8}  {bare * 1e3:10.2f}ms  {sandbox * 1e3:8.2f}ms  {sandbox / bare:5.1f}x  "
            f"{protocol * 1e3:11.2f}ms  {protocol / bare:5.1f}x"
        )
    print("* apply_evolve = sandbox + State validation + token accounting (o200k) + receipt")

    for limit in (0.05, 0.25):
        stop = median_time(lambda: run_evolve([], "for (;;) {}", SandboxLimits(time_s=limit)), 3)  # noqa: B023
        print(
            f"runaway loop with a {limit * 1e3:g} ms limit stopped after {stop * 1e3:.0f} ms "
            f"({stop / limit:.2f}x the limit)"
        )


if __name__ == "__main__":
    main()
