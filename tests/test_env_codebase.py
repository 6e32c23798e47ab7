"""The codebase family: determinism, split hygiene, tools, scoring, the context-bound oracle
(plain, under lossy compaction, and after its own evolve code run through the real evolve
protocol in the QuickJS sandbox), and the volume of tool output at scale 1.0."""

from __future__ import annotations

import json
import re

import pytest
from driver import run_oracle  # tests/ is on sys.path under pytest
from rl_compaction_envs.codebase import POOLS, CodebaseFamily, CodebaseTask
from rl_compaction_envs.codebase import runner as codebase_runner
from rl_compaction_envs.codebase.generator import bug_counts
from rl_compaction_envs.codebase.oracle import MAX_TEST_RUNS, analyse

from rl_compaction.accounting import get_counter
from rl_compaction.core.state import State, dumps_state, validate_state
from rl_compaction.core.tiktoken_offline import get_encoding
from rl_compaction.harness.env import EnvConfig
from rl_compaction.harness.oracle import make_env, run_oracle_episode
from rl_compaction.harness.tasks import SPLITS, Difficulty, ToolError, split_seed
from rl_compaction.protocol.evolve import apply_evolve

SMALL = Difficulty(scale=0.06, level=2)
FAMILY = CodebaseFamily()
ENC = get_encoding("o200k_base")


def make(seed: int = 0, split: str = "test", difficulty: Difficulty = SMALL) -> CodebaseTask:
    return FAMILY.make(seed, split, difficulty)


def tokens(state: State) -> int:
    return len(ENC.encode(dumps_state(state)))


def play(task: CodebaseTask, state: State, until: str) -> State:
    """Let the oracle act on `state` until its next call would be `until` (that call is not made)."""
    oracle = task.oracle()
    while True:
        [call] = oracle.act(state)
        if call["name"] == until:
            return state
        assert call["name"] != "submit", f"episode ended before a {until} call"
        out = task.call_tool(call["name"], json.loads(call["arguments"]))
        state = state + [call, {"type": "function_call_output", "call_id": call["call_id"], "output": out}]


# --------------------------------------------------------------------------- determinism and splits


def test_same_seed_gives_identical_task_and_tool_outputs() -> None:
    a, b = make(7), make(7)
    assert a.files == b.files and a.repo.hidden_tests == b.repo.hidden_tests
    assert a.initial_state() == b.initial_state() and a.instructions == b.instructions

    def outputs(task: CodebaseTask) -> list[str]:
        return [
            task.call_tool("run_tests", {}),
            task.call_tool("search", {"pattern": "function"}),
            task.call_tool("read_file", {"path": sorted(task.files)[0], "page": 1}),
            task.call_tool("run_tests", {}),
        ]

    assert outputs(a) == outputs(b)
    assert make(8).files != a.files


def test_split_pools_are_pairwise_disjoint() -> None:
    fields = ("syllables", "nouns", "doc_templates", "comment_templates", "changelog_templates", "people")
    for i, s1 in enumerate(SPLITS):
        for s2 in SPLITS[i + 1 :]:
            for name in fields:
                shared = set(getattr(POOLS[s1], name)) & set(getattr(POOLS[s2], name))
                assert not shared, f"{name} shared by {s1} and {s2}: {shared}"


def test_instances_of_different_splits_share_no_seed_or_entity_name() -> None:
    seeds = {s: {split_seed(FAMILY.name, s, k) for k in range(50)} for s in SPLITS}
    assert not (seeds["train"] & seeds["test"]) and not (seeds["train"] & seeds["validation"])

    def entities(split: str) -> set[str]:
        names = set()
        for seed in range(4):
            repo = make(seed, split, Difficulty(0.3, 3)).repo
            names |= {f.name for f in repo.functions} | {p.split("/")[-1].split("_")[0] for p in repo.files}
            names.add(repo.name)
        return names - {"CHANGELOG.md", "README.md"}

    train, test, val = entities("train"), entities("test"), entities("validation")
    assert train and not (train & test) and not (train & val) and not (test & val)


# --------------------------------------------------------------------------- instance content


