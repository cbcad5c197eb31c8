"""Drafts copied from text: context lookup (the request's own earlier continuations, and how far
they stood) and the target's stored answers (retrieval, as in REST: He et al. 2023).

A small instruct model writes the same phrases in answer after answer ("Here's a Python function
that", "This function takes ... as input and returns"). A draft folder may carry the target's
answers to its training requests (ANSWERS_FILE, the data its draft learned from); AnswerStore reads
them into n-gram tables, and its `walk` continues a text the way those answers most often went on:
after the text's last 4 tokens where the answers hold them, else its last 3, else 2. StoredLookup
offers that walk as a branch; it costs no forward.
"""

from __future__ import annotations

import json
import math
from bisect import bisect_left
from itertools import chain
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from .config import OuroborosConfig
from .events import Source
from .fitted import STORED_ABOVE
from .proposal import Branches, Copy, LookupTrust, StepContext, StepOutcome

if TYPE_CHECKING:
    from .trunk import Trunk

COPY_RUN = 4  # tokens accepted from a context-lookup branch that switch the drafter to copying
LOOKUP_LONGEST = 4  # context lookup matches up to this many of the text's last tokens


def context_lookup(
    sequence: list[int], length: int, longest: int = LOOKUP_LONGEST, scan: int = 4096
) -> tuple[list[int], int]:
    """Up to `length` tokens that followed an earlier occurrence of the sequence's last tokens
    (prompt lookup, as in Saxena 2023), searched over the last `scan` tokens, and how many tokens
    that occurrence matched; ([], 0) if none.

    The occurrence that matches the most of the sequence's tail (one token at least, `longest` at
    most) wins: after `return self.` the tokens that followed `self.` anywhere are a weaker guess
    than those that followed `return self.`. Among equal matches, the latest with `length` tokens
    after it, else the one with the most: in text that repeats with a short period, the latest
    occurrence sits just before the end and has little after it.
    """
    end = len(sequence)
    last = sequence[-1] if sequence else None
    best = (0, 0, 0)  # (tokens matched, continuation length, start)
    for start in range(end - 1, max(1, end - scan) - 1, -1):  # the continuation starts at `start`
        if sequence[start - 1] != last:
            continue
        matched = 1
        while (
            matched < longest
            and matched < start
            and sequence[start - 1 - matched] == sequence[end - 1 - matched]
        ):
            matched += 1
        have = min(length, end - start)
        if (matched, have) > best[:2]:
            best = (matched, have, start)
            if matched == longest and have == length:
                break
    return sequence[best[2] : best[2] + best[1]], best[0]


