"""Oracle demonstrations for the SFT warm start: one training conversation per model turn.

A small model cannot invent the evolve protocol from nothing, so it first imitates the
context-bound oracle (`rl_compaction.harness.oracle`). The oracle plays whole episodes in
`CompactionEnv` under varied compaction strategies: ``"evolve"`` (the oracle answers the
harness's compaction request with its own targeted evolve edit), ``"none"``, or a harness
strategy (``"sliding_window"``, ``"clear_tool_outputs"``) that rewrites the State between
turns. Only successful episodes are kept, except those of the strategies named in
``keep_failed``: imperfect demonstrations (``"evolve_lossy"``, ``"none"`` at a small window), so
the warm-started policy sometimes errs the way a real model does and RL has something to fix.
A kept failed episode loses its answer turns (calls to ``submit``): the answer is wrong because
the edit lost what it needed, and SFT would teach the wrong answer itself (an empty or guessed
one), not the error RL should fix (the edit).

Why one row per turn: the agent's context is rewritten by edits, so a whole episode is not one
append-only conversation and cannot be written as one. Each row is what the policy saw at that
turn (the observation, recorded before the step: system instructions + the State as it was
then, after any earlier edits) followed by the oracle's turn as the final assistant message.

Row columns:
- ``messages``: chat-completions messages as `rl_compaction.core.render.chat_messages` makes them
  (system instructions, the State), then the oracle's turn as one assistant message with
  ``tool_calls``. For Arrow storage every message has all keys (``tool_calls`` an empty list,
  ``tool_call_id``/``name`` None where absent) and call ``arguments`` are JSON strings, as in
  the OpenAI chat API (dicts of varying keys would be merged into one struct by Arrow).
  `row_messages` gives them back exactly as ``chat_messages`` writes them.
- ``tools``: the chat-completions tool definitions (`render.chat_tools`) as a JSON string
  (TRL reads either form; a string keeps JSON schemas exact).
- ``family``, ``strategy``, ``task_seed``, ``turn`` (1-based model turn), ``is_evolve`` (the
  oracle's turn is an evolve call).

Turns the env answered with an error (a rejected edit, a tool error, a malformed action) are
left out, so the demonstrations teach only turns that worked.
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from datasets import Dataset, Features, List, Value

from rl_compaction.core.outputs import check_output_dir, lock_output_dir
from rl_compaction.core.render import chat_messages, chat_tools
from rl_compaction.core.reports import progress_bar
from rl_compaction.core.state import State
from rl_compaction.core.summary import EpisodeSummary
from rl_compaction.harness.env import CompactionEnv
from rl_compaction.harness.oracle import ORACLE_STRATEGIES, OracleScriptedPolicy, make_env
from rl_compaction.harness.spec import EpisodeSpec
from rl_compaction.harness.tasks import SPLITS, SUBMIT_TOOL, family_names
from rl_compaction.models.registry import counter_name
from rl_compaction.protocol.evolve import EVOLVE

SUMMARY_FILE = "demos_summary.json"

_TOOL_CALL = {
    "id": Value("string"),
    "type": Value("string"),
    "function": {"name": Value("string"), "arguments": Value("string")},
}
FEATURES = Features(
    {
        "messages": List(
            {
                "role": Value("string"),
                "content": Value("string"),
                "tool_calls": List(_TOOL_CALL),
                "tool_call_id": Value("string"),
                "name": Value("string"),
            }
        ),
        "tools": Value("string"),
        "family": Value("string"),
        "strategy": Value("string"),
        "task_seed": Value("int64"),
        "turn": Value("int64"),
        "is_evolve": Value("bool"),
    }
)

#: Events of a turn that make it a bad demonstration.
_ERROR_EVENTS = ("tool_error", "malformed_action")


# --------------------------------------------------------------------------- storage form


def _stored_message(message: dict[str, Any]) -> dict[str, Any]:
    calls = [
        {
            "id": c["id"],
            "type": c["type"],
            "function": {
                "name": c["function"]["name"],
                "arguments": json.dumps(c["function"]["arguments"], ensure_ascii=False),
            },
        }
        for c in message.get("tool_calls", [])
    ]
    return {
        "role": message["role"],
        "content": message["content"],
        "tool_calls": calls,
        "tool_call_id": message.get("tool_call_id"),
        "name": message.get("name"),
    }


def row_messages(row: dict[str, Any]) -> list[dict[str, Any]]:
    """A row's messages exactly as `chat_messages` writes them (arguments as dicts, no empty keys)."""
    out = []
    for stored in row["messages"]:
        message = {"role": stored["role"], "content": stored["content"]}
        if stored.get("tool_calls"):
            message["tool_calls"] = [
                {
                    "id": c["id"],
                    "type": c["type"],
                    "function": {"name": c["function"]["name"], "arguments": json.loads(c["function"]["arguments"])},
                }
                for c in stored["tool_calls"]
            ]
        for key in ("tool_call_id", "name"):
            if stored.get(key) is not None:
                message[key] = stored[key]
        out.append(message)
    return out


