"""Run model-written evolve code in QuickJS, under limits, with no host access.

Each run gets a fresh QuickJS context (nothing leaks between runs), sees a JSON copy of the
State (the caller's objects are never handed over) and must synchronously return an array
of plain JSON values. The context exposes only ECMAScript built-ins: no `require`,
`process`, `fetch`, timers, file system or network exist in it.

QuickJS runs in a child process, one per calling process, kept for reuse. That buys three things
an RL harness running untrusted code needs: an engine crash fails one edit instead of killing
the trainer (the worker is restarted); the time limit, which QuickJS measures with the process
CPU clock, counts the evolve code alone rather than every busy thread of the trainer; and code
that the engine cannot interrupt (a native built-in looping over 2 ** 40 elements) is stopped
by killing the worker at the limit plus a small margin.

Why one module of ~660 lines: the worker's evaluation loop and the parent's side of it speak one
private protocol (length-prefixed frames, the limits, the exit reasons); in one file the two ends
cannot drift.
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

import psutil
import quickjs

from rl_compaction.core.state import MAX_DEPTH, State

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


# The harness script, the same text for every run. The code and the State arrive as data (JSON
# text in globals the harness reads and deletes), so no character of the code can change what
# the harness does. It captures every built-in it needs before the code runs, compiles the code
# as the body of `function evolve(state)` with an indirect eval and checks, by comparing the
# function's source text with what it was given, that the code did not close that body early.
# The result is checked to hold only plain JSON values; a getter or Proxy in it may answer the
# serialisation differently from the check, so Python decodes and validates the text again.
# An inherited toJSON is removed before serialisation. A thrown value is described from its own and
# inherited data properties and the engine's own stack getter, never by calling its code.
# Errors are caught in JS, so their description runs under the CPU limit. The script's value is
# the result's JSON (an array) or a JSON description of the failure (an object); it is never built
# by concatenation, as the binding cannot read a QuickJS rope string.
_HARNESS = """\
"use strict";
(() => {
const isArray = Array.isArray, getProto = Object.getPrototypeOf, setProto = Object.setPrototypeOf;
const create = Object.create, keys = Object.keys, hasOwn = Object.hasOwn, gopd = Object.getOwnPropertyDescriptor;
const apply = Reflect.apply, deleteProperty = Reflect.deleteProperty, isFiniteNum = Number.isFinite;
const stringify = JSON.stringify, isError = Error.isError, indirectEval = eval;
const fnToString = Function.prototype.toString, strSlice = String.prototype.slice;
const stackAccessor = gopd(Error.prototype, "stack"), stackOf = stackAccessor && stackAccessor.get;
const symbolDescription = gopd(Symbol.prototype, "description").get;
const objProto = Object.prototype, arrProto = Array.prototype, PromiseProto = Promise.prototype;
const maxDepth = __MAX_DEPTH__, maxText = __MAX_TEXT__, pad = "\\n".repeat(__LINE_OFFSET__);
const onPath = new Set();
onPath.has = Set.prototype.has; onPath.add = Set.prototype.add; onPath.delete = Set.prototype.delete;
const trail = [];
setProto(trail, null);
const input = globalThis.__input, code = globalThis.__code;
delete globalThis.__input;
delete globalThis.__code;

const rejected = create(null);
let reason = "";
const reject = (message) => { reason = "TypeError: " + message; throw rejected; };
const clipText = (s) => (s.length > maxText ? apply(strSlice, s, [0, maxText]) : s);
const where = (depth) => {
  let path = "state";
  for (let i = 1; i <= depth; i++) {
    const k = trail[i];
    path += typeof k === "number" ? "[" + k + "]" : "." + clipText(k);
  }
  return path;
};

const check = (v, depth) => {
  if (depth > maxDepth) reject("result nests deeper than " + maxDepth + " levels at " + where(depth));
  if (v === null) return;
  const t = typeof v;
  if (t === "string" || t === "boolean") return;
  if (t === "number") {
    if (!isFiniteNum(v)) reject("result holds the non-JSON number " + v + " at " + where(depth));
    return;
  }
  if (t !== "object") reject("result holds a non-JSON value (" + t + ") at " + where(depth));
  if (onPath.has(v)) reject("result has a cycle at " + where(depth));
  onPath.add(v);
  if (isArray(v)) {
    if (getProto(v) !== arrProto || hasOwn(v, "toJSON")) reject("result holds a non-plain array at " + where(depth));
    const n = v.length;
    for (let i = 0; i < n; i++) {
      trail[depth + 1] = i;
      if (!(i in v)) reject("result has an empty array slot at " + where(depth + 1));
      check(v[i], depth + 1);
    }
  } else {
    const proto = getProto(v);
    if (proto !== objProto && proto !== null) {
      reject("result holds a non-plain object at " + where(depth) + " (only arrays and plain objects)");
    }
    const ks = keys(v);
    for (let j = 0; j < ks.length; j++) {
      trail[depth + 1] = ks[j];
      check(v[ks[j]], depth + 1);
    }
  }
  onPath.delete(v);
};

// JSON.stringify calls an inherited toJSON; the result's arrays and objects inherit only from
// these two prototypes (checked above), so removing it there keeps the text the data.
const noToJSON = () => {
  if (getProto(arrProto) !== objProto) reject("Array.prototype's prototype was replaced; the result cannot be sent");
  if ((hasOwn(objProto, "toJSON") && !deleteProperty(objProto, "toJSON")) ||
      (hasOwn(arrProto, "toJSON") && !deleteProperty(arrProto, "toJSON"))) {
    reject("a toJSON that cannot be removed was set on Object.prototype or Array.prototype");
  }
};

const text = (o, name) => {
  for (let p = o, n = 0; p !== null && n < 64; p = getProto(p), n++) {
    const d = gopd(p, name);
    if (d !== undefined) return hasOwn(d, "value") && typeof d.value === "string" ? clipText(d.value) : undefined;
  }
  return undefined;
};

const describe = (e) => {
  const info = create(null);
  const t = typeof e;
  if (e === rejected) {
    info.kind = "reject";
    info.message = reason;
  } else if (e === null) {
    info.kind = "null";
  } else if (t === "object" || t === "function") {
    const error = isError(e);
    info.kind = error ? "error" : "object";
    info.name = text(e, "name");
    info.message = text(e, "message");
    const stack = error && stackOf ? apply(stackOf, e, []) : undefined;
    if (typeof stack === "string") info.stack = clipText(stack);
  } else if (t === "symbol") {
    info.kind = "value";
    info.text = "Symbol(" + clipText(apply(symbolDescription, e, []) ?? "") + ")";
  } else if (t === "string") {
    info.kind = "value";
    info.text = stringify(clipText(e));
  } else if (t === "number" || t === "bigint" || t === "boolean" || t === "undefined") {
    info.kind = "value";
    info.text = "" + e;
  } else {
    info.kind = "uninitialized";
  }
  return info;
};

try {
  const source = 'function evolve(state) {"use strict";\\n' + code + "\\n}";
  const evolve = indirectEval(pad + "(" + source + ")");
  if (typeof evolve !== "function" || apply(fnToString, evolve, []) !== source) {
    reject("evolve code must stay inside its function body (it closes the body early)");
  }
  const result = evolve(input);
  if (result !== null && typeof result === "object" && (getProto(result) === PromiseProto ||
      typeof result.then === "function")) {
    reject("evolve must return the State synchronously; it returned a Promise");
  }
  if (!isArray(result)) {
    reject("evolve must return a State array, got " + (result === null ? "null" : typeof result));
  }
  check(result, 0);
  noToJSON();
  const json = stringify(result);
  if (typeof json !== "string" || json[0] !== "[") {
    reject("the result changed while it was serialised (a getter or Proxy answered differently)");
  }
  return json;
} catch (e) {
  let info;
  try {
    info = describe(e);
  } catch (inner) {
    info = create(null);
    info.kind = "opaque";
  }
  return stringify(info);
}
})()
"""
# Evaluated in every fresh context before the harness: evolve code is deterministic, so that a
# recorded episode can be re-derived by replaying its code. Math.random is a seeded generator
# (mulberry32, the same sequence in every run), and the clock is fixed: Date.now(), new Date() and
# Date() read FIXED_CLOCK_MS, performance.now() reads 0. Dates built from arguments are unchanged.
# The time zone is UTC (the worker is started with TZ=UTC), so local fields equal the UTC ones.
FIXED_CLOCK_MS = 1_767_225_600_000  # 2026-01-01T00:00:00Z
_DETERMINISM = """\
"use strict";
(() => {
const RealDate = Date, construct = Reflect.construct, define = Object.defineProperty, FIXED = __FIXED__;
let seed = 0;
const random = () => {
  seed = (seed + 0x6D2B79F5) | 0;
  let t = Math.imul(seed ^ (seed >>> 15), 1 | seed);
  t = (t + Math.imul(t ^ (t >>> 7), 61 | t)) ^ t;
  return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
};
const FixedDate = function Date(...args) {
  if (new.target === undefined) return new RealDate(FIXED).toString();
  return construct(RealDate, args.length ? args : [FIXED], new.target);
};
FixedDate.prototype = RealDate.prototype;
FixedDate.now = () => FIXED;
FixedDate.parse = RealDate.parse;
FixedDate.UTC = RealDate.UTC;
const hidden = { writable: true, configurable: true, enumerable: false };
define(RealDate.prototype, "constructor", { ...hidden, value: FixedDate });
define(globalThis, "Date", { ...hidden, value: FixedDate });
define(Math, "random", { ...hidden, value: random });
const clock = Object.create(null);
define(clock, "now", { value: () => 0, enumerable: true });
define(clock, "timeOrigin", { value: FIXED, enumerable: true });
define(globalThis, "performance", { writable: true, configurable: true, enumerable: true, value: clock });
})();
0
""".replace("__FIXED__", str(FIXED_CLOCK_MS))

# Lines of padding before the compiled code, so that a stack frame in the code (line > offset)
# cannot be mistaken for one in the harness.
_LINE_OFFSET = 10_000
_MAX_TEXT = 1000  # characters kept of any text the code controls (message, name, stack)
_LOCATION = re.compile(r"<input>:(\d+)")
_LONE_SURROGATE = re.compile("[\ud800-\udfff]")


def _clip(message: str, limit: int = 400) -> str:
    """At most `limit` characters of valid text: a message must fit a receipt and encode as UTF-8."""
    message = _LONE_SURROGATE.sub("\ufffd", message)
    return message if len(message) <= limit else message[: limit - 3] + "..."


def _limit_message(kind: str, limits: SandboxLimits) -> str:
    if kind == "time":
        return f"time limit of {limits.time_s * 1000:g} ms exceeded"
    if kind == "memory":
        return f"memory limit of {limits.memory_bytes / MiB:g} MiB exceeded"
    return f"stack limit of {limits.stack_bytes // KiB} KiB exceeded (too deep recursion)"


def _code_line(stack: str | None, code_lines: int) -> int:
    """The code line of the first stack frame in the code, or 0."""
    for m in _LOCATION.finditer(stack or ""):
        line_no = int(m.group(1)) - _LINE_OFFSET - 1
        if 1 <= line_no <= code_lines:
            return line_no
    return 0


def _describe(info: dict, limits: SandboxLimits, code_lines: int) -> str:
    """One line the model can act on, from the harness's description of a failure."""
    kind, name, message = info.get("kind"), info.get("name"), info.get("message")
    if kind == "reject":
        return _clip(message)
    if kind == "null":  # what QuickJS throws when it runs out of memory building the error itself
        return f"{_limit_message('memory', limits)}, or the code threw null (QuickJS reports both as null)"
    if kind == "uninitialized":
        return _limit_message("memory", limits)
    if kind == "value":
        return _clip(f"threw a non-Error value: {info['text']}")
    if kind == "opaque":
        return "threw a value that could not be described"
    if kind == "object":
        return _clip(f"threw a non-Error object: {message}" if message else "threw a non-Error object")
    if (name, message) == ("InternalError", "out of memory"):
        return _limit_message("memory", limits)
    if (name, message) == ("RangeError", "Maximum call stack size exceeded"):
        return _limit_message("stack", limits)
    head = name or "Error"
    text = _clip(f"{head}: {message}" if message else head)
    line_no = _code_line(info.get("stack"), code_lines)
    return f"{text} (code line {line_no})" if line_no else text


