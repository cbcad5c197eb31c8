"""The draft model as the drafters run it (DraftRunner: the model and its KV cache), and the draft's
trunk, phrase by phrase, with its other likely choices where it hesitated."""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from .config import OuroborosConfig
from .events import Source
from .fitted import (
    ALTERNATIVES,
    CHANCE_SPREAD,
    GUESSES_SCORED,
    RANK_SHARE,
    RECENT_TOKENS_START,
    RECENT_WEIGHTS,
    SPREAD_AT,
    SPREAD_POWER,
)
from .phrases import Lookahead, PoolPhrases
from .proposal import Branches, StepContext, StepOutcome
from .sampling import Sampler, draft_guesses
from .tree import DraftTree, forward_tree, new_cache, truncate, walk


def shared_prefix(a: list, b: list, limit: int) -> int:
    """How many leading items a and b share, at most `limit`: lists compared a slice at a time (a
    draft forward extends what the last one fed, so the whole span usually matches at once), halving
    the span on a mismatch."""
    if a[:limit] == b[:limit]:
        return limit
    low, high = 0, limit  # a[:low] == b[:low], a[:high] != b[:high]
    while high - low > 1:
        middle = (low + high) // 2
        if a[low:middle] == b[low:middle]:
            low = middle
        else:
            high = middle
    return low


# The most tokens of a prompt the draft reads: the last ones. A draft guesses the next words from
# the last few sentences; reading a long prompt whole slows its prefill and every later forward's
# attention without better guesses (docs/BENCHMARKS.md, *Long requests*). Lookup still copies from
# the whole text.
DRAFT_CONTEXT = 512


class DraftRunner:
    """The draft model and its KV cache, kept a prefix of whatever sequence it is asked to
    extend, from the last `context` tokens of the first sequence on."""

    def __init__(self, model, context: int = DRAFT_CONTEXT):
        self.model = model  # a transformers model, or the LeanDecoder that wraps it
        self.cache = new_cache(model)
        self.fed: list[int] = []  # tokens whose keys and values are in the cache
        self.vocab = model.get_input_embeddings().num_embeddings
        self.context = context
        self.start: int | None = None  # where the draft's reading begins, set by the first call
        # A draft that reads the target's state (a LeanDecoder with a projection): the length of
        # the text the state follows, and the state (see follow).
        self.reads_state = getattr(model, "projection", None) is not None
        self.state: tuple[int, torch.Tensor] | None = None

    def follow(self, committed: list[int], state: torch.Tensor | None) -> None:
        """The target's final state one position before the newest committed token (the input
        its output layer read to choose that token): the next forward after exactly `committed`
        adds its projection to that token's row, which guesses the token after."""
        self.state = (len(committed), state) if self.reads_state and state is not None else None

    def readable(self, tokens) -> bool:
        """Whether the draft has an embedding for every token (a target may pad its vocabulary past
        it)."""
        return all(token < self.vocab for token in tokens)

    def forward(self, sequence: list[int], extra_rows: DraftTree | None = None) -> torch.Tensor:
        """Logits after `sequence` and at every row of `extra_rows` (DraftTree.extra_rows: rows past
        the sequence, or in place of its last token); the cache keeps `sequence` alone."""
        state = None
        if self.state is not None and self.state[0] == len(sequence):
            state = self.state[1]
        if self.start is None:
            self.start = max(0, len(sequence) - self.context)
        if self.start:
            sequence = sequence[self.start :]  # only a long prompt's runner copies the list
        # Feed one token at least.
        common = shared_prefix(self.fed, sequence, min(len(self.fed), len(sequence) - 1))
        truncate(self.cache, common)
        logits = forward_tree(self.model, self.cache, sequence[common:], extra_rows, state)
        truncate(self.cache, len(sequence))
        self.fed = list(sequence)
        return logits


def guess_chances(keyed: torch.Tensor, temperature: float) -> torch.Tensor:
    """keyed: the draft's keyed scores, best first, in the last dimension -> the chance that each of
    the best GUESSES_SCORED is the target's sample (float64, on keyed's device; fitted.py)."""
    spread = CHANCE_SPREAD * (SPREAD_AT / temperature) ** SPREAD_POWER
    return torch.softmax(keyed[..., :GUESSES_SCORED] / spread, dim=-1) * RANK_SHARE


