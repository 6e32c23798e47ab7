"""The context-bound codebase oracle and its targeted compaction.

`analyse(state)` rebuilds everything the oracle knows from the State alone: the newest complete
test log, the failing functions, where each is defined (search output), its newest changelog spec
and the file lines read so far (read_file pages, with later edit_file calls replayed on them).
`act` takes the first missing step; `evolve_code` keeps exactly the items and lines that analysis
uses, as a few lines of JavaScript: the call ids to keep, each with a regex for the lines of its
output worth keeping (an output's first line, its header, always stays).

A read_file output cut by an edit keeps its header, so the oracle knows which lines it covered: a
covered line that is gone was dropped on purpose, and the walks from a function's definition to
its spec and result lines step over it (a few lines at most: a doc comment or a function body).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

from rl_compaction.core.state import State, text_of
from rl_compaction.harness.tasks import Oracle

_PAGE_LINES = re.compile(r"read_file shows (\d+) lines per page")
_SUMMARY = re.compile(r"^== summary: (\d+) passed, (\d+) failed", re.M)
_FAILED = re.compile(r"^== failed: (.*)$", re.M)
_SEARCH_HEAD = re.compile(r'^(\d+) matches for "')
_HIT = re.compile(r"^(\S+?):(\d+): (.*)$")
_READ_HEAD = re.compile(r"^(\S+) \(page (\d+) of (\d+), lines (\d+)-(\d+) of (\d+)\)$")
_NUMBERED = re.compile(r"^\s*(\d+) \| ?(.*)$")
_DOC_SPEC = re.compile(r"^\s*\* spec: result = (.*)$")
_CODE = re.compile(r"^\s*const result = (.*);\s*$")
#: the farthest a spec line sits above its definition, and a result line below it (generous: a
#: doc comment and a body are under 12 lines, two functions are over 20 lines apart)
_DOC_SPAN = _BODY_SPAN = 12
#: give up (submit the repo as it is) once the State shows this many test runs: compaction is
#: destroying evidence faster than the oracle can use it.
MAX_TEST_RUNS = 40


@dataclass
class Call:
    """A function call found in the State, with its output text if that is still there."""

    index: int  # position of the call item in the State
    call_id: str
    name: str
    args: dict[str, Any]
    output: str | None  # None when the output item is gone


@dataclass
class Line:
    """A file line as the State shows it (edits replayed) and the read_file call it came from."""

    text: str
    call_id: str


@dataclass
class Target:
    """What the State says about one failing function."""

    name: str
    search_id: str | None = None
    path: str | None = None
    def_line: int | None = None
    changelog_spec: str | None = None
    lines: dict[int, Line] = field(default_factory=dict)  # the lines that gave the spec and the code
    missing: int | None = None  # the next needed line that is not in context
    code_line: int | None = None
    code: str | None = None
    spec: str | None = None

    @property
    def handled(self) -> bool:
        return self.code is not None and self.code == self.spec


@dataclass
class Analysis:
    """Everything the oracle can establish from one State."""

    statement: int | None
    page_lines: int | None
    log: Call | None  # the newest complete test log
    failing: list[str] | None
    stalled: bool  # the two newest logs fail the same tests with no edit between them
    edited_since_log: bool  # an edit_file call came after the newest log: re-run before going on
    targets: list[Target]
    edits: list[Call]


def calls_of(state: State) -> list[Call]:
    outputs = {it["call_id"]: text_of(it["output"]) for it in state if it.get("type") == "function_call_output"}
    found = []
    for i, it in enumerate(state):
        if it.get("type") != "function_call":
            continue
        try:
            args = json.loads(it.get("arguments", ""))
        except json.JSONDecodeError:
            continue
        if isinstance(args, dict):
            found.append(Call(i, it["call_id"], it.get("name", ""), args, outputs.get(it["call_id"])))
    return found


def parse_log(text: str | None) -> list[str] | None:
    """Failing function names of a complete test log, in order; None if `text` is not one."""
    if text is None or not _SUMMARY.search(text):
        return None
    m = _FAILED.search(text)
    if m is None:
        return None
    if m.group(1).strip() == "none":
        return []
    names = [n.strip().rsplit(" #", 1)[0] for n in m.group(1).split(", ")]
    return list(dict.fromkeys(n for n in names if n))


def _page_lines(state: State, calls: list[Call]) -> tuple[int | None, int | None]:
    for i, it in enumerate(state):
        if it.get("type", "message") == "message" and it.get("role") == "user":
            m = _PAGE_LINES.search(text_of(it.get("content", "")))
            if m:
                return i, int(m.group(1))
    for c in calls:
        m = _READ_HEAD.match((c.output or "").split("\n", 1)[0]) if c.name == "read_file" else None
        if m and int(m.group(2)) < int(m.group(3)):
            return None, int(m.group(5)) - int(m.group(4)) + 1
    return None, None


def file_view(path: str, calls: list[Call]) -> tuple[dict[int, Line], set[int]]:
    """Lines of `path` as last shown by read_file, with later edit_file calls replayed on them, and
    every line number a read_file output covered (its header says which, even if lines were cut)."""
    view: dict[int, Line] = {}
    covered: set[int] = set()
    for c in calls:
        if c.name == "read_file" and c.output and c.args.get("path") == path:
            rows = c.output.split("\n")
            m = _READ_HEAD.match(rows[0])
            if not m or m.group(1) != path:
                continue
            covered.update(range(int(m.group(4)), int(m.group(5)) + 1))
            for row in rows[1:]:
                n = _NUMBERED.match(row)
                if n:
                    view[int(n.group(1))] = Line(n.group(2), c.call_id)
        elif c.name == "edit_file" and c.args.get("path") == path:
            line, old, new = c.args.get("line"), c.args.get("old"), c.args.get("new")
            seen = view.get(line) if isinstance(line, int) else None
            ok = c.output is None or not c.output.lstrip().lower().startswith(("{", "error"))
            if seen and ok and isinstance(old, str) and isinstance(new, str) and old and seen.text.count(old) == 1:
                seen.text = seen.text.replace(old, new)
    return view, covered


def _changelog_spec(name: str, text: str) -> tuple[tuple[int, ...], str] | None:
    m = re.search(r"\[v(\d+)\.(\d+)\.(\d+)\] " + re.escape(name) + r": spec changed to `result = (.*)`", text)
    return ((int(m.group(1)), int(m.group(2)), int(m.group(3))), m.group(4)) if m else None


def _locate(t: Target, calls: list[Call]) -> None:
    """Fill in definition and changelog spec from the newest search for the function's name."""
    for c in reversed(calls):
        if c.name != "search" or c.args.get("pattern") != t.name or not c.output:
            continue
        rows = c.output.split("\n")
        if not _SEARCH_HEAD.match(rows[0]):
            continue
        t.search_id = c.call_id
        best: tuple[tuple[int, ...], str] | None = None
        for row in rows[1:]:
            hit = _HIT.match(row)
            if not hit:
                continue
            path, line, text = hit.group(1), int(hit.group(2)), hit.group(3)
            if path.startswith("src/") and text.startswith(f"function {t.name}("):
                t.path, t.def_line = path, line
            elif path == "CHANGELOG.md":
                spec = _changelog_spec(t.name, text)
                if spec and (best is None or spec[0] > best[0]):
                    best = spec
        t.changelog_spec = best[1] if best else None
        return


