"""The evolve protocol: the tool the agent calls, the system suffix that explains the State,
and the boundary that turns one pending evolve call into a new State plus a receipt.

On success the State returned by the code replaces the context; on any failure the previous
State stays exactly as it was. Either way one `function_call_output` receipt answers the call.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

from rl_compaction.accounting import TokenCounter, edit_metrics, get_counter
from rl_compaction.core.render import function_tool
from rl_compaction.core.sandbox import SandboxLimits, run_evolve
from rl_compaction.core.state import State, StateError, clip, typescript_declarations, validate_state
from rl_compaction.core.stats import EVOLVE_ARGUMENTS_ERROR

EVOLVE = "evolve"

EVOLVE_TOOL: dict[str, Any] = function_tool(
    EVOLVE,
    "Edit your own working context. `code` is the body of a JavaScript function "
    "`function evolve(state)` (strict mode, synchronous, no I/O) that receives the current State "
    "(the items of the context, as described in the system message) and returns the new State "
    "array. Keep material you still need exactly, by selecting it from `state`; write only the "
    "edits and new text. The pending evolve call must stay unchanged as the last item. If the code "
    "fails or the result is invalid, nothing changes. Call evolve alone, with no other tool call in "
    "the same turn.",
    {"code": {"type": "string", "description": "Body of `function evolve(state)`; must return a State array."}},
    ["code"],
)


#: The longest error a receipt carries, in characters: the receipt becomes part of the State, so an
#: error quoting a huge value must not make the State too big to edit.
MAX_RECEIPT_ERROR_CHARS = 500
#: So the longest receipt text (JSON escapes one character into at most six).
MAX_RECEIPT_CHARS = 6 * MAX_RECEIPT_ERROR_CHARS + 40
_LONE_SURROGATE = re.compile("[\ud800-\udfff]")


class ProtocolError(ValueError):
    """The harness was asked to apply evolve to something that is not a pending evolve call."""


def system_suffix(limits: SandboxLimits | None = None) -> str:
    """The text placed at the end of the system message, right before the working context."""
    limits = limits or SandboxLimits()
    return (
        "# Your working context\n"
        "Everything after this system message is your working context. The harness stores it as a "
        "State: an ordered list of OpenAI Responses API input items with these TypeScript types:\n\n"
        f"```ts\n{typescript_declarations()}\n```\n\n"
        "Messages hold text or content parts; function calls and their outputs are separate items, "
        "linked by call_id, and `arguments` is a JSON string. The context may already contain earlier "
        "edits: it is your working memory, not the full history, which the harness keeps separately.\n\n"
        "You can manage it yourself with the `evolve` tool: its `code` is the body of "
        "`function evolve(state: State): State`. It runs in a sandbox (QuickJS, strict mode, no I/O, "
        f"{limits.time_s * 1000:g} ms, {limits.memory_bytes // (1024 * 1024)} MiB) on a copy of the State "
        "and must return the new State synchronously. Locate material by its content and relationships "
        "(search texts, follow call_id), keep what you still need exactly, rewrite or remove the rest. "
        "Every function_call needs exactly one function_call_output after it (remove the two together), "
        "call_ids stay unique, and your pending evolve call must remain unchanged as the last item. "
        "If the code throws or the result is invalid, the State is left as it was. A receipt reports "
        "the outcome and its token cost: an edit near the start of the context re-processes everything "
        "after it, so keep stable material early and edit late when you can."
    )


def system_message(instructions: str, limits: SandboxLimits | None = None) -> str:
    """Task instructions followed by the State suffix."""
    return f"{instructions.rstrip()}\n\n{system_suffix(limits)}" if instructions.strip() else system_suffix(limits)


def is_evolve_call(item: dict[str, Any]) -> bool:
    return item.get("type") == "function_call" and item.get("name") == EVOLVE


def evolve_code_of(call: dict[str, Any]) -> str:
    """The code argument of an evolve call; raises ValueError unless arguments are exactly {"code": str}."""
    try:
        args = json.loads(call.get("arguments", ""))
    except json.JSONDecodeError as e:
        raise ValueError(f"evolve arguments are not valid JSON ({e.msg})") from None
    if not isinstance(args, dict) or set(args) != {"code"} or not isinstance(args["code"], str):
        raise ValueError(EVOLVE_ARGUMENTS_ERROR)
    return args["code"]


@dataclass(frozen=True)
class EvolveOutcome:
    """The State to continue from (receipt appended), the receipt, whether the edit applied and
    whether it was a selection (`is_selection`)."""

    state: State
    receipt: dict[str, Any]
    selection: bool = False

    @property
    def applied(self) -> bool:
        return bool(self.receipt["applied"])


def is_selection(before: State, after: State) -> bool:
    """Whether `after` only selects: every item of it is an item of `before`, unchanged. Such an edit
    keeps its material exactly and generates no content; one that writes a new or changed item (a
    summary, a retyped fact) pays output tokens for it and breaks the cached prefix where it lands.
    This is the cheap-edit share that training and eval report. It is judged by the result, so an
    item retyped into exactly the words it had counts as kept: its tokens and cached prefix are the
    same, and the retyping is priced by the evolve call's own tokens."""
    kept = {json.dumps(item, sort_keys=True, ensure_ascii=False) for item in before}
    return all(json.dumps(item, sort_keys=True, ensure_ascii=False) in kept for item in after)


