"""The QuickJS sandbox: limits, isolation, and exact data across the boundary."""

from __future__ import annotations

import collections
import copy
import itertools
import multiprocessing
import os
import signal
import threading
import time

import pytest

from rl_compaction.core import sandbox
from rl_compaction.core.sandbox import KiB, SandboxLimits, run_evolve

STATE = [
    {"type": "message", "role": "user", "content": 'Track ’quotes’, emoji 😀 and escapes \\n " \u0000.'},
    {"type": "function_call", "call_id": "c1", "name": "search", "arguments": '{"q": "\\u2019"}'},
    {"type": "function_call_output", "call_id": "c1", "output": '{"results": [1, 2]}'},
]


def test_identity_round_trip_is_exact_and_input_untouched():
    before = copy.deepcopy(STATE)
    result = run_evolve(STATE, "return state;")
    assert result.ok and result.state == STATE
    assert STATE == before


def test_edit_works_on_a_copy():
    before = copy.deepcopy(STATE)
    result = run_evolve(STATE, "state[0].content = 'edited'; state.pop(); return state;")
    assert result.state == [dict(STATE[0], content="edited"), STATE[1]]
    assert STATE == before


@pytest.mark.parametrize(
    ("code", "words"),
    [
        ("while (true) {}", "time limit of 250 ms exceeded"),
        ("const a = []; for (;;) a.push('x'.repeat(4096) + a.length);", "memory limit of 16 MiB exceeded"),
        ("function f(n) { return f(n + 1) + 1; } return f(0);", "stack limit of 256 KiB exceeded"),
        ("return Promise.resolve(state);", "synchronously"),
        ("return (async () => state)();", "synchronously"),
        ("const o = {}; o.self = o; return [o];", "cycle"),
        ("return [undefined];", "non-JSON value (undefined)"),
        ("return [{ n: NaN }];", "non-JSON number NaN"),
        ("return [{ n: Infinity }];", "non-JSON number Infinity"),
        ("return [() => 1];", "non-JSON value (function)"),
        ("return [1n];", "non-JSON value (bigint)"),
        ("return [new Date(0)];", "non-plain object"),
        ("return [new Map()];", "non-plain object"),
        ("return [, 1];", "empty array slot"),
        ("return {items: state};", "must return a State array, got object"),
        ("return;", "must return a State array, got undefined"),
        ("return state +;", "SyntaxError"),
        ("\n\nthrow new Error('Search call not found');", "Error: Search call not found (code line 3)"),
        ("undeclared = 1; return state;", "ReferenceError"),  # strict mode
    ],
)
def test_failures_are_reported_not_raised(code, words):
    before = copy.deepcopy(STATE)
    result = run_evolve(STATE, code)
    assert not result.ok and result.state is None
    assert words in result.error
    assert STATE == before


MEMORY_BOMBS = [
    "const a = []; for (;;) a.push('x'.repeat(4096) + a.length);",
    "const a = []; for (;;) a.push({ i: a.length });",
    "const m = new Map(); for (let i = 0; ; i++) m.set(i, [i]);",
    "const o = {}; for (let i = 0; ; i++) o['k' + i] = i;",
    "const a = []; for (;;) a.push(JSON.parse(JSON.stringify(state)));",
    "const a = []; for (;;) a.push(new ArrayBuffer(1 << 20));",
    "return new Array(1e9).fill(0);",
]


@pytest.mark.slow
def test_repeated_memory_bombs_fail_the_edit_and_never_crash_the_process():
    """Every out-of-memory path QuickJS takes reads as the memory limit, run after run (the
    archived quickjs 1.19 segfaulted here within a few dozen runs). Some paths throw a bare null,
    which a `throw null` in the code also does, so that message names both."""
    seen = collections.Counter()
    limits = SandboxLimits(time_s=5)  # some bombs need ~200 ms to fill 16 MiB; memory must be what stops them
    for _ in range(10):
        for state, code in itertools.product(([], STATE), MEMORY_BOMBS):
            seen[run_evolve(state, code, limits).error] += 1
    assert sum(seen.values()) == 2 * 10 * len(MEMORY_BOMBS)
    assert set(seen) <= {
        "memory limit of 16 MiB exceeded",
        "memory limit of 16 MiB exceeded, or the code threw null (QuickJS reports both as null)",
    }


def _worker_pid() -> int:
    run_evolve(STATE, "return state;")  # make sure it is up
    return sandbox._worker._proc.pid


def _signal_when_busy(worker_pid: int, target_pid: int, sig: int) -> threading.Thread:
    """Send `sig` to `target_pid` once the worker has spent 0.2 s of CPU on the run (so the
    request is in and the code is running, however loaded the machine is)."""

    def watch() -> None:
        start = sandbox._cpu_seconds(worker_pid)
        while sandbox._cpu_seconds(worker_pid) - start < 0.2:
            time.sleep(0.01)
        os.kill(target_pid, sig)

    thread = threading.Thread(target=watch, daemon=True)
    thread.start()
    return thread


