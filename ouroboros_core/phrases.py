"""The phrase pool (PhrasePool: key token -> up to G phrases, most recent first, with a global
bound), pool phrases as branches after the trunk, and what fills the pool: the draft's lookahead
window, the target's verdicts and the text so far."""

from __future__ import annotations

import math
import random
from collections import OrderedDict

from .config import OuroborosConfig
from .events import Source
from .proposal import Branches, LookupTrust, Offered, StepContext, StepOutcome

Phrase = tuple[int, ...]


class PhrasePool:
    """Phrases that followed a key token somewhere: in the draft's lookahead window, a target
    verdict, the prompt or the text so far. Belongs to one request, or to one visitor's session when
    kept warm."""

    def __init__(self, per_key: int = 8, max_phrases: int = 50_000):
        assert per_key >= 1 and max_phrases >= 1
        self.per_key = per_key
        self.max_phrases = max_phrases
        self._by_key: dict[int, OrderedDict[Phrase, Source]] = {}
        # oldest first, over all keys
        self._age: OrderedDict[tuple[int, Phrase], None] = OrderedDict()

    def __len__(self) -> int:
        return len(self._age)

    def add(self, key: int, phrase: Phrase, source: Source) -> None:
        if not phrase:
            return
        phrases = self._by_key.setdefault(key, OrderedDict())
        if phrase in phrases:
            # A re-inserted phrase moves to the front but keeps the source it was first credited to.
            phrases.move_to_end(phrase)
            self._age.move_to_end((key, phrase))
            return
        phrases[phrase] = source
        self._age[(key, phrase)] = None
        if len(phrases) > self.per_key:
            self._forget(key, next(iter(phrases)))
        if len(self._age) > self.max_phrases:
            self._forget(*next(iter(self._age)))

    def add_ngrams(self, tokens: list[int], n: int, source: Source, start: int = 0) -> None:
        """Pool every phrase of n-1 tokens in `tokens` keyed on the token before it, from index
        `start`."""
        for i in range(start, len(tokens) - n + 1):
            self.add(tokens[i], tuple(tokens[i + 1 : i + n]), source)

    def lookup(self, key: int, k: int) -> list[tuple[Phrase, Source]]:
        """Up to k phrases after `key`, newest first."""
        phrases = self._by_key.get(key)
        if not phrases or k <= 0:
            return []
        out = []
        for phrase in reversed(phrases):
            out.append((phrase, phrases[phrase]))
            if len(out) == k:
                break
        return out

    def _forget(self, key: int, phrase: Phrase) -> None:
        phrases = self._by_key[key]
        del phrases[phrase]
        if not phrases:
            del self._by_key[key]
        del self._age[(key, phrase)]


POOL_PHRASE = 0  # the one row of PoolPhrases' LookupTrust (no match length tells phrases apart)


class Lookahead:
    """The draft's lookahead (Jacobi) window: up to N-1 levels of W guessed tokens. Column i is a
    chain of guesses placed i positions after the draft's last token; each draft forward it rides in
    extends every chain by one token, and a full chain of N tokens enters the pool as (key = its
    first token, phrase = the N-1 after)."""

    def __init__(self, width: int, ngram: int, pool: PhrasePool):
        self.width, self.ngram, self.pool = width, ngram, pool
        self.levels: list[list[int]] = []  # levels[l][i]: column i's l-th guess

    def start(self, prompt_ids: list[int]) -> None:
        if self.width:
            # Seed the chains with prompt tokens (fixed seed: runs must be reproducible).
            rng = random.Random(len(prompt_ids))
            self.levels = [[rng.choice(prompt_ids) for _ in range(self.width)]]

    def columns(self, room: int) -> list[list[int]]:
        """The chains, to ride in the next draft forward; none where `room` positions are too few
        for the furthest (near the end of the context)."""
        depth = len(self.levels)
        if depth == 0 or self.width + depth - 1 > room:
            return []
        return [[level[i] for level in self.levels] for i in range(self.width)]

    def advance(self, newest: list[int]) -> None:
        """The draft's guess after each column's last token: pool the full chains, then extend
        each."""
        if len(self.levels) == self.ngram - 1:
            for i, key in enumerate(self.levels[0]):
                phrase = tuple(level[i] for level in self.levels[1:]) + (newest[i],)
                self.pool.add(key, phrase, Source.POOL)
            self.levels = self.levels[1:]
        self.levels.append(newest)


