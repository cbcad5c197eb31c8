"""Who proposes: vanilla (nothing), a draft model token by token, or Ouroboros phrase by phrase.

Each drafter belongs to one request. `propose` drafts after the committed tokens; `observe` learns from
the target's verdict. The decode loop in engine.py is the same for all three.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass, field

import torch

from .config import OuroborosConfig, SpeculativeConfig
from .draft_runner import DraftRunner
from .events import Source
from .lookup import COPY_RUN, LOOKUP_LONGEST, POOL_PHRASE, LookupTrust, context_lookup
from .pool import PhrasePool
from .sampling import Sampler, draft_guesses
from .verify import Verdict, walk_tree


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


# The chance that the target's sample is the draft's k-th keyed guess (see sampling.draft_guesses): RANK_SHARE *
# softmax(keyed / spread)[k] over the draft's 8 best keyed scores, spread = 0.95 * (0.8 / temperature) ** 0.9 in
# keyed units. Fitted on the embedded pair's distilled draft (12 HumanEval and 12 held-out prompts, 6,144 positions
# at temperatures 0.8 and 0.3; binned calibration error of the first and second guesses): first guess 0.685
# predicted, 0.680 right at 0.8, 0.749 and 0.755 at 0.3; second 0.139 / 0.132 and 0.116 / 0.108. On a later draft
# (trained longer on the target's writing): 0.687 / 0.691 at 0.8, 0.761 / 0.795 at 0.3, second 0.138 / 0.131 and
# 0.109 / 0.094. A refit to it (0.9 * (0.8 / T) ** 0.7, share 0.95) predicted closer but ran 0.99x at 0.8 and 0.98x
# at 0.3 (it drafts on further at 0.3), so the settings above stay: they steer, they do not decide.
RANK_SHARE = 0.97
SCORED = 8
ALTERNATIVES = 3  # the draft's choices after its first that may stand in for it as branches


def guess_chances(keyed: torch.Tensor, temperature: float) -> torch.Tensor:
    """keyed: the draft's keyed scores, best first, in the last dimension -> the chance that each of the best 8
    is the target's sample (float64, on keyed's device)."""
    spread = 0.95 * (0.8 / temperature) ** 0.9
    return torch.softmax(keyed[..., :SCORED] / spread, dim=-1) * RANK_SHARE


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
        self.trust = LookupTrust(LOOKUP_LONGEST, max(config.lookup, config.ngram))  # row POOL_PHRASE: pool phrases
        self.lookup_at = (0, 0, 0)  # the latest proposal's copy: (tokens it matched, where it hangs, its length)
        self.pool_at: list[list[int]] = []  # the pool phrases the latest proposal hung after its trunk
        self.choices_at: dict[int, set[int]] = {}  # trunk position -> the draft's other best keyed guesses there
        # Sampled, rows the target would rarely keep are left out: on the embedded pair a verified row costs about
        # 0.3 ms of a 15 ms step that commits three tokens, what a token standing one time in sixteen saves.
        self.trims = config.lookup_above > 0 and not self.sampler.greedy

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
        found, matched = [], 0
        if cfg.lookup and cfg.prompt_lookup and limit > 0:
            found, matched = context_lookup(committed, min(cfg.lookup, limit))
        trunk, sources, branches, attach, stands = self._chain(committed, limit)
        branch_sources = [Source.DRAFT] * len(branches)
        room = limit - len(trunk)
        # The lookup branch hangs where it parts from the draft's trunk, so the target can walk it
        # past a rejected draft token (found is at most `limit` long, so it fits after the shared part).
        common = 0
        while common < min(len(found), len(trunk)) and found[common] == trunk[common]:
            common += 1
        if self.trims and len(found) > common:
            # The copy is walked where the trunk's first `common` tokens stand and the next does not; one that
            # parts from the trunk on a token outside the draft's 8 best keyed guesses there almost never is
            # (embedded pair, held-out at 0.8: 873 such rows kept 14 tokens). Greedy, the draft's probabilities
            # are no such chances (its argmax is the target's far more often than they say): a greedy copy keeps
            # its L tokens.
            reach = math.prod(stands[:common]) * (1.0 - stands[common] if common < len(trunk) else 1.0)
            if common < len(trunk) and found[common] not in self.choices_at.get(common, (found[common],)):
                reach = 0.0
            found = found[: common + self.trust.length(matched, reach, len(found) - common, cfg.lookup_above)]
        self.looked_up = len(found) > common
        self.lookup_at = (matched, common, len(found) - common)
        if self.looked_up:
            branches.insert(0, found[common:])
            branch_sources.insert(0, Source.PROMPT)
            attach.insert(0, common)
        self.pool_at = []
        if room > 0 and cfg.branches:
            key = trunk[-1] if trunk else committed[-1]
            whole = math.prod(stands)  # pool phrases hang after the trunk: walked where all of it stands
            after_trunk = [b for b, a in zip(branches, attach) if a == len(trunk)]
            added = 0
            # One more candidate per branch already there: a phrase that branch holds is skipped, and the next
            # newest (often from an earlier request of a warm pool) takes its place.
            for phrase, source in self.pool.lookup(key, cfg.branches + len(after_trunk)):
                if added == cfg.branches:
                    break
                phrase = list(phrase[:room])
                if self.trims:  # as far as this request's pool phrases stood
                    phrase = phrase[: self.trust.length(POOL_PHRASE, whole, len(phrase), cfg.lookup_above)]
                    if not phrase:
                        break
                if any(b[: len(phrase)] == phrase for b in after_trunk):
                    continue
                if self.trims:
                    self.pool_at.append(phrase)
                branches.append(phrase)
                branch_sources.append(source)
                attach.append(len(trunk))
                added += 1
        return Proposal(trunk, sources, branches, branch_sources, attach)

    def _chain(self, committed: list[int], limit: int):
        """The draft's trunk, phrase by phrase, and its other likely choices where it hesitated as branches (with
        its guess after each where the trunk went on). Returns (trunk, its sources, branches, attach, each trunk
        token's chance of standing)."""
        cfg = self.config
        sequence = list(committed)
        trunk: list[int] = []
        sources: list[Source] = []
        # At least gamma tokens; then on while the draft is sure of its latest token (where it agrees with the
        # target far more often), up to max_trunk.
        want = 0 if self.copying else min(cfg.gamma, limit)
        most = 0 if self.copying else min(max(cfg.max_trunk, want), limit)
        sure, chance = True, 1.0
        self.choices_at = {}
        alternatives = []  # (trunk position, another of the draft's choices there and what follows it, its chance)
        stands: list[float] = []  # each trunk token's estimated chance of standing, once the tokens before it stood
        while len(trunk) < want or (sure and len(trunk) < most):
            # The alternatives to the trunk's last token ride along in this draft forward: the draft's guess after
            # each is a second token for its branch, kept where the two together are likely enough.
            riding = [i for i, (at, _, p) in enumerate(alternatives) if at == len(trunk) - 1 and p > cfg.second_above]
            new, new_sources, (first_p, others), follow = self._draft_step(
                sequence, [alternatives[i][1][0] for i in riding])
            for i, (token, p) in zip(riding, follow):
                at, tokens, alone = alternatives[i]
                if alone * p > cfg.second_above:
                    alternatives[i] = (at, tokens + [token], alone)
            # An alternative is walked only where the trunk before it stood: weigh it by that chance too.
            at = len(trunk) + len(new) - 1
            alternatives += [(at, [token], p * chance) for token, p in others[:ALTERNATIVES]]
            self.choices_at[at] = {token for token, _ in others}
            stands += [1.0] * (len(new) - 1) + [first_p]  # a pool phrase the draft verified: taken as sure
            trunk += new
            sources += new_sources
            sequence += new
            chance *= first_p  # sampled, each token far less sure: the chance that the whole trunk stands
            # Sampled, a draft forward more pays while the chance that its token stands is a fair share of what
            # a step commits anyway: where steps commit many tokens (low temperatures), each is worth less.
            sure = (first_p > cfg.extend_above if self.sampler.greedy
                    else chance > cfg.extend_chance * self.recent_tokens)
        trunk, sources = trunk[:limit], sources[:limit]
        # Where the draft hesitated, its other likely choices as branches in place of its first: the target walks
        # one if it rejects the first and picks that one, in the same forward.
        chosen = [(at, tokens) for at, tokens, p in alternatives if at < len(trunk) and p > cfg.second_above]
        return trunk, sources, [tokens for _, tokens in chosen], [at for at, _ in chosen], stands[:limit]

    def _draft_step(self, sequence: list[int], siblings: list[int] = ()) -> tuple[list[int], list[Source], tuple, list]:
        """One draft forward: the next token, or a verified pool phrase plus the token after it; at that last
        token, the chance that the target picks it and the draft's next choices with theirs; and for each
        sibling (a token in place of the sequence's last), the draft's guess after it and that guess's chance."""
        cfg = self.config
        candidates = [(phrase, source) for phrase, source in self.pool.lookup(sequence[-1], cfg.draft_candidates)
                      if self.runner.readable(phrase)]  # the pool also holds the target's tokens
        depth = len(self.levels)
        # Column i sits i positions further on; near the end of the context, leave the window out.
        room = self.max_positions - len(sequence)
        fits = depth > 0 and cfg.window + depth - 1 <= room
        columns = [[level[i] for level in self.levels] for i in range(cfg.window)] if fits else []
        phrases = [list(phrase[:room]) for phrase, _ in candidates]
        offsets = list(range(len(columns))) + [0] * (len(phrases) + len(siblings))
        attach = [0] * (len(columns) + len(phrases)) + [-1] * len(siblings)
        logits = self.runner.forward(sequence, columns + phrases + [[token] for token in siblings], offsets, attach)
        sampler = self.sampler
        if sampler.greedy:
            guesses = logits.argmax(dim=-1).tolist()
        else:  # its guess of the target's keyed sample: its own top tokens with the same noise
            # The sequence position each row's token is for: column i's l-th guess sits i + l after the sequence.
            at = len(sequence)
            positions = ([at] + [at + i + level + 1 for i in range(len(columns)) for level in range(depth)]
                         + [at + j + 1 for phrase in phrases for j in range(len(phrase))] + [at] * len(siblings))
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
        # The drafted token's row, then each sibling's: read in one transfer from the device.
        read = [row] + list(range(len(logits) - len(siblings), len(logits)))
        first_p, others, follow = (self._choices(logits, None, read) if sampler.greedy
                                   else self._choices(keyed, ids, read))
        return matched + [verdict.next_token], [source] * len(matched) + [Source.DRAFT], (first_p, others), follow

    def _choices(self, scores: torch.Tensor, ids: torch.Tensor | None, rows: list[int]):
        """At rows[0] (after the drafted token): how likely the target is to pick the draft's first choice, and its
        next ALTERNATIVES choices with how likely the target is to pick each; at each later row (after a sibling):
        the draft's first choice and its chance. Read only where the settings use them, in one transfer from the
        device. Returns (first_p, [(token, chance)], [(token, chance)] per later row).

        Greedy: the draft's own probabilities (scores: its logits). Sampled (scores: its best keyed scores, best
        first; ids: their token ids; see sampling.position_noise): guess_chances, fitted to the embedded pair.
        Either only steers how far to draft and which branches to add, never what is accepted."""
        cfg = self.config
        trims = cfg.lookup and cfg.lookup_above > 0 and not self.sampler.greedy
        if cfg.max_trunk <= cfg.gamma and cfg.second_above >= 1.0 and not trims:
            return 1.0, [], []  # no alternatives, so no siblings either
        top = SCORED if trims else 1 + ALTERNATIVES  # copies parting from the trunk are checked against all 8
        if self.sampler.greedy:
            chances, ids = torch.softmax(scores[rows].float(), dim=-1).topk(top)
        else:
            chances, ids = guess_chances(scores[rows], self.sampler.temperature)[:, :top], ids[rows, :top]
        values = torch.stack([chances.double(), ids.double()], dim=1).tolist()  # per row: [its chances, its ids]
        (first_p, *others), (_, *tokens) = values[0]
        follow = [(int(row_ids[0]), row_chances[0]) for row_chances, row_ids in values[1:]]
        return first_p, [(int(token), p) for token, p in zip(tokens, others)], follow

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
        matched, hangs, length = self.lookup_at
        if self.looked_up and verdict.trunk_accepted == hangs:  # the target reached the copy
            self.trust.observe(matched, length, verdict.branch_accepted if verdict.branch == 0 else 0)
        if self.pool_at and verdict.trunk_accepted == len(proposal.trunk):  # the target reached the pool phrases
            after = committed[old_length + verdict.trunk_accepted :]
            for phrase in self.pool_at:
                if phrase not in proposal.branches:  # not verified (the engine cut the proposal short)
                    continue
                known, kept = min(len(phrase), len(after)), 0
                while kept < known and phrase[kept] == after[kept]:
                    kept += 1
                self.trust.observe(POOL_PHRASE, known, kept)
        self.recent_tokens = 0.8 * self.recent_tokens + 0.2 * (len(committed) - old_length)
        if accepted < len(proposal.trunk):
            # The target's tokens over a rejected tail are mostly right, if misplaced: pool them.
            key = committed[old_length + accepted - 1]
            self.pool.add(key, tuple(trunk_tokens[accepted : accepted + n - 1]), Source.POOL)
        if self.config.prompt_lookup:
            self.pool.add_ngrams(committed, n, Source.PROMPT, start=max(0, old_length - n + 1))
