"""Split-partitioned pools of names and wording for the ledger family.

Every entity name (counterparties, the reconciled company, the bank) starts with a letter
that belongs to exactly one split, and every wording template (bank details, ledger texts,
memo filler) is listed under one split only, so a test instance never reuses a name or a
phrasing seen in training. Tests check the pools' disjointness directly.
"""

from __future__ import annotations

from itertools import product

from rl_compaction.harness.tasks import SPLITS

_INITIALS = {"train": "BDFGK", "validation": "LMNP", "test": "RSTVZ"}
_VOWELS = ("a", "e", "i", "o", "u")
_CODAS = ("r", "l", "n", "v", "s", "rk", "nd", "lt")
_ENDINGS = ("a", "en", "ia", "or", "ik", "ex", "um", "ova")
_SECTORS = (
    "Freight",
    "Logistics",
    "Metals",
    "Foods",
    "Textiles",
    "Energy",
    "Software",
    "Plastics",
    "Paper",
    "Print",
    "Optics",
    "Tooling",
    "Pharma",
    "Marine",
    "Timber",
    "Glass",
)
_LEGAL = ("AB", "GmbH", "Ltd", "SA", "Oy", "BV", "AS", "Srl")
_BANK_WORDS = ("Handelsbank", "Sparbank", "Kreditbank", "Bank", "Landesbank")
_COMPANY_WORDS = ("Holding", "Group", "Industries", "Trading")


def _stems(split: str) -> tuple[str, ...]:
    """Name stems like 'Velmora' whose initial is unique to `split`."""
    return tuple(
        (i + v + c + e).capitalize() for i, v, c, e in product(_INITIALS[split].lower(), _VOWELS, _CODAS, _ENDINGS)
    )


def _names(split: str, words: tuple[str, ...], legal: tuple[str, ...], count: int) -> tuple[str, ...]:
    stems = _stems(split)
    out = []
    for k in range(count):
        # Step through stems with a stride coprime to their count, so consecutive names differ.
        stem = stems[(k * 37) % len(stems)]
        word = words[k % len(words)]
        suffix = f" {legal[(k // len(words)) % len(legal)]}" if legal else ""
        out.append(f"{stem} {word}{suffix}")
    return tuple(dict.fromkeys(out))


#: counterparties (suppliers, customers, landlords, ...), at most 30 characters each.
COUNTERPARTY_POOLS: dict[str, tuple[str, ...]] = {s: _names(s, _SECTORS, _LEGAL, 600) for s in SPLITS}
#: banks holding the reconciled account.
BANK_POOLS: dict[str, tuple[str, ...]] = {s: _names(s, _BANK_WORDS, (), 60) for s in SPLITS}
#: the companies whose books are reconciled.
COMPANY_POOLS: dict[str, tuple[str, ...]] = {s: _names(s, _COMPANY_WORDS, _LEGAL, 120) for s in SPLITS}

#: bank statement DETAILS column; fields: inv (invoice no.), ref (reference code), mon (month name).
DETAIL_TEMPLATES: dict[str, tuple[str, ...]] = {
    "train": (
        "SEPA CT/INV {inv}/EREF {ref} remittance advice attached",
        "INV {inv} settlement {mon}, EREF {ref}, batch {batch}",
        "payment order {ref}, invoice {inv} and credit note {cn}",
        "card txn auth {ref} terminal {batch} merchant copy",
        "direct debit mandate {ref} period {mon} collection {batch}",
        "account maintenance {mon} pkg {batch} ref {ref}",
    ),
    "validation": (
        "wire {ref} re bill {inv}, value date shifted, seq {batch}",
        "customer remittance for bill {inv} ({mon}) trace {ref}",
        "outgoing wire {ref}; supplier bill {inv}; fx desk {batch}",
        "POS purchase code {ref} till {batch}",
        "standing order {ref} instalment {mon}",
        "service charge {mon} tariff {batch} code {ref}",
    ),
    "test": (
        "transfer id {ref} covering statement {inv} of {mon}",
        "incoming funds ref {ref}, their doc {inv}, lot {batch}",
        "bulk payment run {batch} item {ref} doc {inv}",
        "debit card purchase {ref} outlet {batch}",
        "recurring collection {ref} for {mon}",
        "fee schedule {batch} {mon} reference {ref}",
    ),
}
#: ledger TEXT column; fields: inv, mon, cp (a short counterparty tag).
LEDGER_TEXT_TEMPLATES: dict[str, tuple[str, ...]] = {
    "train": (
        "Purchase invoice {inv} {cp} {mon}",
        "Customer receipt inv {inv} {cp}",
        "Card expense {cp} {mon} receipt {inv}",
        "DD {cp} {mon}",
        "Bank charges {mon}",
    ),
    "validation": (
        "Supplier bill {inv} paid, {cp}, {mon}",
        "Receipt from {cp} for bill {inv}",
        "Card spend at {cp} slip {inv}",
        "Standing order {cp} {mon}",
        "Service charges {mon}",
    ),
    "test": (
        "Settlement of statement {inv} to {cp} ({mon})",
        "Funds received {cp} doc {inv}",
        "Debit card {cp} voucher {inv}",
        "Recurring collection {cp} {mon}",
        "Fee schedule charges {mon}",
    ),
}
#: sentences between the memo's rules; they carry no facts the task needs.
MEMO_FILLER: dict[str, tuple[str, ...]] = {
    "train": (
        "Treasury closes the period on the fifth working day; late adjustments go to the next period.",
        "Questions about this memo go to the group controller, not to the bank.",
        "Rates below are the period's accounting rates and replace any daily rates you may have seen.",
        "The audit committee reviews every reconciling item above the materiality threshold.",
        "Please keep reconciliation working papers for ten years.",
    ),
    "validation": (
        "The finance shared-service centre signs off reconciliations before month-end reporting.",
        "Do not contact counterparties directly about differences; raise them in the workflow tool.",
        "These rates come from the central treasury rate sheet for the period.",
        "Internal audit samples reconciliations each quarter.",
        "Working papers are archived with the period's closing pack.",
    ),
    "test": (
        "The controller's office approves all reconciling entries before posting.",
        "Any query about bank lines is raised with the cash-management team.",
        "The rate sheet below is binding for this reconciliation only.",
        "External auditors may request the reconciliation file at year end.",
        "Closing packs are retained according to the records policy.",
    ),
}
