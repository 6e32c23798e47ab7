"""SFT warm start on oracle demonstrations (`rl_compaction.training.demos`), with TRL's SFTTrainer.

    python -m rl_compaction.training.sft --config configs/sft/tiny-cpu.yaml [--max_steps 5 ...]

The YAML holds ``dataset_dir`` (a `write_demos` folder), TRL's `SFTConfig` fields and TRL's
`ModelConfig` fields (model_name_or_path, dtype, use_peft, lora_*); flags override it. The
model is any local folder or a name `rl_compaction.models.registry.resolve_model` knows. The trained
model and tokenizer are saved to ``output_dir`` (a PEFT adapter is merged first), so
``rl-compaction eval --policy OUTPUT_DIR`` and the GRPO trainer load it as any model folder.

How rows become training text, and why (TRL offers three ways to train only the answer):
- ``assistant_only_loss`` needs ``{% generation %}`` markers in the chat template. Most
  templates have none (SmolLM2's, ours), TRL ships training templates only for the model
  families it knows, and a template without tool support (SmolLM2) would render the tools
  and calls differently from what the policy sees at RL time anyway.
- Conversational prompt/completion rows make TRL render the messages with the template's own
  tool handling, which for templates without tools is not our fallback format either.
- So each row is pre-rendered exactly as the policy meets it: the prompt is
  `chat.render_prompt` of the observation (native tools or the documented fallback
  format, generation prompt included), token for token the ids `chat.prompt_ids` gives
  at RL and eval time; the completion is the oracle's turn as the template renders that
  assistant message (tool calls in the model's format) up to and including its end-of-turn
  token, i.e. what the policy must generate before it stops. Rows are tokenised here
  (prompt and completion apart, as at RL time, no special tokens added: the template writes
  them) into TRL's prompt/completion form, ``input_ids`` + ``completion_mask``, and TRL runs with
  ``completion_only_loss=True``: the loss covers exactly the completion tokens.
Each completion is parsed back with `chat.parse_completion` and must give the oracle's
calls, so SFT never teaches a text the policy's parser would misread.

Rows longer than ``max_length`` are dropped (TRL would cut the end of the completion, its
end-of-turn token first); how many is printed.
"""

from __future__ import annotations

import dataclasses
import json
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from datasets import Dataset, interleave_datasets, load_from_disk
from trl import ModelConfig, SFTTrainer, TrlParser, get_peft_config
from trl import SFTConfig as TRLSFTConfig

from rl_compaction import chat
from rl_compaction.core.configs import TRL_USAGE, check_numbers, own_fields_first
from rl_compaction.core.outputs import check_no_previous_run, check_output_dir, lock_on_main_process, resolve_resume
from rl_compaction.models.registry import load_pretrained
from rl_compaction.training.demos import SUMMARY_FILE, check_demo_row, row_observation, turn_kind
from rl_compaction.training.precision import check_master_weights, default_bf16, default_checkpointing
from rl_compaction.training.wandb_resume import finish_wandb, prepare_wandb

#: Markers that open a turn: a rendered assistant turn must end before them, with an end-of-turn token.
_TURN_OPENERS = ("<|im_start|>", "<|start_header_id|>")


@dataclass
class SFTConfig(TRLSFTConfig):
    """TRL's SFTConfig with `bf16` left unset meaning fp32 where no GPU computes in bf16, and its default
    activation checkpointing under the new name (`rl_compaction.training.precision`)."""

    gradient_checkpointing: bool | None = field(
        default=None,
        metadata={"help": "Deprecated alias of `activation_checkpointing` (on unless either is set false)."},
    )

    def __post_init__(self) -> None:
        default_bf16(self)
        default_checkpointing(self)
        super().__post_init__()