def _describe_uncaught(exc: Exception, limits: SandboxLimits) -> str:
    """An error that escaped the harness: the engine stopped the run (limits) or failed itself."""
    text = str(exc)
    first = text.splitlines()[0] if text else type(exc).__name__
    if isinstance(exc, quickjs.StackOverflow) or "stack overflow" in first or "call stack size" in first:
        return _limit_message("stack", limits)
    if first.startswith("InternalError: interrupted"):
        return _limit_message("time", limits)
    if "out of memory" in first or first in ("null", "[uninitialized]"):
        return _limit_message("memory", limits)
    return _clip(f"the sandbox failed: {first}")


def _evaluate(state_json: str, code_json: str, limits: SandboxLimits) -> tuple[str | None, str | None]:
    """One run in a fresh QuickJS context (in the worker): the result's JSON text, or an error.
    `code_json` is the code as a JSON string literal, so that it reaches QuickJS exactly."""
    ctx = quickjs.Context()
    ctx.set_max_stack_size(limits.stack_bytes)
    try:
        ctx.set("__input", state_json)
        ctx.set("__code", code_json)
        ctx.eval(_DETERMINISM)
        ctx.eval("globalThis.__input = JSON.parse(__input); globalThis.__code = JSON.parse(__code); 0")
    except quickjs.JSException as e:  # only if the input itself exceeds the stack
        return None, f"input State could not be loaded: {_describe_uncaught(e, limits)}"
    ctx.set_memory_limit(ctx.memory()["memory_used_size"] + limits.memory_bytes)
    ctx.set_time_limit(limits.time_s)
    script = (
        _HARNESS.replace("__MAX_DEPTH__", str(limits.max_depth))
        .replace("__MAX_TEXT__", str(_MAX_TEXT))
        .replace("__LINE_OFFSET__", str(_LINE_OFFSET))
    )
    try:
        out = ctx.eval(script)
    except quickjs.JSException as e:
        return None, _describe_uncaught(e, limits)
    finally:
        ctx.set_time_limit(-1)
    if out[:1] == "[":
        return out, None
    return None, _describe(json.loads(out), limits, json.loads(code_json).count("\n") + 1)


