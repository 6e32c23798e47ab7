"""Records, the policy memo, their text formats and the reconciliation rules.

The generator renders records and the memo with these functions; the oracle parses them
back from whatever its State still holds and applies `reconcile`. Money is `Decimal`
throughout: every answer depends on exact cents.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import date
from decimal import ROUND_HALF_UP, Decimal

CENT = Decimal("0.01")
BANK_TOOL = "bank_records"
LEDGER_TOOL = "ledger_records"
RECORD_TOOL = "record"
FEE_TYPE = "FEE"
NO_REF = "-"
MEMO_START = "=== POLICY MEMO"
MEMO_END = "=== END OF POLICY MEMO ==="
BANK_TITLE = "BANK STATEMENT"
LEDGER_TITLE = "GENERAL LEDGER"

BANK_ID_RE = re.compile(r"^B-\d{6}$")
LEDGER_ID_RE = re.compile(r"^L-\d{5}$")
_AMOUNT = r"-?\d{1,3}(?:,\d{3})*\.\d{2}"
BANK_LINE_RE = re.compile(
    rf"^(B-\d{{6}})\s+(\d{{4}}-\d{{2}}-\d{{2}})\s+([A-Z]{{2,4}})\s+(\S.*?)\s+([A-Z]{{3}})\s+({_AMOUNT})(?:\s\s+(.*))?$"
)
LEDGER_LINE_RE = re.compile(
    rf"^(L-\d{{5}})\s+(\d{{4}}-\d{{2}}-\d{{2}})\s+(\d{{4}})\s+(B-\d{{6}}|-)\s+(\S.*?)\s+({_AMOUNT})(?:\s\s+(.*))?$"
)
PAGE_RE = re.compile(r"page (\d+) of (\d+)")
BOOK_BALANCE_LABEL = "Book balance per ledger at period end:"
_BOOK_BALANCE_RE = re.compile(re.escape(BOOK_BALANCE_LABEL) + rf"\s*({_AMOUNT})")


def money(value: Decimal) -> str:
    """Amount as shown in records: thousands separators, 2 places (e.g. -12,450.00)."""
    return f"{value:,.2f}"


def plain(value: Decimal) -> str:
    """Amount in the answer format: no separators, 2 places (e.g. -12450.00)."""
    return f"{value.quantize(CENT):.2f}"


def parse_money(text: str) -> Decimal:
    return Decimal(text.replace(",", ""))


def convert(amount: Decimal, rate: Decimal) -> Decimal:
    """Bank amount in the reporting currency: multiply, round half away from zero to cents."""
    return (amount * rate).quantize(CENT, rounding=ROUND_HALF_UP)


@dataclass(frozen=True)
class BankLine:
    """One bank statement line (amount in the transaction currency, debits negative)."""

    id: str
    day: date
    type: str
    counterparty: str
    currency: str
    amount: Decimal
    details: str = ""

    @property
    def key(self) -> tuple[str, str, Decimal]:
        """What a duplicate import repeats: counterparty, currency and amount."""
        return (self.counterparty, self.currency, self.amount)

    def render(self) -> str:
        return (
            f"{self.id:<10}{self.day.isoformat():<12}{self.type:<6}{self.counterparty:<32}"
            f"{self.currency:<4}{money(self.amount):>14}  {self.details}"
        ).rstrip()


@dataclass(frozen=True)
class LedgerLine:
    """One ledger entry of the bank account (amount in the reporting currency)."""

    id: str
    day: date
    account: str
    bank_ref: str
    counterparty: str
    amount: Decimal
    text: str = ""

    def render(self) -> str:
        return (
            f"{self.id:<10}{self.day.isoformat():<12}{self.account:<6}{self.bank_ref:<10}"
            f"{self.counterparty:<32}{money(self.amount):>14}  {self.text}"
        ).rstrip()


BANK_COLUMNS = f"{'ID':<10}{'DATE':<12}{'TYPE':<6}{'COUNTERPARTY':<32}{'CCY':<4}{'AMOUNT':>14}  DETAILS"


def ledger_columns(base: str) -> str:
    return f"{'ID':<10}{'DATE':<12}{'ACCT':<6}{'BANK REF':<10}{'COUNTERPARTY':<32}{'AMOUNT ' + base:>14}  TEXT"


def parse_bank_line(line: str) -> BankLine | None:
    m = BANK_LINE_RE.match(line.rstrip())
    if not m:
        return None
    return BankLine(m[1], date.fromisoformat(m[2]), m[3], m[4], m[5], parse_money(m[6]), m[7] or "")


def parse_ledger_line(line: str) -> LedgerLine | None:
    m = LEDGER_LINE_RE.match(line.rstrip())
    if not m:
        return None
    return LedgerLine(m[1], date.fromisoformat(m[2]), m[3], m[4], m[5], parse_money(m[6]), m[7] or "")


def parse_book_balance(text: str) -> Decimal | None:
    m = _BOOK_BALANCE_RE.search(text)
    return parse_money(m[1]) if m else None


# --------------------------------------------------------------------------- the memo


@dataclass(frozen=True)
class Memo:
    """The policy memo's facts, amendments already applied."""

    base: str
    rates: dict[str, Decimal]  # reporting-currency units per 1 unit; the base itself maps to 1
    tolerances: dict[str, Decimal]  # accepted |booked - converted|, in the reporting currency
    duplicate_days: int
    fee_threshold: Decimal  # |converted fee| under this -> small account, else large account
    fee_account_small: str
    fee_account_large: str

    def fee_account(self, converted: Decimal) -> str:
        return self.fee_account_small if abs(converted) < self.fee_threshold else self.fee_account_large


