"""Context lookup: the text's own earlier continuations as drafts, and how far one request's copies stood."""

from __future__ import annotations

COPY_RUN = 4  # tokens accepted from a context-lookup branch that switch the drafter to copying
LOOKUP_LONGEST = 4  # context lookup matches up to this many of the text's last tokens
POOL_PHRASE = 0  # LookupTrust's row for pool phrases (a copy's row is how many tokens it matched, 1 or more)


def context_lookup(sequence: list[int], length: int, longest: int = LOOKUP_LONGEST,
                   scan: int = 4096) -> tuple[list[int], int]:
    """Up to `length` tokens that followed an earlier occurrence of the sequence's last tokens (prompt lookup,
    as in Saxena 2023), searched over the last `scan` tokens, and how many tokens that occurrence matched;
    ([], 0) if none.

    The occurrence that matches the most of the sequence's tail (one token at least, `longest` at most)
    wins: after `return self.` the tokens that followed `self.` anywhere are a weaker guess than those that
    followed `return self.`. Among equal matches, the latest with `length` tokens after it, else the one
    with the most: in text that repeats with a short period, the latest occurrence sits just before the
    end and has little after it.
    """
    end = len(sequence)
    last = sequence[-1] if sequence else None
    best = (0, 0, 0)  # (tokens matched, continuation length, start)
    for start in range(end - 1, max(1, end - scan) - 1, -1):  # the continuation starts at `start`
        if sequence[start - 1] != last:
            continue
        matched = 1
        while matched < longest and matched < start and sequence[start - 1 - matched] == sequence[end - 1 - matched]:
            matched += 1
        have = min(length, end - start)
        if (matched, have) > best[:2]:
            best = (matched, have, start)
            if matched == longest and have == length:
                break
    return sequence[best[2] : best[2] + best[1]], best[0]


class LookupTrust:
    """How far one request's context-lookup copies have stood, by how many tokens they matched: at each depth of
    a copy, how many copies the target reached there and how many of those tokens it kept.

    A copy after one matching token is right a few tokens on at best (embedded pair, HumanEval at T 0.8: of the
    copies reached, 28%, 18%, 9%, 4% kept their first to fourth tokens, 2% the seventh); after four, it often
    runs to the end (58%, 52%, 42%, 30%, ... 14% at the tenth). At T 0.3 and greedy, copies run further. Each
    request learns its own rates, starting from trusting a copy (80% per token) until the verdicts say otherwise.
    Row POOL_PHRASE learns the pool's phrases alike.
    """

    PRIOR = (1.0, 1.25)  # (kept, reached) pseudo-counts at every depth

    def __init__(self, longest: int, length: int):
        self.kept = [[0] * length for _ in range(longest + 1)]
        self.reached = [[0] * length for _ in range(longest + 1)]

    def length(self, matched: int, reach: float, most: int, above: float) -> int:
        """How many of a copy's tokens have a chance above `above` of standing, where the copy is reached with
        chance `reach` (at most `most`)."""
        chance, kept, reached = reach, self.kept[matched], self.reached[matched]
        for depth in range(most):
            chance *= (kept[depth] + self.PRIOR[0]) / (reached[depth] + self.PRIOR[1])
            if chance <= above:
                return depth
        return most

    def observe(self, matched: int, length: int, accepted: int) -> None:
        """A copy of `length` tokens was reached and its first `accepted` tokens stood."""
        for depth in range(min(accepted + 1, length)):
            self.reached[matched][depth] += 1
            self.kept[matched][depth] += depth < accepted
