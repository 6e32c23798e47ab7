"""Can the tiny model learn to copy a fact from far back in its context? RoPE base side by side.

Every vault answer is a word copied from a note thousands of tokens back, so a policy model must
be able to attend that far by content. This trains fresh tiny models (`build_tiny_model`, the
same seed) on synthetic recall and reports held-out accuracy per context length:

    <filler> note: box 417 is called "<value>". <filler> {"answer": "   ->  <value>

The corpus and loop are `rl_compaction.models.recall`'s (what the `tiny-recall` model is built with);
accuracy is measured at 1k and 4k tokens, beyond the 2k of training. Minutes per setting on 2 CPU cores:

    python scripts/bench_recall.py --rope-theta 10000 1000000 --steps 800

Measured (800 steps, 32 held-out rows per length, chance 1/394; one process per base, side by side):

    rope_theta     10,000: accuracy@1024 0.97, accuracy@4096 0.00
    rope_theta  1,000,000: accuracy@1024 0.97, accuracy@4096 0.97
"""

from __future__ import annotations

import argparse
import tempfile

from transformers import AutoModelForCausalLM, AutoTokenizer

from rl_compaction.models import registry as models
from rl_compaction.models.recall import RecallCorpus, recall_accuracy, train_recall


def run(rope_theta: float, steps: int, lr: float, eval_rows: int) -> dict[str, str]:
    with tempfile.TemporaryDirectory() as tmp:
        models.build_tiny_model(tmp, rope_theta=rope_theta)
        tok, model = AutoTokenizer.from_pretrained(tmp), AutoModelForCausalLM.from_pretrained(tmp)
    train_recall(model, tok, steps, lr)
    result = {f"accuracy@{n}": f"{recall_accuracy(model, tok, n, eval_rows):.2f}" for n in (1024, 4096)}
    return result | {"chance": f"1/{len(RecallCorpus(tok, 0).values)}"}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rope-theta", type=float, nargs="+", default=[10_000.0, models.TINY_ROPE_THETA])
    parser.add_argument("--steps", type=int, default=800)
    parser.add_argument("--lr", type=float, default=3e-3)
    parser.add_argument("--eval-rows", type=int, default=32)
    args = parser.parse_args()
    results = {theta: run(theta, args.steps, args.lr, args.eval_rows) for theta in args.rope_theta}
    for theta, result in results.items():
        print(f"rope_theta {theta:>12,.0f}: " + ", ".join(f"{k} {v}" for k, v in result.items()))


if __name__ == "__main__":
    main()