@dataclass
class SFTScriptArguments:
    """What the SFT entry point needs besides TRL's SFTConfig and ModelConfig."""

    dataset_dir: str = field(metadata={"help": "A demos folder written by rl_compaction.training.demos.write_demos."})
    balance_turns: bool = field(
        default=False,
        metadata={
            "help": "Sample each kind of turn (the tool the oracle called: read, evolve, submit, ...) equally "
            "often, repeating the rarer kinds; an episode has one final answer but many reads."
        },
    )
    turn_kinds: list[str] | None = field(
        default=None,
        metadata={
            "help": "Train only on turns of these kinds (e.g. submit: the answers alone, a phase that makes a "
            "model copy the answer from its context before it learns the rest of the protocol)."
        },
    )
    overwrite_output_dir: bool = field(
        default=False,
        metadata={"help": "Train into an output_dir holding a previous run (checkpoints, a model); else refused."},
    )


def _log(message: str) -> None:
    print(f"[rl-compaction sft] {message}", file=sys.stderr, flush=True)


def _end_of_turn(tokenizer: Any, text: str) -> int:
    """Index just past the first end-of-turn marker in `text` (the marker included)."""
    markers = [m for m in chat.END_MARKERS if m not in _TURN_OPENERS]
    if tokenizer.eos_token:
        markers.append(tokenizer.eos_token)
    found = [(i, m) for m in markers if (i := text.find(m)) != -1]
    if not found:
        raise ValueError(
            f"the chat template of {tokenizer.name_or_path!r} ends the assistant turn with no end-of-turn token "
            f"({', '.join(sorted(set(markers)))}); the model could not learn where to stop: {text[-80:]!r}"
        )
    i, marker = min(found)
    return i + len(marker)


def render_turn(tokenizer: Any, row: dict[str, Any]) -> tuple[str, str]:
    """(prompt, completion) text of a demo row for this tokenizer's chat template.

    prompt: exactly `chat.render_prompt` of the observation (what the policy is given).
    completion: the oracle's turn as the template renders it after that prompt, through its
    end-of-turn token. Raises ValueError when the template does not extend the prompt with the
    turn, or when `chat.parse_completion` does not read the oracle's calls back."""
    instructions, tools, state, turn = row_observation(row)
    prompt = chat.render_prompt(tokenizer, instructions, tools, state)
    full = chat.render_prompt(tokenizer, instructions, tools, state + turn, add_generation_prompt=False)
    if not full.startswith(prompt):
        raise ValueError(
            f"the chat template of {tokenizer.name_or_path!r} renders the conversation with the assistant turn "
            "differently from the prompt alone (it does not extend it), so the turn cannot be cut out as a completion"
        )
    rest = full[len(prompt) :]
    completion = rest[: _end_of_turn(tokenizer, rest)]
    parsed = chat.parse_completion(completion, tokenizer, prompt=prompt, tools=tools)
    got = [(x["name"], json.loads(x["arguments"])) for x in parsed.items if x["type"] == "function_call"]
    want = [(x["name"], json.loads(x["arguments"])) for x in turn if x["type"] == "function_call"]
    if parsed.parse_errors or got != want:
        raise ValueError(
            f"{row.get('family')} seed {row.get('task_seed')} turn {row.get('turn')}: the rendered completion does not "
            f"parse back to the oracle's calls ({parsed.error or 'different calls'}): {completion[:200]!r}"
        )
    return prompt, completion


def tokenize_row(tokenizer: Any, row: dict[str, Any]) -> dict[str, list[int]]:
    """TRL's tokenised prompt/completion form of a row: ``input_ids`` and ``completion_mask`` (1 on the
    completion). The prompt ids are `chat.prompt_ids`'s, the ones the policy is given."""
    prompt, completion = render_turn(tokenizer, row)
    prompt_ids = tokenizer.encode(prompt, add_special_tokens=False)
    completion_ids = tokenizer.encode(completion, add_special_tokens=False)
    return {
        "input_ids": prompt_ids + completion_ids,
        "completion_mask": [0] * len(prompt_ids) + [1] * len(completion_ids),
    }


