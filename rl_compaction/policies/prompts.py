"""Each turn's prompt ids, token in and token out: the previous prompt, the ids the model sampled,
then only what the harness appended, rendered by the chat template.

Why: GRPO keeps an episode's turns in one training row only while each prompt extends the previous
prompt + completion token for token (`rl_compaction.training.segments`). Rendering the whole State
afresh at every turn breaks that wherever the template writes a turn back differently from how the
model sampled it: a turn cut at the token budget (the template closes it with its own end-of-turn),
a tool call written back with other whitespace, Qwen3 dropping the ``<think>`` block of earlier
turns, a tokenisation that differs from the sampled ids. Then every turn starts a row and the
shared context is trained once per turn. As in verl's and TRL's multi-turn loops, a prompt here
extends the previous one whenever the State only grew by the model's turn and the harness's
answers; it is rendered afresh only where something before changed, i.e. where an edit rewrote
the context, so rows are cut only there.

How: `PromptBuilder.remember` keeps each episode's last turn (its State, prompt + sampled ids, the
items parsed from them). A new observation extends it when its State starts with that State, then
holds exactly that turn's items (call ids aside: the env may replace them) and after them only the
harness's items (outputs, receipts, user or system messages). Its prompt is then the previous ids,
the sampled ids, and the ids of the text the template writes after an assistant turn for those
harness items: the turn's end (all of it for a turn cut at the budget, the rest of it after the
stop token otherwise), the items and the generation prompt. That text comes from rendering a fixed
small conversation that ends with an assistant turn holding a marker and then the harness items,
and taking what follows the marker; rendering stays `rl_compaction.chat`'s. Where the
template would write the State back exactly as sampled (the project's tiny ChatML template and a
turn that ended on its own), the ids equal a fresh rendering's.

Policies get a batch of observations without episode ids, so an observation is matched to its
episode's last turn by the State; where two remembered turns fit and give different prompts (two
episodes whose States and items agree but whose sampled ids differ), it is rendered afresh.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from rl_compaction.accounting import ChatTemplateCounter
from rl_compaction.core.state import State
from rl_compaction.harness.policy import Turn

#: Stands for the model's turn in the small conversation that renders the harness's items.
TURN_MARK = "<<rl-compaction: the model's turn ends here>>"
_BASE: State = [
    {"type": "message", "role": "user", "content": "."},
    {"type": "message", "role": "assistant", "content": TURN_MARK},
]
_HARNESS_ROLES = ("user", "system", "developer")


@dataclass(frozen=True)
class _LastTurn:
    """An episode's last model turn, as the next prompt extends it."""

    instructions: str
    tools: list[dict[str, Any]]
    #: the State the turn was sampled on
    state: State
    #: its prompt ids followed by the sampled ids
    ids: list[int]
    #: the text of the stop token the turn ended on; None for a turn cut at the token budget
    stop: str | None
    #: the turn's items as `_written` keys, in order
    written: list[tuple[Any, ...]]


def _written(item: dict[str, Any]) -> tuple[Any, ...] | None:
    """A model-written item (assistant message or function call) as a key that ignores its call id,
    which the env may replace; None for anything else."""
    kind = item.get("type", "message")
    if kind == "function_call":
        return ("call", item.get("name"), item.get("arguments"))
    if kind == "message" and item.get("role") == "assistant":
        return ("text", item.get("content"))
    return None


def _harness_items(tail: State, written: list[tuple[Any, ...]]) -> State | None:
    """The harness's items of `tail` when it is the turn `written` plus what the harness appended
    (outputs and receipts beside the calls, then messages); None when it is anything else."""
    model: list[tuple[Any, ...]] = []
    harness: State = []
    for item in tail:
        key = _written(item)
        is_message = item.get("type", "message") == "message"
        if key is not None:
            if any(x.get("type", "message") == "message" for x in harness):
                return None  # the model wrote after the harness's message: a later turn
            model.append(key)
        elif item.get("type") == "function_call_output" or (is_message and item.get("role") in _HARNESS_ROLES):
            harness.append(item)
        else:
            return None
    return harness if model == written else None


class PromptBuilder:
    """Prompt ids for a local model's batch of observations (see the module docstring). Call
    `prompt_ids` before sampling and `remember` with the turns after, once per lockstep step."""

    def __init__(self, counter: ChatTemplateCounter, stop_ids: Iterable[int]):
        self.counter = counter
        self.stop_ids = set(stop_ids)
        self._last: list[_LastTurn] = []

    def prompt_ids(self, observations: Sequence[dict[str, Any]]) -> list[list[int]]:
        """Each observation's prompt: its episode's last prompt + sampled ids + the harness's items
        when the State only grew, else the whole State rendered (`ChatTemplateCounter.input_ids`)."""
        prompts = []
        for o in observations:
            ids = self._extended(o)
            if ids is None:
                ids = self.counter.input_ids(o["instructions"], o["tools"], o["state"])
            prompts.append(ids)
        return prompts

    def remember(self, observations: Sequence[dict[str, Any]], turns: Sequence[Turn]) -> None:
        """Keep the turns just sampled for these observations; they replace the earlier step's."""
        last = []
        for o, turn in zip(observations, turns, strict=True):
            if turn.prompt_ids is None or turn.completion_ids is None:
                continue
            ended = bool(turn.completion_ids) and turn.completion_ids[-1] in self.stop_ids
            stop = self.counter.tokenizer.decode(turn.completion_ids[-1:], skip_special_tokens=False) if ended else None
            written = [key for key in map(_written, turn.items) if key is not None]
            ids = list(turn.prompt_ids) + list(turn.completion_ids)
            last.append(_LastTurn(o["instructions"], o["tools"], o["state"], ids, stop, written))
        self._last = last

    def _extended(self, observation: dict[str, Any]) -> list[int] | None:
        state, instructions, tools = observation["state"], observation["instructions"], observation["tools"]
        found: list[int] | None = None
        for last in self._last:
            n = len(last.state)
            if len(state) <= n or last.instructions != instructions or last.tools != tools:
                continue
            harness = _harness_items(state[n:], last.written)
            if harness is None or state[:n] != last.state:
                continue
            after = self._after_turn(last, harness)
            if after is None:
                return None
            ids = last.ids + after
            if found is not None and ids != found:
                return None  # two episodes fit and disagree: render afresh
            found = ids
        return found

    def _after_turn(self, last: _LastTurn, harness: State) -> list[int] | None:
        """Ids of what follows a turn's sampled ids: the rest of the template's end of an assistant
        turn, the harness's items and the generation prompt; None if the template hides the marker."""
        text = self.counter.render(last.instructions, last.tools, _BASE + harness)
        _, mark, rest = text.partition(TURN_MARK)
        if not mark or TURN_MARK in rest:
            return None
        if last.stop is not None and rest.startswith(last.stop):
            rest = rest[len(last.stop) :]
        return self.counter.encode_text(rest)
