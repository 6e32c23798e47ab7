"""The research family: determinism, split hygiene, tool errors, scoring, the context-bound
oracle (plain, under lossy compaction, and after its own evolve code) and output volume."""

from __future__ import annotations

import json
import re
from itertools import combinations

import pytest
from driver import run_oracle  # tests/ is on sys.path under pytest
from rl_compaction_envs.research import POOLS, ResearchFamily, ResearchTask
from rl_compaction_envs.research.oracle import EVOLVE_TEMPLATE, MAX_CALLS
from rl_compaction_envs.research.pools import split_of_root
from rl_compaction_envs.research.text import CORRECTION_PREFIX, parse_page, parse_statement

from rl_compaction.core.sandbox import run_evolve
from rl_compaction.core.state import State, dumps_state, validate_state
from rl_compaction.core.tiktoken_offline import get_encoding
from rl_compaction.harness.env import EnvConfig
from rl_compaction.harness.oracle import make_env, run_oracle_episode
from rl_compaction.harness.tasks import SPLITS, Difficulty, ToolError, get_family, tool_arguments

SMALL = Difficulty(scale=0.06, level=2)
FAMILY = ResearchFamily()


def make(seed: int, split: str = "test", difficulty: Difficulty = SMALL) -> ResearchTask:
    return FAMILY.make(seed, split, difficulty)


def step(task: ResearchTask, state: State, item: dict) -> State:
    """Append a task tool call and its output, as the env does."""
    out = task.call_tool(item["name"], tool_arguments(item))
    return state + [item, {"type": "function_call_output", "call_id": item["call_id"], "output": out}]


def clear_old_outputs(keep: int):
    """Lossy compaction: every tool output but the last `keep` becomes a placeholder."""

    def compact(state: State) -> State:
        outputs = [i for i, it in enumerate(state) if it.get("type") == "function_call_output"]
        old = set(outputs[:-keep])
        return [dict(it, output="[output cleared]") if i in old else it for i, it in enumerate(state)]

    return compact


def drop_old_turns(keep: int):
    """Lossy compaction: keep the task statement and only the last `keep` call/output pairs."""

    def compact(state: State) -> State:
        calls = [it["call_id"] for it in state if it.get("type") == "function_call"]
        kept = set(calls[-keep:])
        return [state[0]] + [it for it in state[1:] if it.get("call_id") in kept]

    return compact


def evolve_with_oracle(task: ResearchTask, state: State, call_id: str = "evolve_1") -> tuple[State, State]:
    """Run the oracle's evolve code on `state` in the QuickJS sandbox, as the env would.
    Returns (state with the pending call, validated result)."""
    pending = {"type": "function_call", "call_id": call_id, "name": "evolve", "arguments": "{}"}
    code = task.oracle().evolve_code(state + [pending])
    pending["arguments"] = json.dumps({"code": code})
    before = state + [pending]
    result = run_evolve(before, code)
    assert result.error is None, result.error
    return before, validate_state(result.state, pending_call_id=call_id)


# --------------------------------------------------------------------------- generation


def test_registered_and_deterministic():
    assert isinstance(get_family("research"), ResearchFamily)
    a, b = make(7), make(7)
    assert a.initial_state() == b.initial_state() and a.tools() == b.tools()
    ep_a, ep_b = run_oracle(a), run_oracle(b)
    assert ep_a.outputs == ep_b.outputs and ep_a.answer == ep_b.answer
    assert make(8).initial_state() != a.initial_state()
    assert make(7, "train").initial_state() != a.initial_state()
    validate_state(a.initial_state())


def test_pools_and_entity_names_are_disjoint_across_splits():
    for s1, s2 in combinations(SPLITS, 2):
        for pool in POOLS[s1]:
            assert not set(POOLS[s1][pool]) & set(POOLS[s2][pool]), (pool, s1, s2)
    names = {split: set() for split in SPLITS}
    for split in SPLITS:
        for seed in range(6):
            task = make(seed, split)
            names[split] |= task.entity_names()
            for name in task.entity_names():  # every name carries a root of its own split
                assert split in {split_of_root(w) for w in name.split()}, (split, name)
    for s1, s2 in combinations(SPLITS, 2):
        assert not names[s1] & names[s2]


def test_questions_chain_hops_per_level():
    for level, n_questions, hops in ((1, 2, {2}), (2, 4, {3}), (3, 6, {3, 4})):
        task = make(1, difficulty=Difficulty(0.06, level))
        questions = parse_statement(task.initial_state()[0]["content"])
        assert [q.qid for q in questions] == task.question_ids and len(questions) == n_questions
        assert all(len(q.chain) - 1 in hops for q in questions)  # relations, then the asked fact
        assert len({q.anchor for q in questions}) == n_questions


