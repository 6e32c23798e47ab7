"""Benchmark: the evolve round trip against a bare QuickJS JSON.parse + JSON.stringify of the
same State, at 10 KiB, 100 KiB and 1 MiB, side by side in one run, printed as ratios (the
sandbox's figure includes the round trip to its worker process); how quickly a runaway loop
is stopped relative to the time limit, on an idle process and with two threads busy beside it;
and how quickly a native built-in that ignores the limit is stopped (the parent kills the worker)
and what the next run pays to start a fresh one.

    python scripts/bench_sandbox.py [--repeats 7]
"""

from __future__ import annotations

import argparse
import json
import statistics
import threading
import time

import quickjs

from rl_compaction.core.sandbox import SandboxLimits, _evaluate, run_evolve
from rl_compaction.protocol.evolve import apply_evolve

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


def in_process(state: list[dict]) -> list[dict]:
    """run_evolve's work without its worker process: serialise, run QuickJS here, parse."""
    out, _ = _evaluate(json.dumps(state, ensure_ascii=False), json.dumps(EDIT), SandboxLimits())
    return json.loads(out)


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

    print(
        f"{'State':>8}  {'bare QuickJS':>12}  {'in-process':>10}  {'ratio':>6}  {'run_evolve':>10}  {'ratio':>6}  "
        f"{'apply_evolve*':>13}  {'ratio':>6}"
    )
    for label, size in (("10 KiB", 10 * 1024), ("100 KiB", 100 * 1024), ("1 MiB", 1024 * 1024)):
        state = make_state(size)
        state_json = json.dumps(state, ensure_ascii=False)
        pending = {"type": "function_call", "call_id": "ev", "name": "evolve", "arguments": json.dumps({"code": EDIT})}
        bare = median_time(lambda: bare_quickjs(state_json), args.repeats)  # noqa: B023
        inline = median_time(lambda: in_process(state), args.repeats)  # noqa: B023
        sandbox = median_time(lambda: run_evolve(state, EDIT), args.repeats)  # noqa: B023
        protocol = median_time(lambda: apply_evolve(state + [pending]), args.repeats)  # noqa: B023
        print(
            f"{label:>8}  {bare * 1e3:10.2f}ms  {inline * 1e3:8.2f}ms  {inline / bare:5.1f}x  "
            f"{sandbox * 1e3:8.2f}ms  {sandbox / bare:5.1f}x  "
            f"{protocol * 1e3:11.2f}ms  {protocol / bare:5.1f}x"
        )
    print("in-process = the same QuickJS run without the worker process (what run_evolve did before it)")
    print("* apply_evolve = sandbox + State validation + token accounting (o200k) + receipt")

    for busy in (0, 2):
        with busy_threads(busy):
            for limit in (0.05, 0.25):
                limits = SandboxLimits(time_s=limit)
                stop = median_time(lambda: run_evolve([], "for (;;) {}", limits), 3)  # noqa: B023
                inline = median_time(lambda: _evaluate("[]", '"for (;;) {}"', limits), 3)  # noqa: B023
                print(
                    f"runaway loop, {busy} busy threads beside it, {limit * 1e3:g} ms limit: stopped after "
                    f"{stop * 1e3:.0f} ms ({stop / limit:.2f}x the limit); in-process {inline * 1e3:.0f} ms "
                    f"({inline / limit:.2f}x)"
                )

    limits = SandboxLimits()
    for _ in range(3):
        start = time.perf_counter()
        error = run_evolve([], "[].join.call({ length: 2 ** 40 }, '');", limits).error
        stop = time.perf_counter() - start
        start = time.perf_counter()
        run_evolve([], "return state;", limits)
        restart = time.perf_counter() - start
        print(
            f"native loop, {limits.time_s * 1e3:g} ms limit: {error!r} after {stop * 1e3:.0f} ms "
            f"({stop / limits.time_s:.2f}x the limit); the next run, on a fresh worker, took {restart * 1e3:.0f} ms"
        )


class busy_threads:
    """Threads that keep the CPU busy outside the GIL (as a trainer's math libraries do)."""

    def __init__(self, n: int):
        self.n, self.stop = n, threading.Event()

    def _spin(self) -> None:
        import hashlib

        data = b"x" * (1 << 20)
        while not self.stop.is_set():
            hashlib.sha256(data).digest()  # releases the GIL for large inputs

    def __enter__(self) -> None:
        self.threads = [threading.Thread(target=self._spin, daemon=True) for _ in range(self.n)]
        for t in self.threads:
            t.start()
        time.sleep(0.2)

    def __exit__(self, *exc) -> None:
        self.stop.set()
        for t in self.threads:
            t.join()


if __name__ == "__main__":
    main()