def test_bugs_are_single_line_deviations_from_the_newest_spec() -> None:
    task = make(3, difficulty=Difficulty(0.06, 3))
    roles = [f.role for f in task.repo.functions]
    assert roles.count("bug") == 3 and roles.count("stale") == 2 and roles.count("revised") == 3
    changelog = "\n".join(task.files["CHANGELOG.md"])
    for f in task.repo.functions:
        src = "\n".join(task.files[f.module])
        assert f"const result = {f.code};" in src and f"spec: result = {f.doc_spec}" in src
        if f.role == "bug":
            assert f.code != f.spec and f.doc_spec == f.spec
        if f.role in ("stale", "revised"):
            # the doc comment is superseded; only CHANGELOG.md states the spec the tests follow
            assert f.doc_spec != f.spec and f"{f.name}: spec changed to `result = {f.spec}`" in changelog
            assert f.code == (f.doc_spec if f.role == "stale" else f.spec)
    log = task.call_tool("run_tests", {})
    failing = {n.rsplit(" #", 1)[0] for n in re.findall(r"^  FAIL  (\S+ #\d+)", log, re.M)}
    assert failing == {f.name for f in task.repo.functions if f.buggy}


def test_level_adds_bugs_and_revisions() -> None:
    def count(level: int) -> tuple[int, int]:
        repo = make(1, difficulty=Difficulty(0.06, level)).repo
        return sum(f.buggy for f in repo.functions), sum(bool(f.revisions) for f in repo.functions)

    (b1, r1), (b2, r2), (b3, r3) = count(1), count(2), count(3)
    assert b1 < b2 < b3 and r1 == 0 < r2 < r3


def test_scale_lengthens_the_horizon_with_more_bugs() -> None:
    # every bug costs a test run, so the number of runs (the horizon) grows with the scale, not
    # only the size of each log: without that, compaction could not push the peak far below a log
    plain = [bug_counts(2, scale)[0] for scale in (0.3, 1.0, 1.5, 3.0, 5.0)]
    assert plain == [2, 5, 6, 11, 17]


# --------------------------------------------------------------------------- tools


