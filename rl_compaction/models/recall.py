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

A model that copies from plain filler does not copy in the task's layout (``small-recall``: 0% of the
vault's keys, teacher-forced). `train_chat_recall` then continues it on *chat-shaped* rows: a State
rendered through the chat template, the note inside one tool output among calls and quoted JSON, the
row ending inside the submit call's answer. ``small-chat-recall`` is ``small-recall`` after those rows.
"""

from __future__ import annotations

import json
import random
import re
from collections.abc import Callable, Iterable
from typing import Any

import torch

from rl_compaction.chat.prompt import render_prompt
from rl_compaction.core.reports import progress_bar
from rl_compaction.harness.tasks import SUBMIT_TOOL
from rl_compaction.models.registry import TINY_RECALL_LR
from rl_compaction.protocol.evolve import EVOLVE_TOOL, system_suffix

CUES = ("is called", "has the code", "is named", "was marked", "keeps the word", "has the label")
QUERIES = ('{"answer": "', 'answer: "', '{"name": "submit", "arguments": {"answer": "')
QUESTIONS = (
    "Find what {thing} {number} holds.",
    "Which word does {thing} {number} keep?",
    "Report the word of {thing} {number}.",
)
SEPARATORS = ("\n", " ", "\n\n", ". ")
USAGE = "[harness] Your context holds {tokens} of {window} tokens ({percent}%)."
NO_PARAMETERS = {"type": "object", "properties": {}, "required": [], "additionalProperties": False}
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

    def chat_example(self, length: int) -> tuple[list[int], int]:
        """A State rendered as the harness renders it (`render_prompt`), about `length` filler words per
        output at most: a question names a thing; calls to one to three tools named by rare words (as a
        family's `read` is) with JSON arguments; their outputs are filler with quoted words, some of them
        JSON objects as the harness's receipts are; one output holds the note; usage reports come between
        calls; the row ends inside the submit call's answer. Rows of `LONG` lengths carry the harness's
        system text and tools, as every task does."""
        rng, words = self.rng, self.filler
        # the thing the note is about is a rare word too: a model trained on a few ("box") copies after those only
        value, thing, number = rng.choice(self.values), rng.choice(self.values), rng.randint(100, 999)
        pages = rng.randint(1, max(4, length // 48))  # calls after the note, too: their names are no answer
        outputs = [[rng.choice(words) for _ in range(rng.randint(0, 48))] for _ in range(pages)]
        for out in outputs:  # quoted distractors, words of the harness's text as in its JSON
            for _ in range(rng.randint(0, 3)):
                out.insert(rng.randrange(len(out) + 1), f'"{rng.choice(words)}"')
        texts = [" ".join(out) for out in outputs]
        fact = rng.randrange(len(outputs))
        note, at = f'note: {thing} {number} {rng.choice(CUES)} "{value}".', rng.randrange(len(outputs[fact]) + 1)
        before, after = " ".join(outputs[fact][:at]), " ".join(outputs[fact][at:])
        texts[fact] = (
            before
            + (rng.choice(SEPARATORS) if before else "")
            + note
            + (rng.choice(SEPARATORS) if after else "")
            + after
        )
        for i in range(len(texts)):
            if i != fact and rng.random() < 0.3:
                pairs = rng.randint(2, 6)
                texts[i] = json.dumps(
                    {
                        rng.choice(words): rng.choice([rng.randint(0, 5000), True, rng.choice(words)])
                        for _ in range(pairs)
                    }
                )
        question = rng.choice(QUESTIONS).format(thing=thing, number=number)
        state: list[dict[str, Any]] = [_user(f"{question} {' '.join(rng.choices(words, k=rng.randint(0, 16)))}")]
        # a family's own tools, named by rare words as the note's value is: a quoted rare word alone is not the answer
        tool_names = [n for n in rng.sample(self.values, 4) if n != value][: rng.randint(1, 3)]
        for page, text in enumerate(texts, 1):
            arguments = {} if rng.random() < 0.5 else {rng.choice(words): rng.choice(words)}
            name = rng.choice(tool_names)
            output = f"page {page}\n{text}" if rng.random() < 0.5 else text
            state += [_call(f"c{page}", name, arguments), _output(f"c{page}", output)]
            if rng.random() < 0.3:
                tokens, window, percent = rng.randint(100, 4000), rng.randint(2000, 5000), rng.randint(5, 99)
                state.append(_user(USAGE.format(tokens=tokens, window=window, percent=percent)))
        state.append(_call("answer", "submit", {"answer": value}))
        instructions = " ".join(rng.choices(words, k=rng.randint(4, 24)))
        tools: list[dict[str, Any]] = []
        if length >= LONG[0]:
            instructions += "\n\n" + system_suffix()
            own = ({**SUBMIT_TOOL, "name": n, "parameters": NO_PARAMETERS} for n in tool_names)
            tools = [EVOLVE_TOOL, SUBMIT_TOOL, *own]
            rng.shuffle(tools)
        text = render_prompt(self.tok, instructions, tools, state, add_generation_prompt=False)
        answer = '"answer": "'
        ids = self.tok.encode(text[: text.rindex(f"{answer}{value}") + len(answer)], add_special_tokens=False)
        return ids, self.tok.convert_tokens_to_ids(value)

    def batch(self, size: int, length: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """`size` plain rows of about `length` filler words, as `pad` returns them."""
        return self.pad([self.example(length) for _ in range(size)])

    def chat_batch(self, length: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Whole chat rows until they hold `STEP_TOKENS` tokens, at least two (a chat row's tokens are not its
        filler length: long ones carry the harness's text), as `pad` returns them."""
        rows = [self.chat_example(length), self.chat_example(length)]
        while sum(len(ids) for ids, _ in rows) < STEP_TOKENS:
            rows.append(self.chat_example(length))
        return self.pad(rows)

    def pad(self, rows: list[tuple[list[int], int]]) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Right-padded ids, attention mask and targets; each row's query ends at its last real token."""
        width = max(len(ids) for ids, _ in rows)
        ids = torch.full((len(rows), width), self.tok.pad_token_id)
        mask = torch.zeros((len(rows), width), dtype=torch.long)
        for i, (row, _) in enumerate(rows):
            ids[i, : len(row)], mask[i, : len(row)] = torch.tensor(row), 1
        return ids, mask, torch.tensor([t for _, t in rows])


def _user(text: str) -> dict[str, Any]:
    return {"type": "message", "role": "user", "content": text}


def _call(call_id: str, name: str, arguments: dict[str, Any]) -> dict[str, Any]:
    return {"type": "function_call", "call_id": call_id, "name": name, "arguments": json.dumps(arguments)}


def _output(call_id: str, output: str) -> dict[str, Any]:
    return {"type": "function_call_output", "call_id": call_id, "output": output}


def last_logits(model: Any, ids: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Next-token logits at each row's last real token (rows are right-padded)."""
    logits = model(input_ids=ids, attention_mask=mask).logits
    return logits[torch.arange(len(ids)), mask.sum(1) - 1]


def train_recall(
    model: Any, tokenizer: Any, steps: int = 800, lr: float = TINY_RECALL_LR, seed: int = 0
) -> list[float]:
    """Train `model` in place on recall rows (first half short, second half long); returns the losses."""
    if steps < 2:
        raise ValueError(f"steps must be >= 2 (half short rows, half long), got {steps}")
    torch.manual_seed(seed)
    corpus = RecallCorpus(tokenizer, seed)

    def batch(step: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        length = corpus.rng.choice(SHORT if step < steps // 2 else LONG)
        return corpus.batch(max(4, STEP_TOKENS // length), length)

    return _fit(model, batch, steps, lr, "recall pretraining")


def train_chat_recall(
    model: Any, tokenizer: Any, passes: tuple[int, ...], lr: float = 1e-3, seed: int = 0
) -> list[float]:
    """Train `model` in place on short chat-shaped recall rows, `passes[i]` steps in pass i; returns the losses.

    Each pass is a fresh AdamW over the rows of `seed` from their start, so pass two repeats pass one's
    rows and goes on: the schedule `small-chat-recall`'s results were measured with, kept as it was run."""
    if not passes or min(passes) < 1:
        raise ValueError(f"chat recall passes must be one or more positive step counts, got {passes}")
    losses: list[float] = []
    for i, steps in enumerate(passes, 1):
        torch.manual_seed(seed)
        corpus = RecallCorpus(tokenizer, seed)
        label = f"chat recall, pass {i}/{len(passes)}"
        losses += _fit(model, lambda _, c=corpus: c.chat_batch(c.rng.choice(SHORT)), steps, lr, label)
    return losses


def _fit(
    model: Any,
    batch: Callable[[int], tuple[torch.Tensor, torch.Tensor, torch.Tensor]],
    steps: int,
    lr: float,
    label: str,
) -> list[float]:
    """`steps` AdamW steps on `batch(step)`; returns the losses.

    loss = -log p(value | context), on the value token only; gradient norm clipped at 1."""
    opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.0)
    model.train()
    losses: list[float] = []
    with progress_bar(steps, label) as bar:
        for step in range(steps):
            ids, mask, target = batch(step)
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


def recall_accuracy(model: Any, tokenizer: Any, length: int, rows: int = 32, seed: int = 1) -> float:
    """Share of held-out recall rows of about `length` tokens whose value is the model's top token."""
    corpus = RecallCorpus(tokenizer, seed)
    return _top1(model, (corpus.batch(4, length) for _ in range(rows // 4)))


def chat_recall_accuracy(model: Any, tokenizer: Any, length: int = 128, rows: int = 64, seed: int = 1) -> float:
    """Share of held-out chat rows (`RecallCorpus.chat_example`) whose value is the model's top token."""
    corpus = RecallCorpus(tokenizer, seed)
    return _top1(model, (corpus.pad([corpus.chat_example(length) for _ in range(4)]) for _ in range(rows // 4)))


@torch.no_grad()
def _top1(model: Any, batches: Iterable[tuple[torch.Tensor, torch.Tensor, torch.Tensor]]) -> float:
    hits = total = 0
    for ids, mask, target in batches:
        hits += (last_logits(model, ids, mask).argmax(-1) == target).sum().item()
        total += len(target)
    return hits / total
