"""The probe family: determinism, split hygiene, tools, scoring, the context-bound oracle
(plain, under lossy compaction, and after its own evolve code run in the QuickJS sandbox)."""

from __future__ import annotations

import itertools
import json
import random
import re

import pytest
from driver import run_oracle  # tests/ is on sys.path under pytest
from rl_compaction_envs.probe import KEY_POOLS, ProbeFamily, ProbeOracle, ProbeTask
from rl_compaction_envs.probe.oracle import MAX_FETCHES

from rl_compaction.core.sandbox import run_evolve
from rl_compaction.core.state import State, dumps_state, validate_state
from rl_compaction.core.tiktoken_offline import get_encoding
from rl_compaction.harness.env import EnvConfig
from rl_compaction.harness.oracle import make_env, run_oracle_episode
from rl_compaction.harness.tasks import SPLITS, Difficulty, ToolError

SMALL = Difficulty(scale=0.06, level=2)
FAMILY = ProbeFamily()
KEY_RE = re.compile(r"\b[A-Z][0-9][A-Z]\b")


def make(seed: int = 0, split: str = "test", difficulty: Difficulty = SMALL) -> ProbeTask:
    return FAMILY.make(seed, split, difficulty)


def all_outputs(task: ProbeTask) -> list[str]:
    """Every tool output the task can give, batch 1 to END."""
    return [task.call_tool("next_batch", {"index": i}) for i in range(1, task.n_batches + 2)]


def read_all(task: ProbeTask) -> State:
    """The State after the oracle read the whole stream (its next act would be submit)."""
    oracle, state = task.oracle(), task.initial_state()
    while True:
        [call] = oracle.act(state)
        if call["name"] == "submit":
            return state
        out = task.call_tool(call["name"], json.loads(call["arguments"]))
        state = state + [call, {"type": "function_call_output", "call_id": call["call_id"], "output": out}]


def oracle_answer(state: State) -> str:
    [call] = ProbeOracle().act(state)
    assert call["name"] == "submit"
    return json.loads(call["arguments"])["answer"]


def correct_answer(task: ProbeTask) -> dict[str, int]:
    answer = json.loads(oracle_answer(read_all(task)))
    assert task.score(json.dumps(answer)) == 1.0
    return answer


def clear_old_outputs(keep: int):
    """A lossy harness compaction: every task tool output but the newest `keep` becomes a placeholder."""

    def compact(state: State) -> State:
        outputs = [i for i, it in enumerate(state) if it.get("type") == "function_call_output"]
        stale = set(outputs[:-keep] if keep else outputs)
        return [{**it, "output": "[output cleared]"} if i in stale else it for i, it in enumerate(state)]

    return compact


def oracle_evolve(state: State) -> State:
    """Compaction by the oracle's own evolve code, as the env runs it: with a pending evolve call last."""
    pending = {
        "type": "function_call",
        "call_id": "evolve_pending",
        "name": "evolve",
        "arguments": json.dumps({"code": "..."}),
    }
    before = state + [pending]
    result = run_evolve(before, ProbeOracle().evolve_code(before))
    assert result.ok, result.error
    after = validate_state(result.state, pending_call_id="evolve_pending")
    assert after[-1] == pending
    return after[:-1]


# --------------------------------------------------------------------------- generation


def test_same_seed_same_task_and_outputs():
    a, b = make(7), make(7)
    assert a.instructions == b.instructions and a.tools() == b.tools()
    assert a.initial_state() == b.initial_state()
    assert all_outputs(a) == all_outputs(b)
    assert all_outputs(a) != all_outputs(make(8))


def test_splits_share_no_seed_and_no_key():
    for s1, s2 in itertools.combinations(SPLITS, 2):
        assert not set(KEY_POOLS[s1]) & set(KEY_POOLS[s2])
    for split in SPLITS:
        for seed in range(3):
            task = make(seed, split, Difficulty(0.06, 3))
            seen = set(KEY_RE.findall("\n".join(all_outputs(task)))) | set(task.keys)
            assert seen <= set(KEY_POOLS[split]), seen - set(KEY_POOLS[split])
    outputs = {split: all_outputs(make(0, split)) for split in SPLITS}
    assert len({json.dumps(o) for o in outputs.values()}) == 3


def test_levels_add_tracked_keys_corrections_and_look_alikes():
    def stats(task: ProbeTask) -> tuple[int, int, int]:
        text = "\n".join(all_outputs(task))
        tracked = set(task.keys)
        corrections = re.findall(r"^correction: (\w+) at batch", text, re.MULTILINE)
        look_alikes = {
            k
            for k in KEY_RE.findall(text)
            if k not in tracked and any(sum(x != y for x, y in zip(k, t, strict=True)) == 1 for t in tracked)
        }
        return len(tracked), sum(c in tracked for c in corrections), len(look_alikes)

    easy, hard = stats(make(1, difficulty=Difficulty(0.3, 1))), stats(make(1, difficulty=Difficulty(0.3, 3)))
    assert easy[0] < hard[0] and easy[1] < hard[1] and easy[1] >= 1
    assert hard[2] >= 4