def test_a_crash_in_the_engine_fails_that_edit_and_the_next_run_works():
    pid = _worker_pid()
    _signal_when_busy(pid, pid, signal.SIGSEGV)  # what an engine bug looks like
    result = run_evolve(STATE, "for (;;) {}", SandboxLimits(time_s=30))
    assert result.error == "the sandbox process died running this code (signal SIGSEGV)"
    after = run_evolve(STATE, "return state;")
    assert after.ok and after.state == STATE and _worker_pid() != pid


def test_a_worker_that_died_between_runs_is_restarted_without_blaming_the_code():
    pid = _worker_pid()
    os.kill(pid, signal.SIGKILL)
    os.waitpid(pid, 0)
    assert run_evolve(STATE, "return state;").state == STATE


def test_an_interrupted_run_does_not_answer_the_next_one():
    # Python leaves SIGINT ignored when it starts ignored (nohup, a background job, some CI runners).
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        _signal_when_busy(_worker_pid(), os.getpid(), signal.SIGINT)  # Ctrl-C mid-run
        with pytest.raises(KeyboardInterrupt):
            run_evolve(STATE, "for (;;) {}", SandboxLimits(time_s=5))
    finally:
        signal.signal(signal.SIGINT, previous)
    assert run_evolve(STATE, "return [];").state == []


def test_a_forked_process_gets_its_own_worker():
    parent_pid = _worker_pid()
    ctx = multiprocessing.get_context("fork")
    with ctx.Pool(1) as pool:
        state, child_worker_pid = pool.apply(_run_in_child)
    assert state == STATE and child_worker_pid != parent_pid
    assert _worker_pid() == parent_pid  # the parent's worker was not touched


def _run_in_child() -> tuple:
    return run_evolve(STATE, "return state;").state, sandbox._worker._proc.pid


def test_runaway_loop_is_interrupted_at_the_configured_limit():
    # How quickly it stops is measured in scripts/bench_sandbox.py, not asserted here.
    result = run_evolve(STATE, "for (;;) {}", SandboxLimits(time_s=0.1))
    assert result.error == "time limit of 100 ms exceeded"


def test_host_globals_are_absent():
    names = [
        "require",
        "process",
        "fetch",
        "setTimeout",
        "setInterval",
        "XMLHttpRequest",
        "std",
        "os",
        "console",
        "print",
        "scriptArgs",
        "WebAssembly",
        "Deno",
        "Bun",
        "module",
        "importScripts",
    ]
    result = run_evolve([], f"return [{', '.join(f'typeof {n}' for n in names)}].map(t => ({{type: t}}));")
    assert result.ok
    assert {x["type"] for x in result.state} == {"undefined"}


def test_no_leakage_between_runs():
    polluted = run_evolve(
        STATE, "Object.prototype.hacked = 1; Array.prototype.map = null; globalThis.secret = 42; return state;"
    )
    assert polluted.ok
    assert polluted.state == STATE  # an inherited property is not an own key: it does not leak into data
    probe = run_evolve([], "return [{hacked: typeof ({}).hacked, map: typeof [].map, secret: typeof secret}];")
    assert probe.state == [{"hacked": "undefined", "map": "function", "secret": "undefined"}]


def test_overwritten_builtins_cannot_smuggle_non_json():
    result = run_evolve(STATE, "JSON.stringify = () => '[1, NaN]'; Array.isArray = () => true; return 5;")
    assert not result.ok and "must return a State array" in result.error


def test_code_size_and_state_size_caps():
    assert "over the limit of 65536 bytes" in run_evolve([], "//" + "x" * 65536 + "\nreturn [];").error
    big = [{"type": "message", "role": "user", "content": "x" * (4 * 1024 * 1024)}]
    assert "input State is over the size cap" in run_evolve(big, "return state;").error
    small = SandboxLimits(state_bytes=10 * KiB)
    grow = run_evolve([], "return [{type: 'message', role: 'user', content: 'y'.repeat(20000)}];", small)
    assert "result State is over the size cap" in grow.error


def test_state_cap_of_at_least_4_mib_is_usable():
    state = [{"type": "message", "role": "user", "content": "z" * (4 * 1024 * 1024 - 200)}]
    result = run_evolve(state, "state[0].content = state[0].content.slice(0, 10); return state;")
    assert result.ok, result.error
    assert result.state[0]["content"] == "z" * 10


def test_non_json_input_is_an_error():
    result = run_evolve([{"x": float("nan")}], "return state;")
    assert not result.ok and "not JSON-compatible" in result.error