def balance_by_kind(rows: list[dict[str, Any]], seed: int) -> Dataset:
    """Interleave the rows of each turn kind with equal probability until every kind is used up
    (`datasets.interleave_datasets`, "all_exhausted"): rare kinds repeat, none is dropped."""
    kinds: dict[str, list[dict[str, Any]]] = {}
    for row in rows:
        kinds.setdefault(row["kind"], []).append(row)
    _log("turns per kind: " + ", ".join(f"{k} {len(v)}" for k, v in sorted(kinds.items())))
    parts = [Dataset.from_list(kinds[k]).shuffle(seed=seed) for k in sorted(kinds)]
    if len(parts) == 1:
        return parts[0]
    return interleave_datasets(parts, seed=seed, stopping_strategy="all_exhausted")


def prepare_dataset(
    demos: Dataset,
    tokenizer: Any,
    max_length: int | None,
    balance_turns: bool = False,
    seed: int = 0,
    turn_kinds: list[str] | None = None,
) -> Dataset:
    """Tokenise demo rows for `SFTTrainer`; rows over `max_length` tokens are dropped (and counted).
    With `turn_kinds`, only turns of those kinds are kept; with `balance_turns`, every kind of turn
    is sampled equally often (`balance_by_kind`)."""
    kinds = [turn_kind(row) for row in demos]
    if turn_kinds is not None and not set(turn_kinds) & set(kinds):
        raise ValueError(f"no demo turn is of the kinds {list(turn_kinds)}; the demos hold {sorted(set(kinds))}")
    rows = [
        tokenize_row(tokenizer, row) | {"kind": kind}
        for row, kind in zip(demos, kinds, strict=True)
        if turn_kinds is None or kind in turn_kinds
    ]
    kept = [r for r in rows if max_length is None or len(r["input_ids"]) <= max_length]
    lengths = [len(r["input_ids"]) for r in rows]
    _log(
        f"{len(rows)} demo rows, tokens per row {min(lengths)}-{max(lengths)}; "
        f"{len(rows) - len(kept)} longer than max_length={max_length} dropped"
    )
    if not kept:
        raise ValueError(
            f"every demo row is longer than max_length={max_length} tokens (shortest {min(lengths)}); "
            "raise max_length or write demos with a smaller context_window"
        )
    if balance_turns:
        return balance_by_kind(kept, seed).remove_columns("kind")
    return Dataset.from_list(kept).remove_columns("kind")


def load_demos(dataset_dir: str | Path) -> Dataset:
    """A demos folder written by `write_demos`, with a clear error for anything else: a row that
    `check_demo_row` refuses is named by folder, row (counted from 0, as ``load_from_disk(folder)[i]``)
    and field."""
    path = Path(dataset_dir)
    if not (path / "dataset_info.json").is_file():
        raise FileNotFoundError(f"{path} is not a demos dataset folder (write one with rl_compaction.training.demos)")
    demos = load_from_disk(str(path))
    if not isinstance(demos, Dataset) or "messages" not in demos.column_names or "tools" not in demos.column_names:
        raise ValueError(f"{path} holds no demo rows with 'messages' and 'tools' columns")
    if len(demos) == 0:
        raise ValueError(f"{path} holds no demo rows")
    for i, row in enumerate(demos):
        try:
            check_demo_row(row)
        except ValueError as e:
            raise ValueError(f"{path}, row {i} (from 0): {e}") from None
    return demos


def build_trainer(script_args: SFTScriptArguments, args: SFTConfig, model_args: ModelConfig) -> SFTTrainer:
    """An SFTTrainer on the pre-rendered demos (see the module docstring), model and tokenizer loaded offline."""
    if args.assistant_only_loss:
        raise ValueError(
            "assistant_only_loss is not used: rows are pre-rendered prompt/completion pairs "
            "trained with completion_only_loss (see rl_compaction.training.sft)"
        )
    if args.completion_only_loss is False:
        raise ValueError("completion_only_loss must stay on: only the oracle's turn is trained, never the context")
    args.completion_only_loss = True
    if model_args.model_name_or_path is None:
        raise ValueError("model_name_or_path is required")
    demos = load_demos(script_args.dataset_dir)  # a bad row is named before the model loads
    model, tokenizer = load_pretrained(
        model_args.model_name_or_path, dtype=model_args.dtype, attn_implementation=model_args.attn_implementation
    )
    check_master_weights(model, args, model_args.use_peft)
    train_dataset = prepare_dataset(
        demos,
        tokenizer,
        args.max_length,
        script_args.balance_turns,
        args.seed,
        script_args.turn_kinds,
    )
    return SFTTrainer(
        model=model,
        args=args,
        train_dataset=train_dataset,
        processing_class=tokenizer,
        peft_config=get_peft_config(model_args),
    )