def test_tool_outputs_and_edit_semantics() -> None:
    task = make(2)
    listing = task.call_tool("list_files", {})
    assert all(p in listing for p in task.files)
    f = next(f for f in task.repo.functions if f.role == "bug")
    hits = task.call_tool("search", {"pattern": f"function {f.name}("})
    m = re.search(rf"^(src/\S+):(\d+): function {f.name}\(", hits, re.M)
    assert m and m.group(1) == f.module
    code_line = int(m.group(2)) + next(
        i for i, line in enumerate(task.files[f.module][int(m.group(2)) :], 1) if "const result" in line
    )
    page = task.call_tool("read_file", {"path": f.module, "page": (code_line - 1) // task.repo.page_lines + 1})
    assert f"{code_line:>4} |   const result = {f.code};" in page.splitlines()
    n_lines = len(task.files[f.module])
    out = task.call_tool("edit_file", {"path": f.module, "line": code_line, "old": f.code, "new": f.spec})
    assert out.startswith(f"edited {f.module}:{code_line}") and len(task.files[f.module]) == n_lines
    assert f"FAIL  {f.name} #" not in task.call_tool("run_tests", {})


@pytest.mark.parametrize(
    ("name", "args", "message"),
    [
        ("delete_file", {}, "unknown tool"),
        ("read_file", {"path": "README.md"}, "missing required argument 'page'"),
        ("read_file", {"path": "README.md", "page": "1"}, "must be an integer"),
        ("read_file", {"path": "README.md", "page": True}, "must be an integer"),
        ("read_file", {"path": "README.md", "page": 99}, "out of range"),
        ("read_file", {"path": "README.md", "page": 0}, "out of range"),
        ("read_file", {"path": "nope.js", "page": 1}, "no such file"),
        ("search", {"pattern": ""}, "non-empty"),
        ("search", {"pattern": "x", "regex": True}, "unexpected argument"),
        ("run_tests", {"verbose": True}, "unexpected argument"),
        ("edit_file", {"path": "README.md", "line": 1, "old": "#", "new": "x"}, "read-only"),
        ("edit_file", {"path": "SRC", "line": 10_000, "old": "a", "new": "b"}, "out of range"),
        ("edit_file", {"path": "SRC", "line": 1, "old": "no such text", "new": "b"}, "does not occur"),
        ("edit_file", {"path": "SRC", "line": 1, "old": "", "new": "b"}, "non-empty"),
        ("edit_file", {"path": "SRC", "line": 1, "old": "/*", "new": "a\nb"}, "single line"),
    ],
)
def test_bad_tool_arguments_raise_tool_error(name: str, args: dict, message: str) -> None:
    task = make(0)
    src = next(p for p in task.files if p.startswith("src/"))
    args = {k: (src if v == "SRC" else v) for k, v in args.items()}
    with pytest.raises(ToolError, match=re.escape(message)):
        task.call_tool(name, args)


def test_broken_or_hanging_code_fails_its_tests_without_crashing(monkeypatch: pytest.MonkeyPatch) -> None:
    task = make(4)
    f = next(f for f in task.repo.functions if f.role == "ok")
    line = next(i for i, text in enumerate(task.files[f.module], 1) if f"const result = {f.code};" in text)
    task.call_tool("edit_file", {"path": f.module, "line": line, "old": f.code, "new": "(("})  # syntax error
    log = task.call_tool("run_tests", {})
    assert f"[load] {f.module}" in log and "FAILED: SyntaxError" in log and f"FAIL  {f.name} #1" in log
    assert task.score("done") == 0.0
    monkeypatch.setattr(codebase_runner, "TIME_LIMIT_S", 0.2)
    task.call_tool("edit_file", {"path": f.module, "line": line, "old": "((", "new": "(() => { while (true) {} })()"})
    log = task.call_tool("run_tests", {})
    assert "FAIL  <suite aborted>" in log and "time limit of 200 ms exceeded" in log and "== summary:" in log


@pytest.mark.parametrize(
    "code",
    [
        "[].join.call({length: 2 ** 40})",  # a native loop QuickJS cannot interrupt: the sandbox kills it
        # at load time, a thrown value whose toString never returns
        "0; } throw {toString() { for (;;) {} }}; function _z() { const q = 0",
    ],
    ids=["native-loop", "looping-toString"],
)
def test_task_code_the_engine_cannot_interrupt_is_stopped(monkeypatch: pytest.MonkeyPatch, code: str) -> None:
    """Task code runs with evolve code's guarantees: run_tests and submit return, the suite fails."""
    monkeypatch.setattr(codebase_runner, "TIME_LIMIT_S", 0.2)
    task = make(4)
    f = next(f for f in task.repo.functions if f.role == "ok")
    line = next(i for i, text in enumerate(task.files[f.module], 1) if f"const result = {f.code};" in text)
    task.call_tool("edit_file", {"path": f.module, "line": line, "old": f.code, "new": code})
    log = task.call_tool("run_tests", {})
    assert "FAIL  <suite aborted>" in log and "== summary:" in log
    assert 0.0 <= task.score("done") < 1.0


def test_a_nul_in_an_edit_is_just_a_character_to_the_tests() -> None:
    """An edit may hold a NUL; run_tests used to raise ValueError: embedded null character."""
    env = make_env("codebase", split="test", difficulty=SMALL, config=EnvConfig(context_window=10**6))
    env.reset(seed=4)
    task = env.task
    f = next(f for f in task.repo.functions if f.role == "ok")
    line = next(i for i, text in enumerate(task.files[f.module], 1) if f"const result = {f.code};" in text)
    edit = {"path": f.module, "line": line, "old": f.code, "new": f'"a\x00b" + {f.code}'}
    env.step([{"type": "function_call", "call_id": "e1", "name": "edit_file", "arguments": json.dumps(edit)}])
    obs, *_ = env.step([{"type": "function_call", "call_id": "r1", "name": "run_tests", "arguments": "{}"}])
    log = obs["state"][-1]["output"]
    assert "== summary:" in log and f"FAIL  {f.name} #1" in log


# --------------------------------------------------------------------------- scoring


def test_do_nothing_and_random_answers_score_zero_and_partial_fixes_get_partial_credit() -> None:
    task = make(5)
    assert task.score("done") == 0.0 and task.score("the bug is in line 3") == 0.0
    assert task.score(None) == 0.0  # type: ignore[arg-type]
    buggy = [f for f in task.repo.functions if f.buggy]
    assert len(buggy) == 3
    fix = buggy[0]
    line = next(i for i, text in enumerate(task.files[fix.module], 1) if f"const result = {fix.code};" in text)
    task.call_tool("edit_file", {"path": fix.module, "line": line, "old": fix.code, "new": fix.spec})
    assert task.score("done") == pytest.approx(1 / 3)
    # "fixing" a revised function back to its superseded doc comment breaks working code
    revised = next(f for f in task.repo.functions if f.role == "revised")
    line = next(i for i, text in enumerate(task.files[revised.module], 1) if f"const result = {revised.code};" in text)
    task.call_tool("edit_file", {"path": revised.module, "line": line, "old": revised.code, "new": revised.doc_spec})
    assert 0 < task.score("done") < 1 / 3


# --------------------------------------------------------------------------- oracle


@pytest.mark.parametrize("level", [1, 2, 3])
def test_oracle_solves_test_instances(level: int) -> None:
    for seed in range(5):
        ep = run_oracle(make(seed, "test", Difficulty(0.06, level)))
        assert ep.score == 1.0, (level, seed)
        assert ep.answer == "done"


def clear_old_outputs(keep_last: int):
    """Lossy compaction: every output but the newest `keep_last` becomes a placeholder."""

    def compact(state: State) -> State:
        ids = [it["call_id"] for it in state if it["type"] == "function_call_output"]
        cleared = set(ids[: max(0, len(ids) - keep_last)])
        return [
            {**it, "output": "[output cleared]"} if it.get("call_id") in cleared and "output" in it else it
            for it in state
        ]

    return compact


def drop_oldest_turns(keep_pairs: int):
    """Lossy compaction: keep the task statement and only the newest `keep_pairs` call/output pairs."""

    def compact(state: State) -> State:
        calls = [it["call_id"] for it in state if it["type"] == "function_call"]
        kept = set(calls[-keep_pairs:])
        return [it for it in state if "call_id" not in it or it["call_id"] in kept]

    return compact


@pytest.mark.parametrize(
    ("compact", "every"), [(clear_old_outputs(2), 3), (clear_old_outputs(3), 2), (drop_oldest_turns(3), 2)]
)
def test_oracle_recovers_from_lossy_compaction(compact, every: int) -> None:
    for seed in range(3):
        task = make(seed, "test", Difficulty(0.06, 3))
        plain = run_oracle(make(seed, "test", Difficulty(0.06, 3)))
        ep = run_oracle(task, compact_every=every, compact=compact)
        assert ep.score == 1.0, seed
        assert ep.tool_calls > plain.tool_calls  # it had to fetch lost evidence again


def test_oracle_gives_up_instead_of_looping_when_compaction_outpaces_it() -> None:
    # a function whose spec and result line sit on two pages needs four outputs at once
    ep = run_oracle(make(0, "test", Difficulty(0.06, 1)), compact_every=2, compact=clear_old_outputs(2))
    assert ep.answer == "done" and ep.turns < 4 * MAX_TEST_RUNS


def test_oracle_ignores_env_messages_and_foreign_evolve_round_trips() -> None:
    task = make(6)
    state = play(task, task.initial_state(), until="edit_file")
    expected = task.oracle().act(state)
    noisy = [
        *state,
        {
            "type": "message",
            "role": "user",
            "content": "Context is near its limit: compact it now with the evolve tool",
        },
        {
            "type": "function_call",
            "call_id": "ev1",
            "name": "evolve",
            "arguments": json.dumps({"code": "return state;"}),
        },
        {"type": "function_call_output", "call_id": "ev1", "output": json.dumps({"applied": False, "error": "x"})},
    ]
    [call] = task.oracle().act(validate_state(noisy))
    assert (call["name"], call["arguments"]) == (expected[0]["name"], expected[0]["arguments"])


# --------------------------------------------------------------------------- targeted compaction


def evolve(task: CodebaseTask, state: State, call_id: str = "evolve_1") -> State:
    """Run the oracle's evolve code through the real protocol; returns the new State (receipt last)."""
    code = task.oracle().evolve_code(state)
    pending = {"type": "function_call", "call_id": call_id, "name": "evolve", "arguments": json.dumps({"code": code})}
    outcome = apply_evolve(state + [pending])
    assert outcome.applied, outcome.receipt
    assert outcome.state[-2] == pending  # the pending call stayed, unchanged, last before its receipt
    validate_state(outcome.state[:-1], pending_call_id=call_id)
    return outcome.state


def test_evolve_code_keeps_the_evidence_and_shrinks_the_state() -> None:
    task = make(1, "test", Difficulty(0.3, 2))
    # two fixes in, evidence for the next one gathered: the oracle's next call is an edit
    state = play(task, task.initial_state(), until="edit_file")
    for _ in range(2):
        [call] = task.oracle().act(state)
        out = task.call_tool(call["name"], json.loads(call["arguments"]))
        state = state + [call, {"type": "function_call_output", "call_id": call["call_id"], "output": out}]
        state = play(task, state, until="edit_file")
    state.append({"type": "message", "role": "user", "content": "Context is near its limit: compact it now."})
    before = analyse(state)
    expected = task.oracle().act(state)
    after_state = evolve(task, state)
    new = after_state[:-2]  # without the evolve round trip
    assert tokens(new) < 0.25 * tokens(state)
    after = analyse(after_state)
    assert after.failing == before.failing and after.page_lines == before.page_lines
    assert [(t.path, t.code_line, t.code, t.spec) for t in after.targets] == [
        (t.path, t.code_line, t.code, t.spec) for t in before.targets
    ]
    [call] = task.oracle().act(after_state)
    assert (call["name"], call["arguments"]) == (expected[0]["name"], expected[0]["arguments"])


def evolve_call_tokens(code: str) -> int:
    """Tokens of the evolve call as the env's ledger counts them (o200k_base)."""
    call = {"type": "function_call", "call_id": "e", "name": "evolve", "arguments": json.dumps({"code": code})}
    return get_counter("o200k_base").call_tokens(call)


def test_evolve_call_is_short_and_selects_exact_lines() -> None:
    # mid-fix, with a search, a cut-worthy page and an edit to keep: the richest edit the oracle writes
    task = make(1, "test", Difficulty(0.3, 2))
    state = play(task, task.initial_state(), until="edit_file")
    [call] = task.oracle().act(state)
    out = task.call_tool(call["name"], json.loads(call["arguments"]))
    state = state + [call, {"type": "function_call_output", "call_id": call["call_id"], "output": out}]
    code = task.oracle().evolve_code(state)
    assert evolve_call_tokens(code) < 160, code
    assert code.count("\n") <= 2 and "/^==/" in code  # a keep table and one filter, the log cut by a regex
    edited = evolve(task, state)
    page = next(it["output"] for it in edited if str(it.get("output", "")).startswith("src/"))
    assert len(page.splitlines()) <= 3  # the header and the spec and result lines, not the whole page
    # an edit of the edited State (its evolve round trip included) is as short and drops only that
    assert evolve_call_tokens(task.oracle().evolve_code(edited)) < 160
    assert evolve(task, edited, "evolve_2")[:-2] == edited[:-2]


def test_oracle_solves_the_env_episode_with_several_compactions() -> None:
    # the real env: the harness asks for compaction at the threshold, the oracle answers with its
    # evolve code each time, editing States its earlier edits produced
    config = EnvConfig(context_window=8000, compaction_threshold=4000)
    env = make_env("codebase", strategy="evolve", config=config, difficulty=Difficulty(0.3, 2))
    for seed in range(2):
        info = run_oracle_episode(env, seed, use_evolve=True)
        ledger = info["ledger"]
        assert info["success"] and info["truncated_reason"] is None, seed
        assert ledger["compactions"] >= 3 and ledger["evolve_failures"] == 0
        assert ledger["evolve_tokens"] / ledger["compactions"] < 160
        assert ledger["peak_context_tokens"] <= 8000


def oracle_evolve(task: CodebaseTask):
    """A `compact` for run_oracle: the oracle's own evolve code, each run with a fresh call_id."""
    count = iter(range(10_000))
    return lambda state: evolve(task, state, f"evolve_{next(count)}")


@pytest.mark.parametrize("level", [1, 3])
def test_oracle_solves_the_task_with_periodic_evolve(level: int) -> None:
    for seed in range(3):
        task = make(seed, "test", Difficulty(0.06, level))
        ep = run_oracle(task, compact_every=3, compact=oracle_evolve(task))
        assert ep.score == 1.0, seed


# --------------------------------------------------------------------------- volume


def test_scale_one_gives_well_over_32k_tokens_of_tool_output_without_one_huge_output() -> None:
    ep = run_oracle(make(0, "test", Difficulty(1.0, 1)))
    assert ep.score == 1.0
    counts = [len(ENC.encode(out)) for out in ep.outputs]
    assert sum(counts) > 36_000
    assert max(counts) < 8_000  # each output fits between a 24k compaction threshold and a 32k window
