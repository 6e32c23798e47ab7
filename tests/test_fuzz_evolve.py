"""Fuzz the evolve protocol with seeded random States and hostile code (issue 9).

Invariants, whatever the code does: `apply_evolve` never raises; after a rejection the State is
exactly the one before (plus the receipt); the input is never touched; the resulting State is
valid; the receipt is valid JSON, bounded and encodable; every run ends within its limit plus a
margin. The code is what a model turn can carry: text without lone surrogates, which the State
rules reject (tests/test_sandbox.py covers them). The generator is seeded, so a failure names a
case that reproduces.
"""

from __future__ import annotations

import copy
import json
import random
import time

import pytest

from rl_compaction.core.sandbox import SandboxLimits
from rl_compaction.core.state import validate_state
from rl_compaction.protocol.evolve import MAX_RECEIPT_CHARS, apply_evolve

LIMITS = SandboxLimits(time_s=0.05)
# Generous on purpose: a run the engine cannot stop is killed at its limit + 0.25 s of worker CPU,
# then the worker restarts; on a loaded CI machine that can take seconds of wall time.
MARGIN_S = 10.0
SEEDS = range(4)
CASES_PER_SEED = 60

TEXTS = ["plain", '’quotes’ and "double"', "emoji 😀 tail", "back\\slash \\n", "nul \u0000 inside", "é" * 30, ""]

# Pieces of evolve code: edits a model would write, mistakes, and attacks on the harness.
EDITS = [
    "state[0].content = 'summary of the task';",
    "state.splice(state.length - 1, 0, {type: 'message', role: 'assistant', content: 'note é 😀'});",
    "state.splice(1, 2);",
    "state = state.filter(x => x.type !== 'function_call_output');",
    "state = state.filter(x => !(x.call_id && x.call_id.startsWith('c') && x.call_id.length > 2));",
    "state.reverse();",
    "state.pop();",
    "state[state.length - 1].arguments = '{}';",
    "state.unshift({type: 'message', role: 'robot', content: 'x'});",
    "state[0] = {type: 'message', role: 'user', content: 'r'.repeat(700000)};",
    "state[0] = {type: 'message', role: 'r'.repeat(700000), content: 'x'};",
    "state[0].content = 'half \\ud83d pair';",
    "state[0].content = '\\ud800' + String.raw`\\ud800`;",
    "state[0].content = 'a\u0000b';",
    "state.push(state);",
    "Object.prototype.toJSON = () => 1;",
    "Array.prototype.toJSON = () => 2;",
    "Object.setPrototypeOf(Array.prototype, { toJSON() { return 3; } });",
    "state[0] = new Proxy(state[0], {});",
    "let reads = 0; const deep = () => { let a = []; for (let i = 0; i < 990; i++) a = [a]; return a; };"
    " state[0] = { type: 'message', role: 'user', get content() { return reads++ ? deep() : 'x'; } };",
]
FAILURES = [
    "for (;;) {}",
    "throw null;",
    "throw 'out of memory';",
    "throw Symbol('s');",
    "throw new Error('x'.repeat(100000));",
    "throw new Error('bad \\ud800 message');",
    "throw { toString() { for (;;) {} } };",
    "throw new Proxy({}, { get() { for (;;) {} } });",
    "Error.prototype.toString = function () { for (;;) {} }; for (;;) {}",
    "[].join.call({ length: 2 ** 40 }, '');",
    "String(new Array(2 ** 32 - 1));",
    "const a = []; for (;;) a.push('x'.repeat(4096) + a.length);",
    "const a = []; for (;;) a.push({ i: a.length });",
    "function f(n) { return f(n + 1) + 1; } f(0);",
    "undeclared = 1;",
    "\u0000",
]
RETURNS = [
    "return state;",
    "return state.slice(-1);",
    "return [state[state.length - 1]];",
    "return state.map(x => x);",
    "return new Proxy(state, {});",
    "return Promise.resolve(state);",
    "return {items: state};",
    "return [undefined, ...state];",
    "return [NaN, ...state];",
    "return JSON.parse('['.repeat(500) + ']'.repeat(500));",
    "return;",
    "return state; }; return 'null'; const _z = function(){",
    "return state; }); (function () {",
]
JUNK = list("{}()[];:'\"`\\/*+-=.,!?<>\n ") + ["state", "return", "function", "=>", "\u0000", "\\ud800", "😀"]
COSTLY = {  # pieces that run until the limit (or the kill): kept rare to bound the test's time
    FAILURES[0],
    FAILURES[6],
    FAILURES[7],
    FAILURES[8],
    FAILURES[9],
    FAILURES[10],
    FAILURES[11],
    FAILURES[12],
}


def make_state(rng: random.Random) -> list[dict]:
    state: list[dict] = [{"type": "message", "role": "user", "content": rng.choice(TEXTS) or "task"}]
    for i in range(rng.randint(0, 8)):
        kind = rng.random()
        if kind < 0.4:
            state.append(
                {"type": "function_call", "call_id": f"c{i}", "name": "read", "arguments": json.dumps({"n": i})}
            )
            state.append({"type": "function_call_output", "call_id": f"c{i}", "output": rng.choice(TEXTS)})
        elif kind < 0.7:
            state.append({"role": "assistant", "content": rng.choice(TEXTS) or "ok"})
        else:
            parts = [{"type": "input_text", "text": rng.choice(TEXTS)} for _ in range(rng.randint(1, 3))]
            state.append({"type": "message", "role": "user", "content": parts})
    return state


def make_code(rng: random.Random) -> str:
    if rng.random() < 0.15:
        return "".join(rng.choice(JUNK) for _ in range(rng.randint(1, 40)))
    pieces = rng.sample(EDITS, rng.randint(0, 3))
    if rng.random() < 0.35:
        pieces.append(rng.choice(FAILURES))
    pieces.append(rng.choice(RETURNS))
    cheap = [p for p in pieces if p not in COSTLY]
    if len(cheap) < len(pieces) and rng.random() < 0.6:  # keep most costly cases out
        pieces = cheap or ["return state;"]
    return "\n".join(pieces)


def evolve_call(code: str) -> dict:
    return {"type": "function_call", "call_id": "ev", "name": "evolve", "arguments": json.dumps({"code": code})}


@pytest.mark.parametrize("seed", SEEDS)
def test_apply_evolve_keeps_its_invariants_on_random_hostile_input(seed):
    rng = random.Random(seed)
    for case in range(CASES_PER_SEED):
        code = make_code(rng)
        state = validate_state(make_state(rng) + [evolve_call(code)], pending_call_id="ev")
        before = copy.deepcopy(state)
        where = f"seed {seed} case {case}: {code!r}"

        start = time.perf_counter()
        outcome = apply_evolve(state, limits=LIMITS)
        elapsed = time.perf_counter() - start

        assert state == before, where
        assert elapsed < LIMITS.time_s + MARGIN_S, where
        receipt_text = outcome.state[-1]["output"]
        assert len(receipt_text) <= MAX_RECEIPT_CHARS, where
        assert json.loads(receipt_text) == outcome.receipt, where
        receipt_text.encode("utf-8")
        if not outcome.applied:
            assert outcome.state[:-1] == before, where
            assert set(outcome.receipt) == {"applied", "error"} and outcome.receipt["error"], where
        validate_state(outcome.state)
