"""The codebase task: fix the buggy functions of an in-memory JavaScript repository.

Files live only in the Task (no host file system). Tools: list_files, read_file (paged),
search (literal substring), edit_file (one-line replacement, src/ only) and run_tests (visible
tests in QuickJS, verbose log). The score is computed from hidden tests on the edited repo.
"""

from __future__ import annotations

import json
import re
from typing import Any

from rl_compaction.core.state import State
from rl_compaction.harness.tasks import Difficulty, Oracle, Task, ToolError, check_arguments, function_tool

from .generator import Repo
from .oracle import CodebaseOracle
from .runner import render_log, run_suites

MAX_SEARCH_HITS = 100
MAX_PATTERN = 200
MAX_LINE = 400

_TEST_LINE = re.compile(r'^test\("([^"]+)", \(\) => (.*), (.*)\);$')

INSTRUCTIONS = """You maintain a small JavaScript repository of pure helper functions (it lives in memory; use \
the tools to inspect and change it). Some functions in src/ are buggy and the visible test suite fails.

How the code is specified:
- Each function's doc comment has a line `spec: result = <expression>`; the body computes \
`const result = <expression>;` and returns it.
- CHANGELOG.md may revise a function's spec ("<name>: spec changed to `result = ...`"). The newest \
changelog entry for a function supersedes its doc comment and any earlier entry.
- Tests follow the newest spec. Tests in test/ are read-only; only files under src/ can be edited.

Tools: list_files, read_file(path, page), search(pattern) (literal, case-sensitive substring; shows \
path:line: text), edit_file(path, line, old, new) (replaces the exact text `old`, which must occur once on \
that line, by `new`; a single line, so line numbers never shift) and run_tests (runs the visible tests).

Scoring: hidden tests with more cases per function run on your final repository: the score is the \
fraction of hidden tests passing for the buggy functions, times the fraction still passing for all the \
other functions (so do not break working code). When you are done, call submit with answer "done"."""


def _tool_defs(page_lines: int) -> list[dict[str, Any]]:
    return [
        function_tool("list_files", "List the repository's files with their line counts.", {}, []),
        function_tool(
            "read_file",
            f"Read one page ({page_lines} lines, numbered) of a file.",
            {
                "path": {
                    "type": "string",
                    "description": "File path as shown by list_files, e.g. src/x_math.js.",
                },
                "page": {"type": "integer", "description": "Page number, starting at 1."},
            },
            ["path", "page"],
        ),
        function_tool(
            "search",
            "Find every line containing a literal, case-sensitive substring (path:line: text).",
            {"pattern": {"type": "string", "description": "The exact text to look for."}},
            ["pattern"],
        ),
        function_tool(
            "edit_file",
            "Replace the exact text `old` (occurring once on that line) by `new` on one line of a "
            "src/ file. `new` must be a single line.",
            {
                "path": {"type": "string", "description": "A file under src/."},
                "line": {"type": "integer", "description": "1-based line number."},
                "old": {"type": "string", "description": "Exact text currently on that line."},
                "new": {"type": "string", "description": "Replacement text (no newlines)."},
            },
            ["path", "line", "old", "new"],
        ),
        function_tool("run_tests", "Run the visible test suite in QuickJS and return its verbose log.", {}, []),
    ]