def test_search_lists_every_page_of_an_exact_name_and_look_alikes():
    task = make(2, difficulty=Difficulty(0.06, 3))
    world = task._world
    for name in dict.fromkeys(e for e, _ in world.chain_steps):
        found = json.loads(task.call_tool("search", {"query": name}))["results"]
        urls = {r["url"] for r in found}
        own = {p.url for p in world.pages.values() if p.subject == name}
        assert own <= urls, name
        assert all(re.match(r"\d{4}-\d{2}-\d{2} — ", r["excerpt"]) for r in found)
    titles = [p.title for p in world.pages.values()]
    assert any(t.startswith(CORRECTION_PREFIX) for t in titles)
    look_alike = sum(1 for t in titles if not t.startswith(CORRECTION_PREFIX) and titles.count(t) > 1)
    assert look_alike > 0  # archived copies share the title on another domain


# --------------------------------------------------------------------------- tools and scoring


@pytest.mark.parametrize(
    ("name", "args", "message"),
    [
        ("browse", {"url": "x"}, "unknown tool"),
        ("search", {}, "missing required argument 'query'"),
        ("search", {"query": 3}, "must be a string"),
        ("search", {"query": "   "}, "empty"),
        ("search", {"query": "x" * 301}, "limit"),
        ("search", {"query": "a", "page": 2}, "unexpected argument\\(s\\) page"),
        ("open", {"url": "https://nowhere.example/"}, "no page at"),
        ("open", {"url": None}, "must be a string"),
        ("open", ["https://x"], "JSON object"),
    ],
)
def test_bad_tool_calls_raise_tool_error(name, args, message):
    with pytest.raises(ToolError, match=message):
        make(0).call_tool(name, args)


def test_open_returns_a_long_page():
    task = make(0, difficulty=Difficulty(scale=1.0, level=2))
    anchor = task._world.questions[0].anchor
    results = json.loads(task.call_tool("search", {"query": anchor}))["results"]
    page = task.call_tool("open", {"url": next(r["url"] for r in results if r["title"] == anchor)})
    assert parse_page(page).complete and len(page) > 10_000


def test_score_partial_credit_normalisation_and_garbage():
    task = make(3)
    truth = dict(task._world.answers)
    assert task.score(json.dumps(truth)) == 1.0
    assert task.score("```json\n" + json.dumps({k: v.upper() + "." for k, v in truth.items()}) + "\n```") == 1.0
    half = {k: (v if i % 2 == 0 else "unknown") for i, (k, v) in enumerate(truth.items())}
    assert task.score(json.dumps(half)) == pytest.approx(0.5)
    for garbage in ("", "{}", "[1, 2]", "not json", '{"Q1": null}', json.dumps(dict.fromkeys(truth, "1900"))):
        assert task.score(garbage) == 0.0


def test_ignoring_dates_and_corrections_fails():
    """An agent that trusts the first page titled with the name and never reads notices."""
    scores = []
    for seed in range(5):
        task = make(seed)
        answers = {}
        for q in task._world.questions:
            cur = q.anchor
            for attr in q.chain:
                results = json.loads(task.call_tool("search", {"query": cur}))["results"]
                first = next((r for r in results if r["title"] == cur), None)
                cur = first and parse_page(task.call_tool("open", {"url": first["url"]})).facts.get(attr)
                if cur is None:
                    break
            answers[q.qid] = cur or ""
        scores.append(task.score(json.dumps(answers)))
    assert sum(scores) / len(scores) < 0.5


# --------------------------------------------------------------------------- oracle


@pytest.mark.parametrize("level", [1, 2, 3])
def test_oracle_solves_test_split(level):
    for seed in range(5):
        ep = run_oracle(make(seed, difficulty=Difficulty(0.06, level)))
        assert ep.score == 1.0, (level, seed, ep.answer)


def test_oracle_refetches_under_lossy_compaction():
    difficulty = Difficulty(0.06, 1)
    for seed in range(3):
        task = make(seed, difficulty=difficulty)
        plain = run_oracle(task)
        cleared = run_oracle(task, compact_every=12, compact=clear_old_outputs(keep=8))
        assert cleared.score == 1.0 and cleared.tool_calls > plain.tool_calls
        dropped = run_oracle(task, compact_every=12, compact=drop_old_turns(keep=8))
        assert dropped.score == 1.0 and dropped.tool_calls > plain.tool_calls


def test_oracle_gives_up_cleanly_when_compaction_destroys_everything():
    task = make(0)
    ep = run_oracle(task, compact_every=2, compact=clear_old_outputs(keep=1))
    assert ep.answer is not None and ep.tool_calls <= MAX_CALLS + 1
    assert set(json.loads(ep.answer)) == set(task.question_ids) and ep.score < 1.0


def test_oracle_ignores_env_nudges_and_evolve_receipts():
    task = make(4)
    oracle, state = task.oracle(), task.initial_state()
    for turn in range(200):
        item = oracle.act(state)[0]
        if item["name"] == "submit":
            break
        state = step(task, state, item)
        if turn % 5 == 4:
            state = state + [
                {"type": "message", "role": "user", "content": "Context is near its limit: compact it now."},
                {"type": "function_call", "call_id": f"ev{turn}", "name": "evolve", "arguments": '{"code": "x"}'},
                {"type": "function_call_output", "call_id": f"ev{turn}", "output": '{"applied": false}'},
            ]
    assert task.score(tool_arguments(item)["answer"]) == 1.0


