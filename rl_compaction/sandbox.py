"""Run model-written evolve code in QuickJS, under limits, with no host access.

Each run gets a fresh QuickJS context (nothing leaks between runs), sees a JSON copy of the
State (the caller's objects are never handed over) and must synchronously return an array
of plain JSON values. The context exposes only ECMAScript built-ins: no `require`,
`process`, `fetch`, timers, file system or network exist in it.

QuickJS runs in a child process, one per calling process, kept for reuse. That buys two things
an RL harness running untrusted code needs: an engine crash fails one edit instead of killing
the trainer (the worker is restarted), and the time limit, which QuickJS measures with the
process CPU clock, counts the evolve code alone rather than every busy thread of the trainer.
"""

from __future__ import annotations

import atexit
import contextlib
import importlib.metadata
import json
import os
import re
import select
import signal
import struct
import subprocess
import sys
import threading
import time
from dataclasses import asdict, dataclass
from typing import BinaryIO

import quickjs

from rl_compaction.state import MAX_DEPTH, State

KiB, MiB = 1024, 1024 * 1024


def _check_engine() -> None:
    """Refuse to run on the archived `quickjs` package: it also provides `import quickjs`, and its
    2021 engine crashes the whole process on some out-of-memory paths (a memory bomb in evolve
    code must fail the edit, not kill the trainer)."""
    try:
        importlib.metadata.version("quickjs")
    except importlib.metadata.PackageNotFoundError:
        return
    raise ImportError(
        "the archived `quickjs` package is installed, and it shadows `quickjs-ng` (both provide "
        "`import quickjs`); run: pip uninstall -y quickjs && pip install --force-reinstall quickjs-ng"
    )


_check_engine()


@dataclass(frozen=True)
class SandboxLimits:
    """Limits for one evolve run (the reference prototype's defaults).

    time_s: CPU time for the code and the result check (QuickJS interrupt handler).
    memory_bytes: heap the code may allocate on top of the loaded input State.
    stack_bytes: QuickJS stack size (deep recursion fails cleanly).
    code_bytes: UTF-8 size of the code.
    state_bytes: UTF-8 JSON size of the input State and of the returned State.
    max_depth: nesting depth of the returned JSON.
    """

    time_s: float = 0.25
    memory_bytes: int = 16 * MiB
    stack_bytes: int = 256 * KiB
    code_bytes: int = 64 * KiB
    state_bytes: int = 4 * MiB
    max_depth: int = MAX_DEPTH

    def __post_init__(self) -> None:
        for name in ("time_s", "memory_bytes", "stack_bytes", "code_bytes", "state_bytes", "max_depth"):
            if not getattr(self, name) > 0:
                raise ValueError(f"sandbox limit {name} must be > 0, got {getattr(self, name)!r}")


@dataclass(frozen=True)
class SandboxResult:
    """The outcome of one run: a new State, or an error message (never both)."""

    state: State | None
    error: str | None
    elapsed_s: float

    @property
    def ok(self) -> bool:
        return self.error is None


class SandboxError(Exception):
    """Evolve code failed; the message is what the agent reads in its receipt."""


