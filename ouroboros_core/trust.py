"""How far one request's drafts of a kind stood: the trust that context lookup, stored walks and
pool phrases end their branches by."""

from __future__ import annotations

from .fitted import TRUST_PRIOR


class LookupTrust:
    """How far one request's drafts of a kind have stood, by row (a copy's row: how many tokens it
    matched): at each depth, how many the target reached there and how many of those tokens it kept.

    A copy after one matching token is rarely right for long; after four, it often runs to the end
    (docs/BENCHMARKS.md, "Sampled: rows where they stand"). Each request learns its own rates,
    starting from the prior fitted.TRUST_PRIOR until the verdicts say otherwise. The last row holds
    every copy that matched `longest` tokens or more, so a proposer keyed on longer matches (stored
    walks) shares it rather than needing a row of its own.
    """

    def __init__(self, longest: int, length: int):
        self.kept = [[0] * length for _ in range(longest + 1)]
        self.reached = [[0] * length for _ in range(longest + 1)]

    def length(self, matched: int, reach: float, most: int, above: float) -> int:
        """How many of a copy's tokens have a chance above `above` of standing, where the copy is
        reached with chance `reach` (at most `most`)."""
        row = self.row(matched)
        chance, kept, reached = reach, self.kept[row], self.reached[row]
        for depth in range(most):
            chance *= (kept[depth] + TRUST_PRIOR[0]) / (reached[depth] + TRUST_PRIOR[1])
            if chance <= above:
                return depth
        return most

    def observe(self, matched: int, length: int, accepted: int) -> None:
        """A copy of `length` tokens was reached and its first `accepted` tokens stood."""
        row = self.row(matched)
        for depth in range(min(accepted + 1, length)):
            self.reached[row][depth] += 1
            self.kept[row][depth] += depth < accepted

    def row(self, matched: int) -> int:
        """The row of a copy that matched `matched` tokens: that length, or the longest row."""
        if matched < 0:
            raise ValueError(f"a copy matched {matched} tokens: a match is 0 tokens or more")
        return min(matched, len(self.kept) - 1)