def row_tools(row: dict[str, Any]) -> list[dict[str, Any]]:
    """A row's chat-completions tool definitions."""
    tools = row["tools"]
    return json.loads(tools) if isinstance(tools, str) else tools


def _message_items(message: dict[str, Any]) -> list[dict[str, Any]]:
    """State items that `chat_messages` renders back into `message` (the inverse of its mapping)."""
    role = message["role"]
    if role == "tool":
        return [{"type": "function_call_output", "call_id": message["tool_call_id"], "output": message["content"]}]
    items = []
    if message["content"] or not message.get("tool_calls"):
        items.append({"type": "message", "role": role, "content": message["content"]})
    for call in message.get("tool_calls", []):
        items.append(
            {
                "type": "function_call",
                "call_id": call["id"],
                "name": call["function"]["name"],
                "arguments": json.dumps(call["function"]["arguments"], ensure_ascii=False),
            }
        )
    return items


def row_observation(row: dict[str, Any]) -> tuple[str, list[dict[str, Any]], State, list[dict[str, Any]]]:
    """(instructions, tools, State, turn items) of a row: the observation the oracle saw and its turn.

    Rebuilt from the messages so that prompts go through `chat.render_prompt`, the same
    path the policy's prompts take at RL and eval time; ``chat_messages`` of the rebuilt State
    gives the row's messages back exactly (checked)."""
    messages = row_messages(row)
    if len(messages) < 2 or messages[0]["role"] != "system" or messages[-1]["role"] != "assistant":
        raise ValueError("a demo row must start with the system instructions and end with the assistant turn")
    instructions = messages[0]["content"]
    state = [item for m in messages[1:-1] for item in _message_items(m)]
    turn = _message_items(messages[-1])
    if chat_messages(instructions, state + turn) != messages:
        raise ValueError("the row's messages do not come from chat_messages; cannot rebuild its observation")
    return instructions, row_tools(row), state, turn


def _kind(value: Any) -> str:
    """What a field that cannot be read holds, for its error message."""
    if value is None:
        return "null"
    if isinstance(value, (str, list)) and not value:
        return "empty"
    return f"a {type(value).__name__}"


def _json_field(field: str, value: Any, kind: type) -> None:
    """Check that `value` is a JSON string of a `kind` (``tools`` may be a list already, as `row_tools` reads)."""
    if kind is list and isinstance(value, list):
        return
    if not isinstance(value, str):
        raise ValueError(f"{field} is {_kind(value)}, not a JSON string")
    try:
        parsed = json.loads(value)
    except json.JSONDecodeError as e:
        raise ValueError(f"{field} is not JSON ({e})") from None
    if not isinstance(parsed, kind):
        raise ValueError(f"{field} is JSON {_kind(parsed)}, not a {kind.__name__}")


