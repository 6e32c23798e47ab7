"""Experiment (kept in history, reverted on main): chat-shaped recall for `small-recall`, so that it copies in the
task's layout.

`small-recall` copies a quoted word from plain filler, yet not the key from a vault State rendered through
the chat template. This script continues a built `small-recall` folder on *chat-shaped* recall rows, in the
five stages the results document reports (each a fresh AdamW at rate 1e-3, loss on the value token only):

    1. 500 steps of short chat rows (32-128 filler words), rows seeded 0       -> stage1
    2. 1,000 more                                                              -> stage2
    3. 1,000 more                                                              -> stage3
    4. 500 steps of rows that also hold an evolve call with its receipt (60%), rows seeded 7 -> stage4
    5. 250 steps of those, half of them with the harness's system text and tools           -> stage5

    python scripts/chat_recall_chain.py SMALL_RECALL_DIR OUT_DIR
    python scripts/chat_recall_chain.py --probe MODEL_DIR...   # key top-1 on the recipe's validation demos

Each stage's folder is a transformers model; `stage5` is the base the unasked recipe was run from.
About 40 minutes on two CPU cores. The row generator is 8d5b65a's `RecallCorpus.chat_example` plus the
evolve call (`evolve_code`, `receipt`) and `harness_share`.
"""

from __future__ import annotations

import json
import random
import re
import sys
import tempfile
from dataclasses import replace
from pathlib import Path
from typing import Any

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from rl_compaction.chat.prompt import render_prompt
from rl_compaction.core.reports import progress_bar
from rl_compaction.harness.tasks import SUBMIT_TOOL
from rl_compaction.protocol.evolve import EVOLVE_TOOL, system_suffix
from rl_compaction.recipes.recipe import parse_reproduce_args
from rl_compaction.training.demos import turn_kind, write_demos
from rl_compaction.training.sft import render_turn

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


def user_message(text: str) -> dict[str, Any]:
    return {"type": "message", "role": "user", "content": text}


def function_call(call_id: str, name: str, arguments: dict[str, Any]) -> dict[str, Any]:
    return {"type": "function_call", "call_id": call_id, "name": name, "arguments": json.dumps(arguments)}


def function_output(call_id: str, output: str) -> dict[str, Any]:
    return {"type": "function_call_output", "call_id": call_id, "output": output}


