"""Run a repository's tests in a fresh QuickJS context and render the verbose test log.

The log is deliberately long (every test, lint warnings, heap lines, timings): that volume is
what the agent must learn to compact. All "timings" are pseudo-random but seeded, so the same
task and call sequence give the same log.
"""

from __future__ import annotations

import json
import random
import re
from dataclasses import dataclass

import quickjs

TIME_LIMIT_S = 5
MEMORY_LIMIT = 64 * 1024 * 1024

_HARNESS = """
var __results = [];
function test(name, call, expected) {
  var actual = null, error = null;
  try {
    var v = call();
    actual = v === undefined ? "undefined" : JSON.stringify(v);
  } catch (e) {
    error = String(e);
  }
  var want = JSON.stringify(expected);
  __results.push([name, error === null && actual === want, want, actual, error]);
}
"""

_UNUSED = re.compile(r"^\s*const (_\w+) =")


@dataclass
class TestResult:
    name: str
    passed: bool
    expected: str
    actual: str | None
    error: str | None


@dataclass
class SuiteRun:
    load_errors: dict[str, str]  # src path -> error
    results: dict[str, list[TestResult]]  # suite label -> results in order


def run_suites(sources: dict[str, str], suites: dict[str, str]) -> SuiteRun:
    """Load every source file (in order) then run each suite's `test(...)` calls.

    A source file that fails to load is reported and its functions stay undefined, so their tests
    fail with a ReferenceError; a suite that is interrupted (time or memory limit) fails the tests
    it did not reach."""
    ctx = quickjs.Context()
    ctx.set_time_limit(TIME_LIMIT_S)
    ctx.set_memory_limit(MEMORY_LIMIT)
    ctx.eval(_HARNESS)
    load_errors: dict[str, str] = {}
    for path, src in sources.items():
        try:
            ctx.eval(src)
        except quickjs.JSException as e:
            load_errors[path] = str(e).splitlines()[0]
    results: dict[str, list[TestResult]] = {}
    for label, src in suites.items():
        ctx.eval("__results = [];")
        error = None
        try:
            ctx.eval(src)
        except quickjs.JSException as e:
            error = str(e).splitlines()[0]
        try:
            rows = json.loads(ctx.eval("JSON.stringify(__results)"))
        except quickjs.JSException:
            rows = []
        got = [TestResult(*row) for row in rows]
        if error is not None:
            got.append(TestResult("<suite aborted>", False, "all tests to run", None, error))
        results[label] = got
    return SuiteRun(load_errors, results)


def render_log(
    run: SuiteRun,
    sources: dict[str, list[str]],
    test_lines: dict[str, dict[str, tuple[int, str]]],
    noise_seed: int,
    run_no: int,
) -> str:
    """The verbose log the `run_tests` tool returns.

    test_lines: suite path -> test name -> (line number, call expression), for the failure details."""
    rng = random.Random(f"{noise_seed}/{run_no}")
    out = [
        f"$ qjs-test --reporter verbose test/   (run #{run_no})",
        f"qjs-test 3.2.1 | engine quickjs | {len(run.results)} suites | seed 0x{noise_seed & 0xFFFF:04x}",
    ]
    for path, lines in sources.items():
        status = f"FAILED: {run.load_errors[path]}" if path in run.load_errors else "ok"
        out.append(f"[load] {path} ({len(lines)} lines, {rng.uniform(0.1, 0.9):.2f}ms) {status}")
    for path, lines in sources.items():
        for i, line in enumerate(lines, 1):
            m = _UNUSED.match(line)
            if m:
                out.append(
                    f"[lint] {path}:{i} warning: '{m.group(1)}' is assigned a value but never used (no-unused-vars)"
                )
    passed = failed = 0
    failed_names: list[str] = []
    total_ms = 0.0
    for suite, results in run.results.items():
        out.append(f"> {suite} ({len(results)} tests)")
        for r in results:
            ms = rng.uniform(0.02, 0.4)
            total_ms += ms
            if r.passed:
                passed += 1
                out.append(f"  PASS  {r.name}  ({ms:.3f}ms)")
                continue
            failed += 1
            failed_names.append(r.name)
            line, call = test_lines.get(suite, {}).get(r.name, (0, "?"))
            out.append(f"  FAIL  {r.name}  ({ms:.3f}ms)")
            out.append(f"        call:     {call}")
            out.append(f"        expected: {r.expected}")
            out.append(f"        actual:   {r.error if r.error is not None else r.actual}")
            out.append(f"        at {suite}:{line}")
        out.append(
            f"  [heap] {rng.uniform(0.8, 3.5):.2f} MiB used, {rng.randint(900, 9000)} objects, "
            f"gc passes: {rng.randint(0, 3)}"
        )
    out.append(f"== summary: {passed} passed, {failed} failed, {passed + failed} total ({total_ms:.2f}ms)")
    out.append(f"== failed: {', '.join(failed_names) if failed_names else 'none'}")
    return "\n".join(out)
