"""Can the tiny model learn to copy a fact from far back in its context? RoPE base side by side.

Every vault answer is a word copied from a note thousands of tokens back, so a policy model must
be able to attend that far by content. This trains fresh tiny models (`build_tiny_model`, the
same seed) on synthetic recall and reports held-out accuracy per context length:

    <filler> note: box 417 is called "<value>". <filler> {"answer": "   ->  <value>

Filler is words of the harness's own text (system suffix, tool schemas); values are the other
one-token words of the tokenizer, so one head that attends to "a value word" and copies it
solves the task; what is measured is whether attention reaches it across the distance. Loss
is cross-entropy on the value token only; the first half of training uses 32-128 tokens, the
second half 256-2048, and accuracy is measured at 1k and 4k. Minutes per setting on 2 CPU cores:

    python scripts/bench_recall.py --rope-theta 10000 1000000 --steps 800

Measured (800 steps, 32 held-out rows per length, chance 1/394; one process per base, side by side):

    rope_theta     10,000: accuracy@1024 0.97, accuracy@4096 0.00
    rope_theta  1,000,000: accuracy@1024 0.97, accuracy@4096 0.97
"""

from __future__ import annotations

import argparse
import json
import random
import re
import tempfile
import time

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from rl_compaction import models
from rl_compaction.evolve import EVOLVE_TOOL, system_suffix
from rl_compaction.tasks import SUBMIT_TOOL

CUES = ("is called", "has the code", "is named", "was marked", "keeps the word", "has the label")
QUERIES = ('{"answer": "', 'answer: "', '{"name": "submit", "arguments": {"answer": "')


class RecallCorpus:
    """Seeded recall examples for one tokenizer: (input ids ending at the query, value token id)."""

    def __init__(self, tokenizer, seed: int):
        self.tok, self.rng = tokenizer, random.Random(seed)
        harness = system_suffix() + json.dumps(EVOLVE_TOOL) + json.dumps(SUBMIT_TOOL)
        words = set(re.findall(r"[a-z]+", harness.lower()))
        vocab = tokenizer.get_vocab()
        self.filler = sorted(w for w in words if w in vocab)
        self.values = sorted(w for w in vocab if w.isalpha() and w.islower() and len(w) >= 3 and w not in words)

    def example(self, length: int) -> tuple[list[int], int]:
        rng = self.rng
        value = rng.choice(self.values)
        fact = f'note: box {rng.randint(100, 999)} {rng.choice(CUES)} "{value}".'
        before = rng.randint(0, length // 2)
        fill = [rng.choice(self.filler) for _ in range(length)]
        text = f"{' '.join(fill[:before])}\n{fact}\n{' '.join(fill[before:])}\n{rng.choice(QUERIES)}"
        return self.tok.encode(text, add_special_tokens=False), self.tok.convert_tokens_to_ids(value)

    def batch(self, size: int, length: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Right-padded ids, attention mask and targets; the query ends each row at its last real token."""
        rows = [self.example(length) for _ in range(size)]
        width = max(len(ids) for ids, _ in rows)
        ids = torch.full((size, width), self.tok.pad_token_id)
        mask = torch.zeros((size, width), dtype=torch.long)
        for i, (row, _) in enumerate(rows):
            ids[i, : len(row)], mask[i, : len(row)] = torch.tensor(row), 1
        return ids, mask, torch.tensor([t for _, t in rows])


def last_logits(model, ids: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    logits = model(input_ids=ids, attention_mask=mask).logits
    return logits[torch.arange(len(ids)), mask.sum(1) - 1]


def run(rope_theta: float, steps: int, lr: float, eval_rows: int) -> dict[str, float]:
    with tempfile.TemporaryDirectory() as tmp:
        models.build_tiny_model(tmp, rope_theta=rope_theta)
        tok, model = AutoTokenizer.from_pretrained(tmp), AutoModelForCausalLM.from_pretrained(tmp)
    corpus, held_out = RecallCorpus(tok, seed=0), RecallCorpus(tok, seed=1)
    opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.0)
    start = time.perf_counter()
    for step in range(steps):
        length = corpus.rng.choice((32, 64, 128) if step < steps // 2 else (256, 512, 1024, 2048))
        ids, mask, target = corpus.batch(max(4, 4096 // length), length)
        loss = torch.nn.functional.cross_entropy(last_logits(model, ids, mask), target)
        opt.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        if step % 100 == 0 or step == steps - 1:
            print(
                f"  theta {rope_theta:g} step {step} length {length} loss {loss.item():.3f} "
                f"{time.perf_counter() - start:.0f}s",
                flush=True,
            )
    model.eval()
    result = {}
    with torch.no_grad():
        for length in (1024, 4096):
            hits = 0
            for _ in range(eval_rows // 4):
                ids, mask, target = held_out.batch(4, length)
                hits += (last_logits(model, ids, mask).argmax(-1) == target).sum().item()
            result[f"accuracy@{length}"] = hits / (eval_rows // 4 * 4)
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rope-theta", type=float, nargs="+", default=[10_000.0, models.TINY_ROPE_THETA])
    parser.add_argument("--steps", type=int, default=800)
    parser.add_argument("--lr", type=float, default=3e-3)
    parser.add_argument("--eval-rows", type=int, default=32)
    args = parser.parse_args()
    torch.manual_seed(0)
    results = {theta: run(theta, args.steps, args.lr, args.eval_rows) for theta in args.rope_theta}
    print(f"chance: 1/{len(RecallCorpus(AutoTokenizer.from_pretrained(models.resolve_model('tiny')), 0).values)}")
    for theta, result in results.items():
        print(f"rope_theta {theta:>12,.0f}: " + ", ".join(f"{k} {v:.2f}" for k, v in result.items()))


if __name__ == "__main__":
    main()
