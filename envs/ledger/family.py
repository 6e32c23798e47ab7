"""The ledger family: reconcile a long multi-currency bank statement against the general ledger.

The policy memo (rates, tolerances, duplicate window, bank-charge accounts, late amendments)
is shown once, in the opening message, and no tool returns it again; the records come in
long paginated tool outputs full of noise. A context that drops the memo, keeps a superseded
rate, or loses one record's exact amount gets ids or the balance wrong.
"""

from __future__ import annotations

import random
import re
from decimal import Decimal, InvalidOperation
from typing import Any, ClassVar

from rl_compaction_envs.ledger.generator import Instance, generate
from rl_compaction_envs.ledger.model import (
    BANK_ID_RE,
    BANK_TOOL,
    LEDGER_ID_RE,
    LEDGER_TOOL,
    RECORD_TOOL,
)
from rl_compaction_envs.ledger.oracle import LedgerOracle

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

ID_WEIGHT = 0.6  # share of the score for the discrepancy ids (F1); the rest is the exact balance

_PAGE = {"page": {"type": "integer", "description": "1-based page number."}}
TOOLS = [
    function_tool(
        BANK_TOOL,
        "One page of the bank statement: lines with ID, DATE, TYPE, COUNTERPARTY, CCY "
        "(transaction currency), AMOUNT (debits negative) and free-text DETAILS.",
        _PAGE,
        ["page"],
    ),
    function_tool(
        LEDGER_TOOL,
        "One page of the general-ledger account of the bank: entries with ID, DATE, "
        "ACCT (contra account), BANK REF (the statement line it books, or '-'), COUNTERPARTY, "
        "AMOUNT in the reporting currency and TEXT. Every page repeats the book balance.",
        _PAGE,
        ["page"],
    ),
    function_tool(
        RECORD_TOOL,
        "One bank line (id B-nnnnnn) or ledger entry (id L-nnnnn) again, by id.",
        {"id": {"type": "string", "description": "A record id, e.g. B-204117 or L-55012."}},
        ["id"],
    ),
]

INSTRUCTIONS = """\
You reconcile a company's bank statement against the general-ledger account that books it.
The opening message holds a POLICY MEMO: exchange rates, tolerances, the duplicate window and the \
accounts for bank charges, possibly followed by amendments that supersede table values. It is shown \
once; no tool returns it again.
Tools: bank_records(page) and ledger_records(page) return numbered pages (page 1, 2, ... up to the \
count given in each page header); record(id) returns one line again.
Rules (use the memo's values; an amendment replaces the value it supersedes):
1. Convert a bank line to the reporting currency: AMOUNT x rate, rounded half away from zero to 2 places.
2. A ledger entry books the statement line named in its BANK REF. If |ledger AMOUNT - converted bank \
amount| is greater than the tolerance of the bank line's currency, report the ledger id; its correction \
is converted - booked. Differences up to and including the tolerance are accepted.
3. A bank line of TYPE FEE booked within tolerance but to the wrong account (the memo gives the account \
for charges under the threshold and for charges at or above it, by |converted amount|): report the \
ledger id; correction 0.
4. A ledger entry whose BANK REF is '-', is not a line of the statement, or names a line already booked \
by an earlier ledger entry (by date, then id) is unsupported: report the ledger id; correction -booked.
5. A bank line that no ledger entry books: if an earlier statement line (by date, then id) has the same \
counterparty, currency and amount and is dated 0 to N days before it (N = the duplicate window), it is \
a duplicate import: report the bank id, correction 0. Otherwise it is missing from the ledger: report \
the bank id; correction +converted.
Corrected balance = the book balance per ledger (in every ledger page header) + the sum of corrections.
When done, call submit with answer = a JSON object (as a string): \
{"discrepancies": ["L-55012", "B-204117", ...], "corrected_balance": "123456.78"} where \
corrected_balance is a plain decimal string with exactly 2 places, no thousands separators. \
Score: 0.6 x F1 of the reported ids + 0.4 if the balance is exactly right."""


