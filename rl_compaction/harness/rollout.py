"""Batched rollouts: many episodes at once against one policy, recorded exactly.

Episodes advance in lockstep: every step the observations of all running episodes go to the
policy as one batch. A group is G episodes of the same task instance (the GRPO unit). Each
record keeps, per model invocation, the exact prompt ids, sampled ids and logprobs, timing and
the parsed turn, plus every State version, the evolve code and receipts, the ledger, the seed
and the settings, so any episode can be re-checked later from its JSONL line.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from rl_compaction.accounting import reusable_prefix
from rl_compaction.core.state import clip
from rl_compaction.core.summary import EpisodeSummary
from rl_compaction.harness.env import CompactionEnv
from rl_compaction.harness.policy import Policy, ScriptedPolicy, Turn


@dataclass
class Invocation:
    """One model call of an episode."""

    turn: int
    prompt_ids: list[int] | None
    completion_ids: list[int] | None
    logprobs: list[float] | None
    text: str | None
    items: list[dict[str, Any]]
    usage: dict[str, Any] | None
    latency_s: float
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass
class EpisodeRecord:
    """Everything about one episode; `to_json` / `from_json` make it one JSONL line."""

    policy: str
    family: str
    split: str
    task_seed: int
    episode: int
    settings: dict[str, Any]
    invocations: list[Invocation] = field(default_factory=list)
    info: dict[str, Any] = field(default_factory=dict)
    state_versions: list[dict[str, Any]] = field(default_factory=list)
    #: this episode's share of its lockstep batch's wall time (batch time / episodes in the batch)
    wall_s: float = 0.0

    @property
    def key(self) -> str:
        """Identifies the episode across runs (used by --resume)."""
        return f"{self.policy}|{self.family}|{self.split}|{self.task_seed}|{self.episode}"

    @property
    def summary(self) -> EpisodeSummary:
        """The finished episode's `info`, typed (`info` itself stays the dict the env returned and the
        JSONL line holds)."""
        return EpisodeSummary.from_info(self.info)

    def to_json(self) -> dict[str, Any]:
        """JSON with prompt ids stored as (shared prefix with the previous prompt + completion, new tail)."""
        data = asdict(self)
        previous: list[int] = []
        for inv in data["invocations"]:
            ids = inv.pop("prompt_ids")
            if ids is None:
                inv["prompt_shared"], inv["prompt_tail"] = 0, None
            else:
                shared = reusable_prefix(previous, ids)
                inv["prompt_shared"], inv["prompt_tail"] = shared, ids[shared:]
                previous = ids + (inv["completion_ids"] or [])
        return data

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> EpisodeRecord:
        data = dict(data)
        invocations, previous = [], []
        for raw in data.pop("invocations"):
            raw = dict(raw)
            shared, tail = raw.pop("prompt_shared"), raw.pop("prompt_tail")
            ids = None if tail is None else previous[:shared] + tail
            if ids is not None:
                previous = ids + (raw.get("completion_ids") or [])
            invocations.append(Invocation(prompt_ids=ids, **raw))
        return cls(invocations=invocations, **data)


def _record_turn(record: EpisodeRecord, turn_no: int, turn: Turn) -> None:
    record.invocations.append(
        Invocation(
            turn_no,
            turn.prompt_ids,
            turn.completion_ids,
            turn.logprobs,
            turn.text,
            turn.items,
            turn.usage,
            turn.latency_s,
            turn.extra,
        )
    )


@contextmanager
def closing_envs(envs: list[CompactionEnv]) -> Iterator[list[CompactionEnv]]:
    """Close every env on the way out, whatever happens: a family may hold an outside resource per
    env (scienceworld: a simulator process)."""
    try:
        yield envs
    finally:
        for env in envs:
            env.close()


def rollout(
    policy: Policy | ScriptedPolicy,
    envs: list[CompactionEnv],
    seeds: list[int],
    *,
    episode_ids: list[int] | None = None,
    settings: dict[str, Any] | None = None,
    on_step: Callable[[int], None] | None = None,
    any_active: Callable[[bool], bool] | None = None,
) -> list[EpisodeRecord]:
    """Run one episode per env (env i on task `seeds[i]`) in lockstep against `policy`.

    `any_active(local_active) -> global_active` keeps processes in step in distributed training:
    a process whose episodes have ended keeps calling the policy with an empty batch while others
    still run, because generation there is a collective operation."""
    if len(envs) != len(seeds):
        raise ValueError("rollout needs one seed per env")
    episode_ids = episode_ids or list(range(len(envs)))
    records, observations, batch_start = [], [], time.perf_counter()
    for env, seed, ep in zip(envs, seeds, episode_ids, strict=True):
        obs, info = env.reset(seed=seed)
        observations.append(obs)
        raw = env.unwrapped  # the env's own fields; a wrapper (e.g. `harness.labels.LabelEdits`) steps it
        records.append(
            EpisodeRecord(policy.name, raw.family.name, raw.split, info["task_seed"], ep, dict(settings or {}))
        )
    active = list(range(len(envs)))
    while active if any_active is None else any_active(bool(active)):
        if isinstance(policy, ScriptedPolicy):
            turns = [policy.act_env(envs[i].unwrapped, observations[i]) for i in active]
        else:
            turns = policy.act([observations[i] for i in active])
        if len(turns) != len(active):
            raise RuntimeError(f"policy {policy.name} returned {len(turns)} turns for {len(active)} observations")
        still = []
        for i, turn in zip(active, turns, strict=True):
            env = envs[i]
            _record_turn(records[i], env.unwrapped.turn + 1, turn)
            observations[i], _, terminated, truncated, info = env.step(turn.as_action())
            if terminated or truncated:
                records[i].info = info
                records[i].state_versions = env.unwrapped.state_versions
            else:
                still.append(i)
        if on_step:
            on_step(len(active) - len(still))
        active = still
    # Episodes run in lockstep, so each one's own span is about the whole batch's: record its share
    # of the batch's wall time instead, so that the per-episode mean is the real cost of an episode.
    share = (time.perf_counter() - batch_start) / len(envs) if envs else 0.0
    for record in records:
        record.wall_s = share
    return records


def write_jsonl(path: str | Path, records: list[EpisodeRecord]) -> None:
    """Append records, one JSON line each (flushed per line, so an interrupted run keeps what it wrote).

    A lone surrogate in raw model output (which UTF-8 cannot encode) is written as its JSON escape
    (backslash, u, four hex digits), so the line stays valid JSON and reads back exactly. A failed
    write (a full disk, a file size limit) raises an OSError naming the file: the OS's names none."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        with path.open("a", encoding="utf-8", errors="backslashreplace") as f:
            for record in records:
                f.write(json.dumps(record.to_json(), ensure_ascii=False) + "\n")
                f.flush()
    except OSError as e:
        raise OSError(e.errno, f"cannot append to {path}: {e.strerror or e}") from e


def read_jsonl(path: str | Path) -> Iterator[EpisodeRecord]:
    """Records of a JSONL file. Lines are split as bytes and decoded one by one, so a last line without
    its newline (a write cut off, maybe inside a multi-byte character) is skipped; any other line that
    is not a record raises a ValueError naming the file and the line."""
    with Path(path).open("rb") as f:
        for number, line in enumerate(f, 1):
            if not line.endswith(b"\n"):
                break
            try:
                record = EpisodeRecord.from_json(json.loads(line.decode("utf-8")))
            except (ValueError, TypeError, KeyError, AttributeError) as e:
                raise ValueError(f"{path} line {number} is not an episode record ({clip(str(e), 120)})") from None
            yield record
