"""A reproduction recipe: `ReproduceConfig` (every setting of configs/reproduce/*.yaml), how a recipe file
is read (TRL's `TrlParser`, over its `base` recipe's settings), and the stage configs it makes (GRPO's and
the eval's), checked before stage 1 so that a bad value is not found after 30 minutes of work."""

from __future__ import annotations

import os
import re
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, fields, replace
from importlib import resources
from pathlib import Path
from typing import Any

import yaml

from rl_compaction.core.configs import as_mapping, check_counts, check_numbers, help_field
from rl_compaction.core.outputs import check_output_dir
from rl_compaction.evaluation.evaluate import EvalConfig
from rl_compaction.harness.spec import EpisodeSpec
from rl_compaction.models.registry import check_model
from rl_compaction.training.demos import check_demo_settings

#: The recipes: configs/reproduce/, installed as `rl_compaction_configs` and read with importlib.resources
#: (a wheel install has them too)
RECIPES = Path(str(resources.files("rl_compaction_configs") / "reproduce"))


#: the fields that hold TRL config overrides: a mapping in YAML, a JSON object on the command line (typed
#: `dict | str | None`, as TRL types its own dict fields, so that TrlParser reads the flag as a string)
TRL_SECTIONS = ("sft", "sft_answers", "grpo")
#: the EpisodeSpec mappings of a recipe
EPISODE_SECTIONS = ("episode", "eval_episode")
#: the recipe's mapping of named eval checks, each a mapping of EpisodeSpec changes
CHECKS = "eval_checks"


#: `check_demo_settings`' names of the settings, as this recipe's fields call them
DEMO_SETTING_NAMES = {
    "families": "family",
    "episodes_per_family": "demo_episodes",
    "strategies": "demo_strategies",
    "weights": "demo_weights",
}

#: the fields handed to stage 4's EvalConfig under their own names less the `eval_` prefix
EVAL_FIELDS = ("eval_episodes", "eval_max_new_tokens", "eval_temperature", "eval_batch_size")


@contextmanager
def _naming(field: str) -> Iterator[None]:
    """Prefix a ValueError raised inside with the field whose value it refused ("level: ...")."""
    try:
        yield
    except ValueError as e:
        raise ValueError(f"{field}: {e}") from None


