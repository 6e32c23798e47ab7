"""The four worked examples: run each evolve.js on before.json in the sandbox and check the
result against after.json, and that the input was not changed."""

from __future__ import annotations

import copy
import json
from dataclasses import dataclass
from pathlib import Path

from rl_compaction.accounting import TokenCounter, edit_metrics
from rl_compaction.core.reports import render_table
from rl_compaction.core.sandbox import run_evolve
from rl_compaction.core.state import StateError, load_state, validate_state
from rl_compaction.protocol.evolve import EVOLVE_TOOL, system_message

EXAMPLES_DIR = Path(__file__).parent / "examples"


@dataclass(frozen=True)
class ExampleResult:
    name: str
    passed: bool
    detail: str
    before_bytes: int
    after_bytes: int
    code_bytes: int
    metrics: dict[str, float]


def example_dirs(root: Path = EXAMPLES_DIR) -> list[Path]:
    return sorted(p for p in root.iterdir() if (p / "before.json").exists())


def run_example(path: Path, counter: TokenCounter) -> ExampleResult:
    before_text = (path / "before.json").read_text(encoding="utf-8")
    expected_text = (path / "after.json").read_text(encoding="utf-8")
    code = (path / "evolve.js").read_text(encoding="utf-8")
    before = load_state(before_text)
    expected = load_state(expected_text)
    pristine = copy.deepcopy(before)
    result = run_evolve(before, code)
    metrics: dict[str, float] = {}
    if result.error is not None:
        passed, detail = False, f"evolve failed: {result.error}"
    else:
        try:
            after = validate_state(result.state)
        except StateError as e:
            passed, detail, after = False, f"invalid result: {e}", None
        else:
            if before != pristine:
                passed, detail = False, "the input State was changed"
            elif after != expected:
                passed, detail = False, "result differs from after.json"
            else:
                passed, detail = True, "ok"
            metrics = edit_metrics(
                counter, system_message(""), [EVOLVE_TOOL], before, after, counter.call_tokens(_as_call(code))
            )
    return ExampleResult(
        path.name, passed, detail, len(before_text.encode()), len(expected_text.encode()), len(code.encode()), metrics
    )


def _as_call(code: str) -> dict:
    """The evolve call that would carry `code`, to count its generated tokens."""
    return {
        "type": "function_call",
        "call_id": "example",
        "name": "evolve",
        "arguments": json.dumps({"code": code}, ensure_ascii=False),
    }


def format_table(results: list[ExampleResult]) -> str:
    header = [
        "example",
        "result",
        "before B",
        "after B",
        "code B",
        "before tok",
        "after tok",
        "prefix tok",
        "cache cost",
        "compaction cost",
    ]
    rows = [header]
    for r in results:
        m = r.metrics
        rows.append(
            [
                r.name,
                "PASS" if r.passed else f"FAIL ({r.detail})",
                str(r.before_bytes),
                str(r.after_bytes),
                str(r.code_bytes),
            ]
            + [
                f"{m[k]:g}" if k in m else "-"
                for k in ("before_tokens", "after_tokens", "reusable_prefix_tokens", "cache_cost", "compaction_cost")
            ]
        )
    return render_table(rows, left=2)