def _inspect(t: Target, calls: list[Call]) -> None:
    """Read the function's spec and result line from the file view: up from the definition to the
    doc comment's `spec:` line (unless CHANGELOG.md already gave the spec), down to `const result`.
    A line no read_file output covered is missing (read its page); a covered line that was cut is
    stepped over; a walk that finds nothing within its span asks for the page again."""
    assert t.path is not None and t.def_line is not None
    view, covered = file_view(t.path, calls)

    def walk(start: int, step: int, span: int, pattern: re.Pattern[str], stop: str) -> tuple[int, str] | None:
        for n in range(start, start + step * span, step):
            if n < 1 or (n in view and view[n].text.rstrip() == stop):
                return None
            if n not in view:
                if n in covered:
                    continue
                t.missing = n
                return None
            if m := pattern.match(view[n].text):
                t.lines[n] = view[n]
                return n, m.group(1)
        t.missing = start  # the page was cut too much to tell: read it again
        return None

    if t.changelog_spec is None:
        found = walk(t.def_line - 1, -1, _DOC_SPAN, _DOC_SPEC, "/**")
        if found is None:
            return
        t.spec = found[1]
    found = walk(t.def_line + 1, 1, _BODY_SPAN, _CODE, "}")
    if found is None:
        return
    t.code_line, t.code = found
    if t.changelog_spec is not None:
        t.spec = t.changelog_spec