def test_bad_limits_rejected():
    with pytest.raises(ValueError, match="time_s"):
        SandboxLimits(time_s=0)


def test_unicode_edge_cases_survive_edits():
    code = "state[0].content = state[0].content + ' ✓ \\u2019'; return state;"
    result = run_evolve(STATE, code)
    assert result.state[0]["content"] == STATE[0]["content"] + " ✓ ’"


def test_lone_surrogates_cross_the_boundary_exactly():
    """JSON's "\\ud800" decodes to a lone surrogate in Python, which QuickJS cannot take raw."""
    state = [{"type": "message", "role": "user", "content": "a\ud800b \udfff"}]
    assert run_evolve(state, "return state;").state == state
    code = "state[0].content += '\ud83d' + '\ude00' + '\udc00'; return state;"  # a pair split in two, a lone low
    assert run_evolve(state, code).state[0]["content"] == "a\ud800b \udfff😀\udc00"


def test_archived_quickjs_package_is_refused(monkeypatch):
    import importlib.metadata

    from rl_compaction.core import sandbox

    monkeypatch.setattr(importlib.metadata, "version", lambda name: "1.19.4")
    with pytest.raises(ImportError, match="pip uninstall -y quickjs"):
        sandbox._check_engine()


# -- hostile code (issue 9) --------------------------------------------------------------------

ESCAPES = [
    "return state; }; return 'null'; const _z = function(){",  # replaced the harness's result
    "return state; }); (function () {",  # a second function takes the first one's place
]


@pytest.mark.parametrize("code", ESCAPES)
def test_code_cannot_leave_its_function_body(code):
    result = run_evolve(STATE, code)
    assert not result.ok and result.state is None
    assert "function body" in result.error or "SyntaxError" in result.error


DEEP_WHEN_SERIALISED = """
let reads = 0;
const deep = () => { let a = []; for (let i = 0; i < 990; i++) a = [a]; return a; };
state[0] = { type: 'message', role: 'user', get content() { return reads++ ? deep() : 'x'; } };
return state;
"""


def test_a_result_that_changes_while_serialised_is_rejected():
    """A getter answers the check with a string and the serialisation with 990 nested arrays,
    which Python's JSON decoder cannot take: a rejection, not a RecursionError."""
    result = run_evolve(STATE, DEEP_WHEN_SERIALISED)
    assert not result.ok and "could not be decoded" in result.error


LIMIT = SandboxLimits(time_s=0.1)
# Generous: the run must end near its limit (plus a margin and, on a loaded machine, scheduling),
# far below the 60 s wall guard it used to reach.
PROMPTLY_S = 5.0

THROWN_VALUES_THAT_LOOP = [
    "throw { toString() { for (;;) {} } };",
    "const e = new Error('x'); Object.defineProperty(e, 'message', { get() { for (;;) {} } }); throw e;",
    "Error.prototype.toString = function () { for (;;) {} }; throw new Error('x');",
    "throw new Proxy({}, { get() { for (;;) {} } });",
    "Error.prototype.toString = function () { for (;;) {} }; for (;;) {}",  # interrupted, then converted
]


@pytest.mark.parametrize("code", THROWN_VALUES_THAT_LOOP)
def test_describing_a_thrown_value_cannot_outlast_the_limit(code):
    result = run_evolve(STATE, code, LIMIT)
    assert not result.ok and result.elapsed_s < PROMPTLY_S, (result.error, result.elapsed_s)
    assert run_evolve(STATE, "return state;").state == STATE


NATIVE_LOOPS = [
    "[].join.call({ length: 2 ** 40 }, '');",
    "String(new Array(2 ** 32 - 1));",
    "[].copyWithin.call({ length: 2 ** 40 }, 0, 1);",
    "new Array(1e8).join(''); return state;",  # finishes, but after ~10x the limit
]


@pytest.mark.parametrize("code", NATIVE_LOOPS)
def test_native_builtins_are_stopped_near_the_limit(code):
    result = run_evolve(STATE, code, LIMIT)
    assert result.error == "time limit of 100 ms exceeded" and result.elapsed_s < PROMPTLY_S, result
    assert run_evolve(STATE, "return state;").state == STATE


def test_nul_in_code_is_text_not_a_crash(capfd):
    ok = run_evolve([], "return [{type: 'message', role: 'user', content: 'a\u0000b'}];")  # a raw NUL in a literal
    assert ok.state == [{"type": "message", "role": "user", "content": "a\x00b"}]
    bad = run_evolve([], "return [];\u0000")
    assert not bad.ok and "SyntaxError" in bad.error
    assert capfd.readouterr().err == ""


