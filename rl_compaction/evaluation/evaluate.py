"""`rl-compaction eval`: compare policies on held-out tasks with the same accounting.

A policy spec is ``oracle`` (the task's scripted oracle), ``openai:MODEL`` (any
OpenAI-compatible endpoint), ``vllm:MODEL`` (vLLM on a GPU: in-process, or a ``trl vllm-serve``
server with ``--base-url``) or a local transformers model (a path, ``smollm2-135m``, ``tiny``), optionally
followed by ``@STRATEGY``: ``evolve`` (the agent is asked to compact itself at the threshold),
``none``, ``sliding_window``, ``clear_tool_outputs``, or ``summary`` (the model writes a summary
at the threshold; model policies only). Every episode goes to ``episodes.jsonl``; the summary to
``metrics.json``, a table on stdout and ``success_vs_cost.png``.

This module runs it (config, policies, envs, episodes, resume); `rl_compaction.evaluation.report` makes
the rows, the table, the plot and the W&B log of what it ran.
"""

from __future__ import annotations

import json
import math
import os
import random
import sys
import time
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

from rl_compaction.core.configs import as_mapping, check_counts, check_numbers, help_field
from rl_compaction.core.outputs import check_output_dir, lock_output_dir
from rl_compaction.core.reports import (
    progress_bar,
)
from rl_compaction.evaluation.report import (
    format_metrics,
    log_to_wandb,
    plot_success_vs_cost,
    plot_title,
    policy_metrics,
)
from rl_compaction.harness.env import CompactionEnv
from rl_compaction.harness.labels import LabelEdits
from rl_compaction.harness.oracle import ORACLE_STRATEGIES, OracleScriptedPolicy
from rl_compaction.harness.policy import Policy, ScriptedPolicy
from rl_compaction.harness.rollout import EpisodeRecord, closing_envs, read_jsonl, rollout, write_jsonl
from rl_compaction.harness.spec import EpisodeSpec
from rl_compaction.harness.strategies import HARNESS_STRATEGIES, Summary
from rl_compaction.models.registry import counter_name

MODEL_STRATEGIES = ("evolve", "none", "summary", *HARNESS_STRATEGIES)


