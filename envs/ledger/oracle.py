"""The context-bound ledger oracle and its targeted compaction.

`read_state` rebuilds everything the oracle knows from the State alone: the memo from the
opening message, and every page or record that is still legible in a tool output. Pages
whose output was cleared or removed count as unread and are fetched again (at most
`MAX_FETCHES` times each, then the oracle answers from what it has).

The oracle's own edit (`evolve_code`) cuts page outputs down to the record lines that still
matter and writes two marks a later read (and a later edit) relies on:
- `*` before a line: keep it for good (a discrepancy, a possible duplicate original, the book
  balance); later edits keep it without naming it again;
- ` +` after a bank line: the ledger entry that booked it, within tolerance, was removed.
A page output the edit emptied is a page read with nothing left to keep.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from dataclasses import dataclass, field
from datetime import date, timedelta
from decimal import Decimal
from pathlib import Path
from typing import Any

from rl_compaction_envs.ledger.model import (
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

from rl_compaction.core.state import State, text_of
from rl_compaction.harness.tasks import Oracle

MAX_FETCHES = 3  # fetches of one page visible in the State before the oracle stops asking for it
LEDGER_LAG_DAYS = 3  # a ledger entry is dated 0 to 3 days after the bank line it books (generator)
KEEP_MARK = "*"  # before a line: an edit keeps it for good
BOOKED_MARK = " +"  # after a bank line: its (clean) booking was removed by an edit
EVOLVE = "evolve"
SUBMIT = "submit"
CALL_PREFIX = "ledger_call_"
_CALL_RE = re.compile(re.escape(CALL_PREFIX) + r"(\d+)$")
_PAGES_RE = re.compile(r"bank statement has (\d+) pages .* ledger has (\d+) pages", re.S)
_LEAD_RE = re.compile(r"\W*\w+")  # what K names of an illegible output: its first word (ends in \w for the \b)
_BOOK_KEY = "Book"  # the book balance line starts with this word (K marks it once)


@dataclass
class Page:
    """One legible page output (possibly already cut by an earlier edit)."""

    tool: str
    number: int
    call_id: str
    bank: list[BankLine] = field(default_factory=list)
    ledger: list[LedgerLine] = field(default_factory=list)
    cut: bool = False  # cut by an edit (no title left)


@dataclass
class View:
    """What the State holds, parsed."""

    memo: Memo | None = None
    pages: dict[tuple[str, int], Page] = field(default_factory=dict)  # latest legible copy of each page
    totals: dict[str, int] = field(default_factory=dict)  # tool -> page count
    bank: dict[str, BankLine] = field(default_factory=dict)
    ledger: dict[str, LedgerLine] = field(default_factory=dict)
    book_balance: Decimal | None = None
    book_marked: bool = False  # a book balance line is marked to keep
    fetches: Counter[tuple[str, int]] = field(default_factory=Counter)
    stale: set[str] = field(default_factory=set)  # answered page calls whose outputs are illegible or superseded
    calls_made: int = 0  # the highest oracle call number visible: how many calls it has made so far
    marked: set[str] = field(default_factory=set)  # records marked to keep for good
    booked: set[str] = field(default_factory=set)  # bank lines whose booking an edit removed
    illegible: dict[tuple[str, int], str] = field(default_factory=dict)  # unread page -> its illegible output

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
            refs = {e.bank_ref for e in self.ledger.values()} | self.booked
            ids = [b.id for b in statement_order(self.bank.values()) if b.id not in refs]
            ids += [e.id for e in self.ledger.values() if e.bank_ref not in self.bank]
            return format_answer(ids, book)
        findings = reconcile(self.memo, self.bank.values(), self.ledger.values(), booked=self.booked)
        return format_answer([f.id for f in findings], corrected_balance(book, findings))


def _record(line: str) -> tuple[BankLine | LedgerLine | None, bool, bool]:
    """A record line (full or cut) with its marks: (record or None, kept for good, booking removed)."""
    marked = line.startswith(KEEP_MARK)
    line = line.removeprefix(KEEP_MARK)
    booked = line.endswith(BOOKED_MARK)
    line = line.removesuffix(BOOKED_MARK)
    record = parse_bank_line(line) or parse_ledger_line(line)
    return record, marked, booked and isinstance(record, BankLine)


def _page_of(text: str, tool: str, number: int, call_id: str) -> Page | None:
    """A page output of `tool`: the full page (its title says which page) or one an edit cut to
    record lines and marked lines (possibly none at all); None if illegible (e.g. cleared)."""
    lines = text.splitlines()
    title = BANK_TITLE if tool == BANK_TOOL else LEDGER_TITLE
    page = Page(tool, number, call_id)
    if lines and lines[0].startswith(title):
        m = PAGE_RE.search(lines[0])
        if m is None or int(m[1]) != number:
            return None
        lines = lines[1:]
    else:
        page.cut = True
    for line in lines:
        record, _, _ = _record(line)
        if isinstance(record, BankLine) and tool == BANK_TOOL:
            page.bank.append(record)
        elif isinstance(record, LedgerLine) and tool == LEDGER_TOOL:
            page.ledger.append(record)
        elif page.cut and not line.removeprefix(KEEP_MARK).startswith(BOOK_BALANCE_LABEL):
            return None  # not what an edit leaves: a placeholder, an error, another tool's text
    return page


def read_state(state: State) -> View:
    """Parse the State: the memo (first message that holds a complete one), the page counts, legible
    pages and records with their marks, fetch counts, and page calls whose outputs are useless."""
    view = View()
    calls: dict[str, tuple[str, Any]] = {}
    for item in state:
        kind = item.get("type", "message")
        if kind == "message" and view.memo is None and item.get("role") in ("user", "developer", "system"):
            text = text_of(item.get("content", ""))
            view.memo = parse_memo(text)
            if view.memo is not None and (m := _PAGES_RE.search(text)):
                view.totals = {BANK_TOOL: int(m[1]), LEDGER_TOOL: int(m[2])}
        elif kind == "function_call":
            if m := _CALL_RE.match(item.get("call_id", "")):
                view.calls_made = max(view.calls_made, int(m[1]))
            try:
                args = json.loads(item.get("arguments", "{}"))
            except json.JSONDecodeError:
                args = {}
            page = args.get("page") if isinstance(args, dict) else None
            calls[item["call_id"]] = (item.get("name", ""), page)
            if item.get("name") in (BANK_TOOL, LEDGER_TOOL) and isinstance(page, int) and not isinstance(page, bool):
                view.fetches[(item["name"], page)] += 1
        elif kind == "function_call_output":
            _read_output(
                view, item["call_id"], *calls.get(item["call_id"], ("", None)), text_of(item.get("output", ""))
            )
    for tool in (BANK_TOOL, LEDGER_TOOL):
        # pages are read in order and an edit removes a page it emptied (all but the last one read):
        # a page before a legible one with no call left was read and holds nothing still needed
        top = max((p for t, p in view.pages if t == tool), default=0)
        for j in range(1, top):
            if (tool, j) not in view.pages and not view.fetches[(tool, j)]:
                view.pages[(tool, j)] = Page(tool, j, "", cut=True)
    for page in view.pages.values():
        view.bank.update((b.id, b) for b in page.bank)
        view.ledger.update((e.id, e) for e in page.ledger)
    view.illegible = {page: text for page, text in view.illegible.items() if page not in view.pages}
    return view


def _read_output(view: View, call_id: str, name: str, number: Any, text: str) -> None:
    for line in text.splitlines():
        record, marked, booked = _record(line)
        if record is not None and marked:
            view.marked.add(record.id)
        if booked:
            view.booked.add(record.id)  # type: ignore[union-attr]
        if line.startswith(KEEP_MARK + BOOK_BALANCE_LABEL):
            view.book_marked = True
    if BOOK_BALANCE_LABEL in text and (balance := parse_book_balance(text)) is not None:
        view.book_balance = balance
    if name in (BANK_TOOL, LEDGER_TOOL) and isinstance(number, int):
        page = _page_of(text, name, number, call_id)
        if page is None:
            view.stale.add(call_id)  # cleared, failed or out of range: fetched again if needed
            view.illegible[(name, number)] = text
            return
        if not page.cut and (m := PAGE_RE.search(text.partition("\n")[0])):
            view.totals.setdefault(name, int(m[2]))
        if (old := view.pages.get((name, number))) is not None:
            view.stale.add(old.call_id)
        view.pages[(name, number)] = page
    elif name != EVOLVE:  # record() outputs and anything else holding record lines
        for line in text.splitlines():
            record, _, _ = _record(line)
            if isinstance(record, BankLine):
                view.bank[record.id] = record
            elif isinstance(record, LedgerLine):
                view.ledger[record.id] = record


# --------------------------------------------------------------------------- the edit


def _first_bookings(view: View) -> dict[str, LedgerLine]:
    """Visible bank line id -> the visible entry that books it first (by date, then id); none for a
    line whose first booking an edit removed (later visible entries book it a second time)."""
    first: dict[str, LedgerLine] = {}
    for e in sorted(view.ledger.values(), key=lambda e: (e.day, e.id)):
        if e.bank_ref in view.bank and e.bank_ref not in view.booked and e.bank_ref not in first:
            first[e.bank_ref] = e
    return first


def _clean(memo: Memo, b: BankLine, e: LedgerLine) -> bool:
    """The pair reconciles: within the currency's tolerance, and a fee on the right account."""
    if b.currency not in memo.rates or b.currency not in memo.tolerances:
        return False
    conv = convert(b.amount, memo.rates[b.currency])
    if abs(e.amount - conv) > memo.tolerances[b.currency]:
        return False
    return not (b.type == FEE_TYPE and e.account != memo.fee_account(conv))


