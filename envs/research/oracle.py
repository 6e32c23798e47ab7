"""The research oracle: follows every question's hops through the search results and pages its
State holds right now.

It keeps no facts between calls (only a call-id counter): each turn it re-reads the task
statement, every search output and every complete page present, walks each question from its
anchor, and asks for the first thing a hop lacks: a search for the exact name, then the most
recent page titled with that name, then every newer correction notice about it. A page is
complete only with its end marker, so a cleared, cut or removed output is fetched again. An
item requested `MAX_FETCHES` times that is still missing is given up (compaction keeps
destroying it) and the question is answered as well as the State allows.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from dataclasses import dataclass, field
from importlib.resources import files
from typing import Any

from rl_compaction_envs.research.text import (
    CORRECTION_PREFIX,
    ParsedPage,
    Question,
    parse_page,
    parse_statement,
)

from rl_compaction.core.state import State, text_of
from rl_compaction.harness.tasks import Oracle

MAX_FETCHES = 3
MAX_CALLS = 600  # a last guard: past this many calls the oracle submits what it has
_DATE_RE = re.compile(r"^(\d{4}-\d{2}-\d{2})(?: |$)")  # a compacted excerpt keeps only the date

#: the template of the oracle's edit (comment lines stripped: the model writes only code).
EVOLVE_TEMPLATE = "\n".join(
    line
    for line in files("rl_compaction_envs.research").joinpath("evolve.js").read_text(encoding="utf-8").splitlines()
    if not line.startswith("//")
)


@dataclass
class View:
    """What a State currently holds: the questions, search results and complete pages."""

    questions: list[Question] | None = None
    searches: dict[str, tuple[str, list[dict[str, str]]]] = field(default_factory=dict)  # query -> (call_id, results)
    pages: dict[str, tuple[str, ParsedPage]] = field(default_factory=dict)  # url -> (call_id, page)
    requests: Counter[tuple[str, str]] = field(default_factory=Counter)  # (tool, query or url) -> calls


_RESULT_LINE_RE = re.compile(r"^(\d{4}-\d{2}-\d{2}) (\S+) (.+)$")


def _results(text: str) -> list[dict[str, str]] | None:
    """A search output's results: the tool's JSON, or its compacted form (one `DATE URL TITLE` line
    per result kept, as evolve.js writes it); None if `text` is neither."""
    lines = [_RESULT_LINE_RE.match(line) for line in text.split("\n")]
    if all(lines):
        return [{"title": m.group(3), "url": m.group(2), "excerpt": m.group(1)} for m in lines if m]
    try:
        data = json.loads(text)
    except (json.JSONDecodeError, RecursionError):
        return None
    if not isinstance(data, dict) or not isinstance(data.get("results"), list):
        return None
    keys = ("title", "url", "excerpt")
    if not all(isinstance(r, dict) and all(isinstance(r.get(k), str) for k in keys) for r in data["results"]):
        return None
    return data["results"]


def read_state(state: State) -> View:
    """Parse the task statement, search outputs and complete pages in `state` (later ones win)."""
    view = View()
    calls: dict[str, tuple[str, dict[str, Any]]] = {}
    for item in state:
        kind = item.get("type", "message")
        if kind == "message" and item.get("role") == "user" and view.questions is None:
            view.questions = parse_statement(text_of(item.get("content", "")))
        elif kind == "function_call" and item.get("name") in ("search", "open"):
            try:
                args = json.loads(item.get("arguments", ""))
            except json.JSONDecodeError:
                continue
            key = args.get("query" if item["name"] == "search" else "url") if isinstance(args, dict) else None
            if isinstance(key, str):
                calls[item.get("call_id", "")] = (item["name"], args)
                view.requests[(item["name"], key)] += 1
        elif kind == "function_call_output" and item.get("call_id") in calls:
            name, args = calls[item["call_id"]]
            text = text_of(item.get("output", ""))
            if name == "search" and (results := _results(text)) is not None:
                view.searches[args["query"]] = (item["call_id"], results)
            elif name == "open" and (page := parse_page(text)) is not None and page.complete:
                view.pages[page.url] = (item["call_id"], page)
    return view


def _date(result: dict[str, str]) -> str | None:
    m = _DATE_RE.match(result["excerpt"])
    return m.group(1) if m else None


@dataclass
class Walk:
    """The outcome of following every question through a View."""

    answers: dict[str, str] = field(default_factory=dict)  # questions fully resolved
    need: tuple[str, dict[str, str]] | None = None  # the first tool call a hop lacks
    keep_searches: set[str] = field(default_factory=set)  # call_ids of searches the walk used
    keep_pages: set[str] = field(default_factory=set)  # call_ids of pages the walk used


def walk(view: View) -> Walk:
    """Resolve each question hop by hop from what `view` holds."""
    out = Walk()

    def ask(tool: str, key: str, args: dict[str, str]) -> None:
        if out.need is None and view.requests[(tool, key)] < MAX_FETCHES:
            out.need = (tool, args)

    def resolve(entity: str, attr: str) -> str | None:
        if entity not in view.searches:
            ask("search", entity, {"query": entity})
            out.keep_pages.update(
                cid for cid, p in view.pages.values() if p.title in (entity, CORRECTION_PREFIX + entity)
            )
            return None
        search_id, results = view.searches[entity]
        out.keep_searches.add(search_id)
        dated = [(d, r) for r in results if (d := _date(r))]
        mains = [(d, r) for d, r in dated if r["title"] == entity]
        if not mains:
            return None
        main_date, main = max(mains, key=lambda t: t[0])
        notices = sorted((d, r["url"]) for d, r in dated if r["title"] == CORRECTION_PREFIX + entity and d > main_date)
        used = [main["url"], *(u for _, u in notices)]
        missing = [u for u in used if u not in view.pages]
        out.keep_pages.update(view.pages[u][0] for u in used if u in view.pages)
        if missing:
            ask("open", missing[0], {"url": missing[0]})
            return None
        value = view.pages[main["url"]][1].facts.get(attr)
        for _, url in notices:
            for key, subject, new in view.pages[url][1].corrections:
                if key == attr and subject == entity:
                    value = new
        return value

    for q in view.questions or []:
        cur: str | None = q.anchor
        for attr in q.chain:
            cur = resolve(cur, attr)
            if cur is None:
                break
        if cur is not None:
            out.answers[q.qid] = cur
    return out


class ResearchOracle(Oracle):
    """Context-bound scripted solver for research tasks."""

    def act(self, state: State) -> list[dict[str, Any]]:
        view = read_state(state)
        if view.questions is None:  # the task statement is gone: nothing can be answered
            return [self.function_call(state, "submit", {"answer": "{}"})]
        result = walk(view)
        if result.need is None or self.calls_made >= MAX_CALLS:
            answer = {q.qid: result.answers.get(q.qid, "") for q in view.questions}
            return [self.function_call(state, "submit", {"answer": json.dumps(answer)})]
        tool, args = result.need
        return [self.function_call(state, tool, args)]

    def evolve_code(self, state: State) -> str:
        """Keep the task statement and the searches and pages the hops use, cut down (see
        evolve.js); drop every other call with its output (old evolve calls, unused, cleared or
        failed reads), harness messages and reasoning items."""
        result = walk(read_state(state))
        keep = result.keep_searches | result.keep_pages
        last = state[-1] if state else None
        drop = [x["call_id"] for x in state if x.get("type") == "function_call" and x is not last]
        drop = [cid for cid in drop if cid not in keep]
        return EVOLVE_TEMPLATE.replace("__DROP__", json.dumps(drop, ensure_ascii=False))
