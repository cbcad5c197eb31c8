"""Who proposes: vanilla (nothing), a draft model token by token, or Ouroboros phrase by phrase.

Each drafter belongs to one request. `propose` drafts after the committed tokens; `observe` learns from
the target's verdict. The decode loop in engine.py is the same for all three.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

import torch

from .cache import new_cache, truncate
from .config import OuroborosConfig, SpeculativeConfig
from .events import Source
from .pool import PhrasePool
from .verify import Sampler, Verdict, draft_guesses, forward_tree, walk_tree


@dataclass
class Proposal:
    trunk: list[int] = field(default_factory=list)
    trunk_sources: list[Source] = field(default_factory=list)
    branches: list[list[int]] = field(default_factory=list)  # each continues the trunk (see branch_attach)
    branch_sources: list[Source] = field(default_factory=list)  # one per branch
    # How many trunk tokens each branch continues after; empty: every branch follows the whole trunk.
    branch_attach: list[int] = field(default_factory=list)


class Vanilla:
    """Proposes nothing: every step is one plain target forward."""

    def start(self, prompt_ids: list[int]) -> None:
        pass

    def propose(self, committed: list[int], limit: int) -> Proposal:
        return Proposal()

    def observe(self, committed: list[int], old_length: int, proposal: Proposal, verdict: Verdict,
                trunk_tokens: list[int]) -> None:
        pass


class DraftRunner:
    """The draft model and its KV cache, kept a prefix of whatever sequence it is asked to extend."""

    def __init__(self, model):
        self.model = model  # a transformers model, or the LeanDecoder that wraps it
        self.cache = new_cache(model)
        self.fed: list[int] = []  # tokens whose keys and values are in the cache
        self.vocab = model.get_input_embeddings().num_embeddings

    def readable(self, tokens) -> bool:
        """Whether the draft has an embedding for every token (a target may pad its vocabulary past it)."""
        return all(token < self.vocab for token in tokens)

    def forward(self, sequence: list[int], branches: list[list[int]] = (), offsets=None) -> torch.Tensor:
        """Logits after `sequence` and at every branch position; the cache keeps `sequence` alone."""
        common = 0
        limit = min(len(self.fed), len(sequence) - 1)  # at least one token must be fed
        while common < limit and self.fed[common] == sequence[common]:
            common += 1
        truncate(self.cache, common)
        logits = forward_tree(self.model, self.cache, sequence[common:], [], list(branches), offsets)
        truncate(self.cache, len(sequence))
        self.fed = list(sequence)
        return logits


class Speculative(Vanilla):
    """Classic speculative decoding: the draft proposes gamma tokens, one forward each."""

    def __init__(self, model, config: SpeculativeConfig, sampler: Sampler | None = None):
        self.runner = DraftRunner(model)
        self.config = config
        self.sampler = sampler or Sampler()  # the target's rule: the draft guesses its token with the same noise

    def propose(self, committed: list[int], limit: int) -> Proposal:
        sequence = list(committed)
        trunk = []
        for _ in range(min(self.config.gamma, limit)):
            logits, sampler = self.runner.forward(sequence)[:1], self.sampler
            if sampler.greedy:
                token = int(logits.argmax())
            else:  # its guess of the target's keyed sample: its own top tokens with the same noise
                token = int(draft_guesses(logits, sampler.temperature, sampler.seed, [len(sequence)])[1][0, 0])
            trunk.append(token)
            sequence.append(token)
        return Proposal(trunk, [Source.DRAFT] * len(trunk))


COPY_RUN = 4  # tokens accepted from a context-lookup branch that switch the drafter to copying


def context_lookup(sequence: list[int], length: int, longest: int = 4, scan: int = 4096) -> list[int]:
    """Up to `length` tokens that followed an earlier occurrence of the sequence's last tokens (prompt lookup,
    as in Saxena 2023), searched over the last `scan` tokens; [] if none.

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
    return sequence[best[2] : best[2] + best[1]]


# The chance that the target's sample is the draft's k-th keyed guess (see verify.draft_guesses): RANK_SHARE *
# softmax(keyed / spread)[k] over the draft's 8 best keyed scores, spread = 0.95 * (0.8 / temperature) ** 0.9 in
# keyed units. Fitted on the embedded pair's distilled draft (12 HumanEval and 12 held-out prompts, 6,144 positions
# at temperatures 0.8 and 0.3; binned calibration error of the first and second guesses): first guess 0.685
# predicted, 0.680 right at 0.8, 0.749 and 0.755 at 0.3; second 0.139 / 0.132 and 0.116 / 0.108.
RANK_SHARE = 0.97
SCORED = 8


def guess_chances(keyed: torch.Tensor, temperature: float) -> torch.Tensor:
    """keyed: one row of the draft's keyed scores, best first -> the chance that each of the best 8 is the
    target's sample (float64, on keyed's device)."""
    spread = 0.95 * (0.8 / temperature) ** 0.9
    return torch.softmax(keyed[:SCORED] / spread, dim=-1) * RANK_SHARE