def check_demo_row(row: dict[str, Any]) -> None:
    """Raise a ValueError naming the first field of `row` that SFT cannot read (a hand-edited folder:
    empty ``messages``, a null ``function`` or ``tool_call_id``, JSON that does not parse), so it
    fails where the row is loaded, not with a traceback deep in SFT."""
    messages = row.get("messages")
    if not isinstance(messages, list) or not messages:
        raise ValueError(
            f"messages is {_kind(messages)}; a row holds the system instructions, the State's messages "
            "and the trained assistant turn"
        )
    for i, message in enumerate(messages):
        at = f"messages[{i}]"
        if not isinstance(message, dict):
            raise ValueError(f"{at} is {_kind(message)}, not a message")
        if not isinstance(message.get("content"), str):
            raise ValueError(f"{at}.content is {_kind(message.get('content'))}, not a string")
        call_id = message.get("tool_call_id")
        if message.get("role") == "tool" and (not isinstance(call_id, str) or not call_id):
            raise ValueError(f"{at}.tool_call_id is {_kind(call_id)}; a tool message names the call it answers")
        for j, call in enumerate(message.get("tool_calls") or []):
            function = call.get("function") if isinstance(call, dict) else None
            if not isinstance(function, dict):
                raise ValueError(
                    f"{at}.tool_calls[{j}].function is {_kind(function)}, not an object with name and arguments"
                )
            if not isinstance(call.get("id"), str) or not isinstance(function.get("name"), str):
                raise ValueError(f"{at}.tool_calls[{j}]: id and function.name must be strings")
            _json_field(f"{at}.tool_calls[{j}].function.arguments", function.get("arguments"), dict)
    _json_field("tools", row.get("tools"), list)
    try:
        row_observation(row)
    except ValueError as e:
        raise ValueError(f"messages: {e}") from None


# --------------------------------------------------------------------------- rows


def demo_row(
    observation: dict[str, Any], items: list[dict[str, Any]], *, family: str, strategy: str, task_seed: int, turn: int
) -> dict[str, Any]:
    """One SFT row: the observation's chat messages plus the turn `items` as the final assistant message."""
    prompt = chat_messages(observation["instructions"], observation["state"])
    full = chat_messages(observation["instructions"], observation["state"] + items)
    if len(full) != len(prompt) + 1 or full[: len(prompt)] != prompt or full[-1]["role"] != "assistant":
        raise ValueError(f"{family} seed {task_seed} turn {turn}: the turn does not render as one assistant message")
    is_evolve = any(item.get("type") == "function_call" and item.get("name") == EVOLVE for item in items)
    return {
        "messages": [_stored_message(m) for m in full],
        "tools": json.dumps(chat_tools(observation["tools"]), ensure_ascii=False),
        "family": family,
        "strategy": strategy,
        "task_seed": task_seed,
        "turn": turn,
        "is_evolve": is_evolve,
    }


def _turn_failed(env: CompactionEnv, is_evolve: bool) -> bool:
    """Whether the env answered the turn just stepped with an error: a tool error, a malformed action or,
    for an evolve turn, a rejected edit (the model's evolve event comes before any harness edit's)."""
    events = [e for e in env.events if e["turn"] == env.turn]
    if any(e["event"] in _ERROR_EVENTS for e in events):
        return True
    evolves = [e for e in events if e["event"] == "evolve"]
    return is_evolve and (not evolves or not evolves[0]["applied"])


def turn_kind(row: dict[str, Any]) -> str:
    """What the row's trained turn does: the name of its first tool call, or "message" for plain text."""
    calls = row["messages"][-1].get("tool_calls") or []
    return calls[0]["function"]["name"] if calls else "message"