def test_output_volume_follows_scale():
    enc = get_encoding("o200k_base")
    small = sum(len(enc.encode(o)) for o in all_outputs(make(2)))
    assert 1500 < small < 4000


@pytest.mark.parametrize("level", [1, 2, 3])
def test_full_scale_episode_has_over_32k_tokens_of_tool_output(level):
    task = make(3, difficulty=Difficulty(1.0, level))
    episode = run_oracle(task)
    assert episode.score == 1.0
    tokens = sum(len(t) for t in get_encoding("o200k_base").encode_batch(episode.outputs))
    assert tokens > 32_000


# --------------------------------------------------------------------------- tools and scoring


def test_bad_tool_calls_raise_clear_errors():
    task = make()
    n = task.n_batches
    cases = [
        ("read_batch", {"index": 1}, "unknown tool"),
        ("next_batch", {}, "missing required argument 'index'"),
        ("next_batch", {"index": "1"}, "must be an integer"),
        ("next_batch", {"index": True}, "must be an integer"),
        ("next_batch", {"index": 1.0}, "must be an integer"),
        ("next_batch", {"index": 0}, "out of range"),
        ("next_batch", {"index": -3}, "out of range"),
        ("next_batch", {"index": n + 2}, f"has {n} batches"),
        ("next_batch", {"index": 1, "page": 2}, "unexpected argument\\(s\\) page"),
    ]
    for name, args, message in cases:
        with pytest.raises(ToolError, match=message):
            task.call_tool(name, args)
    assert task.call_tool("next_batch", {"index": n + 1}).startswith("END")
    assert task.call_tool("next_batch", {"index": 1}).startswith("batch 1\n")


def test_partial_credit_and_malformed_answers():
    task = make(4, difficulty=Difficulty(0.06, 3))
    right = correct_answer(task)
    one_wrong = {**right, task.keys[0]: right[task.keys[0]] + 1}
    assert task.score(json.dumps(one_wrong)) == pytest.approx((len(right) - 1) / len(right))
    assert task.score("```json\n" + json.dumps(right) + "\n```") == 1.0
    assert task.score(json.dumps({k: str(v) for k, v in right.items()})) == 0.0
    assert task.score(json.dumps({k: float(v) + 0.5 for k, v in right.items()})) == 0.0
    for junk in ["", "{}", "null", "[1, 2]", "not json", '{"a": 1', json.dumps(list(right.items()))]:
        assert task.score(junk) == 0.0


def test_guessing_scores_near_zero():
    rng = random.Random(0)
    scores = []
    for seed in range(5):
        task = make(seed)
        guess = {k: rng.randint(-100, 600) for k in task.keys}
        scores += [task.score(json.dumps(guess)), task.score(json.dumps(dict.fromkeys(task.keys, 0)))]
    assert max(scores) <= 0.2


# --------------------------------------------------------------------------- the oracle


@pytest.mark.parametrize("level", [1, 2, 3])
def test_oracle_solves_test_instances(level):
    for seed in range(5):
        task = make(seed, "test", Difficulty(0.06, level))
        episode = run_oracle(task)
        assert episode.score == 1.0
        assert episode.tool_calls == task.n_batches + 2  # every batch, END, submit


def test_oracle_refetches_what_lossy_compaction_cleared():
    for seed in range(3):
        task = make(seed)
        plain = run_oracle(task)
        # A window of 4 kept outputs + the reads between compactions can hold the whole stream again.
        lossy = run_oracle(task, compact_every=task.n_batches - 1, compact=clear_old_outputs(keep=4))
        assert lossy.score == 1.0
        assert lossy.tool_calls > plain.tool_calls