@dataclass
class ReproduceConfig:
    """Every setting of the recipe: configs/reproduce/*.yaml map one-to-one onto these fields, and
    `rl-compaction reproduce --config FILE --FIELD VALUE` overrides any of them (TRL's `TrlParser`)."""

    output_dir: str = help_field(
        "where every stage writes (refused when not empty, unless resuming)", default="runs/reproduce"
    )
    model: str = help_field(
        "the model to start from: a known name (tiny, tiny-recall, smollm2-135m) or a folder", default="tiny"
    )
    episode: dict[str, Any] | str | None = help_field(
        "EpisodeSpec fields of every stage: the task family, its scale and level, the window (in the model's own "
        "tokens), the threshold and the turn limit; demos and GRPO may play a distribution (a list or {low, high} "
        "per field, several families), drawn per episode (YAML mapping; JSON on the command line)",
        default_factory=dict,
    )
    demo_episodes: int = help_field("oracle episodes played for the demonstrations (train seeds)", default=60)
    demo_strategies: list[str] = help_field(
        "the oracle's strategies in the demonstrations, played in turn",
        default_factory=lambda: ["evolve", "evolve_lossy", "none"],
    )
    demo_weights: list[int] | None = help_field(
        "episodes of each cycle each strategy plays (default: one each)", default=None
    )
    keep_failed: list[str] = help_field(
        "the imperfect strategies whose failed episodes are kept (without their wrong answer)",
        default_factory=lambda: ["evolve_lossy", "none"],
    )
    balance_turns: bool = help_field("SFT samples read, evolve and submit turns equally often", default=True)
    sft: dict[str, Any] | str | None = help_field(
        "TRL SFTConfig fields of the SFT on every turn (YAML mapping; JSON on the command line)", default_factory=dict
    )
    sft_answers: dict[str, Any] | str | None = help_field(
        "SFTConfig fields of a first SFT phase on the answer turns alone (`submit` calls); empty: no such phase",
        default_factory=dict,
    )
    grpo: dict[str, Any] | str | None = help_field(
        "CompactionGRPOConfig fields (TRL's GRPOConfig plus env and reward) of the GRPO stage", default_factory=dict
    )
    eval_episodes: int = help_field("held-out test episodes per row (seeds 0..n-1)", default=32)
    eval_episode: dict[str, Any] | str | None = help_field(
        "EpisodeSpec fields the eval plays differently from `episode` (e.g. a longer scale: the edits must hold "
        "over more compactions)",
        default_factory=dict,
    )
    eval_checks: dict[str, Any] | str | None = help_field(
        "named changes of the eval's EpisodeSpec under which the learned and SFT-only checkpoints play again, "
        "two rows each (e.g. `no requests: {compaction_request: ''}`) (YAML mapping; JSON on the command line)",
        default_factory=dict,
    )
    eval_check_episodes: int | None = help_field(
        "held-out test episodes per row of each eval check (default, and at most: eval_episodes)", default=None
    )
    eval_max_new_tokens: int = help_field("tokens a model row may generate per turn", default=96)
    eval_temperature: float = help_field("sampling temperature of the model rows", default=1.0)
    eval_batch_size: int = help_field("eval episodes run together (one batched model call)", default=16)
    baselines: list[str] = help_field(
        "policy specs evaluated beside the checkpoints at the same window",
        default_factory=lambda: ["oracle@none", "oracle@sliding_window", "oracle@clear_tool_outputs", "oracle@evolve"],
    )
    unlimited_window: int = help_field(
        'the window of the extra "unlimited context" row (oracle, no compaction)', default=1_000_000
    )
    wandb: bool = help_field("log GRPO and the eval to Weights & Biases (offline without an account)", default=False)
    warm_start: str | None = help_field(
        "a finished SFT checkpoint of this recipe (`build_warm_start`): stages 1-2 are skipped, GRPO starts "
        "from it and it is the SFT-only row",
        default=None,
    )

    def __post_init__(self) -> None:
        """Check every setting now, before stage 1, so a bad value is not found after 30 minutes of work."""
        check_numbers(self)
        from rl_compaction.evaluation.evaluate import MODEL_STRATEGIES, split_spec
        from rl_compaction.harness.oracle import ORACLE_STRATEGIES
        from rl_compaction.training.sft import SFTConfig
        from rl_compaction.training.trainer import CompactionGRPOConfig

        for section in (*TRL_SECTIONS, *EPISODE_SECTIONS, CHECKS):
            setattr(self, section, as_mapping(section, getattr(self, section)))
        for name, changes in self.eval_checks.items():
            as_mapping(f"{CHECKS}: {name}", changes)
        check_counts(self, ("demo_episodes", "eval_episodes", "eval_max_new_tokens", "eval_batch_size"))
        check_counts(self, ("unlimited_window",))
        if self.eval_check_episodes is not None:
            check_counts(self, ("eval_check_episodes",))
        for section in EPISODE_SECTIONS:
            try:
                spec = self.spec if section == "episode" else self.eval_spec
            except (TypeError, ValueError) as e:  # an unknown key is a TypeError of the dataclass
                raise ValueError(f"{section}: {e}") from None
            if section == "eval_episode" and spec.is_distribution:
                raise ValueError(
                    "eval_episode: the eval compares policies at one setting; give one value for each field that "
                    "`episode` draws from a distribution"
                )
        check_output_dir(self.output_dir)
        if self.warm_start is not None and not (Path(self.warm_start) / "config.json").is_file():
            raise ValueError(f"warm_start {self.warm_start!r} is not a model folder (no config.json there)")
        check_demo_settings(
            self.spec.families,
            self.demo_episodes,
            self.demo_strategies,
            self.keep_failed,
            self.demo_weights,
            names=DEMO_SETTING_NAMES,
        )
        for spec in self.baselines:
            name, strategy = split_spec(spec, "evolve")
            allowed = ORACLE_STRATEGIES if name == "oracle" else MODEL_STRATEGIES
            if strategy not in allowed:
                raise ValueError(f"baseline {spec!r}: strategy {strategy!r} is not one of {', '.join(allowed)}")
        for section, config_class in zip(TRL_SECTIONS, (SFTConfig, SFTConfig, CompactionGRPOConfig), strict=True):
            known = {f.name for f in fields(config_class)}
            unknown = sorted(set(getattr(self, section)) - known)
            if unknown:
                raise ValueError(
                    f"unknown key(s) under {section}: {', '.join(unknown)} ({config_class.__name__} fields)"
                )
        # stages 3 and 4 build these configs after hours of work: build them now, so their checks run now
        out = Path(self.output_dir)
        try:
            CompactionGRPOConfig(**grpo_settings(self, out / "grpo"))
        except ValueError as e:
            raise ValueError(f"grpo: {e}") from None
        try:
            eval_configs(self, out, self.baselines or ["oracle@none"])
            check_configs(self, out, ["oracle@none"])
        except ValueError as e:  # EvalConfig names its own fields: `temperature` is this config's `eval_temperature`
            field, _, rest = str(e).partition(" ")
            raise ValueError(f"eval_{field} {rest}" if f"eval_{field}" in EVAL_FIELDS else str(e)) from None
        if self.warm_start is None:
            with _naming("model"):
                check_model(self.model)

    @classmethod
    def from_yaml(cls, path: str | Path, **overrides: Any) -> ReproduceConfig:
        """Read a YAML file of these fields with TRL's parser; an unknown key is an error naming the valid
        ones. `overrides` set fields after the file; under sft / grpo they update the file's mapping."""
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(overrides) - known)
        if unknown:
            raise ValueError(f"unknown override(s) {', '.join(unknown)}; valid: {', '.join(sorted(known))}")
        config, _ = parse_reproduce_args(["--config", str(path)])
        changes = {
            key: {**getattr(config, key), **value} if isinstance(value, dict) else value
            for key, value in overrides.items()
            if value is not None
        }
        return replace(config, **changes) if changes else config

    @property
    def spec(self) -> EpisodeSpec:
        """What demos, GRPO and the eval play (the eval with `eval_episode`'s changes)."""
        return EpisodeSpec(**self.episode)

    @property
    def eval_spec(self) -> EpisodeSpec:
        return replace(self.spec, **self.eval_episode)


