"""Token-in, token-out prompts (`rl_compaction.policies.prompts`): an oracle episode played through
`PromptBuilder` is cut into training rows only where an edit applied, under every shipped chat template
and the public Qwen2.5, Qwen3 and SmolLM2 ones, also when the model writes a turn otherwise than the
template would write it back (a turn cut at the token budget, compact tool-call JSON, reasoning)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from tokenizers import AddedToken
from transformers import AutoTokenizer

import rl_compaction
from rl_compaction.accounting import ChatTemplateCounter
from rl_compaction.harness.env import CompactionEnv, EnvConfig
from rl_compaction.harness.oracle import OraclePolicy
from rl_compaction.harness.policy import Turn, turns_from_ids
from rl_compaction.harness.tasks import Difficulty
from rl_compaction.models.tiny import build_tiny_tokenizer
from rl_compaction.policies.prompts import PromptBuilder
from rl_compaction.training.segments import build_segments

PUBLIC = Path(__file__).parent / "data" / "templates"
SHIPPED = sorted((Path(rl_compaction.__file__).parent / "weights").glob("*/chat_template.jinja"))
TEMPLATES = {
    **{f"shipped-{path.parent.name}": path for path in SHIPPED},
    "qwen2.5": PUBLIC / "qwen2_5.jinja",
    "qwen3": PUBLIC / "qwen3.jinja",
    "smollm2": PUBLIC / "smollm2.jinja",
}
#: Qwen's added tokens that the tiny tokenizer lacks (it has <|im_start|>, <|im_end|>, <tool_call>, </tool_call>)
QWEN_ADDED = ("<tool_response>", "</tool_response>", "<think>", "</think>")
VARIANTS = ("as_rendered", "cut", "compact", "thinking")
REASONING = "<think>\nI read the State first.\n</think>\n\n"


@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory):
    path = tmp_path_factory.mktemp("tok")
    build_tiny_tokenizer(path, "chatml")
    return path


def tokenizer(name: str, tiny_dir: Path):
    """A shipped model's own tokenizer, or the tiny one with Qwen's added tokens and a public template."""
    if name.startswith("shipped-"):
        return AutoTokenizer.from_pretrained(TEMPLATES[name].parent, local_files_only=True)
    tok = AutoTokenizer.from_pretrained(tiny_dir, local_files_only=True)
    tok.add_tokens([AddedToken(t, special=False, normalized=False) for t in QWEN_ADDED])
    tok.chat_template = TEMPLATES[name].read_text()
    return tok


def sampled_text(counter: ChatTemplateCounter, obs: dict, items: list[dict], variant: str) -> str:
    """What a model trained on the template writes for the oracle's `items`: the template's own text
    of the turn up to its end-of-turn token, or that text varied as `variant` says."""
    prompt = counter.render(obs["instructions"], obs["tools"], obs["state"])
    full = counter.render(obs["instructions"], obs["tools"], obs["state"] + items, add_generation_prompt=False)
    assert full.startswith(prompt)
    eos = counter.tokenizer.eos_token
    text = full[len(prompt) :]
    text = text[: text.index(eos) + len(eos)]
    calls = [x for x in items if x["type"] == "function_call"]
    if variant == "cut":  # the token budget ends the turn after a space, which the parse drops
        return text[: text.index('"arguments": ') + len('"arguments": ')]
    if variant == "compact" and calls:
        blocks = [
            "<tool_call>\n"
            + json.dumps({"name": c["name"], "arguments": json.loads(c["arguments"])}, separators=(",", ":"))
            + "\n</tool_call>"
            for c in calls
        ]
        return text[: text.index("<tool_call>")] + "\n".join(blocks) + eos
    if variant == "thinking":
        return REASONING + text.removeprefix("<think>\n\n</think>\n\n")
    return text


def play(tok, variant: str, family: str = "probe", seed: int = 0) -> dict:
    """One oracle episode, each turn sampled as `sampled_text` and prompted through `PromptBuilder`;
    also the prompts of a fresh rendering of the whole State (what policies sent before)."""
    counter = ChatTemplateCounter(tok)
    config = EnvConfig(context_window=8000, compaction_threshold=3000)
    env = CompactionEnv(family, split="test", difficulty=Difficulty(0.06, 1), config=config, counter=counter)
    obs, _ = env.reset(seed=seed)
    oracle = OraclePolicy(env.task.oracle(), env, use_evolve=True)
    builder = PromptBuilder(counter, {tok.eos_token_id})
    built, fresh, cuts = [], [], 0
    while True:
        [prompt] = builder.prompt_ids([obs])
        items = oracle.act(obs)
        # "cut": one later turn that calls a task tool (not an edit: the oracle answers each request once)
        task_call = any(x["type"] == "function_call" and x["name"] not in ("evolve", "submit") for x in items)
        cut = variant == "cut" and not cuts and len(built) >= 1 and task_call
        cuts += cut
        written = "cut" if cut else "as_rendered" if variant == "cut" else variant
        completion = counter.encode_text(sampled_text(counter, obs, items, written))
        [turn] = turns_from_ids(tok, [prompt], [completion], None)
        builder.remember([obs], [turn])
        built.append((prompt, completion, None))
        fresh.append((counter.input_ids(obs["instructions"], obs["tools"], obs["state"]), completion, None))
        obs, _, terminated, truncated, info = env.step(turn.as_action())
        if terminated or truncated:
            break
    edits = sum(v["reason"] == "evolve" for v in env.state_versions)
    return {"built": built, "fresh": fresh, "edits": edits, "cuts": cuts, "success": info["success"]}


@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("name", list(TEMPLATES))
def test_an_episode_is_cut_only_where_an_edit_applied(name, variant, tiny_dir):
    episode = play(tokenizer(name, tiny_dir), variant)
    assert episode["success"] and episode["edits"] >= 1 and episode["cuts"] == (variant == "cut")
    rows = build_segments(episode["built"])
    assert len(rows) == 1 + episode["edits"]
    assert sum(s.trained_tokens for s in rows) == sum(len(c) for _, c, _ in episode["built"])
    if variant != "as_rendered":  # the scenario is one where rendering the whole State afresh cuts more rows
        assert len(build_segments(episode["fresh"])) > len(rows)


@pytest.mark.parametrize("name", [n for n in TEMPLATES if n.startswith("shipped-")])
def test_under_the_tiny_template_the_ids_are_a_fresh_renderings(name, tiny_dir):
    """Where the template writes each turn back as sampled, the prompts are exactly the whole State
    rendered, so figures measured with the project's tiny models stay as they were."""
    episode = play(tokenizer(name, tiny_dir), "as_rendered", family="vault", seed=1)
    assert episode["edits"] >= 1
    assert [p for p, _, _ in episode["built"]] == [p for p, _, _ in episode["fresh"]]