def _unread_gaps(view: View) -> list[tuple[date, date]]:
    """Date bounds of each unread statement page, from the nearest legible pages around it."""
    legible = {p: [b.day for b in page.bank] for (tool, p), page in view.pages.items() if tool == BANK_TOOL}
    gaps = []
    for j in range(1, view.totals.get(BANK_TOOL, 0) + 1):
        if j not in legible:
            lo = max((d for p, days in legible.items() if p < j for d in days), default=date.min)
            hi = min((d for p, days in legible.items() if p > j for d in days), default=date.max)
            gaps.append((lo, hi))
    return gaps


def _possible_original(view: View, b: BankLine, gaps: list[tuple[date, date]], later: dict[tuple, list]) -> bool:
    """`b` may be the earlier copy that makes a later unbooked line a duplicate: a same-key line
    up to N days later is visible (`later`: visible lines by key), or an unread page may hold one."""
    n = view.memo.duplicate_days if view.memo else 0
    if any((d.day, d.id) > (b.day, b.id) and (d.day - b.day).days <= n for d in later.get(b.key, ())):
        return True
    return any(hi >= b.day and (lo - b.day).days <= n for lo, hi in gaps)


def _frontier(view: View, tool: str) -> date | None:
    """No unread record of `tool` is dated before this: the latest date on the unbroken run of
    legible pages from page 1 (date.max once all are legible; None before page 1 is)."""
    total = view.totals.get(tool)
    if total is None:
        return None
    last = 0
    while (tool, last + 1) in view.pages:
        last += 1
    if last == total:
        return date.max
    pages = [view.pages[(tool, p)] for p in range(1, last + 1)]
    return max((r.day for page in pages for r in (*page.bank, *page.ledger)), default=None)


