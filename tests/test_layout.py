"""The layout rule of issue 21: no module over ~500 lines unless a line at its top says why."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).parents[1]
LIMIT = 500


def test_every_module_over_the_limit_says_why_at_its_top():
    unexplained = []
    for path in sorted([*ROOT.joinpath("rl_compaction").rglob("*.py"), *ROOT.joinpath("envs").rglob("*.py")]):
        text = path.read_text(encoding="utf-8")
        if text.count("\n") <= LIMIT:
            continue
        docstring = ast.get_docstring(ast.parse(text)) or ""
        if "Why one module of" not in docstring:
            unexplained.append(f"{path.relative_to(ROOT)} ({text.count(chr(10))} lines)")
    assert not unexplained, f"over {LIMIT} lines with no reason in the module docstring: {unexplained}"