class ContextLookup:
    """Proposes a copy of what followed the text's last tokens before, hung where it parts from the
    draft's trunk, so the target can walk it past a rejected draft token.

    Sampled, the copy ends where its chance of standing falls to `lookup_above`: how far this
    request's copies stood (LookupTrust, by matched length) times the chance that the target reaches
    it. Greedy copies keep their L tokens: the draft's probabilities are no such chances there.
    Learns from the verdict how far the copy stood, and whether the text repeats itself: after a
    copy that ran COPY_RUN tokens or more, `repeating` asks the drafter to copy without drafting;
    after a copy that stood whole, the next may be twice as long, up to `lookup_grow` (a text that
    loops: docs/BENCHMARKS.md, "The preset's settings").

    Example, greedy, L = 4: committed [1, 2, 5, 9, 10, 11, 3, 1, 2] (the text's last [1, 2] was
    followed by 5, 9, 10, 11) and the trunk [5, 6]: the copy [5, 9, 10, 11] shares the trunk's 5, so
    the branch [9, 10, 11] hangs after one trunk token.
    """

    name = "lookup"

    def __init__(
        self, config: OuroborosConfig, trims: bool, length: int | None = None, above: float = 0.0
    ):
        self.config = config
        self.trims = trims  # sampled and lookup_above > 0: copies end where they rarely stand
        self.length = config.lookup if length is None else length  # L: the copy's most tokens
        # trimmed: a token's least chance of standing
        self.above = max(config.lookup_above, above)
        # the most a copy grows to; a subclass that gives its own length (StoredLookup) never grows
        self.most = max(self.length, config.lookup_grow if length is None else 0)
        self.trust = LookupTrust(LOOKUP_LONGEST, max(self.most, 1))
        self.repeating = False  # the latest copy ran long: the text repeats, let lookup lead
        self.grown = self.length  # this step's copy length: L, doubled while whole copies stand

    def find(self, committed: list[int], length: int) -> tuple[list[int], int]:
        """Up to `length` tokens to propose, and how many of the text's last tokens they follow."""
        return context_lookup(committed, length)

    def propose(self, step: StepContext) -> Branches:
        """A copy hung on the step's trunk where it parts from it."""
        committed, limit, trunk, cfg = step.committed, step.limit, step.trunk, self.config
        if not (self.length and cfg.prompt_lookup and limit > 0):
            return Branches(self.name)
        # Found is at most `limit` long, so it fits after the part it shares with the trunk.
        found, matched = self.find(committed, min(self.grown, limit))
        common = 0
        while common < min(len(found), len(trunk.tokens)) and found[common] == trunk.tokens[common]:
            common += 1
        if self.trims and len(found) > common:
            found = found[: common + self._trusted(found, matched, common, trunk)]
        if len(found) <= common:
            return Branches(self.name)
        return Branches(
            self.name,
            [found[common:]],
            [Source.PROMPT],
            [common],
            Copy(matched, common, len(found) - common),
        )

    def _trusted(self, found: list[int], matched: int, common: int, trunk: Trunk) -> int:
        """How many of the copy's tokens past the trunk's first `common` stand a fair chance."""
        # The copy is walked where the trunk's first `common` tokens stand and the next does not;
        # one that parts from the trunk on a token outside the draft's best keyed guesses there
        # almost never is (docs/BENCHMARKS.md, "Sampled: rows left out").
        parts = common < len(trunk.tokens)
        reach = math.prod(trunk.accept_chances[:common]) * (
            1.0 - trunk.accept_chances[common] if parts else 1.0
        )
        if parts and found[common] not in trunk.choices.get(common, (found[common],)):
            reach = 0.0
        return self.trust.length(matched, reach, len(found) - common, self.above)

    def observe(self, outcome: StepOutcome) -> None:
        proposal, verdict = outcome.proposal, outcome.verdict
        walked = proposal.walked(self.name, verdict.branch)
        self.repeating = walked and verdict.branch_accepted >= COPY_RUN
        copy = proposal.notes.get(self.name)
        whole = walked and copy is not None and verdict.branch_accepted == copy.length
        self.grown = min(2 * self.grown, self.most) if whole else self.length
        if copy is not None and verdict.trunk_accepted == copy.hangs:  # the target reached the copy
            self.trust.observe(copy.matched, copy.length, verdict.branch_accepted if walked else 0)


class StoredLookup(ContextLookup):
    """Proposes what the target's stored answers most often wrote after the text's last tokens
    (AnswerStore), as one more branch hung where it parts from the draft's trunk, like a
    context copy. Up to `stored_answers` tokens, greedy or sampled ended where a token's chance of
    standing falls to STORED_ABOVE (how far this request's stored walks stood, by how many tokens
    keyed them, times the chance that the target reaches the branch): most of such a walk is a
    guess, and each row costs the target's forward. Only the context copy's `repeating` stops the
    drafter drafting (drafters.Ouroboros reads no other)."""

    name = "answers"

    def __init__(self, config: OuroborosConfig, store):
        super().__init__(config, trims=True, length=config.stored_answers, above=STORED_ABOVE)
        self.store = store

    def find(self, committed: list[int], length: int) -> tuple[list[int], int]:
        return self.store.walk(committed, length)


# --- the target's stored answers ---

ANSWERS_FILE = "answers.json"  # in a draft's folder: {"about": ..., "answers": [[token ids]]}
ORDERS = (4, 3, 2)  # the text's last tokens a continuation is keyed on, longest first


