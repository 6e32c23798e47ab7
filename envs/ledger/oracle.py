"""The context-bound ledger oracle and its targeted compaction.

`read_state` rebuilds everything the oracle knows from the State alone: the memo from the
opening message, and every page or record that is still legible in a tool output. Pages
whose output was cleared or removed count as unread and are fetched again (at most
`MAX_FETCHES` times each, then the oracle answers from what it has).
"""

from __future__ import annotations

import json
import re
from collections import Counter
from dataclasses import dataclass, field
from datetime import date
from decimal import Decimal
from typing import Any

from envs.ledger.model import (
    BANK_TITLE,
    BANK_TOOL,
    BOOK_BALANCE_LABEL,
    FEE_TYPE,
    LEDGER_TITLE,
    LEDGER_TOOL,
    PAGE_RE,
    BankLine,
    LedgerLine,
    Memo,
    convert,
    corrected_balance,
    format_answer,
    parse_bank_line,
    parse_book_balance,
    parse_ledger_line,
    parse_memo,
    reconcile,
    statement_order,
)
from rl_compaction.state import State, text_of
from rl_compaction.tasks import Oracle

MAX_FETCHES = 3  # fetches of one page visible in the State before the oracle stops asking for it
EVOLVE = "evolve"
SUBMIT = "submit"
CALL_PREFIX = "ledger_call_"
_CALL_RE = re.compile(re.escape(CALL_PREFIX) + r"(\d+)$")


@dataclass
class Page:
    """One legible page output (possibly already filtered by an earlier compaction)."""

    tool: str
    number: int
    total: int
    call_id: str
    bank: list[BankLine] = field(default_factory=list)
    ledger: list[LedgerLine] = field(default_factory=list)


@dataclass
class View:
    """What the State holds, parsed."""

    memo: Memo | None = None
    pages: dict[tuple[str, int], Page] = field(default_factory=dict)  # latest legible copy of each page
    totals: dict[str, int] = field(default_factory=dict)  # tool -> page count
    bank: dict[str, BankLine] = field(default_factory=dict)
    ledger: dict[str, LedgerLine] = field(default_factory=dict)
    book_balance: Decimal | None = None
    fetches: Counter[tuple[str, int]] = field(default_factory=Counter)
    record_outputs: dict[str, list[str]] = field(default_factory=dict)  # call_id of a record output -> its ids
    stale: set[str] = field(default_factory=set)  # answered calls whose outputs carry nothing still needed
    calls_made: int = 0  # the highest oracle call number visible: how many calls it has made so far

    def next_fetch(self) -> tuple[str, int] | None:
        """The first unread page, bank and ledger pages interleaved, that may still be fetched.
        None once every page is legible, or when the fetch budget is spent (a compaction that
        drops whole turns can keep the pages from ever being legible together)."""
        if len(self.totals) == 2 and self.calls_made >= MAX_FETCHES * sum(self.totals.values()):
            return None
        wanted = {tool: range(1, self.totals.get(tool, 1) + 1) for tool in (BANK_TOOL, LEDGER_TOOL)}
        for i in range(1, max(len(r) for r in wanted.values()) + 1):
            for tool in (BANK_TOOL, LEDGER_TOOL):
                if i in wanted[tool] and (tool, i) not in self.pages and self.fetches[(tool, i)] < MAX_FETCHES:
                    return tool, i
        return None

    def answer(self) -> str:
        """The answer from the visible records (best effort when the memo or pages are gone)."""
        book = self.book_balance if self.book_balance is not None else Decimal(0)
        if self.memo is None:  # no rates or rules: report only what needs none
            refs = {e.bank_ref for e in self.ledger.values()}
            ids = [b.id for b in statement_order(self.bank.values()) if b.id not in refs]
            ids += [e.id for e in self.ledger.values() if e.bank_ref not in self.bank]
            return format_answer(ids, book)
        findings = reconcile(self.memo, self.bank.values(), self.ledger.values())
        return format_answer([f.id for f in findings], corrected_balance(book, findings))


def _page_of(text: str, call_id: str) -> Page | None:
    """A page output, recognised by its first line (title and 'page i of N'), or None."""
    lines = text.splitlines()
    if not lines:
        return None
    first = lines[0]
    tool = BANK_TOOL if first.startswith(BANK_TITLE) else LEDGER_TOOL if first.startswith(LEDGER_TITLE) else None
    m = PAGE_RE.search(first)
    if tool is None or m is None:
        return None
    page = Page(tool, int(m[1]), int(m[2]), call_id)
    for line in lines[1:]:
        if tool == BANK_TOOL and (b := parse_bank_line(line)):
            page.bank.append(b)
        elif tool == LEDGER_TOOL and (e := parse_ledger_line(line)):
            page.ledger.append(e)
    return page