class PoolPhrases:
    """Proposes the pool's newest phrases keyed on the trunk's last token, hung after the whole
    trunk (up to k, skipping one a branch there already holds); fills the pool from the prompt, the
    target's tokens over a rejected trunk tail (mostly right, if misplaced) and the text as it grows
    (the draft's lookahead window, trunk.DraftTrunk's, fills it too).

    Sampled, a phrase is cut where its chance of standing falls to `lookup_above`: how far this
    request's pool phrases stood (LookupTrust, one row) times the chance that the whole trunk
    stands. The phrases so cut travel in the proposal as this proposer's note, and the verdict
    teaches the trust.
    """

    name = "pool"

    def __init__(self, pool: PhrasePool, config: OuroborosConfig, trims: bool):
        self.pool = pool
        self.config = config
        self.trims = trims  # sampled and lookup_above > 0: phrases end where they rarely stand
        self.trust = LookupTrust(POOL_PHRASE, max(config.lookup, config.ngram))

    def start(self, prompt_ids: list[int]) -> None:
        if self.config.prompt_lookup:
            self.pool.add_ngrams(prompt_ids, self.config.ngram, Source.PROMPT)

    def propose(self, step: StepContext) -> Branches:
        """Phrases after the step's whole trunk, unlike the branches already hung there."""
        cfg, trunk, committed = self.config, step.trunk, step.committed
        limit, taken = step.limit, step.proposal.after_trunk()
        room = limit - len(trunk.tokens)
        if room <= 0 or not cfg.branches:
            return Branches(self.name)
        key = trunk.tokens[-1] if trunk.tokens else committed[-1]
        whole = math.prod(
            trunk.accept_chances
        )  # they hang after the trunk: walked where all of it stands
        phrases, sources = [], []
        # One more candidate per branch already there: a phrase that branch holds is skipped, and
        # the next newest (often from an earlier request of a warm pool) takes its place.
        for phrase, source in self.pool.lookup(key, cfg.branches + len(taken)):
            if len(phrases) == cfg.branches:
                break
            phrase = list(phrase[:room])
            if self.trims:  # as far as this request's pool phrases stood
                trusted = self.trust.length(POOL_PHRASE, whole, len(phrase), cfg.lookup_above)
                phrase = phrase[:trusted]
                if not phrase:
                    break
            if any(b[: len(phrase)] == phrase for b in taken):
                continue
            phrases.append(phrase)
            sources.append(source)
        return Branches(
            self.name,
            phrases,
            sources,
            [len(trunk.tokens)] * len(phrases),
            Offered(list(phrases)) if self.trims else None,
        )

    def observe(self, outcome: StepOutcome) -> None:
        committed, old_length, proposal = outcome.committed, outcome.old_length, outcome.proposal
        n, accepted, trunk_tokens = (
            self.config.ngram,
            outcome.verdict.trunk_accepted,
            outcome.trunk_tokens,
        )
        offered = proposal.notes.get(self.name)
        if offered and accepted == len(proposal.trunk):  # the target reached the pool phrases
            self._learn(offered.phrases, committed[old_length + accepted :], proposal.branches)
        if accepted < len(proposal.trunk):
            key = committed[old_length + accepted - 1]
            self.pool.add(key, tuple(trunk_tokens[accepted : accepted + n - 1]), Source.POOL)
        if self.config.prompt_lookup:
            self.pool.add_ngrams(committed, n, Source.PROMPT, start=max(0, old_length - n + 1))

    def _learn(self, offered: list[list[int]], after: list[int], verified: list[list[int]]) -> None:
        """How far each phrase offered stood against the tokens committed after the trunk."""
        for phrase in offered:
            if phrase not in verified:  # the engine cut the proposal short before this phrase
                continue
            known, kept = min(len(phrase), len(after)), 0
            while kept < known and phrase[kept] == after[kept]:
                kept += 1
            self.trust.observe(POOL_PHRASE, known, kept)