# The harness script. User code becomes the body of `evolve`; the built-ins the result check
# needs are captured before it runs, so code that overwrites globals cannot fool the check
# (and the returned text is parsed and validated again in Python anyway).
_HEADER = """\
"use strict";
(() => {
const isArray = Array.isArray, getProto = Object.getPrototypeOf, objProto = Object.prototype;
const ownKeys = Reflect.ownKeys, isFiniteNum = Number.isFinite, stringify = JSON.stringify;
const PromiseProto = Promise.prototype, maxDepth = __MAX_DEPTH__;
const input = globalThis.__input;
delete globalThis.__input;
const evolve = function evolve(state) {
"""
_FOOTER = """
};
const result = evolve(input);
if (result !== null && typeof result === "object" && (getProto(result) === PromiseProto ||
    typeof result.then === "function")) {
  throw new TypeError("evolve must return the State synchronously; it returned a Promise");
}
if (!isArray(result)) {
  throw new TypeError("evolve must return a State array, got " + (result === null ? "null" : typeof result));
}
const onPath = new Set();
const check = (v, path, depth) => {
  if (depth > maxDepth) throw new TypeError("result nests deeper than " + maxDepth + " levels at " + path);
  const t = typeof v;
  if (v === null || t === "string" || t === "boolean") return;
  if (t === "number") {
    if (!isFiniteNum(v)) throw new TypeError("result holds the non-JSON number " + v + " at " + path);
    return;
  }
  if (t !== "object") throw new TypeError("result holds a non-JSON value (" + t + ") at " + path);
  if (onPath.has(v)) throw new TypeError("result has a cycle at " + path);
  onPath.add(v);
  if (isArray(v)) {
    for (let i = 0; i < v.length; i++) {
      if (!(i in v)) throw new TypeError("result has an empty array slot at " + path + "[" + i + "]");
      check(v[i], path + "[" + i + "]", depth + 1);
    }
  } else {
    const proto = getProto(v);
    if (proto !== objProto && proto !== null) {
      throw new TypeError("result holds a non-plain object at " + path + " (only arrays and plain objects)");
    }
    for (const k of ownKeys(v)) {
      if (typeof k !== "string") throw new TypeError("result has a symbol key at " + path);
      check(v[k], path + "." + k, depth + 1);
    }
  }
  onPath.delete(v);
};
check(result, "state", 0);
return stringify(result);
})()
"""
_CODE_FIRST_LINE = _HEADER.count("\n") + 1
_LOCATION = re.compile(r"<input>:(\d+)")


def _describe(exc: Exception, limits: SandboxLimits, code_lines: int = 0) -> str:
    """One line the model can act on: the JS error and the line of the code it came from."""
    text = str(exc)
    first = text.splitlines()[0] if text else type(exc).__name__
    if isinstance(exc, quickjs.StackOverflow) or "stack overflow" in first:
        return f"stack limit of {limits.stack_bytes // KiB} KiB exceeded (too deep recursion)"
    if first.startswith("InternalError: interrupted"):
        return f"time limit of {limits.time_s * 1000:g} ms exceeded"
    # QuickJS throws a bare null (or its internal "uninitialized" marker) when it runs out of memory
    # while building the error object itself; a literal `throw null` in evolve code reads the same.
    if "out of memory" in first or first in ("null", "[uninitialized]"):
        return f"memory limit of {limits.memory_bytes / MiB:g} MiB exceeded"
    for line in text.splitlines()[1:]:
        m = _LOCATION.search(line)
        line_no = int(m.group(1)) - _CODE_FIRST_LINE + 1 if m else 0
        if 1 <= line_no <= code_lines:
            return f"{_clip(first)} (code line {line_no})"
    return _clip(first)


def _clip(message: str, limit: int = 400) -> str:
    return message if len(message) <= limit else message[: limit - 3] + "..."


def _evaluate(state_json: str, code: str, limits: SandboxLimits) -> tuple[str | None, str | None]:
    """One run in a fresh QuickJS context (in the worker): the result's JSON text, or an error."""
    ctx = quickjs.Context()
    ctx.set_max_stack_size(limits.stack_bytes)
    try:
        ctx.set("__state_json", state_json)
        ctx.eval("globalThis.__input = JSON.parse(globalThis.__state_json); delete globalThis.__state_json;")
    except quickjs.JSException as e:  # only if the input itself exceeds the stack
        return None, f"input State could not be loaded: {_describe(e, limits)}"
    ctx.set_memory_limit(ctx.memory()["memory_used_size"] + limits.memory_bytes)
    ctx.set_time_limit(limits.time_s)
    script = _HEADER.replace("__MAX_DEPTH__", str(limits.max_depth)) + code + _FOOTER
    try:
        out = ctx.eval(script)
    except quickjs.JSException as e:
        return None, _describe(e, limits, code.count("\n") + 1)
    finally:
        ctx.set_time_limit(-1)
    if not isinstance(out, str):  # code escaped its function body and replaced the harness
        return None, "evolve code must not escape its function body"
    return out, None


