"""The text formats of the probe task, rendered by the generator and parsed by the oracle.

Kept in one module so the writer and the reader cannot drift; `evolve.js` cuts batches with the
same line shapes (the tests run the oracle on what it leaves).

A batch output looks like::

    batch 3
    K7Q=12
    correction: K7Q at batch 1 should have been -4
    ...
    end of batch 3 (250 lines)

Its cut form (what targeted compaction leaves) keeps the header, the footer and only the
tracked keys' lines::

    batch 3
    K7Q=12
    correction: K7Q at batch 1 should have been -4
    end of batch 3 (250 lines)

A reader accepts a batch whose body has the footer's line count (complete), or fewer lines that
all concern tracked keys (cut); anything else (cleared, truncated mid-line, marked as cut short,
an error) is not a batch, so the reader fetches it again.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field

KEY_PATTERN = r"[A-Z][0-9][A-Z]"
TRACKED_RE = re.compile(rf"^Tracked keys: ((?:{KEY_PATTERN}, )*{KEY_PATTERN})\.$", re.MULTILINE)
HEADER_RE = re.compile(r"^batch (\d+)$")
FOOTER_RE = re.compile(r"^end of batch (\d+) \((\d+) lines\)$")
UPDATE_RE = re.compile(rf"^({KEY_PATTERN})=(-?\d+)$")
CORRECTION_RE = re.compile(rf"^correction: ({KEY_PATTERN}) at batch (\d+) should have been (-?\d+)$")
END_RE = re.compile(r"^END \(the stream has (\d+) batches\)$")


def tracked_line(keys: Iterable[str]) -> str:
    """The task statement's line naming the keys to track (parsed back by `TRACKED_RE`)."""
    return f"Tracked keys: {', '.join(keys)}."


def update_line(key: str, value: int) -> str:
    return f"{key}={value}"


def correction_line(key: str, batch: int, value: int) -> str:
    return f"correction: {key} at batch {batch} should have been {value}"


def render_batch(index: int, lines: list[str]) -> str:
    """A full batch output: header, body lines, footer with the body line count."""
    return "\n".join([f"batch {index}", *lines, f"end of batch {index} ({len(lines)} lines)"])


def end_text(n_batches: int) -> str:
    return f"END (the stream has {n_batches} batches)"


@dataclass
class Batch:
    """The parsed lines of one complete batch output (full or filtered)."""

    index: int
    updates: dict[str, int] = field(default_factory=dict)
    #: (key, target batch) -> corrected value, for the corrections this batch carries.
    corrections: dict[tuple[str, int], int] = field(default_factory=dict)


def parse_batch(text: str, keys: Iterable[str] = ()) -> Batch | None:
    """Parse a batch output, complete or cut to the lines of `keys`; None when the text is not a
    well-formed batch (e.g. cleared, truncated or an error), so the reader knows to fetch it again."""
    lines = text.strip("\n").split("\n")
    if len(lines) < 2:
        return None
    head, foot = HEADER_RE.fullmatch(lines[0]), FOOTER_RE.fullmatch(lines[-1])
    if not head or not foot or head.group(1) != foot.group(1):
        return None
    body = lines[1:-1]
    complete = len(body) == int(foot.group(2))
    if len(body) > int(foot.group(2)):
        return None
    wanted = set(keys)
    batch = Batch(int(head.group(1)))
    for line in body:
        if m := UPDATE_RE.fullmatch(line):
            if m.group(1) in batch.updates:
                return None
            batch.updates[m.group(1)] = int(m.group(2))
        elif m := CORRECTION_RE.fullmatch(line):
            batch.corrections[(m.group(1), int(m.group(2)))] = int(m.group(3))
        else:
            return None
        if not complete and m.group(1) not in wanted:
            return None
    return batch


def parse_end(text: str) -> int | None:
    """The stream length an END output states, or None if `text` is not an END output."""
    m = END_RE.fullmatch(text.strip())
    return int(m.group(1)) if m else None


def parse_tracked(text: str) -> list[str] | None:
    """The tracked keys named in a task statement, or None if it names none."""
    m = TRACKED_RE.search(text)
    return m.group(1).split(", ") if m else None


def totals(keys: list[str], batches: dict[int, Batch]) -> dict[str, int]:
    """Each key's total over `batches`: every update counts with its value as last corrected
    (a correction carried by a later batch supersedes an earlier one)."""
    final: dict[tuple[str, int], int] = {}
    for index in sorted(batches):
        for key, value in batches[index].updates.items():
            final.setdefault((key, index), value)
    for index in sorted(batches):
        for (key, target), value in batches[index].corrections.items():
            final[(key, target)] = value
    wanted = set(keys)
    out = dict.fromkeys(keys, 0)
    for (key, _), value in final.items():
        if key in wanted:
            out[key] += value
    return out
