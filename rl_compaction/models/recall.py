"""Recall pretraining: give a tiny random model the in-context copying that pretrained LMs have.

Every answer the toy tasks ask for is material copied from earlier in the context (a key word
kept through the agent's edits). Pretrained models copy from their context out of the box; a
tiny random model does not, and SFT on a few hundred task answers does not teach it (it fits
the answers' prior and stays at chance; README, status). So the ``tiny-recall`` model first
learns recall on synthetic text that holds no task:

    <filler> note: box 417 is called "<value>". <filler> {"answer": "   ->  <value>

Filler is words of the harness's own text (system suffix, tool schemas); values are the other
one-token words of the tokenizer, so the skill is "copy the quoted word that stands out", at
any distance. Loss is cross-entropy on the value token only. The curriculum (32-128 tokens,
then 256-2048) changes the batch size with the length, which is why this is a plain loop and
not a `transformers.Trainer`. 800 steps took 7 minutes on two CPU cores shared with another
job; afterwards the model answers ~97% of held-out rows at 1k and 4k tokens (scripts/bench_recall.py).
"""

from __future__ import annotations

import json
import random
import re
from typing import Any

import torch

from rl_compaction.core.reports import progress_bar
from rl_compaction.harness.tasks import SUBMIT_TOOL
from rl_compaction.models.registry import TINY_RECALL_LR
from rl_compaction.protocol.evolve import EVOLVE_TOOL, system_suffix

CUES = ("is called", "has the code", "is named", "was marked", "keeps the word", "has the label")
QUERIES = ('{"answer": "', 'answer: "', '{"name": "submit", "arguments": {"answer": "')
SHORT, LONG = (32, 64, 128), (256, 512, 1024, 2048)
#: tokens per step (batch size = this / length, at least 4)
STEP_TOKENS = 4096


class RecallCorpus:
    """Seeded recall rows for one tokenizer: (input ids ending at the query, value token id)."""

    def __init__(self, tokenizer: Any, seed: int):
        self.tok, self.rng = tokenizer, random.Random(seed)
        harness = system_suffix() + json.dumps(EVOLVE_TOOL) + json.dumps(SUBMIT_TOOL)
        words = set(re.findall(r"[a-z]+", harness.lower()))
        vocab = tokenizer.get_vocab()
        self.filler = sorted(w for w in words if w in vocab)
        self.values = sorted(w for w in vocab if w.isalpha() and w.islower() and len(w) >= 3 and w not in words)
        if not self.filler or not self.values:
            raise ValueError("recall needs a tokenizer with whole-word tokens (a byte-level BPE like the tiny one's)")

    def example(self, length: int) -> tuple[list[int], int]:
        rng = self.rng
        value = rng.choice(self.values)
        fact = f'note: box {rng.randint(100, 999)} {rng.choice(CUES)} "{value}".'
        before = rng.randint(0, length // 2)
        fill = [rng.choice(self.filler) for _ in range(length)]
        text = f"{' '.join(fill[:before])}\n{fact}\n{' '.join(fill[before:])}\n{rng.choice(QUERIES)}"
        return self.tok.encode(text, add_special_tokens=False), self.tok.convert_tokens_to_ids(value)

    def batch(self, size: int, length: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Right-padded ids, attention mask and targets; each row's query ends at its last real token."""
        rows = [self.example(length) for _ in range(size)]
        width = max(len(ids) for ids, _ in rows)
        ids = torch.full((size, width), self.tok.pad_token_id)
        mask = torch.zeros((size, width), dtype=torch.long)
        for i, (row, _) in enumerate(rows):
            ids[i, : len(row)], mask[i, : len(row)] = torch.tensor(row), 1
        return ids, mask, torch.tensor([t for _, t in rows])


def last_logits(model: Any, ids: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Next-token logits at each row's last real token (rows are right-padded)."""
    logits = model(input_ids=ids, attention_mask=mask).logits
    return logits[torch.arange(len(ids)), mask.sum(1) - 1]


def train_recall(
    model: Any, tokenizer: Any, steps: int = 800, lr: float = TINY_RECALL_LR, seed: int = 0
) -> list[float]:
    """Train `model` in place on recall rows (first half short, second half long); returns the losses.

    loss = -log p(value | context), on the value token only; AdamW, gradient norm clipped at 1."""
    if steps < 2:
        raise ValueError(f"steps must be >= 2 (half short rows, half long), got {steps}")
    torch.manual_seed(seed)
    corpus = RecallCorpus(tokenizer, seed)
    opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.0)
    model.train()
    losses: list[float] = []
    with progress_bar(steps, "recall pretraining") as bar:
        for step in range(steps):
            length = corpus.rng.choice(SHORT if step < steps // 2 else LONG)
            ids, mask, target = corpus.batch(max(4, STEP_TOKENS // length), length)
            loss = torch.nn.functional.cross_entropy(last_logits(model, ids, mask), target)
            opt.zero_grad()
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
            losses.append(loss.item())
            bar.update(1)
            if (step + 1) % 20 == 0 or step + 1 == steps:
                recent = losses[-100:]
                bar.set_postfix_str(f"loss {sum(recent) / len(recent):.3f}")
    model.eval()
    return losses


@torch.no_grad()
def recall_accuracy(model: Any, tokenizer: Any, length: int, rows: int = 32, seed: int = 1) -> float:
    """Share of held-out recall rows of about `length` tokens whose value is the model's top token."""
    corpus, hits = RecallCorpus(tokenizer, seed), 0
    for _ in range(rows // 4):
        ids, mask, target = corpus.batch(4, length)
        hits += (last_logits(model, ids, mask).argmax(-1) == target).sum().item()
    return hits / (rows // 4 * 4)