@pytest.mark.parametrize("level", [1, 2, 3])
def test_evolve_code_keeps_exactly_what_the_oracle_needs(level):
    task = make(5, "validation", Difficulty(0.3, level))
    plain = run_oracle(task)
    oracle, state = task.oracle(), task.initial_state()
    state.append({"type": "reasoning", "id": "rs_1", "summary": []})
    for _ in range(plain.tool_calls // 2):
        state = step(task, state, oracle.act(state)[0])
    before, after = evolve_with_oracle(task, state)
    assert after[-1] == before[-1] and after[0] == state[0]
    enc = get_encoding("o200k_base")
    assert len(enc.encode(dumps_state(after[:-1]))) < 0.4 * len(enc.encode(dumps_state(before[:-1])))
    assert not any(it["type"] == "reasoning" for it in after)
    # Continue from the compacted State: the oracle needs no refetch and still solves it.
    state = after + [{"type": "function_call_output", "call_id": after[-1]["call_id"], "output": '{"applied": true}'}]
    calls = plain.tool_calls // 2
    while (item := oracle.act(state)[0])["name"] != "submit":
        state, calls = step(task, state, item), calls + 1
    assert task.score(tool_arguments(item)["answer"]) == 1.0
    assert calls + 1 == plain.tool_calls


def test_periodic_evolve_compaction_matches_the_plain_run():
    task = make(6, difficulty=Difficulty(0.06, 3))
    plain = run_oracle(task)
    count = iter(range(1000))

    def compact(state: State) -> State:
        _, after = evolve_with_oracle(task, state, f"evolve_{next(count)}")
        return after + [{"type": "function_call_output", "call_id": after[-1]["call_id"], "output": "{}"}]

    ep = run_oracle(task, compact_every=9, compact=compact)
    assert ep.score == 1.0 and ep.tool_calls == plain.tool_calls


def test_scale_one_gives_long_episodes():
    enc = get_encoding("o200k_base")
    ep = run_oracle(make(0, difficulty=Difficulty(scale=1.0, level=2)))
    assert ep.score == 1.0
    assert sum(len(enc.encode(out)) for out in ep.outputs) > 32_000


def test_evolve_cut_keeps_every_fact_and_correction_of_every_page():
    """The cut keeps a page's sentences that name its subject or open with "Its " / "The town ";
    every fact and correction sentence is one of those and no filler sentence is."""
    for level in (1, 2, 3):
        task = make(1, difficulty=Difficulty(0.3, level))
        state: State = task.initial_state()
        for i, url in enumerate(task._world.pages):
            args = json.dumps({"url": url})
            state = step(task, state, {"type": "function_call", "call_id": f"c{i}", "name": "open", "arguments": args})
        state.append({"type": "function_call", "call_id": "evolve_1", "name": "evolve", "arguments": "{}"})
        result = run_evolve(state, EVOLVE_TEMPLATE.replace("__DROP__", "[]"))
        assert result.error is None, result.error
        cut = {it["call_id"]: it["output"] for it in result.state if it["type"] == "function_call_output"}
        outputs = {it["call_id"]: it["output"] for it in state if it["type"] == "function_call_output"}
        for call_id, output in outputs.items():
            full, short = parse_page(output), parse_page(cut[call_id])
            assert (short.title, short.url, short.date, short.complete) == (full.title, full.url, full.date, True)
            assert short.facts == full.facts and short.corrections == full.corrections
        assert sum(map(len, cut.values())) < 0.3 * sum(map(len, outputs.values()))


def env_episode(strategy: str, window: int, threshold: int | None = None, seed: int = 0) -> dict:
    """The oracle in `CompactionEnv`: "none" ignores compaction requests, "evolve" answers them."""
    config = EnvConfig(context_window=window, compaction_threshold=threshold)
    env = make_env("research", strategy=strategy, config=config, difficulty=Difficulty(0.3, 2))
    return run_oracle_episode(env, seed, use_evolve=strategy == "evolve")


def test_oracle_evolve_episode_with_many_compactions_succeeds():
    """Each edit cuts an already cut State again; nothing the oracle needs is lost or fetched twice."""
    for seed in range(2):
        plain, info = env_episode("none", 1_000_000, seed=seed), env_episode("evolve", 9_000, 5_000, seed)
        ledger = info["ledger"]
        assert info["success"], info["truncated_reason"]
        assert ledger["compactions"] >= 6 and ledger["evolve_failures"] == 0
        assert info["turns"] == plain["turns"] + ledger["compactions"]
        assert ledger["peak_context_tokens"] < plain["ledger"]["peak_context_tokens"] / 2


def test_oracle_evolve_call_is_short():
    """The edit is a demonstration for SFT and each of its tokens reads the whole context: keep it
    a few lines of code (o200k tokens per call, as the ledger counts them)."""
    ledger = env_episode("evolve", 9_000, 5_000)["ledger"]
    assert ledger["evolve_tokens"] / ledger["compactions"] < 250