def read_state(state: State) -> View:
    """Parse the State: the memo (first message that holds a complete one), legible pages and
    records, fetch counts, and the calls whose outputs are useless (cleared, superseded, receipts)."""
    view = View()
    calls: dict[str, tuple[str, dict[str, Any]]] = {}
    for item in state:
        kind = item.get("type", "message")
        if kind == "message" and view.memo is None and item.get("role") in ("user", "developer", "system"):
            view.memo = parse_memo(text_of(item.get("content", "")))
        elif kind == "function_call":
            if m := _CALL_RE.match(item.get("call_id", "")):
                view.calls_made = max(view.calls_made, int(m[1]))
            try:
                args = json.loads(item.get("arguments", "{}"))
            except json.JSONDecodeError:
                args = {}
            calls[item["call_id"]] = (item.get("name", ""), args if isinstance(args, dict) else {})
            if item.get("name") in (BANK_TOOL, LEDGER_TOOL) and isinstance(args, dict):
                page = args.get("page")
                if isinstance(page, int) and not isinstance(page, bool):
                    view.fetches[(item["name"], page)] += 1
        elif kind == "function_call_output":
            call_id = item["call_id"]
            name = calls.get(call_id, ("", {}))[0]
            text = text_of(item.get("output", ""))
            page = _page_of(text, call_id)
            if page is not None:
                old = view.pages.get((page.tool, page.number))
                if old is not None:
                    view.stale.add(old.call_id)
                view.pages[(page.tool, page.number)] = page
                view.totals[page.tool] = page.total
                if page.tool == LEDGER_TOOL and (balance := parse_book_balance(text)) is not None:
                    view.book_balance = balance
                continue
            if BOOK_BALANCE_LABEL in text and (balance := parse_book_balance(text)) is not None:
                view.book_balance = balance
            found = [r for line in text.splitlines() if (r := parse_bank_line(line) or parse_ledger_line(line))]
            if found and name != EVOLVE:
                for r in found:
                    (view.bank if isinstance(r, BankLine) else view.ledger)[r.id] = r
                view.record_outputs[call_id] = [r.id for r in found]
            elif name in (BANK_TOOL, LEDGER_TOOL, EVOLVE):
                view.stale.add(call_id)  # cleared or failed page, or an old evolve receipt
    for page in view.pages.values():
        view.bank.update((b.id, b) for b in page.bank)
        view.ledger.update((e.id, e) for e in page.ledger)
    return view


def _droppable(view: View) -> set[str]:
    """Ids of bank lines and their ledger entries that reconcile cleanly and can matter to no
    later conclusion: the pair is within tolerance with the right fee account, and the bank
    line is not the possible original of a duplicate (a same-key line up to N days later, seen
    or on an unread statement page)."""
    memo = view.memo
    if memo is None or BANK_TOOL not in view.totals:
        return set()
    n = memo.duplicate_days
    # date bounds of unread statement pages, from the nearest legible pages around them
    legible = {p: [b.day for b in page.bank] for (tool, p), page in view.pages.items() if tool == BANK_TOOL}
    total = view.totals[BANK_TOOL]
    gaps: list[tuple[date, date]] = []
    for j in range(1, total + 1):
        if j in legible:
            continue
        before = [d for p, days in legible.items() if p < j for d in days]
        after = [d for p, days in legible.items() if p > j for d in days]
        gaps.append((max(before, default=date.min), min(after, default=date.max)))
    lines = statement_order(view.bank.values())
    by_key: dict[tuple[str, str, Decimal], list[BankLine]] = {}
    for b in lines:
        by_key.setdefault(b.key, []).append(b)
    matched: dict[str, LedgerLine] = {}
    for e in sorted(view.ledger.values(), key=lambda e: (e.day, e.id)):
        if e.bank_ref in view.bank and e.bank_ref not in matched:
            matched[e.bank_ref] = e
    drop: set[str] = set()
    for b in lines:
        e = matched.get(b.id)
        if e is None or b.currency not in memo.rates or b.currency not in memo.tolerances:
            continue
        conv = convert(b.amount, memo.rates[b.currency])
        if abs(e.amount - conv) > memo.tolerances[b.currency]:
            continue
        if b.type == FEE_TYPE and e.account != memo.fee_account(conv):
            continue
        if any(d is not b and (d.day, d.id) > (b.day, b.id) and (d.day - b.day).days <= n for d in by_key[b.key]):
            continue
        if any(hi >= b.day and (lo - b.day).days <= n for lo, hi in gaps):
            continue
        drop.update((b.id, e.id))
    return drop


