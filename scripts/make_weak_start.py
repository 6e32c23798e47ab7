"""Build the learning test's weak start: the reproduction's first two stages, saved as a fixture.

    python scripts/make_weak_start.py [--out tests/fixtures/vault-weak-start] [--max-steps 400]

Stage 1 and 2 of `rl-compaction reproduce` with configs/reproduce/vault-tiny-cpu.yaml: oracle
demonstrations on the vault toy under the targeted edit and the lossy edit (kept although it
fails), then SFT of the tiny model with every kind of turn sampled equally. The result follows
the protocol but picks the lossy edit at about half of its first compactions, so it solves only
some tasks: a deliberately weak start that GRPO on the task reward can improve
(tests/test_learning.py). Rebuilding it takes ~20 minutes on 2 CPU cores, too long for CI, so the
~1 MB model is kept in the repository; this script is how it was made.
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
from pathlib import Path

from rl_compaction.demos import write_demos
from rl_compaction.reproduce import CONFIGS, ReproduceConfig
from rl_compaction.sft import train_sft

ROOT = Path(__file__).resolve().parents[1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=str(ROOT / "tests" / "fixtures" / "vault-weak-start"))
    parser.add_argument("--max-steps", type=int, default=None, help="SFT steps (default: the config's)")
    args = parser.parse_args()
    config = ReproduceConfig.from_yaml(CONFIGS / "reproduce" / "vault-tiny-cpu.yaml")
    out = Path(args.out)
    with tempfile.TemporaryDirectory() as tmp:
        demos = Path(tmp) / "demos"
        write_demos(
            demos,
            [config.family],
            config.demo_episodes,
            config.demo_strategies,
            keep_failed=config.keep_failed,
            tokenizer_name_or_path=config.model,
            **config.task,
        )
        sft = {**config.sft, **({"max_steps": args.max_steps} if args.max_steps else {})}
        settings = {"use_cpu": True, "save_strategy": "no", "report_to": "none", "activation_checkpointing": False}
        trained = Path(tmp) / "sft"
        train_sft(demos, config.model, trained, balance_turns=config.balance_turns, **settings, **sft)
        shutil.rmtree(out, ignore_errors=True)
        out.mkdir(parents=True)
        for f in trained.iterdir():  # the model and tokenizer only, not TRL's training_args.bin
            if f.is_file() and f.suffix in (".json", ".safetensors", ".jinja", ".txt"):
                shutil.copy2(f, out / f.name)
    print(f"weak start saved to {out}")


if __name__ == "__main__":
    main()