def apply_evolve(
    state: State,
    *,
    counter: TokenCounter | None = None,
    instructions: str = "",
    tools: list[dict[str, Any]] | None = None,
    limits: SandboxLimits | None = None,
    output_weight: float = 1.0,
    evolve_call_tokens: int | None = None,
    validated: bool = False,
) -> EvolveOutcome:
    """Execute the pending evolve call that ends `state` and append its receipt.

    `instructions` and `tools` are the system text and tool list the model sees; they enter the
    token counts (before/after exclude the pending call and its receipt). `evolve_call_tokens`
    is what the policy really generated for the call; when None the counter estimates it. `validated`:
    the caller vouches that `state` is a valid State ending in the call (the env's own State, which was
    validated when it became the State, plus a call it has checked), so it is not validated again.
    Raises StateError / ProtocolError when `state` itself is not a State ending in a pending
    evolve call (a harness bug, not the agent's); the agent's mistakes go into the receipt.
    """
    if not isinstance(state, list) or not state or not isinstance(state[-1], dict) or not is_evolve_call(state[-1]):
        raise ProtocolError("the State must end with the pending evolve function_call")
    call_id = state[-1].get("call_id")
    current = state if validated else validate_state(state, pending_call_id=call_id)
    pending = current[-1]
    counter = counter or get_counter("o200k_base")
    tools = [EVOLVE_TOOL] if tools is None else tools

    new_state, error = None, None
    try:
        code = evolve_code_of(pending)
    except ValueError as e:
        error = str(e)
    else:
        result = run_evolve(current, code, limits)
        error = result.error
        if error is None:
            try:
                new_state, error = _accept(result.state, pending)
            except Exception as e:  # whatever came back, failing to check it rejects the edit
                error = f"the result could not be checked ({type(e).__name__}: {e})"

    if new_state is None:
        receipt: dict[str, Any] = {"applied": False, "error": _receipt_error(error)}
        base = current
    else:
        call_tokens = counter.call_tokens(pending) if evolve_call_tokens is None else evolve_call_tokens
        metrics = edit_metrics(
            counter, instructions, tools, current[:-1], new_state[:-1], call_tokens, output_weight=output_weight
        )
        receipt = {"applied": True, **metrics}
        base = new_state
    item = {"type": "function_call_output", "call_id": call_id, "output": json.dumps(receipt, ensure_ascii=False)}
    return EvolveOutcome(base + [item], receipt, new_state is not None and is_selection(current, new_state))


def _receipt_error(message: str) -> str:
    """The error as the receipt carries it: bounded, and text every tokenizer and file can take
    (a thrown message may hold half of a surrogate pair)."""
    return clip(_LONE_SURROGATE.sub("\ufffd", message), MAX_RECEIPT_ERROR_CHARS)


def _accept(result: Any, pending: dict[str, Any]) -> tuple[State | None, str | None]:
    """Check the code's result against the protocol and the State rules."""
    if not result or result[-1] != pending:
        if any(isinstance(x, dict) and x.get("call_id") == pending["call_id"] for x in result):
            return None, "the pending evolve call must stay unchanged as the last item"
        return None, "the pending evolve call was removed; it must stay unchanged as the last item"
    try:
        return validate_state(result, pending_call_id=pending["call_id"]), None
    except StateError as e:
        return None, f"invalid State: {e}"