@dataclass
class EvalConfig:
    """Settings of one evaluation, all recorded with every episode. `rl-compaction eval` reads them with
    TRL's `TrlParser`: from flags, or from `--config FILE.yaml` with flags overriding the file."""

    policies: list[str] = help_field(
        "policy specs: oracle | openai:MODEL | vllm:MODEL | a local model (path, smollm2-135m, tiny), each "
        "with an optional @STRATEGY; repeat --policy to compare",
        metadata={"aliases": ["--policy"], "action": "extend"},
    )
    episode: EpisodeSpec | str | dict[str, Any] | None = help_field(
        "what every episode plays: an EpisodeSpec, or a mapping of its fields (`rl-compaction eval` takes them as "
        "flags and keys of their own: --family, --scale, --context_window, ...)",
        default_factory=EpisodeSpec,
    )
    episodes: int = help_field("episodes per policy, on task seeds seed_start..", default=5)
    seed_start: int = help_field("the first task seed (an integer >= 0)", default=0)
    sampling_seed: int = help_field(
        "seeds the sampling of local transformers models (torch, random) at each batch: seed + the batch's first task "
        "seed, so that a row's episodes do not depend on the rows run before it",
        default=0,
    )
    strategy: str = help_field(
        "the strategy of specs without @: evolve, none, sliding_window, clear_tool_outputs, summary",
        default="evolve",
    )
    max_new_tokens: int = help_field("tokens a model policy may generate per turn", default=512)
    temperature: float = help_field("sampling temperature of model policies (0: greedy)", default=0.7)
    batch_size: int = help_field("episodes run together (one batched model call)", default=4)
    base_url: str | None = help_field(
        "for openai: policies (default: the OpenAI API) and vllm: policies (a trl vllm-serve server)", default=None
    )
    api: str = help_field("the openai: policies' API", default="chat", metadata={"choices": ("chat", "responses")})
    request_timeout_s: float = help_field(
        "openai: policies and vllm: policies with base_url: seconds each request may take to answer, and to "
        "send its whole reply",
        default=600.0,
        metadata={"aliases": ["--request-timeout"]},
    )
    vllm_engine_kwargs: dict[str, Any] | str | None = help_field(
        "vllm: policies without base_url: keyword arguments of vllm.LLM (a JSON object on the command line), "
        'e.g. {"enforce_eager": true, "max_model_len": 8192}; prefix caching is on unless set here',
        default_factory=dict,
    )
    output_dir: str = help_field("where episodes.jsonl, metrics.json and the plot go", default="runs/eval")
    extra: dict[str, Any] | str | None = help_field(
        "free-form settings recorded with every episode (a JSON object on the command line)", default_factory=dict
    )

    def __post_init__(self) -> None:
        """Refuse a bad setting before any episode runs, each with its own one-line reason."""
        check_numbers(self)
        if not self.policies or not all(isinstance(p, str) and p for p in self.policies):
            raise ValueError(f"policies must be a non-empty list of policy specs, got {self.policies!r}")
        check_counts(self, ("episodes", "batch_size", "max_new_tokens"))
        for name, what in (("seed_start", "a task seed"), ("sampling_seed", "a seed")):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise ValueError(f"{name} must be {what} (an integer >= 0), got {value!r}")
        if isinstance(self.episode, (dict, str)):
            self.episode = EpisodeSpec(**as_mapping("episode", self.episode))
        if not isinstance(self.episode, EpisodeSpec):
            raise ValueError(f"episode must be an EpisodeSpec or a mapping of its fields, got {self.episode!r}")
        if self.episode.is_distribution:
            raise ValueError(
                "an eval plays one family at fixed settings (its rows compare policies there); run one eval per setting"
            )
        if self.api not in ("chat", "responses"):
            raise ValueError(f"api must be chat or responses, got {self.api!r}")
        if isinstance(self.temperature, bool) or not isinstance(self.temperature, (int, float)) or self.temperature < 0:
            raise ValueError(f"temperature must be a number >= 0 (0: greedy), got {self.temperature!r}")
        timeout = self.request_timeout_s
        if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or not 0 < timeout < math.inf:
            raise ValueError(f"request_timeout_s must be a positive number of seconds, got {timeout!r}")
        self.extra = as_mapping("extra", self.extra)
        self.vllm_engine_kwargs = as_mapping("vllm_engine_kwargs", self.vllm_engine_kwargs)

    def to_dict(self) -> dict[str, Any]:
        """The config as JSON values (metrics.json, W&B), its episode as the spec's settings."""
        return {**asdict(self), "episode": self.episode.settings()}


def split_spec(spec: str, default_strategy: str) -> tuple[str, str]:
    name, _, strategy = spec.partition("@")
    if not name:
        raise ValueError(f"empty policy spec {spec!r}")
    return name, strategy or default_strategy


def check_policy_spec(spec: str, config: EvalConfig) -> tuple[str, str]:
    """(name, strategy) of a spec, after refusing what `make_policy` would refuse, without loading any model:
    `run_eval` checks every spec before the first row's episodes run, not when the row's turn comes."""
    from rl_compaction.models.registry import check_model

    try:
        name, strategy = split_spec(spec, config.strategy)
        if name == "oracle":
            if strategy not in ORACLE_STRATEGIES:
                raise ValueError(f"the oracle takes strategies {', '.join(ORACLE_STRATEGIES)}; got {strategy!r}")
            return name, strategy
        if strategy not in MODEL_STRATEGIES:
            raise ValueError(f"model policies take strategies {', '.join(MODEL_STRATEGIES)}; got {strategy!r}")
        kind, _, model = name.partition(":") if name.startswith(("openai:", "vllm:")) else ("", "", name)
        if not model:
            raise ValueError(f"{kind}: names no model")
        if kind and config.base_url is not None and not config.base_url.startswith(("http://", "https://")):
            raise ValueError(f"base_url must start with http:// or https://, got {config.base_url!r}")
        if kind != "openai":  # a local model, or vLLM's (it reads the model's tokenizer locally)
            check_model(model)
    except (ValueError, FileNotFoundError) as e:
        message = str(e) if repr(spec) in str(e) else f"policy {spec!r}: {e}"
        raise type(e)(message) from None
    return name, strategy