def save_policy_model(
    trainer: Any, output_dir: str | Path, base_model: str | None = None, demos_dir: str | Path | None = None
) -> Path:
    """Save a TRL trainer's model and tokenizer as a plain model folder (a PEFT adapter merged in),
    so eval and GRPO load it like any model, with the project's model card (`write_model_card`)."""
    output_dir = Path(output_dir)
    model = trainer.accelerator.unwrap_model(trainer.model)
    if hasattr(model, "merge_and_unload"):  # PEFT: the policy loaders expect full weights
        trainer.accelerator.wait_for_everyone()
        if trainer.accelerator.is_main_process:
            model.merge_and_unload().save_pretrained(output_dir)
            trainer.processing_class.save_pretrained(output_dir)
    else:
        trainer.save_model(str(output_dir))
    if trainer.accelerator.is_main_process:
        write_model_card(trainer, output_dir, base_model, demos_dir)
    return output_dir


def write_model_card(
    trainer: Any, output_dir: Path, base_model: str | None, demos_dir: str | Path | None = None
) -> Path:
    """The project's model card in `output_dir`/README.md (TRL's card said `model="None"`, carried a
    quick-start prompt about a time machine and `licence: license`): front matter (base_model,
    library_name, tags), what the policy is, how it was trained (GRPO: task families, env and reward
    settings; SFT: the demos' settings, read from `demos_dir`), and how to evaluate it."""
    args = trainer.args
    grpo = hasattr(trainer, "episode")  # the GRPO trainer's EpisodeSpec
    settings: dict[str, Any] = {}
    if grpo:
        names = ("families", "context_window", "compaction_threshold", "max_turns", "scale", "level")
        settings = {name: getattr(trainer.episode, name) for name in names}
    elif demos_dir is not None and (Path(demos_dir) / SUMMARY_FILE).is_file():
        demo = json.loads((Path(demos_dir) / SUMMARY_FILE).read_text(encoding="utf-8"))["settings"]
        settings = {k: demo.get(k) for k in ("families", "context_window", "compaction_threshold", "scale", "level")}
    elif demos_dir is not None and (Path(demos_dir) / "dataset_info.json").is_file():  # rows without a summary
        settings = {"families": sorted(set(load_from_disk(str(demos_dir))["family"]))}
    families = settings.get("families") or ["FAMILY"]
    base = base_model or "a local model"
    method = "GRPO (`rl-compaction train`, TRL's GRPOTrainer)" if grpo else "SFT on oracle demonstrations"
    tags = ["rl-compaction", "trl", "grpo" if grpo else "sft", "context-compaction"]
    lines = [
        "---",
        f"base_model: {json.dumps(base)}",
        "library_name: transformers",
        "tags:",
        *[f"- {t}" for t in tags],
        "---",
        "",
        f"# {output_dir.name}",
        "",
        "A policy trained with rl-compaction: an agent that works through long tool-using",
        "tasks inside a fixed context window and compacts its own context (evolve edits) as it goes.",
        "",
        f"- Base model: `{base}`",
        f"- Training: {method}, {trainer.state.global_step} steps",
        f"- Task families: {', '.join(families)}",
    ]
    if "context_window" in settings:
        threshold = settings.get("compaction_threshold")
        lines.append(
            f"- Environment: window {settings.get('context_window')} tokens, compaction threshold "
            f"{threshold if threshold is not None else 'default (75% of the window)'}"
            + (f", turn limit {settings['max_turns']}" if "max_turns" in settings else "")
            + f", scale {settings.get('scale')}, level {settings.get('level')}"
        )
    if grpo:
        reward = ", ".join(f"{k} {v}" for k, v in vars(args.reward_config).items())
        lines.append(f"- Reward: {reward}")
    window = settings.get("context_window")
    eval_flags = [f"--env {families[0]}"]
    if window:
        eval_flags.append(f"--context-window {window}")
    if settings.get("scale") is not None:
        eval_flags += [f"--scale {settings['scale']}", f"--level {settings.get('level')}"]
    lines += [
        "",
        "## Evaluate",
        "",
        "```bash",
        f"rl-compaction eval --policy {output_dir}@evolve {' '.join(eval_flags)} --split test --episodes 32",
        "```",
        "",
    ]
    card = output_dir / "README.md"
    card.write_text("\n".join(lines), encoding="utf-8")
    return card


