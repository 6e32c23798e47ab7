"""Does a base model copy the key in the task's own layout? Teacher-forced, before any training on the task.

Every vault answer is the key word of a note the agent kept. A model can copy quoted words from plain
filler and still not copy this one from a State rendered through the chat template (`small-recall`: 0%),
and SFT on the task's answers then does not teach it. This plays a recipe's oracle on validation seeds,
per length, and reports the share of its submit turns where the key is the model's top token after
`"answer": "` (chance ~1/400):

    python scripts/probe_key_copy.py --config configs/reproduce/vault-unasked-cpu.yaml \\
        --scale 0.02 0.03 0.04 0.15 -- small-recall small-chat-recall

Minutes per model on 2 CPU cores. The turns are the `evolve_own` oracle's (the recipe's demonstrations),
with the recipe's own episode settings except the scale; their tokens are counted by the first model's
tokenizer.
"""

from __future__ import annotations

import argparse
import tempfile
from dataclasses import replace

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from rl_compaction.models.registry import resolve_model
from rl_compaction.recipes.recipe import parse_reproduce_args
from rl_compaction.training.demos import turn_kind, write_demos
from rl_compaction.training.sft import render_turn

ANSWER = '"answer": "'


@torch.no_grad()
def key_top1(model_dir: str, rows: list[dict]) -> float:
    """Share of `rows` (submit turns) whose key's first token is the model's top token after the answer's quote."""
    tok = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModelForCausalLM.from_pretrained(model_dir).eval()
    hits = 0
    for row in rows:
        prompt, completion = render_turn(tok, row)
        cut = completion.index(ANSWER) + len(ANSWER)
        ids = tok.encode(prompt + completion[:cut], add_special_tokens=False)
        key = tok.encode(prompt + completion, add_special_tokens=False)[len(ids)]
        hits += int(model(torch.tensor([ids]), logits_to_keep=1).logits[0, -1].argmax().item() == key)
    return hits / len(rows)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", default="configs/reproduce/vault-unasked-cpu.yaml", help="a reproduce recipe")
    parser.add_argument("--scale", type=float, nargs="+", default=[0.03], help="episode lengths to probe")
    parser.add_argument("--episodes", type=int, default=60, help="validation episodes per length")
    parser.add_argument("models", nargs="+", help="model names or folders")
    args = parser.parse_args()
    config, _ = parse_reproduce_args(["--config", args.config])
    folders = [str(resolve_model(m)) for m in args.models]
    for scale in args.scale:
        spec = replace(config.spec, tokenizer=folders[0], scale=scale)
        with tempfile.TemporaryDirectory() as tmp:
            demos = write_demos(tmp, spec, args.episodes, ["evolve_own"], split="validation")
            rows = [row for row in demos if turn_kind(row) == "submit"]
        for name, folder in zip(args.models, folders, strict=True):
            print(f"scale {scale}: {name}: key top-1 {key_top1(folder, rows):.0%} of {len(rows)} answers", flush=True)


if __name__ == "__main__":
    main()