def oracle_episode_rows(env: CompactionEnv, strategy: str, seed: int) -> tuple[list[dict[str, Any]], EpisodeSummary]:
    """Play one oracle episode on task `seed` and return (rows of its clean turns, its summary)."""
    policy = OracleScriptedPolicy(strategy)
    observation, _ = env.reset(seed=seed)
    rows = []
    while True:
        items = policy.act_env(env, observation).items
        row = demo_row(observation, items, family=env.family.name, strategy=strategy, task_seed=seed, turn=env.turn + 1)
        observation, _, terminated, truncated, info = env.step(items)
        if not _turn_failed(env, row["is_evolve"]):
            rows.append(row)
        if terminated or truncated:
            return rows, EpisodeSummary.from_info(info)


# --------------------------------------------------------------------------- the data set


def check_demo_settings(
    families: list[str],
    episodes_per_family: int,
    strategies: list[str],
    keep_failed: Sequence[str],
    weights: Sequence[int] | None,
    names: Mapping[str, str] | None = None,
) -> list[int]:
    """Check `write_demos`' families, strategies, `keep_failed` and weights (one ValueError naming the
    setting), so a recipe can check them before any work; returns the weights (default one each). `names`
    gives the caller's names of the settings (e.g. {"episodes_per_family": "demo_episodes"}) for its errors."""
    name = {
        key: (names or {}).get(key, key)
        for key in ("families", "episodes_per_family", "strategies", "keep_failed", "weights")
    }
    known = family_names()
    if not families or any(f not in known for f in families):
        raise ValueError(f"{name['families']} must name known task families ({', '.join(known)}), got {families}")
    if not strategies or any(s not in ORACLE_STRATEGIES for s in strategies):
        raise ValueError(f"{name['strategies']} must be from {', '.join(ORACLE_STRATEGIES)}, got {strategies}")
    if any(s not in strategies for s in keep_failed):
        raise ValueError(
            f"{name['keep_failed']} must name strategies of this run ({', '.join(strategies)}), got {list(keep_failed)}"
        )
    if len(set(strategies)) != len(strategies) or len(set(families)) != len(families):
        raise ValueError(f"{name['families']} and {name['strategies']} must not repeat")
    weights = list(weights) if weights is not None else [1] * len(strategies)
    if len(weights) != len(strategies) or any(not isinstance(w, int) or w < 1 for w in weights):
        raise ValueError(f"{name['weights']} must be one integer >= 1 per strategy ({len(strategies)}), got {weights}")
    cycle = sum(weights)
    if episodes_per_family < cycle:
        raise ValueError(
            f"{name['episodes_per_family']} ({episodes_per_family}) must cover one cycle of the strategies "
            f"({cycle} episodes with weights {weights}), so each gets at least one"
        )
    return weights


#: the episode settings a demos summary records (the model card reads them; a distribution as declared)
DEMO_EPISODE_FIELDS = ("scale", "level", "context_window", "compaction_threshold", "tokenizer")
#: the oracle plays each demonstration to its end: the spec's turn limit binds the policy, and an episode cut
#: short would teach nothing (the oracle takes at most 63 turns at scale 1.0)
DEMO_MAX_TURNS = 1_000


