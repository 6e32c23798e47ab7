"""The vault family: carry a few exact facts through compaction, the learnable toy for CPU.

The agent reads a vault's log page by page with `read` (no arguments: the log has a cursor)
until it returns END, then submits the vault's key. The facts that make up the key are
`note:` lines on early pages; every other page is filler. The log outgrows the context
window, so the agent must compact; the facts are shown once, so a compaction that drops the
oldest turns (sliding window) or clears old tool outputs loses them, and nothing in the rest
of the log lets the agent recover or guess them beyond chance.

Why this is the toy: turns are short (one argument-free call), the right edit is one short
template (keep the pages with notes, drop the rest), and a tiny model can learn it on a CPU.
`scale` multiplies the number of filler pages, so a large scale gives the long horizon; below two
pages' worth (scale < 0.05) the two filler pages get shorter instead.

Levels: 1 = one fact (the key word); 2 = the word and a dial number; 3 = word, dial and a
direction, and decoy notes about other vaults that the key must not take.
"""

from __future__ import annotations

import copy
import json
import random
import re
from dataclasses import dataclass
from typing import Any, ClassVar

from rl_compaction.core.state import State, text_of
from rl_compaction.harness.tasks import (
    Difficulty,
    Oracle,
    Task,
    TaskFamily,
    ToolError,
    check_arguments,
    function_tool,
    split_seed,
)

#: key words, drawn uniformly by every split: one token each in the tiny tokenizer (four letters or
#: more; word pieces count, alphabet runs are left out), and absent from everything else a model
#: sees (instructions, the harness's system text and tools, receipts, filler, the oracle's edit), so
#: the note is the only place a key word can be copied from (a test checks). With 212 words a guess
#: is right 1 time in 212, so held-out success shows the key was carried.
#: Why one shared pool: with eight words a small model fits the answers' prior (it answered one
#: word, at chance) instead of copying; and with the held-out splits on words never trained as
#: answers, the SFT'd tiny model copied the train words but answered half the held-out tasks with
#: a train word (validation success 4/8, every failure a train-split answer).
KEY_WORDS = (
    "years", "invoice", "record", "know", "paid", "agent", "loop", "come",
    "able", "account", "ache", "action", "addi", "alan", "alance", "alse", "amount", "arame",
    "arameters", "arate", "arch", "arness", "arse", "arts", "asoning", "ater", "ates", "ation",
    "atus", "ause", "ayment", "because", "bject", "bout", "cate", "cause", "ccess", "ccount",
    "cess", "chang", "chive", "complete", "cord", "could", "crip", "crypted", "cted", "ction",
    "dbox", "ears", "eded", "empt", "ename", "ence", "ending", "ength", "enti", "ents", "eration",
    "escri", "escrip", "escription", "essag", "essage", "essages", "etween", "fiers", "fore",
    "fter", "fund", "fusal", "gain", "gent", "gument", "guments", "hang", "head", "header", "hing",
    "hould", "hown", "iction", "idates", "iffer", "ifferent", "ight", "ilter", "inal", "indent",
    "ings", "ipyth", "ipython", "ique", "irst", "istory", "itation", "ittle", "ives", "jected",
    "lace", "lation", "lect", "length", "lete", "lice", "lier", "limit", "line", "mage", "main",
    "mall", "mary", "ment", "might", "mory", "moun", "mount", "move", "mpaction", "mpare", "mplete",
    "mpleted", "natures", "ness", "notation", "nput", "oice", "ollow", "omer", "oning", "onst",
    "ontain", "onte", "ontent", "ontext", "oolean", "ople", "ores", "orig", "orre", "otal", "ought",
    "ould", "ound", "over", "perties", "plit", "ponse", "ponses", "ppro", "pproved", "process",
    "progr", "quest", "quire", "quired", "ransfer", "reat", "records", "refi", "refix", "rent",
    "resul", "results", "rial", "rict", "ring", "rite", "ronous", "roperties", "roppe", "rough",
    "round", "rows", "sedes", "self", "sfer", "ship", "ships", "sist", "sistant", "stem", "swer",
    "tail", "tain", "ters", "ther", "thing", "ties", "tion", "ubmit", "udget", "umber", "ummary",
    "unction", "uper", "ures", "ustomer", "utput", "velop", "veloper", "very", "vided", "vives",
    "voice", "volve", "ways", "ween", "xact", "ynch", "ypted", "ystem",
)  # fmt: skip
DIRECTIONS = ("left", "right")
#: vault numbers are the split-specific entities (n % 3 names the split), written with the same digits
#: in every split, so a model meets no unseen token on held-out tasks; the key words and numbers are
#: shared values, as in probe
VAULT_NUMBERS: dict[str, tuple[str, ...]] = {
    split: tuple(str(n) for n in range(100, 1000) if n % 3 == r)
    for split, r in (("train", 0), ("validation", 1), ("test", 2))
}
FILLER = (
    "the clerk counted the shelves again and wrote nothing new in the margin of the old book while "
    "rain fell on the roof and the lamps burned low in the long hall where the files are kept"
).split()

