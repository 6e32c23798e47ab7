"""The research family: multi-hop questions over a generated web of fictional entities.

Each question chains two to four relations ("the founding year of the employer of the
discoverer of Comet Veldran"). The facts sit in long pages full of filler, found with a search
tool among similarly named entities on look-alike domains, archived copies with outdated
facts and dated correction notices that supersede earlier pages. Facts found early are needed
many hops later, names must be kept exactly, and a summary that lost a correction's date or
kept the uncorrected value answers wrong.
"""

from __future__ import annotations

import copy
import json
import random
from typing import Any, ClassVar

from rl_compaction_envs.research.oracle import ResearchOracle
from rl_compaction_envs.research.pools import POOLS
from rl_compaction_envs.research.text import TASK_MARKER, normalize_answer
from rl_compaction_envs.research.world import MAX_RESULTS, World

from rl_compaction.core.state import State
from rl_compaction.harness.tasks import (
    Difficulty,
    Oracle,
    Task,
    TaskFamily,
    ToolError,
    check_arguments,
    function_tool,
    parse_json_answer,
    split_seed,
)

MAX_QUERY_CHARS = 300

SEARCH_TOOL = function_tool(
    "search",
    f'Web search over the task\'s corpus. Returns JSON {{"results": [{{"title", "url", "excerpt"}}]}}, '
    f"at most {MAX_RESULTS} results, best first; each excerpt starts with the page's publication date.",
    {"query": {"type": "string", "description": "Search terms, e.g. an exact entity name."}},
    ["query"],
)
OPEN_TOOL = function_tool(
    "open",
    "Open a page by URL (as returned by search) and return its whole text.",
    {"url": {"type": "string", "description": "A URL from a search result."}},
    ["url"],
)

INSTRUCTIONS = """\
You answer research questions about fictional entities (people, organisations, towns, comets, \
manuscripts, minerals...) by searching a small web with the search tool and reading pages with \
the open tool. Every question chains several facts: find each entity's page, read the fact, and \
follow it to the next entity. Pages are long; most of their text is irrelevant.
Rules: names must match exactly (pages about similarly named entities, often on look-alike \
domains, are about different entities). Every page shows its publication date. When pages \
disagree about a fact of the same entity, the most recently published statement is correct: \
a dated correction notice titled "Correction: <name>" supersedes older pages, and older copies \
of a page (archives) may be outdated.
When done, call submit once with answer set to a JSON object that maps every question id to \
its answer string, written exactly as on the page (full names, identifiers as written, numbers \
in digits without units), e.g. {"Q1": "1879", "Q2": "Ilsa Veldran"}."""


class ResearchTask(Task):
    """One generated world. Its pages are revealed only through the tools and its answers only
    through `score`; the oracle is built without either."""

    family: ClassVar[str] = "research"
    instructions = INSTRUCTIONS

    def __init__(self, world: World):
        self._world = world

    @property
    def question_ids(self) -> list[str]:
        return [q.qid for q in self._world.questions]

    def entity_names(self) -> set[str]:
        """Every name with pages in this task (for split-disjointness checks)."""
        return set(self._world.entities)

    def tools(self) -> list[dict[str, Any]]:
        return [copy.deepcopy(SEARCH_TOOL), copy.deepcopy(OPEN_TOOL)]

    def initial_state(self) -> State:
        lines = [
            TASK_MARKER,
            "Answer every question below. Search the web with search(query), read pages with open(url).",
            "Names must match exactly: similarly named entities are different entities.",
            "Every page is dated. When pages disagree about the same entity, use the most recently "
            "published statement (correction notices supersede older pages; archived copies may be outdated).",
            "",
            "Questions:",
            *(q.text() for q in self._world.questions),
            "",
            "Submit answer = a JSON object mapping each question id to its exact answer string, e.g. "
            + json.dumps({q.qid: "..." for q in self._world.questions}),
        ]
        return [{"type": "message", "role": "user", "content": "\n".join(lines)}]

    def call_tool(self, name: str, arguments: dict[str, Any]) -> str:
        if name not in ("search", "open"):
            raise ToolError(f"unknown tool {name!r}; this task's tools are search and open")
        field = "query" if name == "search" else "url"
        value = check_arguments(name, arguments, {field: str})[field]
        if name == "search":
            if not value.strip():
                raise ToolError("search 'query' is empty")
            if len(value) > MAX_QUERY_CHARS:
                raise ToolError(f"search 'query' is {len(value)} characters; the limit is {MAX_QUERY_CHARS}")
            return json.dumps({"results": self._world.search(value)}, ensure_ascii=False)
        url = value.strip()
        if url not in self._world.pages:
            raise ToolError(f"no page at {url!r}; open a URL exactly as a search result gives it")
        return self._world.render(url)

    def score(self, answer: str) -> float:
        """Fraction of questions answered exactly (after `normalize_answer`); 0 if unparsable."""
        parsed = parse_json_answer(answer)
        if parsed is None:
            return 0.0
        expected = self._world.answers
        right = sum(
            1
            for qid, value in expected.items()
            if isinstance(parsed.get(qid), (str, int)) and normalize_answer(parsed[qid]) == normalize_answer(value)
        )
        return right / len(expected)

    def oracle(self) -> Oracle:
        return ResearchOracle()


class ResearchFamily(TaskFamily):
    """Seeded generator of research tasks (see the module docstring)."""

    name: ClassVar[str] = "research"
    description: ClassVar[str] = (
        "Multi-hop questions over long generated web pages with look-alike entities and domains, "
        "archived copies and dated corrections; answer is a JSON object of exact strings."
    )
    pools: ClassVar[dict[str, dict[str, tuple]]] = POOLS

    def make(self, seed: int, split: str = "train", difficulty: Difficulty | None = None) -> ResearchTask:
        difficulty = difficulty or Difficulty()
        rng = random.Random(split_seed(self.name, split, seed))
        return ResearchTask(World(rng, split, difficulty.level, difficulty.scale))