def write_demos(
    out_dir: str | Path,
    episode: EpisodeSpec,
    episodes_per_family: int,
    strategies: list[str],
    *,
    split: str = "train",
    first_seed: int = 0,
    keep_failed: list[str] | tuple[str, ...] = (),
    weights: list[int] | None = None,
) -> Dataset:
    """Run the oracle on `episode`'s families and settings and save one SFT row per clean turn of each
    successful episode to `out_dir`.

    Episode k of a family plays task seed ``first_seed + k`` of `split` (train: demonstrations are training
    data, whatever the spec's split says), with the settings `episode.sample` draws for that seed, under the
    strategies in turn, each taking ``weights[i]`` episodes of every cycle (default 1 each), so every strategy
    gets its share of distinct tasks (the same task under two strategies would repeat every turn before the
    first compaction). Weights set how often the warm-started policy picks each strategy. The oracle plays
    every episode to its end (`DEMO_MAX_TURNS`), whatever the spec's turn limit. The spec's
    `tokenizer` (a model name known to `rl_compaction.models.registry`, a local folder, ``hf:PATH`` or a
    tiktoken encoding) counts tokens for the window and threshold: use the model to be trained, so compaction
    requests come where they will at RL time.

    Writes the dataset with ``save_to_disk(out_dir)`` plus `SUMMARY_FILE` (episodes, successes,
    rows and evolve rows per family and strategy) and returns it. Raises ValueError for bad
    arguments and when no episode succeeded (nothing to learn from)."""
    families, strategies = list(episode.families), list(strategies)
    check_output_dir(out_dir)
    weights = check_demo_settings(families, episodes_per_family, strategies, keep_failed, weights)
    cycle = [s for s, w in zip(strategies, weights, strict=True) for _ in range(w)]
    if split not in SPLITS:
        raise ValueError(f"unknown split {split!r}; choose one of {', '.join(SPLITS)}")
    if first_seed < 0:
        raise ValueError(f"first_seed must be >= 0, got {first_seed}")
    episode = replace(episode, tokenizer=counter_name(episode.tokenizer))

    with lock_output_dir(out_dir):  # one run at a time writes the folder
        rows: list[dict[str, Any]] = []
        stats: dict[str, dict[str, dict[str, int]]] = defaultdict(dict)
        bar = progress_bar(len(families) * episodes_per_family, f"oracle demonstrations ({', '.join(families)})")
        for family in families:
            envs: dict[tuple[str, str], CompactionEnv] = {}
            for k in range(episodes_per_family):
                strategy, drawn = cycle[k % len(cycle)], episode.sample(first_seed + k, family)
                drawn = replace(drawn, max_turns=DEMO_MAX_TURNS)
                key = (strategy, repr(drawn.settings()))
                if key not in envs:  # one env per strategy and settings: its tokenizer loads once
                    envs[key] = make_env(
                        family, split=split, strategy=strategy, config=drawn.env_config(), difficulty=drawn.difficulty
                    )
                episode_rows, end = oracle_episode_rows(envs[key], strategy, first_seed + k)
                bar.update(1)
                s = stats[family].setdefault(strategy, {"episodes": 0, "successful": 0, "rows": 0, "evolve_rows": 0})
                s["episodes"] += 1
                s["successful"] += end.success
                if not end.success:
                    # a failed episode's answer is wrong: keep its edits, never the answer (module docstring)
                    answer = SUBMIT_TOOL["name"]
                    kept = strategy in keep_failed
                    episode_rows = [r for r in episode_rows if turn_kind(r) != answer] if kept else []
                if episode_rows:
                    s["rows"] += len(episode_rows)
                    s["evolve_rows"] += sum(r["is_evolve"] for r in episode_rows)
                    rows.extend(episode_rows)
        bar.close()
        if not rows:
            raise ValueError(f"no oracle episode succeeded ({json.dumps(stats)}); raise context_window or lower scale")

        dataset = Dataset.from_list(rows, features=FEATURES)
        out = Path(out_dir)
        dataset.save_to_disk(str(out))
        summary = {
            "rows": len(rows),
            "evolve_rows": sum(r["is_evolve"] for r in rows),
            "episodes": sum(s["episodes"] for f in stats.values() for s in f.values()),
            "successful_episodes": sum(s["successful"] for f in stats.values() for s in f.values()),
            "per_family": stats,
            "settings": {
                "families": families,
                "episodes_per_family": episodes_per_family,
                "strategies": strategies,
                "weights": weights,
                "split": split,
                **{name: getattr(episode, name) for name in DEMO_EPISODE_FIELDS},
                "first_seed": first_seed,
                "keep_failed": list(keep_failed),
            },
        }
        (out / SUMMARY_FILE).write_text(json.dumps(summary, indent=2) + "\n", encoding="utf-8")
        return dataset