@dataclass
class ReproduceRunArguments:
    """What the command line adds to a recipe: whether to continue a run."""

    resume: bool = help_field("continue a failed or killed run in output_dir (same config)", default=False)


#: what `--help` says first: TrlParser's --config flag is not an argparse option, so it lists nowhere else
CONFIG_HELP = (
    "Every field below is a ReproduceConfig field; --config FILE.yaml reads them from a recipe "
    "(default: the packaged configs/reproduce/vault-tiny-cpu.yaml), and flags after it override the file's values."
)


def parse_reproduce_args(argv: list[str]) -> tuple[ReproduceConfig, bool]:
    """(config, resume) from `rl-compaction reproduce` arguments, parsed by TRL's `TrlParser` as TRL's own
    scripts parse theirs. A missing, unreadable or non-YAML recipe, or a key that is no field, is a
    ValueError or FileNotFoundError saying so; a bad flag exits as argparse does."""
    from trl import TrlParser

    argv = list(argv)
    if "--config" not in argv:
        argv = ["--config", str(RECIPES / "vault-tiny-cpu.yaml"), *argv]
    elif argv.index("--config") == len(argv) - 1:
        raise ValueError("--config needs a YAML file")
    path = Path(argv[argv.index("--config") + 1])
    if path.is_dir():
        raise ValueError(f"{path} is a folder; --config takes a YAML file")
    if not path.is_file():
        raise FileNotFoundError(f"reproduce config not found: {path}")
    parser = TrlParser(
        (ReproduceConfig, ReproduceRunArguments), prog="rl-compaction reproduce", description=CONFIG_HELP
    )
    try:
        with _composed(path) as recipe:  # TRL's parser reads the recipe with its base's settings merged in
            argv[argv.index("--config") + 1] = str(recipe)
            config, run, from_file, _ = parser.parse_args_and_config(
                argv, return_remaining_strings=True, separate_remaining_strings=True
            )
    except yaml.YAMLError as e:
        raise ValueError(f"{path} is not valid YAML: {' '.join(str(e).split())}") from None
    except ValueError as e:  # TRL's words for a file that is no mapping, or a bad value's own (names its field)
        if "must contain a YAML mapping" in str(e) or "`env` field" in str(e):
            raise ValueError(f"{path}: expected a mapping of ReproduceConfig fields ({e})") from None
        raise
    unknown = [key.removeprefix("--") for key in from_file[::2]]
    if unknown:
        valid = ", ".join(sorted(f.name for f in fields(ReproduceConfig)))
        raise ValueError(f"{path}: unknown field(s) {', '.join(unknown)}; valid: {valid}")
    return config, run.resume