class AnswerStore:
    """Per order n, the token that most often followed each run of n tokens in the answers."""

    def __init__(self, answers: list[list[int]]):
        lengths = np.fromiter(map(len, answers), np.int64, len(answers))
        self.answers, self.tokens = len(answers), int(lengths.sum())
        tokens = np.fromiter(chain.from_iterable(answers), np.int64, self.tokens)
        ends = np.repeat(np.cumsum(lengths), lengths)  # where each token's answer ends
        self.next = {n: Continuations(tokens, ends, n) for n in ORDERS}

    def walk(self, sequence: list[int], length: int) -> tuple[list[int], int]:
        """Up to `length` tokens after `sequence`, each the one the answers most often wrote after
        the longest run of the tokens before it that they hold; and how many tokens keyed the first
        one (0: none found)."""
        tail = list(sequence[-ORDERS[0] :])
        walked, matched = [], 0
        while len(walked) < length:
            for n in ORDERS:
                token = self.next[n].get(tail[-n:]) if len(tail) >= n else None
                if token is not None:
                    break
            else:
                break
            matched = matched or n
            walked.append(token)
            tail = tail[1:] + [token]
        return walked, matched


class Continuations:
    """Each run of n tokens in the answers -> the token that most often followed it; a tie goes to
    the (run, token) pair seen first.

    Held in sorted arrays, a trie by levels: level j numbers the distinct runs of the answers'
    first j + 1 tokens of a window, keyed by the number of their first j times the vocabulary plus
    their last. Built on whole numbers with no Python object per run: a million answer tokens load
    in a fraction of a second (dictionaries of tuples took seconds at every start)."""

    def __init__(self, tokens: np.ndarray, ends: np.ndarray, n: int):
        """tokens: the answers one after another; ends: where each token's answer ends."""
        starts = np.flatnonzero(np.arange(len(tokens)) + n < ends)  # windows within one answer
        rows = tokens[starts[:, None] + np.arange(n + 1)]  # (run..., next token), in the order seen
        self.vocab = int(rows.max(initial=-1)) + 1
        # read through memoryviews: a bisection over one yields Python ints, some times faster for
        # the decode loop's lookups than numpy's searchsorted and scalars
        self.levels: list[memoryview] = []
        key, run = rows[:, 0], np.zeros(0, np.int64)
        for column in range(1, n + 1):
            distinct, run = np.unique(key, return_inverse=True)
            self.levels.append(memoryview(distinct))
            key = run.ravel() * self.vocab + rows[:, column]  # never past rows * vocabulary
        _, first, counts = np.unique(key, return_index=True, return_counts=True)
        pair_run = run.ravel()[first]
        order = np.lexsort((first, -counts, pair_run))  # by run, then most counted, then seen first
        # every run was followed by a token: one kept per run, in the order of their numbers
        kept = order[np.r_[True, pair_run[order][1:] != pair_run[order][:-1]][: len(order)]]
        self.best = memoryview(rows[first[kept], n])

    def get(self, run: list[int]) -> int | None:
        """The token that most often followed `run` (n tokens), None where the answers never hold
        it."""
        number = 0
        for level, token in zip(self.levels, run):
            if not 0 <= token < self.vocab:
                return None
            key = number * self.vocab + token
            number = bisect_left(level, key)
            if number == len(level) or level[number] != key:
                return None
        return self.best[number]


def read_store(path: Path, vocab_size: int) -> AnswerStore:
    """A folder's ANSWERS_FILE as a store; LoadError where it is not a list of token-id lists."""
    from .load_report import LoadError

    try:
        answers = json.loads(path.read_text())["answers"]
    except (OSError, ValueError, KeyError, TypeError) as err:
        raise LoadError(f"{path}: not a JSON object with a list of answers ({err})") from err
    if (
        not isinstance(answers, list)
        or not all(type(answer) is list for answer in answers)
        or not set(map(type, chain.from_iterable(answers))) <= {int}
        or not all(
            0 <= min(answer, default=0) and max(answer, default=0) < vocab_size
            for answer in answers
        )
    ):
        raise LoadError(f"{path}: answers must be lists of token ids from 0 to {vocab_size - 1}")
    return AnswerStore(answers)