class RecallCorpus:
    """Seeded recall rows for one tokenizer: (input ids ending at the query, value token id)."""

    def __init__(self, tokenizer: Any, seed: int, evolve_share: float = 0.0, harness_share: float = 0.0):
        self.tok, self.rng = tokenizer, random.Random(seed)
        self.evolve_share, self.harness_share = evolve_share, harness_share
        harness = system_suffix() + json.dumps(EVOLVE_TOOL) + json.dumps(SUBMIT_TOOL)
        words = set(re.findall(r"[a-z]+", harness.lower()))
        vocab = tokenizer.get_vocab()
        self.filler = sorted(w for w in words if w in vocab)
        self.values = sorted(w for w in vocab if w.isalpha() and w.islower() and len(w) >= 3 and w not in words)
        if not self.filler or not self.values:
            raise ValueError("recall needs a tokenizer with whole-word tokens (a byte-level BPE like the tiny one's)")

    def example(self, length: int) -> tuple[list[int], int]:
        """One plain row of about `length` filler words."""
        rng = self.rng
        value = rng.choice(self.values)
        fact = f'note: box {rng.randint(100, 999)} {rng.choice(CUES)} "{value}".'
        before = rng.randint(0, length // 2)
        fill = [rng.choice(self.filler) for _ in range(length)]
        text = f"{' '.join(fill[:before])}\n{fact}\n{' '.join(fill[before:])}\n{rng.choice(QUERIES)}"
        return self.tok.encode(text, add_special_tokens=False), self.tok.convert_tokens_to_ids(value)

    def chat_example(self, length: int) -> tuple[list[int], int]:
        """A State rendered as the harness renders it (`render_prompt`): a question names a thing,
        calls to one to three tools named by rare words (as a family's `read` is) with JSON arguments,
        and outputs of filler (quoted words among them, some as short as a header, some JSON) follow,
        one output holds the note, and the row ends inside the submit call's answer. Long rows carry
        the harness's system text and tools, as every task does. A model that copies plain rows does
        not copy in this layout (small-recall: 0-5% of the vault's answers, teacher-forced; it copies
        the read tool's quoted name), so the layout itself is what these rows teach."""
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
        for i in range(len(texts)):  # some outputs are JSON objects, as the harness's receipts are
            if i != fact and rng.random() < 0.3:
                texts[i] = json.dumps(
                    {
                        rng.choice(words): rng.choice([rng.randint(0, 5000), True, rng.choice(words)])
                        for _ in range(rng.randint(2, 6))
                    }
                )
        question = rng.choice(QUESTIONS).format(thing=thing, number=number)
        state: list[dict[str, Any]] = [user_message(f"{question} {' '.join(rng.choices(words, k=rng.randint(0, 16)))}")]
        # a family's own tools, named by rare words as the note's value is: a quoted rare word alone is not the answer
        tool_names = [n for n in rng.sample(self.values, 4) if n != value][: rng.randint(1, 3)]
        for page, text in enumerate(texts, 1):
            arguments = {} if rng.random() < 0.5 else {rng.choice(words): rng.choice(words)}
            name = rng.choice(tool_names)
            output = f"page {page}\n{text}" if rng.random() < 0.5 else text
            state += [function_call(f"c{page}", name, arguments), function_output(f"c{page}", output)]
            if rng.random() < 0.3:
                tokens, window, percent = rng.randint(100, 4000), rng.randint(2000, 5000), rng.randint(5, 99)
                state.append(user_message(USAGE.format(tokens=tokens, window=window, percent=percent)))
        # an evolve call, whose code quotes strings, and its receipt
        if self.evolve_share and rng.random() < self.evolve_share:
            at = rng.choice([i + 1 for i, item in enumerate(state) if item["type"] == "function_call_output"])
            state[at:at] = [
                function_call("e", "evolve", {"code": self.evolve_code()}),
                function_output("e", json.dumps(self.receipt())),
            ]
        state.append(function_call("answer", "submit", {"answer": value}))
        instructions = " ".join(rng.choices(words, k=rng.randint(4, 24)))
        tools: list[dict[str, Any]] = []
        if length >= LONG[0] or (self.harness_share and rng.random() < self.harness_share):
            instructions += "\n\n" + system_suffix()
            tools = [
                EVOLVE_TOOL,
                SUBMIT_TOOL,
                *({**SUBMIT_TOOL, "name": n, "parameters": NO_PARAMETERS} for n in tool_names),
            ]
            rng.shuffle(tools)
        text = render_prompt(self.tok, instructions, tools, state, add_generation_prompt=False)
        answer = '"answer": "'
        ids = self.tok.encode(text[: text.rindex(f"{answer}{value}") + len(answer)], add_special_tokens=False)
        return ids, self.tok.convert_tokens_to_ids(value)

    def evolve_code(self) -> str:
        """JavaScript like the demonstrations' evolve code: filters and slices with quoted strings and regexes."""
        rng, w = self.rng, self.filler

        def q() -> str:
            return rng.choice([f'"{rng.choice(w)}"', '"note:"', f'"{rng.choice(w)} {rng.choice(w)}"', '""'])

        rx = "|".join(
            rng.choice(["note:", "^Find", f"^{rng.choice(w)}", rng.choice(w)]) for _ in range(rng.randint(1, 3))
        )
        forms = [
            f"return state.filter((x, i) => /{rx}/.test(x.content ?? x.output ?? state[i + 1]?.output ?? {q()}));",
            f"return state.filter(x => (x.output ?? x.content ?? {q()}).includes({q()}));",
            f"return [state[0], ...state.filter(x => /{rx}/.test(x.output ?? {q()})), state.at(-1)];",
            f"return state.slice(0, {rng.randint(1, 4)}).concat(state.slice(-{rng.randint(1, 3)}));",
            f"const keep = state.filter(x => x.type !== {q()} || /{rx}/.test(x.output)); return keep;",
            f"return state.map(x => x.type === {q()} ? {{...x, output: {q()}}} : x);",
        ]
        return rng.choice(forms)

    def receipt(self) -> dict[str, Any]:
        rng = self.rng
        before = rng.randint(500, 4000)
        after = rng.randint(100, before)
        return {
            "applied": rng.random() < 0.9,
            "before_tokens": before,
            "after_tokens": after,
            "reusable_prefix_tokens": rng.randint(0, after),
            "evolve_call_tokens": rng.randint(30, 150),
            "cache_cost": rng.randint(0, 900),
            "compaction_cost": rng.random() * 500,
        }

    def chat_batch(self, length: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Chat rows up to about `STEP_TOKENS` tokens, at least 2 (a chat row's tokens are not its filler
        length: long ones carry the harness's text)."""
        rows = [self.chat_example(length), self.chat_example(length)]
        while sum(len(ids) for ids, _ in rows) < STEP_TOKENS:
            rows.append(self.chat_example(length))
        return self.pad(rows)

    def batch(self, size: int, length: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """`size` plain rows of about `length` filler words, as `pad` returns them."""
        return self.pad([self.example(length) for _ in range(size)])

    def pad(self, rows: list[tuple[list[int], int]]) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Right-padded ids, attention mask and targets; each row's query ends at its last real token."""
        size = len(rows)
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


@torch.no_grad()
def chat_accuracy(model: Any, corpus: RecallCorpus, length: int, rows: int = 64) -> float:
    """Share of held-out chat rows whose value is the model's top token."""
    hits = 0
    for _ in range(rows // 4):
        ids, mask, target = corpus.pad([corpus.chat_example(length) for _ in range(4)])
        hits += (last_logits(model, ids, mask).argmax(-1) == target).sum().item()
    return hits / (rows // 4 * 4)


#: (steps, rows' seed, evolve_share, harness_share)
STAGES = [(500, 0, 0.0, 0.0), (1000, 0, 0.0, 0.0), (1000, 0, 0.0, 0.0), (500, 7, 0.6, 0.0), (250, 7, 0.6, 0.5)]


def continue_on_chat_rows(
    model: Any, tok: Any, steps: int, seed: int, evolve_share: float, harness_share: float
) -> None:
    """One stage: `steps` AdamW steps (rate 1e-3, clip 1) on short chat rows; loss = -log p(value | row)."""
    torch.manual_seed(0)
    corpus = RecallCorpus(tok, seed, evolve_share, harness_share)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.0)
    model.train()
    losses: list[float] = []
    with progress_bar(steps, f"chat recall, seed {seed}") as bar:
        for _ in range(steps):
            ids, mask, target = corpus.chat_batch(corpus.rng.choice(SHORT))
            loss = torch.nn.functional.cross_entropy(last_logits(model, ids, mask), target)
            opt.zero_grad()
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
            losses.append(loss.item())
            bar.update(1)
            bar.set_postfix_str(f"loss {sum(losses[-25:]) / len(losses[-25:]):.3f}")
    model.eval()


def main(source: str, out: str) -> None:
    tok = AutoTokenizer.from_pretrained(source)
    model = AutoModelForCausalLM.from_pretrained(source)
    for i, (steps, seed, evolve_share, harness_share) in enumerate(STAGES, 1):
        continue_on_chat_rows(model, tok, steps, seed, evolve_share, harness_share)
        held_out = chat_accuracy(model, RecallCorpus(tok, 1, evolve_share, harness_share), 128)
        print(f"stage {i}: held-out chat rows at 128 words {held_out:.0%}", flush=True)
        model.save_pretrained(Path(out) / f"stage{i}")
        tok.save_pretrained(Path(out) / f"stage{i}")


@torch.no_grad()
def key_top1(model_dir: str, demos: Any) -> float:
    """Teacher-forced: share of the demos' submit turns whose key token is the model's top token."""
    tok = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModelForCausalLM.from_pretrained(model_dir).eval()
    rows = [r for r in demos if turn_kind(r) == "submit"]
    hits = 0
    for row in rows:
        prompt, completion = render_turn(tok, row)
        cut = completion.index('"answer": "') + len('"answer": "')
        ids = tok.encode(prompt + completion[:cut], add_special_tokens=False)
        key = tok.encode(prompt + completion, add_special_tokens=False)[len(ids)]
        hits += int(model(torch.tensor([ids]), logits_to_keep=1).logits[0, -1].argmax().item() == key)
    return hits / len(rows)


def probe(model_dirs: list[str]) -> None:
    """The key's top-1 on 60 validation episodes of the unasked recipe's own demonstrations (563 rows)."""
    config, _ = parse_reproduce_args(["--config", "configs/reproduce/vault-unasked-cpu.yaml"])
    demos = write_demos(
        tempfile.mkdtemp(), replace(config.spec, tokenizer=model_dirs[0]), 60, ["evolve_own"], split="validation"
    )
    for model_dir in model_dirs:
        print(f"{model_dir}: key top-1 {key_top1(model_dir, demos):.0%}", flush=True)


if __name__ == "__main__":
    if sys.argv[1] == "--probe":
        probe(sys.argv[2:])
    else:
        main(*sys.argv[1:3])