# Worker protocol, one frame each way per run. Request: lengths of (limits JSON, code, State
# JSON) as 3 x uint32, then the three UTF-8 blobs (see `_utf8`). Reply: status byte (0 result,
# 1 error) and a uint32 length, then the payload, UTF-8 with "surrogatepass" (an error message
# may quote a lone surrogate).
_REQUEST, _REPLY = struct.Struct("<III"), struct.Struct("<BI")
_TEXT = ("utf-8", "surrogatepass")
_LONE_SURROGATE = re.compile("[\ud800-\udfff]")


def _utf8(text: str) -> bytes:
    """UTF-8 of code or State JSON for QuickJS, which cannot take a lone surrogate (JSON's "\\ud800"
    decodes to one in Python): each becomes a \\uXXXX escape, which means the same inside JSON and
    JS string literals, and JS joins an escaped high + low pair into one character."""
    try:
        return text.encode()
    except UnicodeEncodeError:
        return _LONE_SURROGATE.sub(lambda m: f"\\u{ord(m.group()):04x}", text).encode()


def _read_exact(stream: BinaryIO, n: int) -> bytes | None:
    data = b""
    while len(data) < n:
        chunk = stream.read(n - len(data))
        if not chunk:
            return None
        data += chunk
    return data


def _serve(requests: BinaryIO, replies: BinaryIO) -> None:
    """The worker's loop: answer frames until the parent closes the pipe."""
    while (head := _read_exact(requests, _REQUEST.size)) is not None:
        sizes = _REQUEST.unpack(head)
        blobs = [_read_exact(requests, n) for n in sizes]
        if any(b is None for b in blobs):
            return
        limits_json, code, state_json = (b.decode() for b in blobs)
        out, error = _evaluate(state_json, code, SandboxLimits(**json.loads(limits_json)))
        payload = (out if error is None else error).encode(*_TEXT)
        replies.write(_REPLY.pack(0 if error is None else 1, len(payload)) + payload)
        replies.flush()