READ_TOOL = function_tool("read", "Read the next page of the vault log; returns END after the last page.", {}, [])
NOTE = re.compile(r'^note: vault (\d+) (?:opens with the word "(\w+)"|dial (\d+)|turn (left|right))\.$', re.MULTILINE)
END_TEXT = "END of the log."

INSTRUCTIONS = """\
Read the vault log page by page with read() until it returns END, then call submit with the \
vault's key: its key word, then (if the log gives them) its dial number and its turn direction, \
separated by single spaces, e.g. "silver 7 left". Notes about other vaults do not count."""


@dataclass(frozen=True)
class _Level:
    facts: int  # 1: word; 2: + dial; 3: + direction
    decoys: int  # notes about other vaults
    pages: int  # filler pages at scale 1.0
    words: int  # filler words per page


#: level 1, the CPU toy, reads the same volume per scale as the others in pages a quarter as long, so the
#: window holds several pages and the harness asks every few pages: when to compact is a choice (an
#: agent that edits after every page pays ~1.35x at the training length), not forced at every read
_LEVELS = {1: _Level(1, 0, 120, 300), 2: _Level(2, 0, 30, 1200), 3: _Level(3, 2, 30, 1200)}


class LogTask(Task):
    """A task read through one argument-free tool that returns the next page of a log, then `end_text`:
    the CPU toys' shape (`vault`, `courier`, `archive`), one short call a turn."""

    tool: ClassVar[dict[str, Any]]
    end_text: ClassVar[str]

    def __init__(self, pages: list[str]):
        self._pages = pages
        self._cursor = 0

    def tools(self) -> list[dict[str, Any]]:
        return [copy.deepcopy(self.tool)]

    def call_tool(self, name: str, arguments: dict[str, Any]) -> str:
        if name != self.tool["name"]:
            raise ToolError(f"unknown tool {name!r}; this task's tool is {self.tool['name']}")
        check_arguments(name, arguments, {})
        if self._cursor >= len(self._pages):
            return self.end_text
        self._cursor += 1
        return self._pages[self._cursor - 1]


def log_ended(state: State, end_text: str) -> bool:
    """Whether the State holds the log's end (a tool output that is `end_text`): the toy oracles' cue to answer."""
    return any(x.get("type") == "function_call_output" and text_of(x.get("output", "")) == end_text for x in state)


class VaultTask(LogTask):
    """One vault log; the key is revealed only through the pages and checked by `score`."""

    family: ClassVar[str] = "vault"
    instructions = INSTRUCTIONS
    tool = READ_TOOL
    end_text = END_TEXT

    def __init__(self, vault: str, pages: list[str], key: list[str]):
        super().__init__(pages)
        self.vault = vault
        self._key = key

    def initial_state(self) -> State:
        text = f"Find the key of vault {self.vault}. Read the log with read() until END, then submit the key."
        return [{"type": "message", "role": "user", "content": text}]

    def score(self, answer: str) -> float:
        """Share of the key's parts given right, in order (an exact, space-separated answer scores 1)."""
        if not isinstance(answer, str):
            return 0.0
        given = answer.strip().lower().split()
        right = sum(1 for i, part in enumerate(self._key) if i < len(given) and given[i] == part)
        return right / len(self._key) if len(given) <= len(self._key) else right / len(given)

    def oracle(self) -> Oracle:
        return VaultOracle()


def _texts(state: State) -> list[tuple[bool, str]]:
    """(is a user message, text) of the items notes can sit in: pages (tool outputs), and user messages
    (the task statement, or a summary that retypes it and the notes)."""
    texts = []
    for item in state:
        if item.get("type", "message") == "message" and item.get("role") == "user":
            texts.append((True, text_of(item.get("content", ""))))
        elif item.get("type") == "function_call_output":
            texts.append((False, text_of(item.get("output", ""))))
    return texts


def read_key(state: State) -> tuple[str | None, list[str]]:
    """The vault named in the task statement (or in a summary that restates it) and the key parts
    the State's notes give (in order)."""
    vault, parts = None, {}
    for from_user, text in _texts(state):
        if from_user and vault is None:
            m = re.search(r"key of vault (\d+)", text)
            vault = m.group(1) if m else None
        for m in NOTE.finditer(text):
            if m.group(1) == vault:
                for i, value in enumerate(m.groups()[1:]):
                    if value is not None:
                        parts[i] = value
    return vault, [parts[i] for i in sorted(parts)]


def notes_of(state: State, vault: str | None) -> list[str]:
    """The note lines about `vault` in the State (pages and retyped ones), each once, in order."""
    lines: list[str] = []
    for _, text in _texts(state):
        for m in NOTE.finditer(text):
            if m.group(1) == vault and m.group(0) not in lines:
                lines.append(m.group(0))
    return lines


#: the targeted edit: keep the task, every page with a note and the pending call (a call is judged by
#: its output, which follows it); drop filler pages, harness requests and old evolve round trips
KEEP_NOTES = """state.filter((x, i) => /note:|^Find/.test(x.content ?? x.output ?? state[i + 1]?.output ?? "note:"))"""
EVOLVE_CODE = f"return {KEEP_NOTES};"