# Worker protocol, one frame each way per run. Request: lengths of (limits JSON, code as a JSON
# string, State JSON) as 3 x uint32, then the three UTF-8 blobs (see `_utf8`). Reply: status byte
# (0 result, 1 error) and a uint32 length, then the payload in UTF-8.
_REQUEST, _REPLY = struct.Struct("<III"), struct.Struct("<BI")
_TEXT = ("utf-8", "surrogatepass")


def _utf8(json_text: str) -> bytes:
    """UTF-8 of JSON text for QuickJS, which cannot take a lone surrogate (JSON's "\\ud800" decodes
    to one in Python): each becomes a \\uXXXX escape. JSON text holds such a character only inside
    a string, after complete escapes, so the escape means exactly that character."""
    try:
        return json_text.encode()
    except UnicodeEncodeError:
        return _LONE_SURROGATE.sub(lambda m: f"\\u{ord(m.group()):04x}", json_text).encode()


def _read_exact(stream: BinaryIO, n: int) -> bytes | None:
    """`n` bytes from `stream` (which may return fewer per read), or None at its end."""
    data = bytearray()
    while len(data) < n:
        chunk = stream.read(n - len(data))
        if not chunk:
            return None
        data += chunk
    return bytes(data)


def _write_all(stream: BinaryIO, data: bytes) -> None:
    """Write all of `data` to an unbuffered stream, which may take only part of it per call."""
    view = memoryview(data)
    while view:
        view = view[stream.write(view) :]


