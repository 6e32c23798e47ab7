"""The ledger task family: bank reconciliation under a once-shown policy memo.

`family` holds the task and its checker, `generator` the seeded instances, `model` the record
and memo formats and the rules, `oracle` the context-bound solver and its targeted compaction,
`pools` the split-partitioned names and wording.
"""

from rl_compaction_envs.ledger.family import INSTRUCTIONS, TOOLS, LedgerFamily, LedgerTask, parse_answer
from rl_compaction_envs.ledger.oracle import LedgerOracle, read_state

__all__ = ["INSTRUCTIONS", "TOOLS", "LedgerFamily", "LedgerOracle", "LedgerTask", "parse_answer", "read_state"]
