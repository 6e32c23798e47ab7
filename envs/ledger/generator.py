"""Seeded generation of one reconciliation instance and its answer.

The answer is built constructively (each injected discrepancy carries its own correction),
independently of `model.reconcile`, so tests that compare the two catch a bug in either.

Why one module of ~560 lines: `_Builder` is one seeded pass in which every injected discrepancy
draws from the same random stream; split, a change to one injector could shift the others' draws
unnoticed.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass, field
from datetime import date, timedelta
from decimal import Decimal

from rl_compaction_envs.ledger import pools
from rl_compaction_envs.ledger.model import (
    BANK_COLUMNS,
    BANK_TITLE,
    BOOK_BALANCE_LABEL,
    CENT,
    FEE_TYPE,
    LEDGER_TITLE,
    NO_REF,
    Amendment,
    BankLine,
    LedgerLine,
    Memo,
    convert,
    ledger_columns,
    money,
    render_memo,
)

from rl_compaction.harness.tasks import Difficulty

#: reporting-currency value of one unit, in EUR (rates are jittered around these).
CURRENCY_VALUE = {
    "EUR": 1.0,
    "USD": 0.92,
    "GBP": 1.17,
    "CHF": 1.05,
    "SEK": 0.087,
    "NOK": 0.086,
    "DKK": 0.134,
    "PLN": 0.232,
    "CZK": 0.040,
    "CAD": 0.68,
}
BASES = ("EUR", "USD", "GBP", "CHF")
TOLERANCES = tuple(Decimal(t) for t in ("0.05", "0.10", "0.20", "0.25", "0.40", "0.50", "1.00"))
FEE_THRESHOLDS = tuple(Decimal(t) for t in ("15.00", "20.00", "25.00", "30.00", "40.00", "50.00"))
FEE_ACCOUNTS = (("6570", "6590"), ("6200", "6210"), ("6060", "6065"), ("7770", "7790"))
CASH_ACCOUNT = "1930"
PERIOD_DAYS = 91
BASE_PAGE_SIZE = 40
MIN_NORMAL = 6

# type -> (weight, base-equivalent magnitude range, sign, ledger contra accounts)
_TYPES: dict[str, tuple[float, tuple[float, float], int, tuple[str, ...]]] = {
    "TRF": (0.36, (60.0, 18000.0), -1, ("4010", "4020", "2440", "5410")),
    "RCV": (0.32, (120.0, 26000.0), 1, ("1510", "3010", "3040")),
    "CARD": (0.17, (6.0, 650.0), -1, ("5460", "6110", "6250")),
    "DD": (0.15, (25.0, 3200.0), -1, ("5010", "6310", "6540")),
}
# which DETAIL_TEMPLATES / LEDGER_TEXT_TEMPLATES entries fit each type
_DETAIL_INDEX = {"TRF": (0, 2), "RCV": (1,), "CARD": (3,), "DD": (4,), FEE_TYPE: (5,)}
_TEXT_INDEX = {"TRF": 0, "RCV": 1, "CARD": 2, "DD": 3, FEE_TYPE: 4}


@dataclass(frozen=True)
class Level:
    """What a difficulty level adds (counts of injected discrepancies and distractors)."""

    records: int  # bank lines at scale 1.0
    currencies: int  # foreign currencies besides the reporting one
    amount: int
    missing: int
    unsupported: int
    duplicates: int
    fee_account: int
    twins: int  # identical genuine payments inside the duplicate window, both booked (no discrepancy)
    edges: bool  # boundary cases: tolerance met exactly / exceeded by a cent, N-day duplicate, N+1-day repeat
    amendments: bool  # memo amendments supersede one rate and one tolerance; stale-rate bookings


LEVELS = {
    1: Level(
        records=420,
        currencies=2,
        amount=2,
        missing=1,
        unsupported=1,
        duplicates=1,
        fee_account=1,
        twins=0,
        edges=False,
        amendments=False,
    ),
    2: Level(
        records=520,
        currencies=3,
        amount=3,
        missing=2,
        unsupported=1,
        duplicates=2,
        fee_account=1,
        twins=1,
        edges=True,
        amendments=False,
    ),
    3: Level(
        records=620,
        currencies=4,
        amount=3,
        missing=2,
        unsupported=2,
        duplicates=2,
        fee_account=2,
        twins=2,
        edges=True,
        amendments=True,
    ),
}


@dataclass
class _Spec:
    """A bank line before ids are assigned, and how the ledger books it."""

    day: date
    seq: int
    type: str
    counterparty: str
    currency: str
    amount: Decimal
    details: str
    booked: bool = True
    booked_amount: Decimal | None = None  # None: the converted amount plus an in-tolerance difference
    account: str | None = None  # None: the counterparty's (or the fee rule's) account
    role: str = "normal"  # normal | amount | missing | duplicate | fee_account (for the answer)
    id: str = ""


@dataclass
class Instance:
    """Everything a task needs: the opening message, tool pages and the hidden answer."""

    statement: str
    memo: Memo  # amendments applied
    bank: list[BankLine]
    ledger: list[LedgerLine]
    book_balance: Decimal
    corrections: dict[str, Decimal]  # discrepancy id -> its correction to the book balance
    bank_pages: list[str]
    ledger_pages: list[str]
    kinds: dict[str, str] = field(default_factory=dict)  # discrepancy id -> kind (for tests and logs)

    @property
    def expected_balance(self) -> Decimal:
        return self.book_balance + sum(self.corrections.values(), Decimal(0))


class _Builder:
    def __init__(self, rng: random.Random, split: str, difficulty: Difficulty):
        self.rng = rng
        self.split = split
        self.level = LEVELS[difficulty.level]
        self.scale = difficulty.scale
        self.specs: list[_Spec] = []
        self.profiles: dict[str, tuple[str, str, str]] = {}  # counterparty -> (type, currency, account)

    # ----------------------------------------------------------------- setup

    def setup(self) -> None:
        rng, lv = self.rng, self.level
        self.company = rng.choice(pools.COMPANY_POOLS[self.split])
        self.bank_name = rng.choice(pools.BANK_POOLS[self.split])
        self.account_no = f"{rng.choice(['NO', 'SE', 'DE', 'FI', 'NL'])}{rng.randint(10, 99)} " + " ".join(
            str(rng.randint(1000, 9999)) for _ in range(3)
        )
        base = rng.choice(BASES)
        foreign = rng.sample([c for c in CURRENCY_VALUE if c != base], lv.currencies)
        table_rates = {
            c: Decimal(CURRENCY_VALUE[c] / CURRENCY_VALUE[base] * rng.uniform(0.97, 1.03)).quantize(Decimal("1e-6"))
            for c in foreign
        }
        table_tols = {base: Decimal("0.00")}
        for c in foreign:
            table_tols[c] = rng.choice(TOLERANCES[2:] if lv.amendments else TOLERANCES)
        threshold = rng.choice(FEE_THRESHOLDS)
        small, large = rng.choice(FEE_ACCOUNTS)
        table = Memo(base, {base: Decimal(1), **table_rates}, table_tols, rng.randint(3, 7), threshold, small, large)
        self.amendments: list[Amendment] = []
        if lv.amendments:
            c_rate, c_tol = foreign[0], foreign[1]
            shift = Decimal(1 + rng.choice([-1, 1]) * rng.uniform(0.015, 0.04))
            self.amendments.append(Amendment("rate", c_rate, (table_rates[c_rate] * shift).quantize(Decimal("1e-6"))))
            tighter = [t for t in TOLERANCES if t < table_tols[c_tol]]
            self.amendments.append(Amendment("tolerance", c_tol, rng.choice(tighter)))
        rates, tols = dict(table.rates), dict(table.tolerances)
        for a in self.amendments:
            (rates if a.kind == "rate" else tols)[a.currency] = a.value
        self.table = table
        self.memo = Memo(base, rates, tols, table.duplicate_days, threshold, small, large)
        self.foreign = foreign
        self.start = date(rng.randint(2021, 2025), rng.choice([1, 4, 7, 10]), 1)
        self.end = self.start + timedelta(days=PERIOD_DAYS - 1)
        n_cp = max(6, min(60, round(self.level.records * self.scale / 12) + 6))
        for cp in rng.sample(pools.COUNTERPARTY_POOLS[self.split], n_cp):
            kind = rng.choices(list(_TYPES), weights=[t[0] for t in _TYPES.values()])[0]
            currency = base if rng.random() < 0.5 else rng.choice(foreign)
            self.profiles[cp] = (kind, currency, rng.choice(_TYPES[kind][3]))

    # ----------------------------------------------------------------- bank lines

    def _day(self, lo: int = 0, hi: int = PERIOD_DAYS - 1) -> date:
        return self.start + timedelta(days=self.rng.randint(lo, hi))

    def _details(self, kind: str, day: date) -> str:
        rng = self.rng
        template = pools.DETAIL_TEMPLATES[self.split][rng.choice(_DETAIL_INDEX[kind])]
        ref = "".join(rng.choice("ABCDEFGHJKLMNPQRSTUVWXYZ0123456789") for _ in range(8))
        return template.format(
            inv=rng.randint(10000, 99999),
            ref=ref,
            mon=day.strftime("%B"),
            batch=rng.randint(10, 999),
            cn=rng.randint(1000, 9999),
        )

    def _amount(self, kind: str, currency: str) -> Decimal:
        lo, hi = _TYPES[kind][1]
        magnitude = math.exp(self.rng.uniform(math.log(lo), math.log(hi)))
        value = (Decimal(magnitude) / self.memo.rates[currency]).quantize(CENT)
        return max(value, CENT) * _TYPES[kind][2]

    def _fee_amount(self, currency: str) -> Decimal:
        magnitude = Decimal(self.rng.uniform(0.3, 2.5)) * self.memo.fee_threshold
        return -max((magnitude / self.memo.rates[currency]).quantize(CENT), CENT)

    def add(
        self,
        kind: str | None = None,
        currency: str | None = None,
        day: date | None = None,
        amount: Decimal | None = None,
        cp: str | None = None,
        **booking: object,
    ) -> _Spec:
        """A new bank line (random where not given) appended to the statement."""
        rng = self.rng
        if kind == FEE_TYPE:
            cp = self.bank_name
            currency = currency or (self.memo.base if rng.random() < 0.6 else rng.choice(self.foreign))
            amount = amount if amount is not None else self._fee_amount(currency)
        else:
            cp = cp or rng.choice(
                [c for c, p in self.profiles.items() if kind is None or p[0] == kind] or list(self.profiles)
            )
            kind = kind or self.profiles[cp][0]
            currency = currency or self.profiles[cp][1]
            amount = amount if amount is not None else self._amount(kind, currency)
        day = day or self._day()
        spec = _Spec(day, len(self.specs), kind, cp, currency, amount, self._details(kind, day), **booking)
        self.specs.append(spec)
        return spec

    def copy(self, original: _Spec, days_later: int, **booking: object) -> _Spec:
        """A line repeating `original`'s counterparty, currency and amount `days_later` days on."""
        day = original.day + timedelta(days=days_later)
        # a duplicate import repeats the line verbatim; other repeats are separate payments
        details = original.details if booking.get("role") == "duplicate" else self._details(original.type, day)
        spec = _Spec(
            day,
            len(self.specs),
            original.type,
            original.counterparty,
            original.currency,
            original.amount,
            details,
            **booking,
        )
        self.specs.append(spec)
        return spec

    def conv(self, spec: _Spec) -> Decimal:
        return convert(spec.amount, self.memo.rates[spec.currency])

    def _wrong(self, conv: Decimal, tol: Decimal) -> Decimal:
        """A booked amount clearly off the converted one: transposed digits, a wrong digit, or a
        percentage error."""
        rng = self.rng
        while True:
            how = rng.choice(("transpose", "digit", "percent"))
            if how == "transpose":
                digits = list(f"{abs(conv):.2f}".replace(".", ""))
                spots = [i for i in range(len(digits) - 1) if digits[i] != digits[i + 1]]
                if not spots:
                    continue
                i = rng.choice(spots)
                digits[i], digits[i + 1] = digits[i + 1], digits[i]
                wrong = (Decimal("".join(digits)) / 100) * (1 if conv > 0 else -1)
            elif how == "digit":
                wrong = conv + rng.choice([-1, 1]) * rng.randint(1, 9) * Decimal(10) ** rng.randint(0, 2)
            else:
                wrong = (conv * Decimal(1 + rng.choice([-1, 1]) * rng.uniform(0.02, 0.15))).quantize(CENT)
            if abs(wrong - conv) > tol + Decimal("0.05") and wrong != 0 and (wrong > 0) == (conv > 0):
                return wrong

    def _far_from(self, key_spec: _Spec, day: date) -> bool:
        """No other line with the same key lies within the duplicate window before `day`."""
        n = self.memo.duplicate_days
        return not any(
            s is not key_spec
            and s.counterparty == key_spec.counterparty
            and s.amount == key_spec.amount
            and s.currency == key_spec.currency
            and 0 <= (day - s.day).days <= n
            for s in self.specs
        )

    def build_lines(self) -> None:
        rng, lv, memo = self.rng, self.level, self.memo
        n = memo.duplicate_days
        injected = (
            lv.amount
            + lv.missing
            + 2 * lv.duplicates
            + lv.fee_account
            + 2 * lv.twins
            + (6 if lv.edges else 0)
            + (3 if lv.amendments else 0)
        )
        target = round(lv.records * self.scale)
        series = 1 if target < 100 else 3
        for _ in range(max(MIN_NORMAL, target - injected - 3 * series)):
            self.add(FEE_TYPE if rng.random() < 0.07 else None)
        # recurring payments (same key every month): a repeated key far outside the window is no duplicate
        for cp in rng.sample(list(self.profiles), series):
            kind, currency, _ = self.profiles[cp]
            first = self.add(kind, currency, day=self._day(0, 27), cp=cp)
            for month in (1, 2):
                self.copy(first, 30 * month)

        for _ in range(lv.amount):
            spec = self.add(rng.choice(("TRF", "RCV", "DD")), role="amount")
            spec.booked_amount = self._wrong(self.conv(spec), memo.tolerances[spec.currency])
        for _ in range(lv.missing):
            self.add(rng.choice(("TRF", "RCV", "CARD")), booked=False, role="missing")
        for i in range(lv.duplicates):
            original = self.add(rng.choice(("TRF", "DD", "CARD")), day=self._day(0, PERIOD_DAYS - 1 - n))
            self.copy(original, n if (lv.edges and i == 0) else rng.randint(0, n), booked=False, role="duplicate")
        fees = [self.add(FEE_TYPE) for _ in range(lv.fee_account)]
        for spec in fees:
            right = memo.fee_account(self.conv(spec))
            spec.account = memo.fee_account_large if right == memo.fee_account_small else memo.fee_account_small
            spec.role = "fee_account"
        for _ in range(lv.twins):
            original = self.add(rng.choice(("TRF", "CARD")), day=self._day(0, PERIOD_DAYS - 1 - n))
            self.copy(original, rng.randint(1, n))
        if lv.edges:
            self._edges()
        if lv.amendments:
            self._amendment_traps()
        # a missing line must not look like a duplicate of an earlier line (a one-in-a-million clash)
        for spec in self.specs:
            if spec.role == "missing" and not self._far_from(spec, spec.day):
                spec.amount += CENT if spec.amount > 0 else -CENT

    def _edges(self) -> None:
        rng, memo = self.rng, self.memo
        n = memo.duplicate_days
        positive = [c for c in self.foreign if memo.tolerances[c] > 0]
        cur = rng.choice(positive)
        tol = memo.tolerances[cur]
        ok = self.add("TRF", currency=cur)  # booked off by exactly the tolerance: accepted
        ok.booked_amount = self.conv(ok) + rng.choice([-1, 1]) * tol
        bad = self.add("RCV", currency=cur, role="amount")  # off by one cent more: a discrepancy
        bad.booked_amount = self.conv(bad) + rng.choice([-1, 1]) * (tol + CENT)
        # the same key again N+1 days later and unbooked: missing, not a duplicate
        original = self.add("DD", day=self._day(0, PERIOD_DAYS - 2 - n))
        self.copy(original, n + 1, booked=False, role="missing")
        # a fee of exactly the threshold belongs to the large-fee account
        self.add(FEE_TYPE, currency=memo.base, amount=-memo.fee_threshold)

    def _amendment_traps(self) -> None:
        """Bookings at the superseded rate are wrong; a difference allowed by the superseded
        tolerance but not by the amended one is a discrepancy."""
        rng, memo = self.rng, self.memo
        (rate_fix, tol_fix) = self.amendments
        old_rate = self.table.rates[rate_fix.currency]
        spec = self.add("TRF", currency=rate_fix.currency, role="amount")
        while abs(convert(spec.amount, old_rate) - self.conv(spec)) <= memo.tolerances[spec.currency] + CENT:
            spec.amount *= 3
        spec.booked_amount = convert(spec.amount, old_rate)
        old_tol, new_tol = self.table.tolerances[tol_fix.currency], tol_fix.value
        spec = self.add("RCV", currency=tol_fix.currency, role="amount")
        spec.booked_amount = self.conv(spec) + rng.choice([-1, 1]) * (
            new_tol + CENT * rng.randint(1, int((old_tol - new_tol) / CENT))
        )
        spec = self.add("TRF", currency=rate_fix.currency)  # correctly booked at the amended rate
        spec.booked_amount = self.conv(spec)

    # ----------------------------------------------------------------- ledger and answer

    def finish(self) -> Instance:
        rng, memo = self.rng, self.memo
        order = sorted(self.specs, key=lambda s: (s.day, s.seq))
        number = rng.randint(200000, 700000)
        used: set[int] = set()
        for spec in order:
            number += rng.randint(1, 9)
            used.add(number)
            spec.id = f"B-{number:06d}"
        bank = [BankLine(s.id, s.day, s.type, s.counterparty, s.currency, s.amount, s.details) for s in order]

        entries: list[tuple[date, int, str, str, str, Decimal, str]] = []  # day, seq, account, ref, cp, amount, text
        corrections: dict[str, Decimal] = {}
        kinds: dict[str, str] = {}
        pending_ids: dict[int, _Spec] = {}
        for spec in order:
            conv = self.conv(spec)
            if not spec.booked:
                corrections[spec.id] = conv if spec.role == "missing" else Decimal(0)
                kinds[spec.id] = spec.role
                continue
            if spec.booked_amount is None:
                tol = memo.tolerances[spec.currency]
                spread = int(tol / CENT)
                delta = CENT * rng.randint(-spread, spread) if spread and rng.random() < 0.5 else Decimal(0)
                spec.booked_amount = conv + delta
            if spec.account is None:
                spec.account = memo.fee_account(conv) if spec.type == FEE_TYPE else self.profiles[spec.counterparty][2]
            seq = len(entries)
            entries.append(
                (
                    spec.day + timedelta(days=rng.randint(0, 3)),
                    seq,
                    spec.account,
                    spec.id,
                    spec.counterparty,
                    spec.booked_amount,
                    self._text(spec.type, spec.counterparty, spec.day),
                )
            )
            pending_ids[seq] = spec
        unsupported: list[int] = []
        gaps = [k for k in range(min(used), max(used)) if k not in used]
        for _ in range(self.level.unsupported):
            kind = rng.choice(("TRF", "CARD", "DD"))
            cp = rng.choice(list(self.profiles))
            ref = NO_REF if rng.random() < 0.4 or not gaps else f"B-{rng.choice(gaps):06d}"
            amount = Decimal(rng.uniform(40, 4000)).quantize(CENT) * _TYPES[kind][2]
            unsupported.append(len(entries))
            entries.append(
                (
                    self._day(),
                    len(entries),
                    rng.choice(_TYPES[kind][3]),
                    ref,
                    cp,
                    amount,
                    self._text(kind, cp, self.start),
                )
            )

        entries.sort(key=lambda e: (e[0], e[1]))
        number = rng.randint(10000, 60000)
        ledger: list[LedgerLine] = []
        for day, seq, account, ref, cp, amount, text in entries:
            number += rng.randint(1, 3)
            line = LedgerLine(f"L-{number:05d}", day, account, ref, cp, amount, text)
            ledger.append(line)
            if seq in unsupported:
                corrections[line.id], kinds[line.id] = -amount, "unsupported"
            elif pending_ids[seq].role in ("amount", "fee_account"):
                spec = pending_ids[seq]
                corrections[line.id] = self.conv(spec) - amount if spec.role == "amount" else Decimal(0)
                kinds[line.id] = spec.role
        if sum(corrections.values(), Decimal(0)) == 0:  # keep the do-nothing balance wrong
            i = next(i for i, e in enumerate(ledger) if kinds.get(e.id) == "unsupported")
            e = ledger[i]
            ledger[i] = LedgerLine(e.id, e.day, e.account, e.bank_ref, e.counterparty, e.amount - 1, e.text)
            corrections[e.id] = -ledger[i].amount
        opening = Decimal(rng.uniform(20000, 900000)).quantize(CENT)
        book = opening + sum((e.amount for e in ledger), Decimal(0))
        page_size = max(6, min(BASE_PAGE_SIZE, round(BASE_PAGE_SIZE * math.sqrt(self.scale))))
        return Instance(
            statement=self._statement(len(bank), len(ledger), page_size),
            memo=memo,
            bank=bank,
            ledger=ledger,
            book_balance=book,
            corrections=corrections,
            bank_pages=self._bank_pages(bank, page_size),
            ledger_pages=self._ledger_pages(ledger, book, page_size),
            kinds=kinds,
        )

    def _text(self, kind: str, cp: str, day: date) -> str:
        template = pools.LEDGER_TEXT_TEMPLATES[self.split][_TEXT_INDEX[kind]]
        return template.format(inv=self.rng.randint(10000, 99999), cp=cp.split()[0], mon=day.strftime("%b"))

    def _bank_pages(self, bank: list[BankLine], size: int) -> list[str]:
        chunks = [bank[i : i + size] for i in range(0, len(bank), size)]
        title = f"{BANK_TITLE} - {self.bank_name} - account {self.account_no} - {self.company}"
        pages = []
        for i, chunk in enumerate(chunks, start=1):
            first = (i - 1) * size + 1
            lines = [
                f"{title} - page {i} of {len(chunks)}",
                f"Statement period {self.start} to {self.end}; lines {first}-{first + len(chunk) - 1} of "
                f"{len(bank)}; amounts in the transaction currency (CCY), debits negative.",
                BANK_COLUMNS,
                *(b.render() for b in chunk),
                f"-- end of statement page {i} of {len(chunks)} --",
            ]
            pages.append("\n".join(lines))
        return pages

    def _ledger_pages(self, ledger: list[LedgerLine], book: Decimal, size: int) -> list[str]:
        base = self.memo.base
        chunks = [ledger[i : i + size] for i in range(0, len(ledger), size)]
        title = f"{LEDGER_TITLE} - account {CASH_ACCOUNT} {self.bank_name} - {self.company} - amounts in {base}"
        pages = []
        for i, chunk in enumerate(chunks, start=1):
            lines = [
                f"{title} - page {i} of {len(chunks)}",
                f"{BOOK_BALANCE_LABEL} {money(book)} {base}",
                ledger_columns(base),
                *(e.render() for e in chunk),
                f"-- end of ledger page {i} of {len(chunks)} --",
            ]
            pages.append("\n".join(lines))
        return pages

    def _statement(self, n_bank: int, n_ledger: int, size: int) -> str:
        filler = self.rng.sample(pools.MEMO_FILLER[self.split], 4)
        memo_text, amendments = render_memo(self.table, self.amendments, filler[:3])
        parts = [
            f"Reconcile the {self.bank_name} account {self.account_no} of {self.company} for "
            f"{self.start} to {self.end} against its general ledger account {CASH_ACCOUNT}.",
            f"The bank statement has {math.ceil(n_bank / size)} pages (bank_records) and the ledger has "
            f"{math.ceil(n_ledger / size)} pages (ledger_records).",
            "",
            memo_text,
            "",
            "Apply the reconciliation rules from your instructions with this memo's values, then submit "
            "the discrepancy ids and the corrected book balance.",
        ]
        if amendments:
            parts += ["", "Late note from treasury (received after the memo above):", filler[3], amendments]
        return "\n".join(parts)


def generate(rng: random.Random, split: str, difficulty: Difficulty) -> Instance:
    """One instance for `split` at `difficulty`; deterministic in `rng`'s state."""
    builder = _Builder(rng, split, difficulty)
    builder.setup()
    builder.build_lines()
    return builder.finish()