@dataclass(frozen=True)
class DraftStep:
    """One draft forward's outcome."""

    tokens: list[int]  # a pool phrase the draft verified (maybe none), then the draft's next token
    sources: list[Source]
    first_p: float  # the chance that the target picks that last token
    others: list[tuple[int, float]]  # the draft's next choices there, each with that chance
    follow: list[tuple[int, float]]  # per sibling: the draft's guess after it, and its chance


@dataclass(frozen=True)
class Trunk:
    """The trunk a DraftTrunk proposes, with what the other proposers hang their branches by."""

    tokens: list[int]
    sources: list[Source]
    accept_chances: list[float]  # each token's chance of standing, once the tokens before it stood
    choices: dict[int, set[int]]  # trunk position -> the draft's other best keyed guesses there
    alternatives: Branches  # the draft's other choices, each a branch in place of its first
    # the draft's other choices left out of `alternatives` that may fill free rows, likeliest first
    spare: list[Alternative] = field(default_factory=list)


@dataclass
class Alternative:
    """Another of the draft's choices at a trunk position, as a branch in place of its first."""

    at: int  # the trunk position it stands in for
    tokens: list[int]  # that choice, then the draft's guess after it where likely enough
    chance: float  # the chance it stands: the trunk before it stands and the target picks it


def as_branches(owner: str, alternatives: list[Alternative]) -> Branches:
    """The draft's other choices as branches, each in place of the trunk token it stands for."""
    tokens, places = [a.tokens for a in alternatives], [a.at for a in alternatives]
    return Branches(owner, tokens, [Source.DRAFT] * len(alternatives), places)


@dataclass
class TrunkBuilder:
    """A trunk while the draft grows it: its tokens, and the draft's other choices on the way."""

    sequence: list[int]  # the committed tokens, then the trunk so far
    tokens: list[int] = field(default_factory=list)
    sources: list[Source] = field(default_factory=list)
    accept_chances: list[float] = field(default_factory=list)
    chance: float = 1.0  # the chance that the whole trunk so far stands
    choices: dict[int, set[int]] = field(default_factory=dict)
    alternatives: list[Alternative] = field(default_factory=list)

    def alternatives_to_extend(self, above: float) -> list[Alternative]:
        """The alternatives to the trunk's last token likely enough to go in the next forward, where
        the draft guesses the token after each."""
        last = len(self.tokens) - 1
        return [a for a in self.alternatives if a.at == last and a.chance > above]

    def extend(self, step: DraftStep, extending: list[Alternative], above: float) -> None:
        # The draft's guess after an alternative it extended is a second token for its branch, kept
        # where the two together are likely enough.
        for alternative, (token, p) in zip(extending, step.follow):
            if alternative.chance * p > above:
                alternative.tokens = alternative.tokens + [token]
        # An alternative is walked only where the trunk before it stood: weigh it by that chance
        # too.
        at = len(self.tokens) + len(step.tokens) - 1
        self.alternatives += [
            Alternative(at, [token], p * self.chance) for token, p in step.others[:ALTERNATIVES]
        ]
        self.choices[at] = {token for token, _ in step.others}
        # A pool phrase the draft verified is taken as sure.
        self.accept_chances += [1.0] * (len(step.tokens) - 1) + [step.first_p]
        self.tokens += step.tokens
        self.sources += step.sources
        self.sequence += step.tokens
        self.chance *= step.first_p

    def trunk(self, limit: int, above: float, owner: str, spare_above: float = 1.0) -> Trunk:
        """The trunk cut to `limit`; where the draft hesitated, its other likely choices as branches
        in place of its first: the target walks one if it rejects the first and picks that one.
        Those less likely, but above `spare_above`, are its spare choices."""
        tokens = self.tokens[:limit]
        inside = [a for a in self.alternatives if a.at < len(tokens)]
        branches = as_branches(owner, [a for a in inside if a.chance > above])
        spare = sorted(
            (a for a in inside if spare_above < a.chance <= above), key=lambda a: -a.chance
        )
        return Trunk(
            tokens, self.sources[:limit], self.accept_chances[:limit], self.choices, branches, spare
        )