@pytest.mark.parametrize(
    ("code", "words"),
    [
        ("throw null;", "threw null"),
        ("throw 'out of memory';", 'threw a non-Error value: "out of memory"'),
        ("throw Symbol('s');", "threw a non-Error value: Symbol(s)"),
        ("throw 42;", "threw a non-Error value: 42"),
        ("throw { message: 'plain' };", "threw a non-Error object: plain"),
        ("throw new Proxy({}, { getOwnPropertyDescriptor() { throw 1; } });", "could not be described"),
        ("class Oops extends Error {}; Oops.prototype.name = 'Oops'; throw new Oops('no');", "Oops: no (code line 1)"),
    ],
)
def test_thrown_values_are_named_for_what_they_are(code, words):
    result = run_evolve(STATE, code)
    assert words in result.error
    if "memory" in code:
        assert "memory limit" not in result.error


def test_an_inherited_to_json_does_not_change_the_result():
    result = run_evolve(STATE, "Object.prototype.toJSON = () => 1; Array.prototype.toJSON = () => 2; return state;")
    assert result.ok and result.state == STATE


@pytest.mark.parametrize(
    "literal",
    ["String.raw`\ud800`", "'\\\ud800'", "`\ud800`"],  # a backslash before a lone surrogate escapes that character
    ids=["String.raw", "backslash", "template"],
)
def test_a_lone_surrogate_in_the_code_keeps_its_meaning(literal):
    result = run_evolve([], f"return [{{type: 'message', role: 'user', content: {literal}}}];")
    assert result.state == [{"type": "message", "role": "user", "content": "\ud800"}]


def test_without_proc_the_wall_clock_stops_native_loops(monkeypatch):
    monkeypatch.setattr(sandbox, "_cpu_seconds", lambda pid: None)
    result = run_evolve(STATE, NATIVE_LOOPS[0], LIMIT)
    assert result.error == "time limit of 100 ms exceeded" and result.elapsed_s < PROMPTLY_S


def test_a_fresh_worker_is_ready_before_its_first_run_is_timed():
    """The watchdog counts the worker's CPU from the request on; a worker still importing would
    charge that to the first run after every restart."""
    sandbox._worker.close()
    proc = sandbox._worker._start()
    before = sandbox._cpu_seconds(proc.pid)
    time.sleep(0.3)
    assert sandbox._cpu_seconds(proc.pid) - before < 0.02


def test_a_worker_that_cannot_start_fails_the_edit_with_a_reason(monkeypatch):
    sandbox._worker.close()
    monkeypatch.setattr(sandbox.sys, "executable", "/bin/false")
    result = run_evolve(STATE, "return state;")
    assert result.error == "the sandbox process could not start (exit code 1)"
    monkeypatch.undo()
    assert run_evolve(STATE, "return state;").state == STATE


@pytest.mark.slow
def test_a_fork_while_another_thread_sends_a_request_does_not_deadlock_the_child():
    """A thread writes big evolve requests while the main thread forks; each child drops the
    inherited worker and runs nothing else. With a buffered pipe the child's copy of the writer's
    lock could be held at the fork, and closing the pipe then blocked forever (after 17-89 forks)."""
    big = [{"type": "message", "role": "user", "content": "x" * 2_000_000}]
    stop = threading.Event()

    def send() -> None:
        while not stop.is_set():
            run_evolve(big, "return state;", SandboxLimits(time_s=5))

    sender = threading.Thread(target=send, daemon=True)
    sender.start()
    stuck = 0
    try:
        for _ in range(150):
            pid = os.fork()
            if pid == 0:  # the child: what its first run_evolve does first
                sandbox._worker.close()
                os._exit(0)
            deadline = time.monotonic() + 10
            while (done := os.waitpid(pid, os.WNOHANG))[0] == 0 and time.monotonic() < deadline:
                time.sleep(0.005)
            if done[0] == 0:
                stuck += 1
                os.kill(pid, signal.SIGKILL)
                os.waitpid(pid, 0)
    finally:
        stop.set()
        sender.join()
    assert stuck == 0


def test_evolve_code_is_deterministic_a_fixed_clock_and_a_seeded_random():
    """The same code on the same State gives the same State, so a recorded episode replays exactly."""
    code = "return [Math.random(), Math.random(), Date.now(), new Date().toISOString(), Date(), performance.now()];"
    first, second = run_evolve(STATE, code), run_evolve(STATE, code)
    assert first.error is None and first.state == second.state
    r1, r2, now, iso, text, perf = first.state
    assert 0 <= r1 < 1 and r1 != r2 and now == sandbox.FIXED_CLOCK_MS and perf == 0
    assert iso == "2026-01-01T00:00:00.000Z" and text.startswith("Thu Jan 01 2026")
    explicit = "return [new Date(0).toISOString(), Date.UTC(2020, 0, 1), new Date() instanceof Date];"
    assert run_evolve(STATE, explicit).state == ["1970-01-01T00:00:00.000Z", 1577836800000, True]