def compose_recipe(path: Path, seen: tuple[Path, ...] = ()) -> Any:
    """A recipe's settings with those of its `base` (a recipe file, relative to this one) underneath: a key
    the recipe gives replaces the base's, a mapping (episode, sft, grpo, ...) key by key, except the checks
    (`eval_checks`), which are replaced whole: a recipe states every check it runs. A file that is no
    mapping comes back as it is, for the parser to refuse."""
    data = yaml.safe_load(path.read_text(encoding="utf-8"))
    if not isinstance(data, dict) or "base" not in data:
        return data
    base = path.parent / str(data.pop("base"))
    if base.resolve() in seen or base.resolve() == path.resolve():
        raise ValueError(f"{path}: its base {base} is itself or one of its own bases")
    if not base.is_file():
        raise FileNotFoundError(f"{path}: its base recipe {base} does not exist")
    under = compose_recipe(base, (*seen, path.resolve()))
    if not isinstance(under, dict):
        raise ValueError(f"{base} (the base of {path}) is not a mapping of ReproduceConfig fields")
    return {
        **under,
        **{
            k: {**under[k], **v} if isinstance(v, dict) and isinstance(under.get(k), dict) and k != CHECKS else v
            for k, v in data.items()
        },
    }


@contextmanager
def _composed(path: Path) -> Iterator[Path]:
    """`path` itself, or, for a recipe with a `base`, a temporary file of the composed settings."""
    raw = yaml.safe_load(path.read_text(encoding="utf-8"))
    if not isinstance(raw, dict) or "base" not in raw:
        yield path
        return
    data = compose_recipe(path)
    with tempfile.NamedTemporaryFile("w", suffix=".yaml", encoding="utf-8", delete=False) as f:
        yaml.safe_dump(data, f, sort_keys=False)
    try:
        yield Path(f.name)
    finally:
        os.unlink(f.name)


def grpo_settings(config: ReproduceConfig, out: Path) -> dict[str, Any]:
    """The `CompactionGRPOConfig` fields of stage 3: the recipe's task, on CPU, then its `grpo` section."""
    return {
        "output_dir": str(out),
        "use_cpu": True,
        "save_strategy": "no",
        "report_to": "wandb" if config.wandb else "none",
        "run_name": f"{Path(config.output_dir).resolve().name}-grpo",  # W&B's name of the run
        "bf16": False,
        "activation_checkpointing": False,
        **config.grpo,
    }


def eval_configs(config: ReproduceConfig, out: Path, policies: list[str]) -> tuple[EvalConfig, EvalConfig]:
    """Stage 4's two evals: `policies` at the recipe's window, and the oracle at the unlimited window."""
    # held-out test seeds, counted in the trained model's tokens (as GRPO counted)
    spec = replace(config.eval_spec, split="test", tokenizer=str(out / "grpo"))
    common = {
        "episodes": config.eval_episodes,
        "max_new_tokens": config.eval_max_new_tokens,
        "temperature": config.eval_temperature,
        "batch_size": config.eval_batch_size,
    }
    windowed = EvalConfig(policies=policies, output_dir=str(out / "eval"), episode=spec, **common)
    unlimited_spec = replace(spec, context_window=config.unlimited_window, compaction_threshold=None)
    unlimited = EvalConfig(
        policies=["oracle@none"], output_dir=str(out / "eval_unlimited"), episode=unlimited_spec, **common
    )
    return windowed, unlimited


def check_configs(config: ReproduceConfig, out: Path, policies: list[str]) -> dict[str, EvalConfig]:
    """Stage 4's evals of `eval_checks`: `policies` under each named change of the eval's settings."""
    windowed, _ = eval_configs(config, out, policies)
    episodes = min(config.eval_check_episodes or config.eval_episodes, config.eval_episodes)
    checks = {}
    for name, changes in config.eval_checks.items():
        try:
            spec = replace(windowed.episode, **changes)
        except (TypeError, ValueError) as e:  # an unknown key is a TypeError of the dataclass
            raise ValueError(f"{CHECKS}: {name}: {e}") from None
        folder = out / ("eval_check_" + re.sub(r"[^a-z0-9]+", "_", name.lower()).strip("_"))
        try:
            checks[name] = replace(windowed, policies=policies, output_dir=str(folder), episode=spec, episodes=episodes)
        except ValueError as e:
            raise ValueError(f"{CHECKS}: {name}: {e}") from None
    return checks