def make_policy(name: str, strategy: str, config: EvalConfig) -> Policy | ScriptedPolicy:
    """Build the policy named by a spec."""
    if name == "oracle":
        if strategy not in ORACLE_STRATEGIES:
            raise ValueError(f"the oracle takes strategies {', '.join(ORACLE_STRATEGIES)}; got {strategy!r}")
        return OracleScriptedPolicy(strategy)
    if strategy not in MODEL_STRATEGIES:
        raise ValueError(f"model policies take strategies {', '.join(MODEL_STRATEGIES)}; got {strategy!r}")
    if name.startswith("vllm:"):
        from rl_compaction.policies.vllm import VLLMPolicy

        return VLLMPolicy(
            name.removeprefix("vllm:"),
            base_url=config.base_url,
            max_new_tokens=config.max_new_tokens,
            temperature=config.temperature,
            engine_kwargs=config.vllm_engine_kwargs,
            timeout_s=config.request_timeout_s,
        )
    if name.startswith("openai:"):
        from rl_compaction.policies.openai_http import OpenAIPolicy

        return OpenAIPolicy(
            name.removeprefix("openai:"),
            base_url=config.base_url,
            api=config.api,
            timeout_s=config.request_timeout_s,
            max_output_tokens=config.max_new_tokens,
            temperature=config.temperature,
        )
    from rl_compaction.policies.local import TransformersPolicy

    greedy = config.temperature == 0  # as for the OpenAI and vLLM APIs; transformers needs do_sample off
    return TransformersPolicy(
        name,
        max_new_tokens=config.max_new_tokens,
        temperature=1.0 if greedy else config.temperature,
        do_sample=not greedy,
        max_batch_size=config.batch_size,
    )


def make_envs(config: EvalConfig, strategy: str, policy: Policy | ScriptedPolicy, n: int) -> list[LabelEdits]:
    harness = None
    if strategy in HARNESS_STRATEGIES:
        harness = HARNESS_STRATEGIES[strategy]()
    elif strategy == "summary":
        harness = Summary(summarize=_model_summarizer(policy))
    episode = replace(config.episode, tokenizer=counter_name(config.episode.tokenizer))
    if strategy == "none":  # the agent is never asked
        episode = replace(episode, compaction_request="")
    return [LabelEdits(episode.make_env(strategy=harness)) for _ in range(n)]  # targeted% needs the labels


SUMMARY_REQUEST = (
    "Write a summary of the work so far that lets you continue the task without the earlier turns: "
    "keep every fact, identifier and number you still need exactly. Reply with the summary only."
)


def _model_summarizer(policy: Policy | ScriptedPolicy):
    """The `Summary` hook backed by the evaluated model itself (one extra model call)."""
    if isinstance(policy, ScriptedPolicy):
        raise ValueError("the summary strategy needs a model policy")

    def summarize(state: list[dict[str, Any]], env: CompactionEnv) -> str:
        obs = {
            "instructions": "You summarise an agent's working context.",
            "tools": [],
            "state": state + [{"type": "message", "role": "user", "content": SUMMARY_REQUEST}],
        }
        turn = policy.act([obs])[0]
        ids = turn.prompt_ids or env.counter.input_ids(obs["instructions"], [], obs["state"])
        env.ledger.record(
            ids, turn.completion_ids if turn.completion_ids is not None else env.counter.output_tokens(turn.items)
        )
        return "\n".join(x["content"] for x in turn.items if x.get("type") == "message") or (turn.text or "")

    return summarize