def analyse(state: State) -> Analysis:
    calls = calls_of(state)
    statement, page_lines = _page_lines(state, calls)
    logs = [c for c in calls if c.name == "run_tests" and parse_log(c.output) is not None]
    edits = [c for c in calls if c.name == "edit_file"]
    log = logs[-1] if logs else None
    failing = parse_log(log.output) if log else None
    stalled = False
    if len(logs) >= 2:
        prev = logs[-2]
        between = any(prev.index < e.index < log.index for e in edits)  # type: ignore[union-attr]
        stalled = not between and parse_log(prev.output) == failing
    targets = []
    for name in failing or []:
        t = Target(name)
        _locate(t, calls)
        if t.path is not None:
            _inspect(t, calls)
        targets.append(t)
    edited = log is not None and any(e.index > log.index for e in edits)
    return Analysis(statement, page_lines, log, failing, stalled, edited, targets, edits)


class CodebaseOracle(Oracle):
    """Run tests, locate the first failing function, read it, align its result line with the newest
    spec, re-run tests after each edit, submit when none fail. Keeps no facts between calls, only a
    call counter."""

    def _call(self, state: State, name: str, args: dict[str, Any]) -> list[dict[str, Any]]:
        return [self.function_call(state, name, args)]

    def act(self, state: State) -> list[dict[str, Any]]:
        a = analyse(state)
        runs = sum(1 for it in state if it.get("type") == "function_call" and it.get("name") == "run_tests")
        if runs >= MAX_TEST_RUNS:
            return self._call(state, "submit", {"answer": "done"})
        if a.failing is None or a.edited_since_log:
            return self._call(state, "run_tests", {})
        if not a.failing or a.stalled:
            return self._call(state, "submit", {"answer": "done"})
        for t in a.targets:
            if t.search_id is None:
                return self._call(state, "search", {"pattern": t.name})
            if t.path is None:
                continue  # not defined in src/: nothing this oracle can fix
            if t.missing is not None:
                page = (t.missing - 1) // a.page_lines + 1 if a.page_lines else 1
                return self._call(state, "read_file", {"path": t.path, "page": page})
            if t.code is None or t.spec is None or t.handled:
                continue
            return self._call(state, "edit_file", {"path": t.path, "line": t.code_line, "old": t.code, "new": t.spec})
        return self._call(state, "run_tests", {})

    def evolve_code(self, state: State) -> str:
        """Keep the task statement, the newest test log cut to its `==` summary lines, each failing
        function's search hits for its definition and changelog specs, the read_file lines that gave
        its spec and result line, and the edits that still matter (after the log, or on a kept line);
        drop everything else, the previous edits and the compaction request included."""
        a = analyse(state)
        keep: dict[str, str | None] = {}  # call id -> regex of the output lines to keep (None: all)
        if a.log is not None:
            keep[a.log.call_id] = "^=="
        kept_lines = {(t.path, n) for t in a.targets for n in t.lines}
        for e in a.edits:
            if (a.log is not None and e.index > a.log.index) or (e.args.get("path"), e.args.get("line")) in kept_lines:
                keep[e.call_id] = None
        numbers: dict[str, set[int]] = {}
        for t in a.targets:
            if t.search_id is not None:
                keep[t.search_id] = "function |spec changed"
            for num, line in t.lines.items():
                numbers.setdefault(line.call_id, set()).add(num)
        for call_id, nums in numbers.items():
            keep[call_id] = f"^ *({'|'.join(map(str, sorted(nums)))}) "
        text_outputs = {
            it["call_id"]
            for it in state
            if it.get("type") == "function_call_output" and isinstance(it.get("output"), str)
        }
        order = {it.get("call_id"): i for i, it in enumerate(state)}
        entries = ",".join(
            f"{_js_key(cid)}:{f'/{rx}/' if rx and cid in text_outputs else 0}"
            for cid, rx in sorted(keep.items(), key=lambda kv: order.get(kv[0], 0))
        )
        first = "" if a.statement is None else ("!i||" if a.statement == 0 else f"i=={a.statement}||")
        return (
            f"const keep={{{entries}}};\n"
            f"return state.filter((x,i)=>{first}i==state.length-1||x.call_id in keep).map(x=>{{"
            "const re=keep[x.call_id];"
            "return re&&x.output?{...x,output:x.output.split('\\n').filter((l,j)=>!j||re.test(l)).join('\\n')}:x})"
        )


def _js_key(call_id: str) -> str:
    """A call id as an object key: bare when it is an identifier, else a JSON string."""
    return call_id if re.fullmatch(r"[A-Za-z_$][\w$]*", call_id) else json.dumps(call_id)