def test_two_episodes_that_fit_one_observation_and_disagree_render_afresh(tiny_dir):
    """Policies match an observation to its episode by the State: where two remembered turns fit it
    (same State and items) but were sampled as different ids, the prompt is the State rendered."""
    tok = tokenizer("qwen3", tiny_dir)
    counter = ChatTemplateCounter(tok)
    env = CompactionEnv("probe", split="test", difficulty=Difficulty(0.06, 1), counter=counter)
    obs, _ = env.reset(seed=0)
    items = OraclePolicy(env.task.oracle(), env).act(obs)
    text = sampled_text(counter, obs, items, "as_rendered")
    builder = PromptBuilder(counter, {tok.eos_token_id})
    [prompt] = builder.prompt_ids([obs])
    turns = [
        Turn(items=items, prompt_ids=prompt, completion_ids=counter.encode_text(t))
        for t in (text, REASONING + text.removeprefix("<think>\n\n</think>\n\n"))
    ]
    builder.remember([obs, obs], turns)
    after, *_ = env.step(turns[0].as_action())
    fresh = counter.input_ids(after["instructions"], after["tools"], after["state"])
    assert builder.prompt_ids([after]) == [fresh]
    builder.remember([obs], turns[:1])
    [extended] = builder.prompt_ids([after])
    assert extended[: len(prompt) + len(turns[0].completion_ids)] == prompt + turns[0].completion_ids