def run_sft(script_args: SFTScriptArguments, args: SFTConfig, model_args: ModelConfig) -> SFTTrainer:
    """Train on the demos and save the model to ``args.output_dir``; returns the trainer (its
    ``state.log_history`` holds the losses)."""
    check_output_dir(args.output_dir)
    args.resume_from_checkpoint = resolve_resume(args.resume_from_checkpoint, args.output_dir)
    prepare_wandb(args)
    trainer = build_trainer(script_args, args, model_args)
    trainer.train(resume_from_checkpoint=args.resume_from_checkpoint)
    save_policy_model(trainer, args.output_dir, model_args.model_name_or_path, script_args.dataset_dir)
    finish_wandb(args)
    if trainer.accelerator.is_main_process:
        _log(f"saved the trained model to {args.output_dir}")
    return trainer


def train_sft(
    dataset_dir: str | Path,
    model_name_or_path: str,
    output_dir: str | Path,
    *,
    model_config: dict[str, Any] | None = None,
    balance_turns: bool = False,
    turn_kinds: list[str] | None = None,
    **config: Any,
) -> SFTTrainer:
    """SFT from Python: `config` holds `SFTConfig` overrides (max_steps, learning_rate, max_length,
    use_cpu, ...), `model_config` `ModelConfig` fields beyond the model (dtype, use_peft, lora_r, ...),
    `balance_turns` and `turn_kinds` as `SFTScriptArguments`."""
    args = SFTConfig(output_dir=str(output_dir), **config)
    model_args = ModelConfig(model_name_or_path=str(model_name_or_path), **(model_config or {}))
    script_args = SFTScriptArguments(dataset_dir=str(dataset_dir), balance_turns=balance_turns, turn_kinds=turn_kinds)
    return run_sft(script_args, args, model_args)


#: what `--help` says first: TrlParser's --config flag is not an argparse option, so it lists nowhere else
CONFIG_HELP = (
    "Fields come from TRL's dataclasses below; --config FILE.yaml reads them from a YAML file "
    "(configs/), and flags given after it override the file's values."
)


def main(argv: list[str] | None = None, prog: str | None = None) -> None:
    parser = TrlParser(
        (SFTScriptArguments, SFTConfig, ModelConfig), description=CONFIG_HELP, prog=prog, usage=TRL_USAGE
    )
    own_fields_first(parser, "rl-compaction: demonstrations", {f.name for f in dataclasses.fields(SFTScriptArguments)})
    script_args, args, model_args = parser.parse_args_and_config(argv if argv is not None else sys.argv[1:])
    for config in (script_args, args, model_args):
        check_numbers(config)
    if model_args.model_name_or_path is None:
        parser.error("model_name_or_path is required (in the YAML or as --model_name_or_path)")
    resume = resolve_resume(args.resume_from_checkpoint, args.output_dir)
    check_no_previous_run(args.output_dir, resume=resume, overwrite=script_args.overwrite_output_dir)
    check_output_dir(args.output_dir)
    with lock_on_main_process(args.output_dir):  # one run at a time trains into the folder
        run_sft(script_args, args, model_args)


if __name__ == "__main__":
    main()
