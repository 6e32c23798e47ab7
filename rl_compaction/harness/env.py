"""`CompactionEnv`: a Gymnasium environment around one Task, with an editable State.

The env owns the working context (the State, which evolve may rewrite), the full history
(append-only, never edited), the task tools plus `evolve` and `submit`, the context window
and compaction threshold, the turn / token / time limits, and the accounting ledger.

Observation: ``{"instructions": str, "tools": [tool definitions], "state": State}`` (the model
input is exactly these three). Action: one model turn, either a list of Responses output items
(an assistant message and/or function calls) or ``{"items": [...], "input_ids": [...],
"output_ids": [...]}`` carrying the token ids the policy really used. Reward: the task score
in [0, 1] when the episode ends (the training reward module adds cost terms).

Robustness: whatever the model wrote, `step` does not raise. A malformed function call (no name,
arguments that are not a JSON object, ...) is answered with an error tool output; other malformed
items are ignored and logged as a ``malformed_action`` event. Only an action whose envelope is
wrong (the policy wrapper's bug: items not a list, token ids not lists of ints) raises
`InvalidAction`, and then nothing changes, not even the turn count. After the episode ends
(terminated or truncated), or after a `reset` that raised (it changes nothing of the env, but the
episode under way is over), `step` raises Gymnasium's `ResetNeeded`.

Why one module of ~700 lines: `CompactionEnv` is one state machine (State, history, window,
threshold, limits and ledger change together at every step). Its spaces live in `harness.spaces`.
"""

from __future__ import annotations

import copy
import json
import numbers
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

import gymnasium as gym
from gymnasium.error import ResetNeeded

from rl_compaction.accounting import Ledger, TokenCounter, get_cache_model, get_counter
from rl_compaction.core.configs import check_numbers, help_field
from rl_compaction.core.sandbox import SandboxLimits
from rl_compaction.core.state import (
    State,
    StateError,
    check_json_value,
    check_text,
    clip,
    loads_json,
    quote,
    validate_state,
)
from rl_compaction.harness.spaces import action_space, observation_space
from rl_compaction.harness.tasks import SUBMIT_TOOL, Difficulty, Task, TaskFamily, ToolError, family_names, get_family
from rl_compaction.protocol.evolve import EVOLVE, EVOLVE_TOOL, apply_evolve, system_message

HARNESS_RULES = (
    "Work step by step with the tools. When you are done, call `submit` with your final answer; "
    "the episode ends there and only the answer is scored. Your context window is {window} tokens; "
    "the harness may ask you to compact it."
)
DEFAULT_COMPACTION_REQUEST = (
    "[harness] Your context holds {tokens} of {window} tokens. Compact it now with the evolve tool: keep "
    "what you still need exactly and remove or shorten the rest."
)
#: a usage report, for EnvConfig.usage_report: the request's first sentence, without the request
USAGE_REPORT = "[harness] Your context holds {tokens} of {window} tokens ({percent}%)."
DEFAULT_CONTINUE_NUDGE = "[harness] Continue the task with the tools, or call submit with your final answer."