class Ouroboros(Vanilla):
    """The draft decodes phrase by phrase with a lookahead window and a phrase pool (Zhao et al. 2024).

    Window: up to N-1 levels of W guessed tokens. Column i is a chain of guesses placed i positions after
    the draft's last token; each draft forward extends every chain by one token, and a full chain of N
    tokens enters the pool as (key = its first token, phrase = the N-1 after). The same forward checks
    pool phrases keyed on the draft's last token, so one draft forward can advance by a whole phrase.
    """

    def __init__(self, model, config: OuroborosConfig, pool: PhrasePool, max_positions: int = 1 << 30,
                 sampler: Sampler | None = None):
        self.runner = DraftRunner(model)
        self.config = config
        self.sampler = sampler or Sampler()  # the target's rule: the draft guesses its token with the same noise
        self.pool = pool
        self.max_positions = max_positions  # positions the models take: GPT-2's position table ends there
        self.levels: list[list[int]] = []  # levels[l][i]: column i's l-th guess
        self.looked_up = False  # the latest proposal's first branch came from context lookup
        self.copying = False  # the text is repeating itself: let lookup lead and skip the draft forward
        self.recent_tokens = 3.0  # tokens a step committed lately (a moving average over the verdicts)

    def start(self, prompt_ids: list[int]) -> None:
        if self.config.prompt_lookup:
            self.pool.add_ngrams(prompt_ids, self.config.ngram, Source.PROMPT)
        if self.config.window:
            # Seed the chains with prompt tokens (fixed seed: runs must be reproducible).
            rng = random.Random(len(prompt_ids))
            self.levels = [[rng.choice(prompt_ids) for _ in range(self.config.window)]]

    def propose(self, committed: list[int], limit: int) -> Proposal:
        cfg = self.config
        # What followed the text's last two tokens before (prompt or text so far): cheap, and long.
        found = []
        if cfg.lookup and cfg.prompt_lookup and limit > 0:
            found = context_lookup(committed, min(cfg.lookup, limit))
        trunk, sources, branches, attach = self._chain(committed, limit)
        branch_sources = [Source.DRAFT] * len(branches)
        room = limit - len(trunk)
        # The lookup branch hangs where it parts from the draft's trunk, so the target can walk it
        # past a rejected draft token (found is at most `limit` long, so it fits after the shared part).
        common = 0
        while common < min(len(found), len(trunk)) and found[common] == trunk[common]:
            common += 1
        self.looked_up = len(found) > common
        if self.looked_up:
            branches.insert(0, found[common:])
            branch_sources.insert(0, Source.PROMPT)
            attach.insert(0, common)
        if room > 0 and cfg.branches:
            key = trunk[-1] if trunk else committed[-1]
            after_trunk = [b for b, a in zip(branches, attach) if a == len(trunk)]
            added = 0
            # One more candidate per branch already there: a phrase that branch holds is skipped, and the next
            # newest (often from an earlier request of a warm pool) takes its place.
            for phrase, source in self.pool.lookup(key, cfg.branches + len(after_trunk)):
                if added == cfg.branches:
                    break
                phrase = list(phrase[:room])
                if any(b[: len(phrase)] == phrase for b in after_trunk):
                    continue
                branches.append(phrase)
                branch_sources.append(source)
                attach.append(len(trunk))
                added += 1
        return Proposal(trunk, sources, branches, branch_sources, attach)

    def _chain(self, committed: list[int], limit: int):
        """The draft's trunk, phrase by phrase, and its second choices where it hesitated as one-token branches.
        Returns (trunk, its sources, branches, attach)."""
        cfg = self.config
        sequence = list(committed)
        trunk: list[int] = []
        sources: list[Source] = []
        # At least gamma tokens; then on while the draft is sure of its latest token (where it agrees with the
        # target far more often), up to max_trunk.
        want = 0 if self.copying else min(cfg.gamma, limit)
        most = 0 if self.copying else min(max(cfg.max_trunk, want), limit)
        sure, chance = True, 1.0
        alternatives = []  # (trunk position, the draft's second choice there, its probability)
        while len(trunk) < want or (sure and len(trunk) < most):
            new, new_sources, (first_p, second, second_p) = self._draft_step(sequence)
            alternatives.append((len(trunk) + len(new) - 1, second, second_p))
            trunk += new
            sources += new_sources
            sequence += new
            chance *= first_p  # sampled, each token far less sure: the chance that the whole trunk stands
            # Sampled, a draft forward more pays while the chance that its token stands is a fair share of what
            # a step commits anyway: where steps commit many tokens (low temperatures), each is worth less.
            sure = (first_p > cfg.extend_above if self.sampler.greedy
                    else chance > cfg.extend_chance * self.recent_tokens)
        trunk, sources = trunk[:limit], sources[:limit]
        # Where the draft hesitated, its second choice as a one-token branch in place of its first: the target
        # walks it if it rejects the first and picks the second, in the same forward.
        chosen = [(at, second) for at, second, second_p in alternatives
                  if at < len(trunk) and second_p > cfg.second_above]
        return trunk, sources, [[second] for _, second in chosen], [at for at, _ in chosen]

    def _draft_step(self, sequence: list[int]) -> tuple[list[int], list[Source], tuple[float, int, float]]:
        """One draft forward: the next token, or a verified pool phrase plus the token after it; and at that
        last token, the draft's probability for it, its second choice and that one's probability."""
        cfg = self.config
        candidates = [(phrase, source) for phrase, source in self.pool.lookup(sequence[-1], cfg.draft_candidates)
                      if self.runner.readable(phrase)]  # the pool also holds the target's tokens
        depth = len(self.levels)
        # Column i sits i positions further on; near the end of the context, leave the window out.
        room = self.max_positions - len(sequence)
        fits = depth > 0 and cfg.window + depth - 1 <= room
        columns = [[level[i] for level in self.levels] for i in range(cfg.window)] if fits else []
        phrases = [list(phrase[:room]) for phrase, _ in candidates]
        offsets = list(range(len(columns))) + [0] * len(phrases)
        logits = self.runner.forward(sequence, columns + phrases, offsets)
        sampler = self.sampler
        if sampler.greedy:
            guesses = logits.argmax(dim=-1).tolist()
        else:  # its guess of the target's keyed sample: its own top tokens with the same noise
            # The sequence position each row's token is for: column i's l-th guess sits i + l after the sequence.
            at = len(sequence)
            positions = ([at] + [at + i + level + 1 for i in range(len(columns)) for level in range(depth)]
                         + [at + j + 1 for phrase in phrases for j in range(len(phrase))])
            keyed, ids = draft_guesses(logits, sampler.temperature, sampler.seed, positions)
            guesses = ids[:, 0].tolist()
        window_out = guesses[1 : 1 + depth * len(columns)]
        phrase_out, rows, start = [], [], 1 + depth * len(columns)
        for phrase in phrases:
            rows.append(start)  # the logits row after the phrase's first token
            phrase_out.append(guesses[start : start + len(phrase)])
            start += len(phrase)
        verdict = walk_tree([], phrases, [guesses[0]], phrase_out)
        if columns:
            self._advance_window([window_out[i * depth + depth - 1] for i in range(len(columns))])
        matched, source, row = [], Source.DRAFT, 0
        if verdict.branch is not None:
            matched = phrases[verdict.branch][: verdict.branch_accepted]
            source = candidates[verdict.branch][1]
            row = rows[verdict.branch] + verdict.branch_accepted - 1
        choices = self._choices(logits[row]) if sampler.greedy else self._choices(keyed[row], ids[row, 1])
        return matched + [verdict.next_token], [source] * len(matched) + [Source.DRAFT], choices

    def _choices(self, scores: torch.Tensor, second: torch.Tensor | None = None) -> tuple[float, int, float]:
        """How likely the target is to pick the draft's first choice, the draft's second choice and how likely
        the target is to pick that one; read only where the settings use them (one transfer from the device).

        Greedy: the draft's own probabilities (scores: its logits). Sampled (scores: its best keyed scores, best
        first; second: the second's id; see verify.position_noise): guess_chances, fitted to the embedded
        pair. Either only steers how far to draft and which branches to add, never what is accepted."""
        cfg = self.config
        if cfg.max_trunk <= cfg.gamma and cfg.second_above >= 1.0:
            return 1.0, -1, 0.0
        if self.sampler.greedy:
            values, indices = torch.softmax(scores.float(), dim=-1).topk(2)
            first_p, second_p, _, second = torch.cat([values.double(), indices.double()]).tolist()
            return first_p, int(second), second_p
        chances = guess_chances(scores, self.sampler.temperature)[:2]
        first_p, second_p, token = torch.cat([chances, second[None].double()]).tolist()
        return first_p, int(token), second_p

    def _advance_window(self, newest: list[int]) -> None:
        if len(self.levels) == self.config.ngram - 1:
            for i, key in enumerate(self.levels[0]):
                phrase = tuple(level[i] for level in self.levels[1:]) + (newest[i],)
                self.pool.add(key, phrase, Source.POOL)
            self.levels = self.levels[1:]
        self.levels.append(newest)

    def observe(self, committed: list[int], old_length: int, proposal: Proposal, verdict: Verdict,
                trunk_tokens: list[int]) -> None:
        n = self.config.ngram
        accepted = verdict.trunk_accepted
        # A long run accepted from context lookup means the text repeats: the next step copies without
        # asking the draft; the first step where lookup does not pay returns to drafting.
        self.copying = self.looked_up and verdict.branch == 0 and verdict.branch_accepted >= COPY_RUN
        self.recent_tokens = 0.8 * self.recent_tokens + 0.2 * (len(committed) - old_length)
        if accepted < len(proposal.trunk):
            # The target's tokens over a rejected tail are mostly right, if misplaced: pool them.
            key = committed[old_length + accepted - 1]
            self.pool.add(key, tuple(trunk_tokens[accepted : accepted + n - 1]), Source.POOL)
        if self.config.prompt_lookup:
            self.pool.add_ngrams(committed, n, Source.PROMPT, start=max(0, old_length - n + 1))