#: the early edit: the targeted edit behind an annotation inserted as the first item (the annotation
#: of the last edit is dropped by the filter, as it holds no note, and written anew)
EARLY_EDIT_CODE = (
    f'return [{{type: "message", role: "user", content: "Compacted: kept the task and the pages with notes."}}, '
    f"...{KEEP_NOTES}];"
)

#: the conservative edit: the targeted edit's items plus the last two pages read and their calls (the
#: last six items but the harness request, which has content), kept although only filler
RECENT_EDIT_CODE = (
    "return state.filter((x, i) => i >= state.length - 6 && !x.content || "
    '/note:|^Find/.test(x.content ?? x.output ?? state[i + 1]?.output ?? "note:"));'
)

#: the summary edit's message: the task, how far the log was read and the notes, retyped (no key word
#: may appear in it but the note's own, a test checks). It is a new first item at every edit (the page
#: number moves on), so the cached prefix ends at the system message.
SUMMARY = (
    "Summary of the work so far (the context was compacted): the task is to find the key of vault {vault}; "
    "read the log with read() until it returns END, then submit the key. The pages read so far, up to page "
    "{page}, held these notes:\n{notes}\nEvery other page was filler."
)
_PAGE = re.compile(r"^page (\d+)$|up to page (\d+),", re.MULTILINE)


def last_page(state: State) -> int:
    """The number of the last page read, from the pages in the State or a summary that gives it."""
    return max((int(a or b) for _, text in _texts(state) for a, b in _PAGE.findall(text)), default=0)


class VaultOracle(Oracle):
    """Reads until END is in its State, then submits the key parts its State still holds."""

    def act(self, state: State) -> list[dict[str, Any]]:
        if not log_ended(state, END_TEXT):
            return [self.function_call(state, "read", {})]
        _, parts = read_key(state)
        return [self.function_call(state, "submit", {"answer": " ".join(parts)})]

    def evolve_code(self, state: State) -> str:
        return EVOLVE_CODE

    def early_edit_code(self, state: State) -> str:
        return EARLY_EDIT_CODE

    def recent_edit_code(self, state: State) -> str:
        return RECENT_EDIT_CODE

    def summary_code(self, state: State) -> str:
        """Replace the context with `SUMMARY` (the notes retyped) and the pending call."""
        vault, _ = read_key(state)
        text = SUMMARY.format(vault=vault, page=last_page(state), notes="\n".join(notes_of(state, vault)))
        return f'return [{{type: "message", role: "user", content: {json.dumps(text)}}}, state.at(-1)];'


def _filler(rng: random.Random, n: int) -> str:
    return " ".join(rng.choice(FILLER) for _ in range(n))


def generate(rng: random.Random, split: str, difficulty: Difficulty) -> VaultTask:
    lv = _LEVELS[difficulty.level]
    names = VAULT_NUMBERS[split]
    vault = rng.choice(names)
    key = [rng.choice(KEY_WORDS), str(rng.randint(1, 9)), rng.choice(DIRECTIONS)][: lv.facts]
    notes = [
        f'note: vault {vault} opens with the word "{key[0]}".',
        *([f"note: vault {vault} dial {key[1]}."] if lv.facts > 1 else []),
        *([f"note: vault {vault} turn {key[2]}."] if lv.facts > 2 else []),
    ]
    others = [n for n in names if n != vault]
    for _ in range(lv.decoys):
        notes.append(f'note: vault {rng.choice(others)} opens with the word "{rng.choice(KEY_WORDS)}".')
    rest = notes[1:]
    rng.shuffle(rest)
    notes = notes[:1] + rest
    volume = lv.pages * difficulty.scale  # filler pages' worth of text
    fillers = max(2, round(volume))
    # below two pages' worth the log keeps its two filler pages and they get shorter, so the volume
    # keeps scaling (the CPU learning test's short episodes)
    words = lv.words if round(volume) >= 2 else max(10, round(lv.words * volume / 2))
    pages = [f"page 1\n{notes[0]}"]
    # later notes land on the first pages after the first, before the filler that follows them
    for i, note in enumerate(notes[1:], start=2):
        pages.append(f"page {i}\n{_filler(rng, words // 2)}\n{note}")
    for _ in range(fillers):
        pages.append(f"page {len(pages) + 1}\n{_filler(rng, words)}")
    return VaultTask(vault, pages, key)


class VaultFamily(TaskFamily):
    """Seeded generator of vault logs (see the module docstring)."""

    name: ClassVar[str] = "vault"
    description: ClassVar[str] = (
        "Carry a vault's key (a word, a dial number, a direction) shown once on early pages through "
        "many pages of filler; the learnable toy for CPU training."
    )

    def make(self, seed: int, split: str = "train", difficulty: Difficulty | None = None) -> VaultTask:
        difficulty = difficulty or Difficulty()
        rng = random.Random(split_seed(self.name, split, seed))
        return generate(rng, split, difficulty)