def run_eval(config: EvalConfig, *, resume: bool = False, use_wandb: bool = False) -> dict[str, Any]:
    """Run every policy on the same task seeds; write episodes, metrics and the plot. One run at a time holds
    the output folder (`lock_output_dir`): another on it fails before writing anything."""
    specs = [check_policy_spec(spec, config) for spec in config.policies]  # a bad last spec fails before any row
    out = check_output_dir(config.output_dir)
    with lock_output_dir(out):
        return _run_eval(config, specs, out, resume=resume, use_wandb=use_wandb)


def _run_eval(
    config: EvalConfig, specs: list[tuple[str, str]], out: Path, *, resume: bool, use_wandb: bool
) -> dict[str, Any]:
    episodes_path = out / "episodes.jsonl"
    if episodes_path.exists() and not resume:
        raise FileExistsError(f"{episodes_path} exists; pass --resume to continue it or choose another --output-dir")
    settings = recorded_settings(config, out)
    done = _resume(episodes_path, settings, out) if episodes_path.exists() else {}
    seeds = list(range(config.seed_start, config.seed_start + config.episodes))

    rows, by_policy = [], {}
    for name, strategy in specs:
        label = f"{name}@{strategy}"
        policy_key = f"{portable_path(name, out)}@{strategy}"  # recorded: the row a moved folder's records are
        key = f"{policy_key}|{config.episode.family}|{config.episode.split}"  # as `_resume` keys them
        records = [done[k] for s in seeds if (k := f"{key}|{s}|0") in done]
        todo = [s for s in seeds if f"{key}|{s}|0" not in done]
        if todo:
            policy = make_policy(name, strategy, config)
            policy.name = label
            with progress_bar(len(todo), label) as bar:
                for start in range(0, len(todo), config.batch_size):
                    batch = todo[start : start + config.batch_size]
                    _seed_sampling(config.sampling_seed + batch[0])
                    with closing_envs(make_envs(config, strategy, policy, len(batch))) as envs:
                        new = rollout(
                            policy,
                            envs,
                            batch,
                            episode_ids=[0] * len(batch),
                            settings={**settings, "strategy": strategy, "policy_key": policy_key},
                            on_step=bar.update,
                        )
                    write_jsonl(episodes_path, new)
                    records.extend(new)
            if isinstance(policy, Policy):
                policy.close()
        row = policy_metrics(label, sorted(records, key=lambda r: r.task_seed))
        rows.append(row)
        by_policy[label] = row
    table = format_metrics(rows)
    plot = plot_success_vs_cost(rows, out / "success_vs_cost.png", plot_title(config))
    metrics = {"config": config.to_dict(), "policies": by_policy, "created": time.strftime("%Y-%m-%dT%H:%M:%S")}
    (out / "metrics.json").write_text(json.dumps(metrics, indent=2), encoding="utf-8")
    if use_wandb:
        log_to_wandb(config, rows, plot, episodes_path)
    return {"table": table, "metrics": metrics, "plot": plot, "episodes": episodes_path}


#: the episode settings every record carries, under these names since the first records (a resume compares them)
RECORDED_EPISODE_FIELDS = (
    "split",
    "scale",
    "level",
    "context_window",
    "compaction_threshold",
    "max_turns",
    "tokenizer",
    "cache_preset",
)


def recorded_settings(config: EvalConfig, out: Path) -> dict[str, Any]:
    """What every episode record carries of the run's settings, and a resume must match: the eval's own
    fields, the episode's family and `RECORDED_EPISODE_FIELDS` always, its other fields where they differ
    from EpisodeSpec's defaults (so records written before those fields existed still match)."""
    own = {k: v for k, v in asdict(config).items() if k not in ("policies", "output_dir", "episode")}
    episode, default = config.episode.settings(), EpisodeSpec().settings()
    kept = {k: v for k, v in episode.items() if k in RECORDED_EPISODE_FIELDS or v != default[k]}
    return {**own, "family": config.episode.family, **kept, "tokenizer": portable_path(episode["tokenizer"], out)}