@dataclass(frozen=True)
class Amendment:
    """A memo line that supersedes one rate or one tolerance of the table."""

    kind: str  # "rate" or "tolerance"
    currency: str
    value: Decimal


_RATES_RE = re.compile(r"^Exchange rates \(([A-Z]{3}) per 1 unit\):\s*(.+)$")
_TOLS_RE = re.compile(r"^Tolerances \(([A-Z]{3}), absolute\):\s*(.+)$")
_BASE_RE = re.compile(r"^Reporting currency:\s*([A-Z]{3})\b")
_WINDOW_RE = re.compile(r"^Duplicate window:\s*(\d+) days\b")
_FEES_RE = re.compile(
    r"^Bank charges:\s*under (\d+\.\d{2}) [A-Z]{3} -> account (\d{4}); (\d+\.\d{2}) [A-Z]{3} or more -> account (\d{4})"
)
_AMEND_RE = re.compile(r"^Amendment \d+ \(supersedes the table\):\s*(rate|tolerance) ([A-Z]{3}) (\d+\.\d+)")
_PAIR_RE = re.compile(r"^([A-Z]{3}) (\d+\.\d+)$")


def _pairs(text: str) -> dict[str, Decimal]:
    out = {}
    for chunk in text.split("|"):
        m = _PAIR_RE.match(chunk.strip())
        if m:
            out[m[1]] = Decimal(m[2])
    return out


def render_memo(memo: Memo, amendments: Iterable[Amendment], filler: list[str]) -> tuple[str, str]:
    """The memo block and its amendment lines (placed elsewhere in the opening message).
    `memo` holds the table values as first issued; the amendments supersede some of them."""
    base = memo.base
    rates = " | ".join(f"{c} {r}" for c, r in memo.rates.items() if c != base)
    tols = " | ".join(f"{c} {t}" for c, t in memo.tolerances.items())
    lines = [
        f"{MEMO_START} (shown once: no tool returns it again) ===",
        f"Reporting currency: {base}",
        filler[0],
        f"Exchange rates ({base} per 1 unit): {rates}",
        f"Tolerances ({base}, absolute): {tols}",
        filler[1],
        f"Duplicate window: {memo.duplicate_days} days",
        f"Bank charges: under {memo.fee_threshold} {base} -> account {memo.fee_account_small}; "
        f"{memo.fee_threshold} {base} or more -> account {memo.fee_account_large}",
        filler[2],
        MEMO_END,
    ]
    amend = [
        f"Amendment {i} (supersedes the table): {a.kind} {a.currency} {a.value}"
        for i, a in enumerate(amendments, start=1)
    ]
    return "\n".join(lines), "\n".join(amend)