def test_oracle_refetches_a_truncated_batch():
    task = make(5)
    state = read_all(task)
    third = next(i for i, it in enumerate(state) if it.get("output", "").startswith("batch 3\n"))
    text = state[third]["output"]
    state[third] = {**state[third], "output": text[: len(text) // 3] + "\n... [truncated]\n" + text[-40:]}
    [call] = ProbeOracle().act(state)
    assert call["name"] == "next_batch" and json.loads(call["arguments"]) == {"index": 3}


def test_oracle_gives_up_when_compaction_keeps_destroying_evidence():
    task = make(6)
    episode = run_oracle(task, compact_every=1, compact=clear_old_outputs(keep=0), max_turns=500)
    assert episode.answer is not None  # it submitted instead of looping
    assert episode.tool_calls <= MAX_FETCHES + 1
    assert episode.score < 1.0


def test_oracle_without_task_statement_submits_empty_answer():
    task = make(0)
    state = read_all(task)[1:]
    assert oracle_answer(state) == "{}"


def test_oracle_ignores_env_items_and_reads_list_outputs():
    task = make(8)
    state = read_all(task)
    expected = oracle_answer(state)
    noisy: State = []
    for i, item in enumerate(state):
        if item.get("type") == "function_call_output" and i % 3 == 0:
            item = {**item, "output": [{"type": "input_text", "text": item["output"]}]}
        noisy.append(item)
        if i == 4:
            noisy += [
                {
                    "type": "message",
                    "role": "user",
                    "content": "Context is near its limit: compact it now with the evolve tool",
                },
                {
                    "type": "function_call",
                    "call_id": "call_99",
                    "name": "evolve",
                    "arguments": json.dumps({"code": "return state;"}),
                },
                {
                    "type": "function_call_output",
                    "call_id": "call_99",
                    "output": json.dumps({"applied": False, "error": "example"}),
                },
            ]
    validate_state(noisy)
    assert oracle_answer(noisy) == expected
    [call] = ProbeOracle().act(noisy)
    assert call["call_id"] not in {it.get("call_id") for it in noisy}


# --------------------------------------------------------------------------- targeted compaction


def test_evolve_code_keeps_evidence_and_shrinks_state():
    task = make(9)
    state = read_all(task)
    answer = oracle_answer(state)
    # Extra clutter the code must clean up: a duplicate read, a cleared read, an old evolve call.
    dup = [
        {"type": "function_call", "call_id": "dup", "name": "next_batch", "arguments": '{"index": 2}'},
        {"type": "function_call_output", "call_id": "dup", "output": task.call_tool("next_batch", {"index": 2})},
    ]
    cleared = [
        {"type": "function_call", "call_id": "gone", "name": "next_batch", "arguments": '{"index": 1}'},
        {"type": "function_call_output", "call_id": "gone", "output": "[output cleared]"},
    ]
    old = [
        {"type": "function_call", "call_id": "ev0", "name": "evolve", "arguments": '{"code": "return state;"}'},
        {"type": "function_call_output", "call_id": "ev0", "output": '{"applied": true}'},
    ]
    state = state + dup + cleared + old
    after = oracle_evolve(state)
    assert after[0] == state[0]
    assert len(dumps_state(after)) < 0.6 * len(dumps_state(state))
    ids = {it.get("call_id") for it in after}
    assert not ids & {"gone", "ev0"}
    batches = [it["output"] for it in after if it.get("type") == "function_call_output"]
    assert sum(o.startswith("batch 2\n") for o in batches) == 1
    for o in batches:  # END, or a batch cut to the tracked keys' lines between header and footer
        assert o.startswith("END") or all(KEY_RE.search(line)[0] in task.keys for line in o.split("\n")[1:-1])
    assert oracle_answer(after) == answer
    assert oracle_evolve(after) == after  # idempotent


def test_oracle_solves_task_when_its_evolve_code_runs_periodically():
    for level in (1, 3):
        task = make(10, difficulty=Difficulty(0.06, level))
        plain = run_oracle(task)
        compacted = run_oracle(task, compact_every=3, compact=oracle_evolve)
        assert compacted.score == 1.0
        assert compacted.tool_calls == plain.tool_calls  # nothing needed had to be fetched again


def test_evolve_code_runs_within_sandbox_limits_at_full_scale():
    task = make(11, difficulty=Difficulty(1.0, 3))
    state = read_all(task)
    after = oracle_evolve(state)
    assert len(dumps_state(after)) < 0.25 * len(dumps_state(state))
    assert task.score(oracle_answer(after)) == 1.0


def env_episode(strategy: str, window: int, seed: int = 0) -> dict:
    """The oracle in `CompactionEnv`: "none" ignores compaction requests, "evolve" answers them."""
    config = EnvConfig(context_window=window)
    env = make_env("probe", strategy=strategy, config=config, difficulty=Difficulty(0.3, 2))
    return run_oracle_episode(env, seed, use_evolve=strategy == "evolve")


def test_oracle_evolve_episode_with_many_compactions_succeeds():
    """Each edit cuts an already cut State again; nothing the oracle needs is lost or fetched twice."""
    for seed in range(2):
        plain, info = env_episode("none", 1_000_000, seed), env_episode("evolve", 5_000, seed)
        ledger = info["ledger"]
        assert info["success"], info["truncated_reason"]
        assert ledger["compactions"] >= 8 and ledger["evolve_failures"] == 0
        assert info["turns"] == plain["turns"] + ledger["compactions"]
        assert ledger["peak_context_tokens"] < plain["ledger"]["peak_context_tokens"] / 2


def test_oracle_evolve_call_is_short():
    """The edit is a demonstration for SFT and each of its tokens reads the whole context: keep it
    a few lines of code (o200k tokens per call, as the ledger counts them)."""
    ledger = env_episode("evolve", 5_000)["ledger"]
    assert ledger["evolve_tokens"] / ledger["compactions"] < 150