def _seed_sampling(seed: int) -> None:
    """Seed what local models sample from: torch's generators (every device) and `random`. Loaded
    lazily: an oracle-only eval never imports torch, and draws nothing."""
    random.seed(seed)
    if (torch := sys.modules.get("torch")) is not None:
        torch.manual_seed(seed)


#: Settings that only choose which episodes run (or how many at once), not how one runs: a resume
#: may change them. Every other setting must match the episodes already in the file.
RESUME_MAY_CHANGE = ("episodes", "seed_start", "batch_size", "strategy", "request_timeout_s", "vllm_engine_kwargs")


def portable_path(value: Any, out: Path, *, recorded: bool = False) -> Any:
    """A setting or policy name that is an existing path, spelled relative to the output folder `out` when it
    lies beside it (a reproduce run's RUN/grpo for RUN/eval), else resolved; anything else as it is. So a run
    resumed from another working directory, with the folder spelled another way or moved, matches its records.
    A `recorded` value (read back from a record) is looked for relative to `out` before the working directory."""
    if not isinstance(value, str) or not value:
        return value
    folder = out.resolve()
    given = Path(value).expanduser()
    candidates = (folder / given, given) if recorded else (given, folder / given)
    for candidate in candidates:
        if candidate.exists():
            path = candidate.resolve()
            return os.path.relpath(path, folder) if path.is_relative_to(folder.parent) else str(path)
    return value


def _portable_key(record: EpisodeRecord, out: Path) -> str:
    """The record's key with its policy as `portable_path` spells it (recorded as `policy_key` since)."""
    policy = record.settings.get("policy_key")
    if not isinstance(policy, str):  # a record written before: its policy's path as the run spelled it
        name, _, strategy = record.policy.rpartition("@")
        policy = f"{portable_path(name, out, recorded=True)}@{strategy}" if name else record.policy
    return f"{policy}|{record.family}|{record.split}|{record.task_seed}|{record.episode}"


def _resume(path: Path, settings: dict[str, Any], out: Path | None = None) -> dict[str, EpisodeRecord]:
    """The episodes already in `path`, by key (paths in it spelled by `portable_path`), after checking they
    were run with `settings` (else ValueError: mixing runs would make the metrics meaningless). A partial last
    line, left by a run killed mid-write, is cut off so that the next record starts on its own line."""
    out = path.parent if out is None else out
    done: dict[str, EpisodeRecord] = {}
    try:
        records = list(read_jsonl(path))
    except ValueError as e:  # read_jsonl names the file and the line
        raise ValueError(f"{e}; fix or remove it, or choose another --output-dir") from None
    for record in records:  # every record, also an episode's second (two runs once wrote each episode twice)
        if "tokenizer" in record.settings:
            record.settings["tokenizer"] = portable_path(record.settings["tokenizer"], out, recorded=True)
        done[_portable_key(record, out)] = record
        if "env" in record.settings:  # written before EvalConfig.env was renamed family
            record.settings["family"] = record.settings.pop("env")
        keys = (set(record.settings) | set(settings)) - {*RESUME_MAY_CHANGE, "policy_key"}
        changed = sorted(k for k in keys if record.settings.get(k) != settings.get(k))
        if changed:
            diff = ", ".join(f"{k}={record.settings.get(k)!r} (now {settings.get(k)!r})" for k in changed[:4])
            raise ValueError(
                f"{path} holds episodes run with other settings: {diff}; "
                "resume with the same settings or choose another --output-dir"
            )
    _cut_partial_last_line(path)
    return done


def _cut_partial_last_line(path: Path) -> None:
    """Truncate `path` after its last newline (reading backwards: the file can be large)."""
    with path.open("rb+") as f:
        end = f.seek(0, os.SEEK_END)
        pos = end
        while pos > 0:
            start = max(0, pos - 65536)
            f.seek(start)
            chunk = f.read(pos - start)
            if (i := chunk.rfind(b"\n")) >= 0:
                pos = start + i + 1
                break
            pos = start
        if pos < end:
            f.truncate(pos)