def parse_memo(text: str) -> Memo | None:
    """The memo's facts from a text holding it (amendment lines anywhere in it are applied
    in order, after the table); None unless every rule is present."""
    base = window = fees = None
    rates: dict[str, Decimal] = {}
    tols: dict[str, Decimal] = {}
    amendments: list[tuple[str, str, Decimal]] = []
    for raw in text.splitlines():
        line = raw.strip().lstrip("-* ").strip()
        if m := _BASE_RE.match(line):
            base = m[1]
        elif m := _RATES_RE.match(line):
            rates.update(_pairs(m[2]))
        elif m := _TOLS_RE.match(line):
            tols.update(_pairs(m[2]))
        elif m := _WINDOW_RE.match(line):
            window = int(m[1])
        elif m := _FEES_RE.match(line):
            fees = (Decimal(m[1]), m[2], m[4])
        elif m := _AMEND_RE.match(line):
            amendments.append((m[1], m[2], Decimal(m[3])))
    if base is None or window is None or fees is None or not tols:
        return None
    for kind, currency, value in amendments:
        (rates if kind == "rate" else tols)[currency] = value
    rates[base] = Decimal(1)
    return Memo(base, rates, tols, window, fees[0], fees[1], fees[2])


# --------------------------------------------------------------------------- the rules


@dataclass(frozen=True)
class Finding:
    """One discrepancy: the id to report, why, and its correction to the book balance."""

    id: str
    kind: str  # amount | fee_account | unsupported | missing | duplicate
    correction: Decimal


def statement_order(lines: Iterable[BankLine]) -> list[BankLine]:
    return sorted(lines, key=lambda b: (b.day, b.id))


def reconcile(
    memo: Memo, bank: Iterable[BankLine], ledger: Iterable[LedgerLine], booked: Iterable[str] = ()
) -> list[Finding]:
    """Apply the task's rules (stated in the instructions) to the given records.

    `booked`: ids of bank lines already booked, within tolerance, by an entry not among `ledger`
    (a compaction removed it); every given entry naming one of them books it a second time.
    A currency missing from the memo's table makes its lines unconvertible; they are
    treated as rate 0 / tolerance 0, which can only happen on a corrupted context."""
    bank_lines = statement_order(bank)
    by_id = {b.id: b for b in bank_lines}
    matched: dict[str, LedgerLine | None] = dict.fromkeys(booked)
    findings: list[Finding] = []
    for entry in sorted(ledger, key=lambda e: (e.day, e.id)):
        b = by_id.get(entry.bank_ref)
        if b is None or b.id in matched:
            findings.append(Finding(entry.id, "unsupported", -entry.amount))
            continue
        matched[b.id] = entry
        conv = convert(b.amount, memo.rates.get(b.currency, Decimal(0)))
        if abs(entry.amount - conv) > memo.tolerances.get(b.currency, Decimal(0)):
            findings.append(Finding(entry.id, "amount", conv - entry.amount))
        elif b.type == FEE_TYPE and entry.account != memo.fee_account(conv):
            findings.append(Finding(entry.id, "fee_account", Decimal(0)))
    seen: dict[tuple[str, str, Decimal], list[BankLine]] = {}  # earlier lines, by key
    for b in bank_lines:
        earlier = seen.setdefault(b.key, [])
        earlier_days = [a.day for a in earlier]
        earlier.append(b)
        if b.id in matched:
            continue
        if any(0 <= (b.day - d).days <= memo.duplicate_days for d in earlier_days):
            findings.append(Finding(b.id, "duplicate", Decimal(0)))
        else:
            findings.append(Finding(b.id, "missing", convert(b.amount, memo.rates.get(b.currency, Decimal(0)))))
    return findings


def corrected_balance(book_balance: Decimal, findings: Iterable[Finding]) -> Decimal:
    return book_balance + sum((f.correction for f in findings), Decimal(0))


def format_answer(ids: Iterable[str], balance: Decimal) -> str:
    """The answer string the task expects: a JSON object of the ids and the plain-decimal balance."""
    return json.dumps({"discrepancies": list(ids), "corrected_balance": plain(balance)})