@dataclass
class EnvConfig:
    """Harness settings of one episode (`EpisodeSpec` adds the task's; each field's help says what it is)."""

    context_window: int = help_field(
        "input tokens the model can take (and is told it can); an input over it ends the episode (truncated)",
        default=32_768,
    )
    compaction_threshold: int | None = help_field(
        "input tokens at which the harness asks for a compaction, or runs its strategy (default: 75%% of the window)",
        default=None,
    )
    compaction_request: str = help_field(
        "the request's wording ({tokens} and {window} are filled in); empty: the harness never asks",
        default=DEFAULT_COMPACTION_REQUEST,
    )
    usage_report: str = help_field(
        "a message the harness appends after every turn that called a tool, stating the context's size "
        "({tokens}, {window} and {percent} are filled in), so that the agent can choose when to compact without "
        "being asked; empty: none (e.g. rl_compaction.harness.env.USAGE_REPORT)",
        default="",
    )
    request_role: str = help_field(
        "role of the request message, appended at the end (user or developer)", default="user"
    )
    rearm_tokens: int | None = help_field(
        "after an edit the harness asks again only once the input has grown this much past its post-edit size "
        "(default: a quarter of the gap between threshold and window), so an edit that stays above the threshold "
        "is not re-requested every turn",
        default=None,
    )
    continue_nudge: str = help_field(
        "what the harness says after a turn with no tool call", default=DEFAULT_CONTINUE_NUDGE
    )
    max_turns: int = help_field("model turns per episode (truncated when reached)", default=100)
    max_output_tokens: int = help_field("output tokens per episode (truncated when reached)", default=200_000)
    max_wall_s: float | None = help_field("seconds per episode (truncated when reached; default: none)", default=None)
    tokenizer: str = help_field(
        "the units of window, threshold and cost: a tiktoken encoding, a model name or a model folder "
        "(GRPO counts in the trained model's own tokens whatever this says)",
        default="o200k_base",
    )
    cache_preset: str = help_field("the cost model's preset (configs/accounting.yaml)", default="local")
    success_threshold: float = help_field("a task score at or above it counts as success", default=1.0)
    sandbox: SandboxLimits = field(default_factory=SandboxLimits, metadata={"help": "evolve's sandbox limits"})

    def __post_init__(self) -> None:
        for name in ("context_window", "compaction_threshold", "compaction_request", "max_turns"):
            if isinstance(getattr(self, name), (list, tuple, dict)):
                raise ValueError(f"{name} holds a distribution; draw one episode's settings with EpisodeSpec.sample")
        check_numbers(self)
        if self.context_window <= 0:
            raise ValueError("context_window must be > 0")
        if self.compaction_threshold is None:
            self.compaction_threshold = int(self.context_window * 0.75)
        if not 0 < self.compaction_threshold <= self.context_window:
            raise ValueError("compaction_threshold must be in (0, context_window]")
        if self.rearm_tokens is None:
            self.rearm_tokens = max(1, (self.context_window - self.compaction_threshold) // 4)
        if self.request_role not in ("user", "developer"):
            raise ValueError("request_role must be 'user' or 'developer'")
        for name in ("compaction_request", "usage_report"):
            try:
                getattr(self, name).format(tokens=0, window=1, percent=0)
            except (KeyError, IndexError, ValueError) as e:
                raise ValueError(f"{name} may use only {{tokens}}, {{window}} and {{percent}}: {e!r}") from None
        if self.max_turns <= 0 or self.max_output_tokens <= 0:
            raise ValueError("max_turns and max_output_tokens must be > 0")


@dataclass(frozen=True)
class _Snapshot:
    """What `step` restores when a turn raised half-way (a bug in a task or strategy): the env's own fields,
    and the lengths of its append-only lists. The State is never changed in place, so keeping the reference
    keeps it. (The ledger row is recorded after every step that can fail; what a task keeps inside itself
    is the task's.)"""

    state: State
    turn: int
    output_tokens: int
    answer: str | None
    score: float
    requested: bool
    armed_at: int
    compaction_requests: int
    call_counter: int
    input_ids: list[int]
    history: int
    events: int
    state_versions: int


class InvalidAction(ValueError):
    """An action that is not one model turn (the policy wrapper's bug, not the model's): `step`
    raises it before changing anything."""


class PluginError(RuntimeError):
    """A task plug-in handed the env what cannot enter the State (a tool output that is not a string or
    holds a lone surrogate, a user reply that is neither a string nor None): the family's bug, not the
    model's. `step` raises it and undoes the turn, as for any other task or strategy bug."""


@dataclass
class _Turn:
    """One model turn read from an action, every item checked: texts of assistant messages,
    function calls (call, parsed arguments, error to answer with), and notes on ignored items."""

    entries: list[tuple[str, Any]]
    problems: list[str]
    input_ids: list[int] | None
    output_ids: list[int] | None

    @property
    def calls(self) -> list[tuple[dict[str, Any], dict[str, Any] | None, str | None]]:
        return [e for kind, e in self.entries if kind == "call"]

    @property
    def texts(self) -> list[str]:
        return [e for kind, e in self.entries if kind == "text"]


#: A harness strategy: given the State (ending with a pending evolve call) returns evolve code.
HarnessStrategy = Callable[[State, "CompactionEnv"], str]
#: describes an edit the model applied: (env, State before, the evolve call, State after) -> event fields
EditLabel = Callable[["CompactionEnv", State, dict[str, Any], State], dict[str, Any]]


def _token_ids(value: Any, name: str) -> list[int] | None:
    """Token ids of an action as a list of ints >= 0 (numpy arrays and tensors are converted)."""
    if value is None:
        return None
    if hasattr(value, "tolist"):
        value = value.tolist()
    if not isinstance(value, (list, tuple)) or not all(type(x) is int and x >= 0 for x in value):
        raise InvalidAction(f"{name} must be a list of token ids (ints >= 0), got {clip(quote(value), 80)}")
    return list(value)


class CompactionEnv(gym.Env):
    """Gymnasium env: one Task per episode, the State as observation, model turns as actions."""

    #: text rendering; render_fps as Gymnasium's toy-text envs declare it (`check_env` warns without one)
    metadata = {"render_modes": ["ansi"], "render_fps": 4}

    def __init__(
        self,
        family: str | TaskFamily = "probe",
        *,
        split: str = "train",
        difficulty: Difficulty | None = None,
        config: EnvConfig | None = None,
        strategy: HarnessStrategy | None = None,
        counter: TokenCounter | None = None,
        render_mode: str | None = None,
    ):
        self.family = get_family(family) if isinstance(family, str) else family
        self.split = split
        self.difficulty = difficulty or Difficulty()
        # one EnvConfig, with its derived values filled in (an EpisodeSpec hands over its harness settings)
        self.config = config.env_config() if hasattr(config, "env_config") else config or EnvConfig()
        self.strategy = strategy
        self.counter = counter or get_counter(self.config.tokenizer)
        self.cache_model = get_cache_model(self.config.cache_preset)
        self.render_mode = render_mode
        self.observation_space, self.action_space = observation_space(), action_space()
        self.task: Task | None = None
        self._reset_failed = False
        self._edit_labels: list[EditLabel] = []

    # ------------------------------------------------------------------ gym API

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[dict, dict]:
        """Start an episode on task `seed` of the split (or `options["task_seed"]`). The new episode is
        built before the env changes: when the family raises half-way, the env keeps nothing of the
        new task and the episode under way is over (`step` raises `ResetNeeded` until a reset succeeds)."""
        self._reset_failed = True  # until the new episode is complete
        super().reset(seed=seed)
        options = options or {}
        task_seed = options.get("task_seed", seed)
        if task_seed is None:
            task_seed = int(self.np_random.integers(0, 2**31 - 1))
        task_seed = int(task_seed)
        task = self.family.make(task_seed, self.split, self.difficulty)
        tools = [*task.tools(), SUBMIT_TOOL, EVOLVE_TOOL]
        tool_names = {t["name"] for t in tools}
        rules = HARNESS_RULES.format(window=self.config.context_window)
        instructions = system_message(f"{task.instructions.rstrip()}\n\n{rules}", self.config.sandbox)
        state: State = validate_state(task.initial_state())
        input_ids = self.counter.input_ids(instructions, tools, state)

        # Nothing can fail from here: the new episode replaces the old one whole.
        self.task_seed, self.task, self.tools, self.tool_names = task_seed, task, tools, tool_names
        self.instructions, self.state, self._input_ids = instructions, state, input_ids
        self.history: State = list(state)
        self.ledger = Ledger(self.cache_model)
        self.turn = 0
        self.output_tokens = 0
        self.started = time.monotonic()
        self.events: list[dict[str, Any]] = []
        self.state_versions: list[dict[str, Any]] = [{"turn": 0, "reason": "reset", "state": copy.deepcopy(state)}]
        self.answer: str | None = None
        self.score = 0.0
        self._requested = False
        self._armed_at = self.config.compaction_threshold
        self.compaction_requests = 0
        self._call_counter = 0
        self._ended = False
        self._closed = False
        self._reset_failed = False
        return self._observation(), {
            "task_seed": self.task_seed,
            "family": self.family.name,
            "split": self.split,
            "input_tokens": len(self._input_ids),
        }

    def step(self, action: Any) -> tuple[dict, float, bool, bool, dict]:
        """One model turn. Raises `InvalidAction` (nothing changed) for an action that is not a
        turn, `ResetNeeded` after the episode ended or a reset raised; the model's own mistakes never raise."""
        if self._reset_failed:
            raise ResetNeeded("the last reset() raised; call reset() again to start an episode")
        if self.task is None:
            raise RuntimeError("call reset() before step()")
        if self._ended:
            raise ResetNeeded("the episode has ended (terminated or truncated); call reset() to start another")
        if self._closed:
            # the family's resources are gone: playing on would quietly restart them (a new JVM) mid-episode
            raise ResetNeeded("the env was closed; call reset() to start another episode")
        turn = self._read_action(action)
        saved = self._bookmark()
        try:
            return self._step(turn)
        except BaseException:
            self._rewind(saved)
            raise

    def _step(self, turn: _Turn) -> tuple[dict, float, bool, bool, dict]:
        self.turn += 1
        prompt_ids = turn.input_ids if turn.input_ids is not None else self._input_ids
        n_out = len(turn.output_ids) if turn.output_ids is not None else self._estimate_output_tokens(turn)
        self.output_tokens += n_out
        terminated = self._apply_turn(turn, n_out if turn.output_ids is not None else None)
        applied = self._last_evolve_applied

        truncated_reason = None
        if not terminated:
            self._input_ids = self._render()
            if applied:
                self._rearm()
            if self.config.usage_report and turn.calls:
                self._append(
                    {
                        "type": "message",
                        "role": self.config.request_role,
                        "content": self._usage(self.config.usage_report),
                    }
                )
                self._input_ids = self._render()
            if len(self._input_ids) >= self._armed_at:
                self._on_threshold()
            if len(self._input_ids) > self.config.context_window:
                truncated_reason = "context_window"
            elif self.turn >= self.config.max_turns:
                truncated_reason = "max_turns"
            elif self.output_tokens >= self.config.max_output_tokens:
                truncated_reason = "max_output_tokens"
            elif self.config.max_wall_s is not None and time.monotonic() - self.started > self.config.max_wall_s:
                truncated_reason = "max_wall_s"
        # Recorded last: everything that can fail has run, and `_rewind` cannot take a row back.
        self.ledger.record(prompt_ids, n_out, evolve_call_tokens=self._last_evolve_tokens, evolve_applied=applied)
        truncated = truncated_reason is not None
        reward = self.score if terminated else 0.0
        info: dict[str, Any] = {"turn": self.turn, "input_tokens": len(self._input_ids) if not terminated else None}
        if terminated or truncated:
            info.update(self.summary(truncated_reason))
        self._ended = terminated or truncated
        return self._observation(), reward, terminated, truncated, info

    def _bookmark(self) -> _Snapshot:
        return _Snapshot(
            state=self.state,
            turn=self.turn,
            output_tokens=self.output_tokens,
            answer=self.answer,
            score=self.score,
            requested=self._requested,
            armed_at=self._armed_at,
            compaction_requests=self.compaction_requests,
            call_counter=self._call_counter,
            input_ids=self._input_ids,
            history=len(self.history),
            events=len(self.events),
            state_versions=len(self.state_versions),
        )

    def _rewind(self, saved: _Snapshot) -> None:
        self.state, self.turn, self.output_tokens = saved.state, saved.turn, saved.output_tokens
        self.answer, self.score, self._requested = saved.answer, saved.score, saved.requested
        self._armed_at, self.compaction_requests = saved.armed_at, saved.compaction_requests
        self._call_counter, self._input_ids = saved.call_counter, saved.input_ids
        del self.history[saved.history :], self.events[saved.events :], self.state_versions[saved.state_versions :]

    def close(self) -> None:
        """Release the family's resources (e.g. a simulator process); the env may be reset again
        afterwards, but the episode under way is over (`step` raises until then)."""
        self._closed = True
        self.family.close()
        super().close()

    def render(self) -> str | None:
        if self.render_mode != "ansi" or self.task is None:
            return None
        return json.dumps(self.state, ensure_ascii=False, indent=1)

    # ------------------------------------------------------------------ turn handling

    def _read_action(self, action: Any) -> _Turn:
        """Check the whole action before anything uses it. The envelope must be right (else
        InvalidAction); items are the model's text, so a bad one becomes an error tool output
        (a function call) or a logged problem (anything else), never an exception."""
        if isinstance(action, dict) and "items" in action:
            unknown = set(action) - {"items", "input_ids", "output_ids"}
            if unknown:
                raise InvalidAction(f"unknown action keys {sorted(map(quote, unknown))}")
            items = action["items"]
            input_ids = _token_ids(action.get("input_ids"), "input_ids")
            output_ids = _token_ids(action.get("output_ids"), "output_ids")
        else:
            items, input_ids, output_ids = action, None, None
        if isinstance(items, dict):
            items = [items]
        if not isinstance(items, list):
            raise InvalidAction(
                f"an action is a list of output items or a dict with 'items', got {type(items).__name__}"
            )
        turn = _Turn([], [], input_ids, output_ids)
        used = {x.get("call_id") for x in self.history}
        for item in items:
            try:
                check_json_value(item, root="item")
            except StateError as e:
                if isinstance(item, dict) and item.get("type") == "function_call":
                    call = self._read_call({}, used)[0]
                    turn.entries.append(("call", (call, None, f"the call is not valid JSON: {e.rule}")))
                else:
                    turn.problems.append(f"ignored an output item that is not valid JSON: {e.rule}")
                continue
            if not isinstance(item, dict):
                turn.problems.append(f"ignored a non-object output item: {quote(item, 80)}")
                continue
            kind = item.get("type", "message" if "role" in item else None)
            if kind == "message":
                content = item.get("content")
                turn.entries.append(("text", content if isinstance(content, str) else _plain_text(content)))
            elif kind == "function_call":
                turn.entries.append(("call", self._read_call(item, used)))
            else:
                turn.problems.append(f"ignored an output item of type {quote(kind)}")
        return turn

    def _read_call(
        self, item: dict[str, Any], used: set[Any]
    ) -> tuple[dict[str, Any], dict[str, Any] | None, str | None]:
        """The call as it enters the State (always valid: a fresh call_id when missing or taken,
        "unknown" for a missing name, "{}" for bad arguments), its arguments, and the error, if any."""
        cid, name, raw_args = item.get("call_id"), item.get("name"), item.get("arguments")
        if not isinstance(cid, str) or not cid or cid in used:
            cid = self._fresh_call_id(used)
        used.add(cid)
        error, args = None, None
        if not isinstance(name, str) or not name:
            name, error = "unknown", "the call has no tool name"
        if not isinstance(raw_args, str):
            error = error or "arguments must be a JSON object string"
        else:
            try:
                args = loads_json(raw_args, root="arguments")
            except StateError as e:
                error = error or f"arguments are not a JSON object ({e.rule})"
            else:
                if not isinstance(args, dict):
                    args, error = None, error or "arguments are not a JSON object"
        if args is None:
            raw_args = "{}"
        call = {"type": "function_call", "call_id": cid, "name": name, "arguments": raw_args}
        return call, args, error

    def _append(self, *items: dict[str, Any]) -> None:
        self.state = self.state + list(items)
        self.history.extend(copy.deepcopy(list(items)))

    def _fresh_call_id(self, used: set[Any] | None = None) -> str:
        used = {x.get("call_id") for x in self.history} if used is None else used
        while True:
            self._call_counter += 1
            cid = f"call_h{self._call_counter}"
            if cid not in used:
                return cid

    def _apply_turn(self, turn: _Turn, evolve_tokens: int | None) -> bool:
        """Append the model's turn and the harness's answers. Returns True when submitted."""
        self._last_evolve_tokens, self._last_evolve_applied = 0, None
        for kind, entry in turn.entries:
            if kind == "text":
                self._append({"type": "message", "role": "assistant", "content": entry})
        if turn.problems:
            self.events.append({"turn": self.turn, "event": "malformed_action", "detail": turn.problems})
        calls, texts = turn.calls, turn.texts

        # The design's rule: evolve is the only *call* of its turn (text beside it is fine).
        evolve_alone = len(calls) == 1
        for i, (call, args, error) in enumerate(calls):
            name = call["name"]
            if error is None and name not in self.tool_names:
                error = f"unknown tool {quote(name)}; available: {', '.join(sorted(self.tool_names))}"
            if error is None and name == EVOLVE and not evolve_alone:
                error = "evolve must be the only tool call in its turn; nothing was changed"
            if error is None and name == "submit" and not isinstance(args.get("answer"), str):
                error = "submit takes one argument: answer, a string"
            if error is not None:
                self._append(call, _output(call, {"error": error}))
                self.events.append({"turn": self.turn, "event": "tool_error", "tool": name, "error": error})
            elif name == EVOLVE:
                self._evolve(call, evolve_tokens if evolve_tokens is not None else self.counter.call_tokens(call))
            elif name == "submit":
                self.score = self._score(args["answer"])
                self.answer = args["answer"]
                self._append(call, _output(call, "Answer submitted."))
                # Calls after submit in the same turn are answered so the State stays valid.
                for later, _, _ in calls[i + 1 :]:
                    self._append(later, _output(later, {"error": "not run: the episode ended with submit"}))
                return True
            else:
                try:
                    out = self._task_text(self.task.call_tool(name, args), f"call_tool({quote(name)})")
                except ToolError as e:
                    out = json.dumps({"error": str(e)})
                    self.events.append({"turn": self.turn, "event": "tool_error", "tool": name, "error": str(e)})
                self._append(call, _output(call, out))
        if not calls:
            reply = self.task.user_reply(texts[-1] if texts else "")
            reply = None if reply is None else self._task_text(reply, "user_reply()", "a string or None")
            nudge = reply if reply is not None else self.config.continue_nudge
            self._append({"type": "message", "role": "user", "content": nudge})
        return False

    def _task_text(self, text: Any, method: str, wanted: str = "a string") -> str:
        """Text a task plug-in hands the State, checked where it enters: a bad one would make every later
        edit fail validation, so it raises `PluginError` (and `step` undoes the turn)."""
        where = f"task family {quote(self.family.name)}: {method}"
        if not isinstance(text, str):
            raise PluginError(f"{where} must return {wanted}, got {type(text).__name__}")
        try:
            check_text(text, "the text")
        except StateError as e:
            raise PluginError(f"{where} returned invalid text: {e.rule}") from None
        return text

    def _score(self, answer: str) -> float:
        """The task's score of an answer, a number in [0, 1]. An answer the checker cannot even parse (a
        5000-digit number hits Python's int limit) scores 0 rather than leaving the episode without an end;
        so does a score that is no number in [0, 1] (NaN, inf, 7.5: the family's bug), rather than
        becoming the reward and counting as success. Both are recorded as a ``score_error`` event."""
        try:
            score = self.task.score(answer)
        except (ValueError, OverflowError, RecursionError) as e:
            return self._score_error(str(e))
        # NaN fails both comparisons; bool is accepted, as float() always did (a checker may return answer == x)
        if not isinstance(score, numbers.Real) or not 0 <= score <= 1:
            return self._score_error(
                f"task family {quote(self.family.name)}: score() returned {quote(score)}; "
                "a score must be a finite number in [0, 1]"
            )
        return float(score)

    def _score_error(self, error: str) -> float:
        self.events.append({"turn": self.turn, "event": "score_error", "error": clip(error, 200)})
        return 0.0

    def _evolve(self, call: dict[str, Any], evolve_tokens: int, by_harness: bool = False) -> None:
        """Run one evolve call through the protocol; the receipt lands in State and history."""
        asked = self._requested  # a compaction request was pending: the edit answers it
        before = self.state
        outcome = apply_evolve(
            self.state + [call],
            counter=self.counter,
            instructions=self.instructions,
            tools=self.tools,
            limits=self.config.sandbox,
            output_weight=self.cache_model.output_weight,
            evolve_call_tokens=evolve_tokens,
            validated=True,  # the State is the env's own; the call was checked when the action was read
        )
        self.history.extend(copy.deepcopy([call, outcome.state[-1]]))
        self.state = outcome.state
        if by_harness:
            self.ledger.record_harness_edit(outcome.applied)
        else:
            self._last_evolve_tokens += evolve_tokens
            self._last_evolve_applied = outcome.applied
        self._requested = False if outcome.applied else self._requested
        self.events.append(
            {
                "turn": self.turn,
                "event": "evolve",
                "by": "harness" if by_harness else "model",
                "selection": outcome.selection,
                "asked": asked,
                # when: the context the turn's prompt held, as a share of the window (the threshold is where
                # the harness asks; an unasked edit may come earlier or later)
                "context_share": round(len(self._input_ids) / self.config.context_window, 4),
                **outcome.receipt,
                # what the opt-in labels say of an edit the model applied (`add_edit_label`, `harness.labels`)
                **(self._label(before, call, outcome.state) if outcome.applied and not by_harness else {}),
            }
        )
        if outcome.applied:
            self.state_versions.append(
                {
                    "turn": self.turn,
                    "reason": "evolve",
                    "code": json.loads(call["arguments"])["code"],
                    "state": copy.deepcopy(self.state),
                }
            )

    def add_edit_label(self, label: EditLabel) -> None:
        """Have `label(env, before, call, after)` describe every edit the model applies from now on: the
        fields it returns join the edit's event (`rl_compaction.harness.labels.LabelEdits` adds one). The env
        itself does no analysis of an edit beyond its protocol's receipt."""
        self._edit_labels.append(label)

    def _label(self, before: State, call: dict[str, Any], after: State) -> dict[str, Any]:
        return {k: v for label in self._edit_labels for k, v in label(self, before, call, after).items()}

    def _on_threshold(self) -> None:
        """At the threshold: run the harness strategy if there is one, else ask the model (once)."""
        tokens = len(self._input_ids)
        if self.strategy is not None:
            call = {"type": "function_call", "call_id": self._fresh_call_id(), "name": EVOLVE, "arguments": "{}"}
            code = self.strategy(self.state + [call], self)
            call["arguments"] = json.dumps({"code": code}, ensure_ascii=False)
            self._evolve(call, 0, by_harness=True)
            self.events.append({"turn": self.turn, "event": "harness_compaction", "input_tokens": tokens})
            self._input_ids = self._render()
            self._rearm()
            return
        if self._requested or not self.config.compaction_request:
            return
        text = self._usage(self.config.compaction_request)
        self._append({"type": "message", "role": self.config.request_role, "content": text})
        self._requested = True
        self.compaction_requests += 1
        self.events.append({"turn": self.turn, "event": "compaction_request", "input_tokens": tokens})
        self._input_ids = self._render()

    # ------------------------------------------------------------------ accounting and reports

    def _rearm(self) -> None:
        """After an edit: fire again only once the input has grown `rearm_tokens` past its new size."""
        self._armed_at = max(self.config.compaction_threshold, len(self._input_ids) + self.config.rearm_tokens)

    def _usage(self, template: str) -> str:
        tokens, window = len(self._input_ids), self.config.context_window
        return template.format(tokens=tokens, window=window, percent=round(100 * tokens / window))

    @property
    def input_tokens(self) -> int:
        """The tokens of the model's next input (instructions, tools and State)."""
        return len(self._input_ids)

    @property
    def pending_compaction_request(self) -> int:
        """The number of the compaction request the model has not yet answered with an applied edit, or 0."""
        return self.compaction_requests if self._requested else 0

    def _render(self) -> list[int]:
        return self.counter.input_ids(self.instructions, self.tools, self.state)

    def _estimate_output_tokens(self, turn: _Turn) -> int:
        n = sum(self.counter.call_tokens(call) for call, _, _ in turn.calls)
        return n + sum(self.counter.text_tokens(text) for text in turn.texts)

    def _observation(self) -> dict[str, Any]:
        return {"instructions": self.instructions, "tools": self.tools, "state": copy.deepcopy(self.state)}

    def summary(self, truncated_reason: str | None = None) -> dict[str, Any]:
        """End-of-episode info: score, success, the ledger (rows and totals) and harness events. A plain
        dict, as Gymnasium expects; `rl_compaction.core.summary.EpisodeSummary` is its type, for readers."""
        return {
            "score": self.score,
            "success": self.answer is not None and self.score >= self.config.success_threshold,
            "answer": self.answer,
            "truncated_reason": truncated_reason,
            "turns": self.turn,
            "ledger": self.ledger.totals(),
            **edit_counts(self.events),
            "ledger_rows": [row.to_dict() for row in self.ledger.rows],
            "events": self.events,
            "task_seed": self.task_seed,
            "config": {k: v for k, v in asdict(self.config).items() if k != "sandbox"},
        }


def edit_counts(events: list[dict[str, Any]]) -> dict[str, int]:
    """The model's applied edits (`model_edits`), how many of them only selected (`selection_edits`,
    `rl_compaction.protocol.evolve.is_selection`), how many answered a pending compaction request
    (`asked_edits`; the others were made unasked, while the window still had room) and how many left
    exactly what the task oracle's targeted edit leaves (`targeted_edits`), from an episode's events."""
    edits = [e for e in events if e["event"] == "evolve" and e.get("by") == "model" and e.get("applied")]
    counts = {
        "model_edits": len(edits),
        "selection_edits": sum(bool(e.get("selection")) for e in edits),
        "asked_edits": sum(bool(e.get("asked")) for e in edits),
    }
    if all("targeted" in e for e in edits):  # labelled (`harness.labels`); else unknown, not 0: left out
        counts["targeted_edits"] = sum(bool(e["targeted"]) for e in edits)
    return counts


def _output(call: dict[str, Any], payload: Any) -> dict[str, Any]:
    text = payload if isinstance(payload, str) else json.dumps(payload, ensure_ascii=False)
    return {"type": "function_call_output", "call_id": call["call_id"], "output": text}


def _plain_text(content: Any) -> str:
    if not isinstance(content, list):
        return "" if content is None else str(content)
    return "\n".join(str(p.get("text") or p.get("refusal") or "") for p in content if isinstance(p, dict))


def register_envs() -> None:
    """Register every task family as ``rl_compaction/<family>-v0`` with Gymnasium."""
    for name in family_names():
        env_id = f"rl_compaction/{name}-v0"
        if env_id not in gym.registry:
            gym.register(
                env_id,
                entry_point="rl_compaction.harness.env:CompactionEnv",
                kwargs={"family": name},
                disable_env_checker=True,
            )


register_envs()
