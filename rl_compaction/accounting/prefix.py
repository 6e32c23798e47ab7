"""Prefix arithmetic: the reusable prefix of two inputs, Cache Cost, Compaction Cost, and the hashed
index of earlier requests that finds the longest prefix a new request shares with any of them."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

TokenIds = Sequence[int]


def _as_list(ids: Any) -> list[int]:
    if isinstance(ids, list):
        return ids
    if hasattr(ids, "tolist"):  # numpy arrays and torch tensors
        return ids.tolist()
    return list(ids)


def reusable_prefix(a: TokenIds, b: TokenIds) -> int:
    """Length of the longest common initial token sequence of `a` and `b` (see `_common_prefix`)."""
    return _common_prefix(_as_list(a), _as_list(b))


def _common_prefix(a: Sequence[Any], b: Sequence[Any]) -> int:
    """Length of the common start of two lists or two strings.

    Compares slices in C: one comparison settles the common case (one sequence extends the
    other). Otherwise windows that double in size from the start find the first difference and
    a bisection inside the last window pins it, so the work after that first comparison grows
    with the common prefix, not with the sequences' length (an edit near the start of a long
    context is found at once)."""
    if len(a) > len(b):
        a, b = b, a
    n = len(a)
    if a == b[:n]:
        return n
    lo, width = 0, 256  # a[:lo] == b[:lo]; the first difference is at an index in [lo, n)
    while True:
        hi = min(n, lo + width)
        if a[lo:hi] != b[lo:hi]:
            break
        lo, width = hi, width * 2
    while hi - lo > 1:  # the first difference is at an index in [lo, hi)
        mid = (lo + hi) // 2
        if a[lo:mid] == b[lo:mid]:
            lo = mid
        else:
            hi = mid
    return lo


def cache_cost(old_ids: TokenIds, new_ids: TokenIds) -> int:
    """Tokens of the new input that the old input's cache cannot serve."""
    return len(new_ids) - reusable_prefix(old_ids, new_ids)


def compaction_cost(evolve_call_tokens: int, cache_cost: int, output_weight: float) -> float:
    """Compaction Cost in input-token equivalents: writing the edit plus re-reading what it broke."""
    if evolve_call_tokens < 0 or cache_cost < 0:
        raise ValueError(
            f"token counts must be >= 0, got evolve_call_tokens={evolve_call_tokens}, cache_cost={cache_cost}"
        )
    if not output_weight >= 0:
        raise ValueError(f"output_weight must be >= 0, got {output_weight}")
    return evolve_call_tokens * output_weight + cache_cost


class PrefixIndex:
    """Earlier token sequences ("branches") and the longest prefix a new one shares with any.

    A sequence that extends a branch replaces it, so no branch is a prefix of another: an
    append-only episode keeps one branch and each edit adds one. Each branch is hashed in
    blocks of `GRAIN` tokens as a hash chain (as vLLM's prefix cache does); a lookup finds
    the last chain hash it shares with any branch, confirms the match by comparison and
    compares the rest within one block, so results are exact even under hash collisions.
    Chain hashes are reused from the previous sequence up to their common prefix, so a
    lookup hashes only new tokens."""

    GRAIN = 64

    def __init__(self) -> None:
        self._seqs: dict[int, list[int]] = {}
        self._chains: dict[int, list[int]] = {}
        self._by_hash: dict[int, set[int]] = {}
        self._next_id = 0
        self._last: int | None = None

    def __len__(self) -> int:
        return len(self._seqs)

    @staticmethod
    def _block_hash(previous: int, block: list[int]) -> int:
        """Chain hash of one block: depends on the block and on every block before it."""
        return hash((previous, *block))

    def _chain(self, seq: list[int]) -> tuple[list[int], int]:
        """Chain hashes of seq's full blocks, and how many leading blocks are known (by
        comparison) to equal the last branch's."""
        g = self.GRAIN
        chain: list[int] = []
        if self._last is not None:
            chain = self._chains[self._last][: reusable_prefix(self._seqs[self._last], seq) // g]
        verified = len(chain)
        h = chain[-1] if chain else 0
        for start in range(len(chain) * g, len(seq) - g + 1, g):
            h = self._block_hash(h, seq[start : start + g])
            chain.append(h)
        return chain, verified

    def _match(self, seq: list[int], chain: list[int], verified: int) -> tuple[int, int | None]:
        """(longest shared prefix, id of a branch that is a prefix of seq or None)."""
        k = 0
        while k < len(chain) and chain[k] in self._by_hash:
            k += 1
        base = k * self.GRAIN
        candidates = self._by_hash[chain[k - 1]] if k else self._seqs.keys()
        best, prefix_of = 0, None
        for b in candidates:
            s = self._seqs[b]
            # A hash match is confirmed by comparison (the last branch's was compared in _chain).
            if k and not (b == self._last and k <= verified) and s[:base] != seq[:base]:
                return self._brute_force(seq)  # a hash collision: not seen in practice, still exact
            n = base + reusable_prefix(s[base : base + self.GRAIN], seq[base : base + self.GRAIN])
            best = max(best, n)
            if n == len(s):
                prefix_of = b
        return best, prefix_of

    def _brute_force(self, seq: list[int]) -> tuple[int, int | None]:
        best, prefix_of = 0, None
        for b, s in self._seqs.items():
            n = reusable_prefix(s, seq)
            best = max(best, n)
            if n == len(s):
                prefix_of = b
        return best, prefix_of

    def longest(self, seq: TokenIds) -> int:
        """Longest prefix `seq` shares with any branch."""
        seq = _as_list(seq)
        return self._match(seq, *self._chain(seq))[0]

    def extend(self, seq: TokenIds, *, copy: bool = True) -> int:
        """Longest prefix `seq` shares with any branch; then `seq` is recorded as a branch
        (`copy=False`: the caller hands the list over and will not change it)."""
        seq = list(seq) if copy or not isinstance(seq, list) else seq
        chain, verified = self._chain(seq)
        best, prefix_of = self._match(seq, chain, verified)
        if best == len(seq):
            return best  # already covered by a branch
        if prefix_of is None:
            bid, known = self._next_id, 0
            self._next_id += 1
        else:  # seq extends that branch: it takes the branch's place and keeps its hashes
            bid, known = prefix_of, len(self._chains[prefix_of])
        self._seqs[bid], self._chains[bid] = seq, chain
        for h in chain[known:]:
            self._by_hash.setdefault(h, set()).add(bid)
        self._last = bid
        return best
