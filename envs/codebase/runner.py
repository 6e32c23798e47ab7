"""Run a repository's tests in the evolve sandbox and render the verbose test log.

The log is deliberately long (every test, lint warnings, heap lines, timings): that volume is
what the agent must learn to compact. All "timings" are pseudo-random but seeded, so the same
task and call sequence give the same log.
"""

from __future__ import annotations

import random
import re
from dataclasses import dataclass

from rl_compaction.core.sandbox import MiB, SandboxLimits, run_evolve

TIME_LIMIT_S = 5
MEMORY_LIMIT = 64 * MiB

# The suite runner, run by the evolve sandbox (rl_compaction.core.sandbox) as the body of
# `function evolve(state)`, so that task code gets the same guarantees as evolve code: a separate
# process, the CPU limit, and a kill at the limit for a native loop the engine cannot interrupt.
# Its input is [{sources: [[path, text], ...], suite: text | null}]: the texts arrive as data (a NUL
# or any other character in an edit is just a character), are run with an indirect eval (global
# code: their functions become globals, each file's top-level const and let stay in that file),
# and the output is [load errors by path, test rows, the error that aborted the suite or null].
_RUNNER = """
const job = state[0], indirectEval = eval, rows = [], loadErrors = {};
const firstLine = (e) => { try { return String(e).split("\\n")[0]; } catch (inner) { return "uncaught exception"; } };
globalThis.test = function (name, call, expected) {
  let actual = null, error = null;
  try {
    const v = call();
    actual = v === undefined ? "undefined" : JSON.stringify(v);
  } catch (e) {
    error = firstLine(e);
  }
  const want = JSON.stringify(expected);
  rows.push([String(name), error === null && actual === want, String(want), actual, error]);
};
for (const [path, text] of job.sources) {
  try { indirectEval(text); } catch (e) { loadErrors[path] = firstLine(e); }
}
let aborted = null;
if (job.suite !== null) {
  try { indirectEval(job.suite); } catch (e) { aborted = firstLine(e); }
}
return [loadErrors, rows, aborted];
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


def _run(sources: dict[str, str], suite: str | None) -> tuple[dict[str, str], list[TestResult], str | None]:
    """One fresh sandbox run: the sources, then `suite`. A run the sandbox stopped (time, memory, a
    crash) reports its error as the suite's, with no rows: the tests it did not finish fail."""
    limits = SandboxLimits(time_s=TIME_LIMIT_S, memory_bytes=MEMORY_LIMIT, stack_bytes=MiB)
    result = run_evolve([{"sources": list(sources.items()), "suite": suite}], _RUNNER, limits)
    if result.error is not None:
        return {}, [], result.error.splitlines()[0]
    load_errors, rows, aborted = result.state
    return load_errors, [TestResult(*row) for row in rows], aborted


def run_suites(sources: dict[str, str], suites: dict[str, str]) -> SuiteRun:
    """Load every source file (in order) then run each suite's `test(...)` calls, each suite in a
    fresh sandbox run (`_RUNNER`) under the CPU and memory limits.

    A source file that fails to load is reported and its functions stay undefined, so their tests
    fail with a ReferenceError; a suite that is stopped (time or memory limit, or the sandbox
    killed it) fails with one "<suite aborted>" row, and its tests count as not passed."""
    load_errors: dict[str, str] = {}
    results: dict[str, list[TestResult]] = {}
    for label, src in suites.items():
        errors, got, aborted = _run(sources, src)
        load_errors = load_errors or errors
        if aborted is not None:
            got.append(TestResult("<suite aborted>", False, "all tests to run", None, aborted))
        results[label] = got
    if not suites:
        load_errors = _run(sources, None)[0]
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
