"""`EpisodeSpec`: one declaration per episode setting, distributions drawn per task seed, and one spec
taken by every entry point (GRPO, eval, demos, the env and oracle commands, the recipes)."""

from __future__ import annotations

import ast
import dataclasses
from pathlib import Path

import pytest

from rl_compaction.harness.env import CompactionEnv, EnvConfig
from rl_compaction.harness.spec import DISTRIBUTED, EpisodeSpec
from rl_compaction.harness.tasks import Difficulty

PACKAGE = Path(__file__).parents[1] / "rl_compaction"
SETTINGS = {f.name for f in dataclasses.fields(EpisodeSpec)}
#: function parameters that share a setting's name but not its meaning
OTHER_MEANINGS = {
    ("policies/local.py", "__init__", "tokenizer"): "the policy's own HF tokenizer object",
    ("policies/openai_http.py", "__init__", "max_output_tokens"): "a request's output budget (one turn)",
    ("training/trainer.py", "group_advantages", "scale"): "how advantages are scaled",
    # the env's and the oracle's constructors: which task an env plays is given to them, not configured
    ("harness/env.py", "__init__", "family"): "the env's task family (a name or a plug-in instance)",
    ("harness/env.py", "__init__", "split"): "the env's task split",
    ("harness/oracle.py", "make_env", "split"): "the oracle env's task split",
    ("harness/tasks.py", "make", "split"): "the task plug-in contract's signature",
    ("training/demos.py", "write_demos", "split"): "demonstrations are training data: train",
    ("harness/spec.py", "sample", "family"): "None: draw the family",
    ("harness/spec.py", "make_env", "family"): "None: draw the family",
}


def _declarations() -> list[tuple[str, str, str]]:
    """(file, class or function, setting) for every class field with a default, and every parameter with a
    default, named like an EpisodeSpec field, in the package."""
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        where = str(path.relative_to(PACKAGE))
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ClassDef):
                for item in node.body:
                    target = getattr(item, "target", None)
                    if isinstance(item, ast.AnnAssign) and item.value is not None and target.id in SETTINGS:
                        found.append((where, node.name, target.id))
            elif isinstance(node, ast.FunctionDef):
                positional = node.args.posonlyargs + node.args.args
                with_defaults = positional[len(positional) - len(node.args.defaults) :]
                keyword = [a for a, d in zip(node.args.kwonlyargs, node.args.kw_defaults, strict=True) if d is not None]
                found += [(where, node.name, a.arg) for a in with_defaults + keyword if a.arg in SETTINGS]
    return found


def test_every_episode_setting_is_declared_once_with_one_default():
    """Each setting was declared in up to 7 places with defaults of 32,768, 4,500 or 1,000,000 (the window),
    or 400, 64, 100 and 40 (the turn limit). Now: EnvConfig's fields, the spec's own, and the task's
    difficulty, whose defaults the spec reads."""
    declared: dict[str, list[str]] = {}
    for where, owner, name in _declarations():
        if (where, owner, name) not in OTHER_MEANINGS:
            declared.setdefault(name, []).append(f"{where}:{owner}")
    harness = {f.name for f in dataclasses.fields(EnvConfig)}
    for name in SETTINGS:
        expected = ["harness/env.py:EnvConfig"] if name in harness else ["harness/spec.py:EpisodeSpec"]
        if name in ("scale", "level"):
            expected = ["harness/spec.py:EpisodeSpec", "harness/tasks.py:Difficulty"]
            assert getattr(EpisodeSpec(), name) == getattr(Difficulty(), name)
        assert sorted(declared.get(name, [])) == expected, name


def test_a_distribution_draws_the_same_settings_for_the_same_seed_and_covers_its_values():
    spec = EpisodeSpec(
        family=["probe", "vault"],
        family_weights=[1.0, 3.0],
        context_window=[3000, 4000],
        scale={"low": 0.04, "high": 0.08},
        compaction_request=[EnvConfig.compaction_request, ""],
        level=1,
    )
    draws = [spec.sample(seed) for seed in range(200)]
    assert draws[7] == spec.sample(7) and not draws[7].is_distribution
    assert {d.family for d in draws} == {"probe", "vault"}
    assert 0.65 < sum(d.family == "vault" for d in draws) / len(draws) < 0.85  # weights 1:3
    assert {d.context_window for d in draws} == {3000, 4000}
    assert all(0.04 <= d.scale <= 0.08 for d in draws) and len({d.scale for d in draws}) > 100
    assert {d.compaction_request == "" for d in draws} == {True, False}  # some episodes are never asked
    # an unset threshold follows each drawn window (75%), rather than the first window's
    assert {d.context_window: d.env_config().compaction_threshold for d in draws} == {3000: 2250, 4000: 3000}
    assert spec.sample(7, family="probe").family == "probe"  # GRPO's row has drawn the family
    whole = {"low": 3000, "high": 3003}
    assert {EpisodeSpec(context_window=whole).sample(s).context_window for s in range(60)} == {3000, 3001, 3002, 3003}


def test_a_distribution_must_be_drawn_before_it_plays():
    spec = EpisodeSpec(context_window=[3000, 4000])
    with pytest.raises(ValueError, match="context_window hold distributions; sample"):
        spec.env_config()
    with pytest.raises(ValueError, match="needs the task seed"):
        spec.make_env()
    with pytest.raises(ValueError, match="context_window hold distributions; sample"):
        CompactionEnv("probe", config=spec)
    env = spec.make_env(3)
    assert env.config.context_window == spec.sample(3).context_window


def test_the_env_plays_the_spec_it_is_given():
    spec = EpisodeSpec(family="vault", split="validation", scale=0.02, level=1, context_window=3300, max_turns=9)
    env = spec.make_env()
    _, info = env.reset(seed=4)
    assert (info["family"], info["split"], env.difficulty) == ("vault", "validation", Difficulty(0.02, 1))
    assert (env.config.context_window, env.config.compaction_threshold, env.config.max_turns) == (3300, 2475, 9)
    assert "Your context window is 3300 tokens" in env._observation()["instructions"]
    # the env takes a spec as its config too: the harness settings, derived values filled in
    assert CompactionEnv("vault", config=spec).config == spec.env_config()


def test_every_distributed_field_is_a_harness_or_task_setting():
    assert set(DISTRIBUTED) <= SETTINGS
    with pytest.raises(ValueError, match="split takes one value, not a distribution"):
        EpisodeSpec(split=["train", "test"])
