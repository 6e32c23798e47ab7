"""The probe oracle: sums the tracked keys from the batch outputs its State holds right now.

It keeps no facts between calls (only a call-id counter): every turn it re-reads the task
statement and the batch outputs present, fetches the first batch that is missing (never
read, cleared, truncated, or removed by compaction) and submits once all are present. If the
State shows that a batch was already requested `MAX_FETCHES` times and is still missing,
compaction keeps destroying it, so the oracle gives up and submits its best partial sums.
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass, field
from importlib.resources import files
from itertools import count
from typing import Any

from rl_compaction_envs.probe import stream

from rl_compaction.core.state import State, text_of
from rl_compaction.harness.tasks import Oracle

MAX_FETCHES = 3


@dataclass
class StreamView:
    """What a State currently holds about the stream."""

    keys: list[str] | None = None
    batches: dict[int, stream.Batch] = field(default_factory=dict)
    n_batches: int | None = None  # known once an END output is present
    fetches: Counter[int] = field(default_factory=Counter)  # next_batch calls per index

    def next_missing(self) -> int | None:
        """The first batch index still to read, or None when every batch is present and END was seen.
        Until END is seen, the index after the last batch read (which may turn out to be END)."""
        if self.n_batches is None:
            return next(i for i in count(1) if i not in self.batches)
        return next((i for i in range(1, self.n_batches + 1) if i not in self.batches), None)


def read_state(state: State) -> StreamView:
    """Parse the task statement, every batch output (complete, or cut to the tracked keys' lines)
    and any END output in `state`."""
    view = StreamView()
    for item in state:
        if item.get("type", "message") == "message" and item.get("role") == "user":
            if (keys := stream.parse_tracked(text_of(item.get("content", "")))) is not None:
                view.keys = keys
                break
    for item in state:
        kind = item.get("type", "message")
        if kind == "function_call" and item.get("name") == "next_batch":
            if (index := _index(item)) is not None:
                view.fetches[index] += 1
        elif kind == "function_call_output":
            text = text_of(item.get("output", ""))
            if (batch := stream.parse_batch(text, view.keys or ())) is not None:
                view.batches[batch.index] = batch
            elif (n := stream.parse_end(text)) is not None:
                view.n_batches = n
    return view


def _index(call: dict[str, Any]) -> int | None:
    try:
        index = json.loads(call.get("arguments", "")).get("index")
    except (json.JSONDecodeError, AttributeError):
        return None
    return index if isinstance(index, int) and not isinstance(index, bool) else None


def stale_calls(state: State, keys: list[str]) -> list[str]:
    """Call ids the oracle's edit removes with their outputs: earlier evolve calls (not the pending
    last one), next_batch reads that hold no batch or END (cleared, cut short, errors) and every
    copy of a batch or END but the newest."""
    last = state[-1] if state else None
    names = {x["call_id"]: x.get("name") for x in state if x.get("type") == "function_call"}
    drop = [x["call_id"] for x in state if x.get("name") == "evolve" and x is not last and x["call_id"] in names]
    newest: dict[object, str] = {}
    for item in state:
        if item.get("type") != "function_call_output" or names.get(item["call_id"]) != "next_batch":
            continue
        text = text_of(item.get("output", ""))
        batch = stream.parse_batch(text, keys)
        what = batch.index if batch is not None else "END" if stream.parse_end(text) is not None else None
        if what is None:
            drop.append(item["call_id"])
        else:
            if what in newest:
                drop.append(newest[what])
            newest[what] = item["call_id"]
    return drop


class ProbeOracle(Oracle):
    """Context-bound scripted solver for probe tasks."""

    def act(self, state: State) -> list[dict[str, Any]]:
        view = read_state(state)
        if view.keys is None:  # the task statement is gone: nothing can be answered correctly
            return [self.function_call(state, "submit", {"answer": "{}"})]
        index = view.next_missing()
        if index is None or view.fetches[index] >= MAX_FETCHES:
            answer = json.dumps(stream.totals(view.keys, view.batches))
            return [self.function_call(state, "submit", {"answer": answer})]
        return [self.function_call(state, "next_batch", {"index": index})]

    def evolve_code(self, state: State) -> str:
        """Cut every batch output to the tracked keys' lines (header and footer stay, values exact),
        drop harness messages and the calls `stale_calls` names with their outputs."""
        keys = read_state(state).keys
        if keys is None:  # no task statement in sight: change nothing
            return "return state;"
        return EVOLVE_JS.replace("__DROP__", json.dumps(stale_calls(state, keys))).replace("__KEYS__", "|".join(keys))


#: the template of the oracle's edit (comment lines stripped: the model writes only code).
EVOLVE_JS = "\n".join(
    line
    for line in files("rl_compaction_envs.probe").joinpath("evolve.js").read_text(encoding="utf-8").splitlines()
    if not line.startswith("//")
)