def _serve(requests: BinaryIO, replies: BinaryIO) -> None:
    """The worker's loop: answer frames until the parent closes the pipe."""
    while (head := _read_exact(requests, _REQUEST.size)) is not None:
        sizes = _REQUEST.unpack(head)
        blobs = [_read_exact(requests, n) for n in sizes]
        if any(b is None for b in blobs):
            return
        limits_json, code_json, state_json = (b.decode() for b in blobs)
        try:
            out, error = _evaluate(state_json, code_json, SandboxLimits(**json.loads(limits_json)))
        except Exception as e:  # a bug here must fail this edit, not kill the worker with a traceback
            out, error = None, _clip(f"the sandbox failed: {type(e).__name__}: {e}")
        payload = (out if error is None else error).encode(*_TEXT)
        replies.write(_REPLY.pack(0 if error is None else 1, len(payload)) + payload)
        replies.flush()


_READY = b"\x00"  # the worker's first byte: imports done, waiting for requests


class _StartFailed(Exception):
    """The worker process exited or hung before it was ready."""


class _Worker:
    """The QuickJS child process of this process, started on first use and after a crash.

    Calls are serialised with a lock. A forked child (e.g. a data-loader worker) starts its own
    worker rather than sharing its parent's pipes.
    """

    # QuickJS stops runaway JS at the CPU limit itself, but not a native built-in that loops
    # without checking it (`[].join.call({length: 2 ** 40})`) nor a user toString that the binding
    # calls after the limit came off. So the parent also watches the worker's CPU time and kills it
    # at the limit plus this margin, which covers the worker's own work on the run (loading the
    # input State, encoding the reply).
    KILL_MARGIN_S = 0.25
    POLL_S = 0.02
    # Where the worker's CPU time cannot be read (psutil cannot say), its wall time stands in, this much looser.
    WALL_FACTOR = 4.0
    # This wall-clock guard only catches a worker that stopped answering without using CPU (its
    # machine is swapping, or the engine waits on something).
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
        # Unbuffered pipes (raw file objects, no lock of their own): a process forked while another
        # thread was writing a request inherits a buffered writer's lock held, and its first close
        # of the inherited pipe would then block forever. The worker runs in UTC: QuickJS reads the
        # time zone for `Date()`, `getHours()` and dates from local fields, and evolve results must
        # not depend on the host's.
        self._proc = subprocess.Popen(
            [sys.executable, "-m", "rl_compaction.core.sandbox"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            bufsize=0,
            env=dict(os.environ, PYTHONPATH=path, TZ="UTC"),
        )
        self._owner = os.getpid()
        # It says it is ready once its imports are done, so that their CPU time is not counted
        # against the first run's limit.
        ready = select.select([self._proc.stdout], [], [], self.GRACE_S)[0] and _read_exact(self._proc.stdout, 1)
        if ready != _READY:
            status = self._discard()
            raise _StartFailed(f"the sandbox process could not start ({_exit_reason(status)})")
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

    def run(self, state_json: bytes, code_json: bytes, limits: SandboxLimits) -> tuple[str | None, str | None]:
        blobs = [json.dumps(asdict(limits)).encode(), code_json, state_json]
        frame = _REQUEST.pack(*map(len, blobs)) + b"".join(blobs)
        with self._lock:
            try:
                proc, cpu_start = self._send(frame)
                stopped = self._wait(proc, limits, cpu_start)
                reply = None if stopped else self._reply(proc)
            except _StartFailed as e:
                return None, str(e)
            except BaseException:  # e.g. Ctrl-C mid-run: its late reply must not answer the next run
                self._discard()
                raise
            if stopped:
                self._discard()
                return None, stopped
            if reply is None:  # end of its output: it died (let it finish exiting to read why)
                status = self._discard(kill=False)
                return None, f"the sandbox process died running this code ({_exit_reason(status)})"
        kind, payload = reply
        return (payload, None) if kind == 0 else (None, payload)

    def _send(self, frame: bytes) -> tuple[subprocess.Popen, float | None]:
        """Hand the request to a ready worker; returns it and its CPU time just before."""
        proc = self._start()
        try:
            cpu_start = _cpu_seconds(proc.pid)
            _write_all(proc.stdin, frame)
        except BrokenPipeError:  # it died between runs: not this code's doing, so try once more
            self._discard()
            proc = self._start()
            cpu_start = _cpu_seconds(proc.pid)
            _write_all(proc.stdin, frame)
        return proc, cpu_start

    def _wait(self, proc: subprocess.Popen, limits: SandboxLimits, cpu_start: float | None) -> str | None:
        """Wait for the worker's reply: None once it is ready to read, else why the run must stop."""
        budget = limits.time_s + self.KILL_MARGIN_S
        if cpu_start is None:
            budget *= self.WALL_FACTOR
        start = time.monotonic()
        timeout = budget  # a single-threaded worker's CPU time never outruns the wall clock
        while not select.select([proc.stdout], [], [], timeout)[0]:
            elapsed = time.monotonic() - start
            cpu = None if cpu_start is None else _cpu_seconds(proc.pid)
            used = elapsed if cpu is None else cpu - cpu_start
            if used > budget:
                return _limit_message("time", limits)
            if elapsed > limits.time_s + self.GRACE_S:
                return f"the sandbox process did not answer within {limits.time_s + self.GRACE_S:g} s and was restarted"
            timeout = self.POLL_S
        return None

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


def _cpu_seconds(pid: int) -> float | None:
    """CPU time (user + system) a process has used, as psutil reads it (Linux, macOS, Windows, BSD);
    None where it cannot (the process is gone, or the platform does not say)."""
    try:
        times = psutil.Process(pid).cpu_times()
    except (psutil.Error, OSError, NotImplementedError):
        return None
    return times.user + times.system


def _exit_reason(status: int | None) -> str:
    if status is not None and status < 0:
        try:
            return f"signal {signal.Signals(-status).name}"
        except ValueError:
            return f"signal {-status}"
    return f"exit code {status}"


#: the folder that holds the `rl_compaction` package (this file is rl_compaction/core/sandbox.py)
_PACKAGE_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
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
    code_size = len(code.encode(*_TEXT))
    if code_size > limits.code_bytes:
        return fail(f"code is {code_size} bytes, over the limit of {limits.code_bytes} bytes")
    try:
        state_bytes = _utf8(json.dumps(state, ensure_ascii=False, allow_nan=False))
    except (TypeError, ValueError, RecursionError) as e:
        return fail(_clip(f"input State is not JSON-compatible: {e}"))
    if len(state_bytes) > limits.state_bytes:
        return fail(f"input State is over the size cap of {limits.state_bytes} bytes")

    out, error = _worker.run(state_bytes, _utf8(json.dumps(code, ensure_ascii=False)), limits)
    if error is not None:
        return fail(error)
    if len(out.encode(*_TEXT)) > limits.state_bytes:
        return fail(f"result State is over the size cap of {limits.state_bytes} bytes")
    try:
        result = json.loads(out)
    except (ValueError, RecursionError) as e:  # the harness sends checked JSON; never trust that alone
        return fail(_clip(f"result could not be decoded: {e}"))
    if not isinstance(result, list):
        return fail(f"result is not a State array but {type(result).__name__}")
    return SandboxResult(result, None, time.perf_counter() - start)


if __name__ == "__main__":  # the worker process (see _Worker)
    sys.stdout.buffer.write(_READY)
    sys.stdout.buffer.flush()
    _serve(sys.stdin.buffer, sys.stdout.buffer)