class CodebaseTask(Task):
    """One repository instance; the files are mutated in place by edit_file."""

    family = "codebase"

    def __init__(self, repo: Repo, *, seed: int, split: str, difficulty: Difficulty, noise_seed: int) -> None:
        self.repo, self.seed, self.split, self.difficulty = repo, seed, split, difficulty
        self.files: dict[str, list[str]] = {p: list(lines) for p, lines in repo.files.items()}
        self.noise_seed = noise_seed
        self.test_runs = 0
        self.instructions = INSTRUCTIONS
        self._tools = _tool_defs(repo.page_lines)
        self._test_lines = {p: self._index_tests(lines) for p, lines in repo.files.items() if p.startswith("test/")}

    @staticmethod
    def _index_tests(lines: list[str]) -> dict[str, tuple[int, str]]:
        found = {}
        for i, line in enumerate(lines, 1):
            m = _TEST_LINE.match(line)
            if m:
                found[m.group(1)] = (i, m.group(2))
        return found

    # ---- contract

    def tools(self) -> list[dict[str, Any]]:
        return [dict(t) for t in self._tools]

    def initial_state(self) -> State:
        src = sorted(p for p in self.files if p.startswith("src/"))
        text = (
            f"Repository `{self.repo.name}`: {len(self.files)} files ({len(src)} modules under src/, their "
            "visible tests under test/, CHANGELOG.md and README.md). The visible test suite fails: some "
            "functions in src/ do not meet their specification (the newest spec, see CHANGELOG.md). "
            "Find and fix them with edit_file; hidden tests with more cases per function decide your score. "
            f"read_file shows {self.repo.page_lines} lines per page. When you are done, call submit with "
            'answer "done".'
        )
        return [{"type": "message", "role": "user", "content": text}]

    def call_tool(self, name: str, arguments: dict[str, Any]) -> str:
        handlers = {
            "list_files": (self._list_files, {}),
            "read_file": (self._read_file, {"path": str, "page": int}),
            "search": (self._search, {"pattern": str}),
            "edit_file": (self._edit_file, {"path": str, "line": int, "old": str, "new": str}),
            "run_tests": (self._run_tests, {}),
        }
        if name not in handlers:
            raise ToolError(f"unknown tool {name!r}; available: {', '.join(handlers)}")
        fn, schema = handlers[name]
        return fn(**check_arguments(name, arguments, schema))

    def score(self, answer: str) -> float:
        """Hidden-test score of the current files; the answer text itself is not graded."""
        if not isinstance(answer, str):
            return 0.0
        run = run_suites(self._sources(), {"hidden": self.repo.hidden_tests})
        passed = {r.name for r in run.results["hidden"] if r.passed}
        buggy = {f.name for f in self.repo.functions if f.buggy}
        bug_total = bug_ok = other_total = other_ok = 0
        for f in self.repo.functions:
            for i in range(len(f.hidden)):
                ok = f"{f.name} #{i + 1}" in passed
                if f.name in buggy:
                    bug_total, bug_ok = bug_total + 1, bug_ok + ok
                else:
                    other_total, other_ok = other_total + 1, other_ok + ok
        fixed = bug_ok / bug_total if bug_total else 1.0
        kept = other_ok / other_total if other_total else 1.0
        return fixed * kept

    def oracle(self) -> Oracle:
        return CodebaseOracle()

    # ---- tools

    def _sources(self) -> dict[str, str]:
        return {p: "\n".join(lines) for p, lines in sorted(self.files.items()) if p.startswith("src/")}

    def _file(self, path: str) -> list[str]:
        if path not in self.files:
            raise ToolError(f"no such file {path!r}; call list_files to see the {len(self.files)} files")
        return self.files[path]

    def _list_files(self) -> str:
        rows = [f"{p}  ({len(lines)} lines)" for p, lines in sorted(self.files.items())]
        return "\n".join([f"{len(rows)} files in {self.repo.name}:", *rows])

    def _read_file(self, path: str, page: int) -> str:
        lines = self._file(path)
        size = self.repo.page_lines
        pages = max(1, -(-len(lines) // size))
        if not 1 <= page <= pages:
            raise ToolError(f"page {page} out of range for {path}: it has {pages} page(s) of {size} lines")
        lo = (page - 1) * size
        chunk = lines[lo : lo + size]
        head = f"{path} (page {page} of {pages}, lines {lo + 1}-{lo + len(chunk)} of {len(lines)})"
        return "\n".join([head, *(f"{lo + i + 1:>4} | {text}" for i, text in enumerate(chunk))])

    def _search(self, pattern: str) -> str:
        if not pattern:
            raise ToolError("search: pattern must be a non-empty string")
        if len(pattern) > MAX_PATTERN or "\n" in pattern:
            raise ToolError(f"search: pattern must be one line of at most {MAX_PATTERN} characters")
        hits = [
            f"{p}:{i}: {line.strip()}"
            for p, lines in sorted(self.files.items())
            for i, line in enumerate(lines, 1)
            if pattern in line
        ]
        head = f'{len(hits)} matches for "{pattern}"'
        shown = hits[:MAX_SEARCH_HITS]
        tail = (
            [f"... {len(hits) - len(shown)} more matches not shown; use a more specific pattern"]
            if len(hits) > len(shown)
            else []
        )
        return "\n".join([head, *shown, *tail])

    def _edit_file(self, path: str, line: int, old: str, new: str) -> str:
        lines = self._file(path)
        if not path.startswith("src/"):
            raise ToolError(f"edit_file: {path} is read-only; only files under src/ can be edited")
        if not 1 <= line <= len(lines):
            raise ToolError(f"edit_file: line {line} out of range for {path} (1-{len(lines)})")
        if not old:
            raise ToolError("edit_file: old must be non-empty text found on the line")
        if "\n" in new or "\r" in new:
            raise ToolError("edit_file: new must be a single line (no newline characters)")
        current = lines[line - 1]
        count = current.count(old)
        if count != 1:
            found = "does not occur" if count == 0 else f"occurs {count} times"
            raise ToolError(
                f"edit_file: {json.dumps(old)} {found} on {path}:{line}, which reads: {json.dumps(current)}"
            )
        updated = current.replace(old, new)
        if len(updated) > MAX_LINE:
            raise ToolError(f"edit_file: the edited line would exceed {MAX_LINE} characters")
        lines[line - 1] = updated
        return f"edited {path}:{line}\n- {current}\n+ {updated}"

    def _run_tests(self) -> str:
        self.test_runs += 1
        sources = self._sources()
        suites = {p: "\n".join(lines) for p, lines in sorted(self.files.items()) if p.startswith("test/")}
        run = run_suites(sources, suites)
        src_lines = {p: self.files[p] for p in sources}
        return render_log(run, src_lines, self._test_lines, self.noise_seed, self.test_runs)