class _Worker:
    """The QuickJS child process of this process, started on first use and after a crash.

    Calls are serialised with a lock. A forked child (e.g. a data-loader worker) starts its own
    worker rather than sharing its parent's pipes.
    """

    # The worker's own CPU limit stops runaway code; this wall-clock guard only catches a worker
    # that stopped answering (its machine is swapping, or the engine hangs outside JS).
    GRACE_S = 60.0

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._proc: subprocess.Popen | None = None
        self._owner = 0

    def _start(self) -> subprocess.Popen:
        if self._proc is not None and self._owner == os.getpid() and self._proc.poll() is None:
            return self._proc
        self._discard()
        # The package's folder goes first on the path, so the worker imports this same code
        # even when the caller found it through a sys.path entry added at run time.
        path = os.pathsep.join(filter(None, [_PACKAGE_ROOT, os.environ.get("PYTHONPATH")]))
        self._proc = subprocess.Popen(
            [sys.executable, "-m", "rl_compaction.sandbox"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            env=dict(os.environ, PYTHONPATH=path),
        )
        self._owner = os.getpid()
        return self._proc

    def _discard(self, kill: bool = True) -> int | None:
        """Forget the current worker: stop it if this process started it (killing it, or closing
        its input so that it exits), and close this process's ends of its pipes."""
        proc, self._proc = self._proc, None
        if proc is None:
            return None
        status = None
        with contextlib.suppress(OSError):  # a dead worker's pipe refuses the final flush
            proc.stdin.close()
        if self._owner == os.getpid():
            if kill:
                proc.kill()
            try:
                status = proc.wait(timeout=None if kill else 5)
            except subprocess.TimeoutExpired:
                proc.kill()
                status = proc.wait()
        proc.stdout.close()
        return status

    def run(self, state_json: bytes, code: bytes, limits: SandboxLimits) -> tuple[str | None, str | None]:
        blobs = [json.dumps(asdict(limits)).encode(), code, state_json]
        frame = _REQUEST.pack(*map(len, blobs)) + b"".join(blobs)
        timeout_s = limits.time_s + self.GRACE_S
        with self._lock:
            try:
                proc = self._start()
                try:
                    proc.stdin.write(frame)
                    proc.stdin.flush()
                except BrokenPipeError:  # it died between runs: not this code's doing, so try once more
                    self._discard()
                    proc = self._start()
                    proc.stdin.write(frame)
                    proc.stdin.flush()
                answered = bool(select.select([proc.stdout], [], [], timeout_s)[0])
                reply = self._reply(proc) if answered else None
            except BaseException:  # e.g. Ctrl-C mid-run: its late reply must not answer the next run
                self._discard()
                raise
            if not answered:
                self._discard()
                return None, f"the sandbox process did not answer within {timeout_s:g} s and was restarted"
            if reply is None:  # end of its output: it died (let it finish exiting to read why)
                status = self._discard(kill=False)
                return None, f"the sandbox process died running this code ({_exit_reason(status)})"
        kind, payload = reply
        return (payload, None) if kind == 0 else (None, payload)

    @staticmethod
    def _reply(proc: subprocess.Popen) -> tuple[int, str] | None:
        """The worker's answer, or None if its output ended (it died)."""
        head = _read_exact(proc.stdout, _REPLY.size)
        if head is None:
            return None
        kind, size = _REPLY.unpack(head)
        payload = _read_exact(proc.stdout, size)
        return None if payload is None else (kind, payload.decode(*_TEXT))

    def close(self) -> None:
        with self._lock:
            self._discard(kill=False)

    def after_fork_in_child(self) -> None:
        self._lock = threading.Lock()  # a parent thread may have held it at the fork


def _exit_reason(status: int | None) -> str:
    if status is not None and status < 0:
        try:
            return f"signal {signal.Signals(-status).name}"
        except ValueError:
            return f"signal {-status}"
    return f"exit code {status}"


_PACKAGE_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_worker = _Worker()
atexit.register(_worker.close)
os.register_at_fork(after_in_child=_worker.after_fork_in_child)


def run_evolve(state: State, code: str, limits: SandboxLimits | None = None) -> SandboxResult:
    """Run `code` as the strict-mode body of `function evolve(state)` on a copy of `state`.

    Returns the JSON result (not yet checked against the State schema: that is the evolve
    protocol's job) or an error. Never raises for bad code or bad input; never changes `state`.
    """
    limits = limits or SandboxLimits()
    start = time.perf_counter()

    def fail(message: str) -> SandboxResult:
        return SandboxResult(None, message, time.perf_counter() - start)

    if not isinstance(code, str):
        return fail(f"code must be a string, got {type(code).__name__}")
    code_bytes = _utf8(code)
    if len(code_bytes) > limits.code_bytes:
        return fail(f"code is {len(code_bytes)} bytes, over the limit of {limits.code_bytes} bytes")
    try:
        state_bytes = _utf8(json.dumps(state, ensure_ascii=False, allow_nan=False))
    except (TypeError, ValueError) as e:
        return fail(f"input State is not JSON-compatible: {e}")
    if len(state_bytes) > limits.state_bytes:
        return fail(f"input State is over the size cap of {limits.state_bytes} bytes")

    out, error = _worker.run(state_bytes, code_bytes, limits)
    if error is not None:
        return fail(error)
    if len(out.encode(*_TEXT)) > limits.state_bytes:
        return fail(f"result State is over the size cap of {limits.state_bytes} bytes")
    try:
        result = json.loads(out)
    except json.JSONDecodeError as e:
        return fail(f"result is not JSON: {e.msg}")
    return SandboxResult(result, None, time.perf_counter() - start)


if __name__ == "__main__":  # the worker process (see _Worker)
    _serve(sys.stdin.buffer, sys.stdout.buffer)