def _settled_bound(view: View) -> str:
    """X: bank lines with ids before it are settled: read, past every ledger entry that can book
    them, and past the duplicate window of every unread line. The edit drops them unless marked."""
    fb, fl = _frontier(view, BANK_TOOL), _frontier(view, LEDGER_TOOL)
    if view.memo is None or fb is None or fl is None:
        return "B-"
    cuts = []
    if fb != date.max:
        cuts.append(fb - timedelta(days=view.memo.duplicate_days))
    if fl != date.max:
        cuts.append(fl - timedelta(days=LEDGER_LAG_DAYS))
    if not cuts:
        return _ALL_SETTLED
    return min((b.id for b in view.bank.values() if b.day >= min(cuts)), default=_ALL_SETTLED)


_ALL_SETTLED = "B-9999999"  # an X above every bank id

#: the oracle's edit (envs/ledger/evolve.js without its `//` comment lines)
_EVOLVE_JS = "\n".join(
    line for line in Path(__file__).with_name("evolve.js").read_text().splitlines() if not line.startswith("//")
)


def plan_edit(view: View) -> tuple[str, list[str]]:
    """(X, K) for the edit, chosen so that what it keeps reads back to the same reconciliation. The
    JS drops every unmarked bank line before X and every unmarked entry that names a visible
    unmarked bank line; K lists those that must stay (they get marked):
    - a bank line before X unless booked within tolerance (its entry visible or removed) and no
      possible duplicate original;
    - a later bank line whose first visible booking is a discrepancy, or that was booked already
      and is named again (no " +" may then be added: its bookings stay visible);
    - every entry naming a visible unmarked bank line except its clean first booking, which goes
      (its bank line gets " +" or goes too);
    - the book balance line once."""
    memo = view.memo
    assert memo is not None
    bound, first, gaps = _settled_bound(view), _first_bookings(view), _unread_gaps(view)
    by_key: dict[tuple, list[BankLine]] = {}
    for b in view.bank.values():
        by_key.setdefault(b.key, []).append(b)
    unmarked = [b for b in statement_order(view.bank.values()) if b.id not in view.marked]
    named = {e.bank_ref for e in view.ledger.values() if e.id not in view.marked}
    clean = {b.id for b in unmarked if b.id in view.booked or (b.id in first and _clean(memo, b, first[b.id]))}
    keep_bank = {
        b.id
        for b in unmarked
        if (b.id < bound and (b.id not in clean or _possible_original(view, b, gaps, by_key)))
        or (b.id >= bound and b.id in first and b.id not in clean)
        or (b.id in view.booked and b.id in named)
    }
    visible = {b.id for b in unmarked}
    gone = {first[i].id for i in visible - keep_bank if i in first and i in clean}
    keep_ledger = {e.id for e in view.ledger.values() if e.id not in view.marked and e.bank_ref in visible} - gone
    keep = sorted(keep_bank) + sorted(keep_ledger)
    if not view.book_marked and view.book_balance is not None:
        keep.append(_BOOK_KEY)
    # an illegible output of an unread page (cleared, an error) is marked, not emptied: its call stays
    # visible, so the page still counts as unread and is fetched again
    for text in view.illegible.values():
        if (m := _LEAD_RE.match(text)) and not text.startswith(KEEP_MARK):
            keep.append(re.escape(m[0]))
    return bound, list(dict.fromkeys(keep))


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

    def evolve_code(self, state: State) -> str | None:
        """A short edit (see `_EVOLVE_JS` and `plan_edit`); None without the memo (nothing can be
        judged, and the oracle answers at once anyway)."""
        view = read_state(state)
        if view.memo is None:
            return None
        bound, keep = plan_edit(view)
        return _EVOLVE_JS.replace("__X__", bound).replace("__K__", "|".join(keep) or "(?!)")