class LedgerTask(Task):
    """One generated reconciliation. Pages are revealed only through the tools and the answer
    (`_corrections`, `_balance`) only through `score`; the oracle is built without either."""

    family: ClassVar[str] = "ledger"
    instructions = INSTRUCTIONS

    def __init__(self, instance: Instance):
        self._instance = instance
        self._records = {b.id: b.render() for b in instance.bank} | {e.id: e.render() for e in instance.ledger}
        self._corrections = dict(instance.corrections)
        self._balance = instance.expected_balance

    @property
    def n_pages(self) -> dict[str, int]:
        return {BANK_TOOL: len(self._instance.bank_pages), LEDGER_TOOL: len(self._instance.ledger_pages)}

    def tools(self) -> list[dict[str, Any]]:
        return [dict(t) for t in TOOLS]

    def initial_state(self) -> State:
        return [{"type": "message", "role": "user", "content": self._instance.statement}]

    def call_tool(self, name: str, arguments: dict[str, Any]) -> str:
        tools = [t["name"] for t in TOOLS]
        if name not in tools:
            raise ToolError(f"unknown tool {name!r}; this task's tools are {', '.join(tools)}")
        if name == RECORD_TOOL:
            return self._record(check_arguments(name, arguments, {"id": str})["id"])
        value = check_arguments(name, arguments, {"page": int})["page"]
        pages = self._instance.bank_pages if name == BANK_TOOL else self._instance.ledger_pages
        if not 1 <= value <= len(pages):
            raise ToolError(f"{name} page {value} is out of range: pages are 1 to {len(pages)}")
        return pages[value - 1]

    def _record(self, value: str) -> str:
        rid = value.strip().upper()
        if not (BANK_ID_RE.match(rid) or LEDGER_ID_RE.match(rid)):
            raise ToolError(f"record id {value!r} is malformed: bank lines are B-nnnnnn, ledger entries L-nnnnn")
        if rid not in self._records:
            where = "bank statement" if rid.startswith("B-") else "ledger"
            raise ToolError(f"no {where} record with id {rid}")
        kind = "bank statement line" if rid.startswith("B-") else "ledger entry"
        return f"RECORD {rid} ({kind}):\n{self._records[rid]}"

    def score(self, answer: str) -> float:
        """0.6 x F1 of the reported ids + 0.4 for the exact corrected balance; 0 if unparsable."""
        parsed = parse_answer(answer)
        if parsed is None:
            return 0.0
        ids, balance = parsed
        truth = set(self._corrections)
        hits = len(ids & truth)
        f1 = 2 * hits / (len(ids) + len(truth)) if ids or truth else 1.0
        return ID_WEIGHT * f1 + (1 - ID_WEIGHT) * (balance is not None and balance == self._balance)

    def oracle(self) -> Oracle:
        return LedgerOracle()


_BALANCE_RE = re.compile(r"^-?\d+\.\d{2}$")


def parse_answer(answer: Any) -> tuple[set[str], Decimal | None] | None:
    """(reported ids, balance or None if malformed) from a submitted answer; None if the answer
    is not a JSON object. A surrounding markdown code fence is tolerated; non-string ids are ignored."""
    parsed = parse_json_answer(answer)
    if parsed is None:
        return None
    raw_ids = parsed.get("discrepancies")
    ids = {i.strip().upper() for i in raw_ids if isinstance(i, str)} if isinstance(raw_ids, list) else set()
    raw_balance = parsed.get("corrected_balance")
    balance = None
    if isinstance(raw_balance, str) and _BALANCE_RE.match(raw_balance.strip()):
        try:
            balance = Decimal(raw_balance.strip())
        except InvalidOperation:
            balance = None
    return ids, balance


class LedgerFamily(TaskFamily):
    """Seeded reconciliation tasks (see the module docstring)."""

    name: ClassVar[str] = "ledger"
    description: ClassVar[str] = (
        "Bank reconciliation: a once-shown policy memo (rates, tolerances, duplicate window, fee accounts, "
        "amendments) applied to long paginated bank and ledger listings; answer the discrepancy ids and the "
        "exact corrected balance."
    )

    def make(self, seed: int, split: str = "train", difficulty: Difficulty | None = None) -> LedgerTask:
        rng = random.Random(split_seed(self.name, split, seed))
        return LedgerTask(generate(rng, split, difficulty or Difficulty()))