class DraftTrunk:
    """Proposes the draft's trunk, phrase by phrase: at least gamma tokens, then on while the draft
    is sure of its latest token (where it agrees with the target far more often), up to max_trunk;
    and where it hesitated, its other likely choices (up to ALTERNATIVES, with its guess after each
    where the trunk went on) as branches in place of its first.

    Each draft forward also checks the pool's phrases keyed on the draft's last token, so one
    forward can advance by a whole phrase, and carries the lookahead window (phrases.Lookahead).
    Greedy, the draft's probabilities steer it; sampled, its keyed guesses of the target's sample
    and their fitted chances (guess_chances). Either only steers how far to draft and what to offer,
    never what stands. Learns from each verdict how many tokens a step commits lately.
    """

    name = "draft"

    def __init__(
        self,
        runner: DraftRunner,
        config: OuroborosConfig,
        sampler: Sampler,
        phrases: PoolPhrases,
        max_positions: int,
    ):
        self.runner = runner
        self.config = config
        self.sampler = sampler  # the target's rule: the draft guesses its token with the same noise
        self.pool = phrases.pool  # phrases the draft checks inside its own forward
        # the lookahead window rides in every draft forward, filling the pool
        self.window = Lookahead(config.window, config.ngram, phrases.pool)
        self.max_positions = max_positions  # positions the models take: GPT-2's table ends there
        self.recent_tokens = RECENT_TOKENS_START  # tokens a step committed lately
        # The draft's chances are read only where a setting uses them; sampled, a context-lookup
        # copy parting from the trunk is checked against all its best guesses there.
        checks_copies = config.lookup and config.lookup_above > 0 and not sampler.greedy
        self.reads_chances = (
            config.max_trunk > config.gamma
            or config.second_above < 1.0
            or config.free_rows > 0
            or checks_copies
        )
        self.top = GUESSES_SCORED if checks_copies else 1 + ALTERNATIVES

    def start(self, prompt_ids: list[int]) -> None:
        self.window.start(prompt_ids)

    def propose(self, step: StepContext) -> Trunk:
        """The trunk and the draft's other choices; none where the text repeats itself
        (step.copying: context lookup leads, no draft forward at all)."""
        cfg, limit = self.config, step.limit
        want = 0 if step.copying else min(cfg.gamma, limit)
        most = 0 if step.copying else min(max(cfg.max_trunk, want), limit)
        builder, sure = TrunkBuilder(list(step.committed)), True
        while len(builder.tokens) < want or (sure and len(builder.tokens) < most):
            extending = builder.alternatives_to_extend(cfg.second_above)
            step = self._draft_forward(
                builder.sequence, [alternative.tokens[0] for alternative in extending]
            )
            builder.extend(step, extending, cfg.second_above)
            sure = self._goes_on(step.first_p, builder.chance)
        spare_above = cfg.fill_above if cfg.free_rows else 1.0
        return builder.trunk(limit, cfg.second_above, self.name, spare_above)

    def _goes_on(self, first_p: float, chance: float) -> bool:
        if self.sampler.greedy:
            return first_p > self.config.extend_above
        # Sampled, one more draft forward pays while the chance that the trunk stands is a fair
        # share of what a step commits anyway: where steps commit many tokens (low temperatures),
        # each is worth less.
        return chance > self.config.extend_chance * self.recent_tokens

    def _draft_forward(self, sequence: list[int], siblings: list[int]) -> DraftStep:
        """One draft forward: the next token, or a verified pool phrase plus the token after it. The
        window's columns, the pool's phrases and each sibling (a token in place of the sequence's
        last) ride along as branches."""
        room = self.max_positions - len(sequence)
        pooled = self.pool.lookup(sequence[-1], self.config.draft_candidates)
        # the pool also holds the target's tokens
        candidates = [
            (list(phrase[:room]), source)
            for phrase, source in pooled
            if self.runner.readable(phrase)
        ]
        columns = self.window.columns(room)  # column i sits i positions further on
        phrases = [phrase for phrase, _ in candidates]
        extra_rows = DraftTree.extra_rows(columns, phrases, siblings)
        logits = self.runner.forward(sequence, extra_rows)
        # only a sampled guess is keyed on its position
        positions = [] if self.sampler.greedy else extra_rows.row_positions(len(sequence))
        scores, ids, guesses = self._guesses(logits, positions)
        starts = [extra_rows.branch_row(b) for b in range(len(extra_rows.branches))]
        if columns:
            self.window.advance([guesses[s + len(c) - 1] for s, c in zip(starts, columns)])
        starts = starts[len(columns) :]
        verdict = walk(
            DraftTree.of([], phrases),
            [guesses[0]],
            [guesses[s : s + len(p)] for s, p in zip(starts, phrases)],
        )
        matched, source, row = [], Source.DRAFT, 0
        if verdict.branch is not None:
            matched = phrases[verdict.branch][: verdict.branch_accepted]
            source = candidates[verdict.branch][1]
            row = starts[verdict.branch] + verdict.branch_accepted - 1  # after the drafted token
        # The drafted token's row, then each sibling's: read in one transfer from the device.
        read = [row] + list(range(len(logits) - len(siblings), len(logits)))
        first_p, others, follow = self._chances(scores, ids, read)
        return DraftStep(
            matched + [verdict.next_token],
            [source] * len(matched) + [Source.DRAFT],
            first_p,
            others,
            follow,
        )

    def _guesses(self, logits: torch.Tensor, positions: list[int]):
        """The draft's guess at every row of logits, with the scores its chances read (greedy: the
        logits; sampled: its best keyed scores, best first, and their ids). positions: the sequence
        position each row's guess is for (its sample's noise is keyed on it)."""
        sampler = self.sampler
        if sampler.greedy:
            return logits, None, logits.argmax(dim=-1).tolist()
        keyed, ids = draft_guesses(logits, sampler.temperature, sampler.seed, positions)
        return keyed, ids, ids[:, 0].tolist()

    def _chances(self, scores: torch.Tensor, ids: torch.Tensor | None, rows: list[int]):
        """At rows[0] (after the drafted token): the chance that the target picks the draft's first
        choice, and the draft's next choices with theirs; at each later row (after a sibling): the
        draft's first choice and its chance. Returns (first_p, [(token, chance)], [(token, chance)]
        per later row), read in one transfer from the device."""
        if not self.reads_chances:
            return 1.0, [], []  # no alternatives, so no siblings either
        if self.sampler.greedy:
            chances, ids = torch.softmax(scores[rows].float(), dim=-1).topk(self.top)
        else:
            chances = guess_chances(scores[rows], self.sampler.temperature)[:, : self.top]
            ids = ids[rows, : self.top]
        # Per row: its chances, then its ids.
        values = torch.stack([chances.double(), ids.double()], dim=1).tolist()
        (first_p, *others), (_, *tokens) = values[0]
        follow = [(int(row_ids[0]), row_chances[0]) for row_chances, row_ids in values[1:]]
        return first_p, [(int(token), p) for token, p in zip(tokens, others)], follow

    def observe(self, outcome: StepOutcome) -> None:
        self.runner.follow(outcome.committed, outcome.target_state)
        share, latest = RECENT_WEIGHTS
        committed = len(outcome.committed) - outcome.old_length
        self.recent_tokens = share * self.recent_tokens + latest * committed


class SpareChoices:
    """Proposes the draft's spare choices (Trunk.spare) that fit in the rows the step's
    verification has free (`free_rows`: rows that cost no more than the one it needs), likeliest
    first: nearly free tokens. One that a branch already offers at the same place is left out."""

    name = DraftTrunk.name  # the draft's choices, as its alternatives are

    def __init__(self, free_rows: int):
        self.free_rows = free_rows

    def propose(self, step: StepContext) -> Branches:
        proposal, spare = step.proposal, step.trunk.spare
        room = self.free_rows - 1 - len(proposal.trunk) - sum(map(len, proposal.branches))
        chosen = []
        if room > 0 and spare:  # most steps, and every step where free_rows is 0
            offered = {(at, b[0]) for at, b in zip(proposal.branch_attach, proposal.branches) if b}
            for alternative in spare:
                place = (alternative.at, alternative.tokens[0])
                if len(alternative.tokens) <= room and place not in offered:
                    chosen.append(alternative)
                    offered.add(place)
                    room -= len(alternative.tokens)
        return as_branches(self.name, chosen)

    def observe(self, outcome: StepOutcome) -> None:
        pass  # nothing to learn: the trunk's draft learns from the text itself