_EVOLVE_JS = """\
const DROP = new Set(__DROP__);
const KEEP = __KEEP__;
const RECORD = /^([BL]-\\d{5,6})\\s/;
const BANK = /^(B-\\d{6}\\s+\\S+\\s+\\S+\\s+\\S.*?\\s+[A-Z]{3}\\s+-?[\\d,]+\\.\\d{2})(\\s|$)/;
const LEDGER = /^(L-\\d{5}\\s+\\S+\\s+\\S+\\s+\\S+\\s+\\S.*?\\s+-?[\\d,]+\\.\\d{2})(\\s|$)/;
const TITLE = /^(BANK STATEMENT|GENERAL LEDGER)\\b.*?(page \\d+ of \\d+)/;
const BALANCE = /^Book balance per ledger/;
let balanceKept = false;
const out = [];
for (const item of state) {
  const linked = item.type === "function_call" || item.type === "function_call_output";
  if (linked && DROP.has(item.call_id)) continue;
  if (item.type === "function_call_output" && typeof item.output === "string" &&
      Object.prototype.hasOwnProperty.call(KEEP, item.call_id)) {
    const ids = new Set(KEEP[item.call_id]);
    const kept = [];
    let total = 0, shown = 0;
    for (const line of item.output.split("\\n")) {
      const m = RECORD.exec(line);
      const title = TITLE.exec(line);
      if (m) {
        total++;
        if (!ids.has(m[1])) continue;
        const core = BANK.exec(line) || LEDGER.exec(line);
        kept.push((core ? core[1] : line).replace(/ {2,}/g, " "));
        shown++;
      } else if (title && !line.startsWith("-- end")) {
        kept.push(title[1] + " " + title[2]);
      } else if (BALANCE.test(line) && !balanceKept) {
        kept.push(line);
        balanceKept = true;
      } else if (line.startsWith("RECORD ")) {
        kept.push(line);
      }
    }
    kept.push("[kept " + shown + " of " + total + " records; the rest reconcile cleanly]");
    out.push(Object.assign({}, item, {output: kept.join("\\n")}));
    continue;
  }
  out.push(item);
}
return out;
"""


class LedgerOracle(Oracle):
    """Reads every statement and ledger page (interleaved), then submits the reconciliation
    computed from the State. Keeps only a counter for unique call ids."""

    def _call(self, state: State, name: str, arguments: dict[str, Any]) -> dict[str, Any]:
        return self.function_call(state, name, arguments, prefix=CALL_PREFIX)

    def act(self, state: State) -> list[dict[str, Any]]:
        view = read_state(state)
        # the memo is shown once: once it is gone no page can help, so answer at once
        target = view.next_fetch() if view.memo is not None else None
        if target is not None:
            return [self._call(state, target[0], {"page": target[1]})]
        return [self._call(state, SUBMIT, {"answer": view.answer()})]

    def evolve_code(self, state: State) -> str:
        """JavaScript that drops cleared, superseded and receipt outputs (with their calls) and cuts
        every page to its header and the records that are discrepancies, their counterparts, possible
        duplicate originals, or not yet reconciled; kept records lose their free-text column."""
        view = read_state(state)
        drop = _droppable(view)
        keep: dict[str, list[str]] = {}
        stale = set(view.stale)
        for page in view.pages.values():
            keep[page.call_id] = [r.id for r in (*page.bank, *page.ledger) if r.id not in drop]
        for call_id, ids in view.record_outputs.items():
            kept = [i for i in ids if i not in drop]
            if kept:
                keep[call_id] = kept
            else:
                stale.add(call_id)
        answered = {item["call_id"] for item in state if item.get("type") == "function_call_output"}
        stale &= answered  # never touch a pending call (the evolve call running this code)
        for call_id in stale:
            keep.pop(call_id, None)
        return _EVOLVE_JS.replace("__DROP__", json.dumps(sorted(stale))).replace(
            "__KEEP__", json.dumps(keep, separators=(",", ":"))
        )
