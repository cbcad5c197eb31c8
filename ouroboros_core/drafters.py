"""Who proposes: vanilla (nothing), a draft model token by token, or Ouroboros phrase by phrase.

Each drafter belongs to one request. `propose` drafts after the committed tokens; `observe` learns
from the step's outcome (the target's verdict). The decode loop in decode.py is the same for all
three; Ouroboros composes proposers of one contract (proposal.Proposer).
"""

from __future__ import annotations

from .config import OuroborosConfig, SpeculativeConfig
from .events import Source
from .lookup import ContextLookup, StoredLookup
from .phrases import PhrasePool, PoolPhrases
from .proposal import Proposal, Proposer, StepContext, StepOutcome
from .sampling import Sampler, draft_guesses
from .trunk import DraftRunner, DraftTrunk, SpareChoices


class Vanilla:
    """Proposes nothing: every step is one plain target forward."""

    def start(self, prompt_ids: list[int]) -> None:
        pass

    def propose(self, committed: list[int], limit: int) -> Proposal:
        return Proposal()

    def observe(self, outcome: StepOutcome) -> None:
        pass


class Speculative(Vanilla):
    """Classic speculative decoding: the draft proposes gamma tokens, one forward each."""

    def __init__(self, model, config: SpeculativeConfig, sampler: Sampler | None = None):
        self.runner = DraftRunner(model)
        self.config = config
        # The target's rule: the draft guesses its token with the same noise.
        self.sampler = sampler or Sampler()

    def propose(self, committed: list[int], limit: int) -> Proposal:
        sequence = list(committed)
        trunk = []
        sampler = self.sampler
        for _ in range(min(self.config.gamma, limit)):
            logits = self.runner.forward(sequence)[:1]
            if sampler.greedy:
                token = int(logits.argmax())
            else:  # its guess of the target's keyed sample: its own top tokens with the same noise
                keyed = draft_guesses(logits, sampler.temperature, sampler.seed, [len(sequence)])
                token = int(keyed[1][0, 0])
            trunk.append(token)
            sequence.append(token)
        return Proposal(trunk, [Source.DRAFT] * len(trunk))

    def observe(self, outcome: StepOutcome) -> None:
        self.runner.follow(outcome.committed, outcome.target_state)


class Ouroboros(Vanilla):
    """Phrase by phrase (Zhao et al. 2024), from proposers composed into one tree: the draft's
    trunk and its other choices (trunk.DraftTrunk), a copy of what followed the text's last tokens
    before (lookup.ContextLookup), where the draft's folder stores the target's answers a walk of
    what they most often wrote next (lookup.StoredLookup, `store`: lookup.AnswerStore), and pool
    phrases after the trunk (phrases.PoolPhrases, whose lookahead window rides in the draft's
    forwards and fills the pool).

    Branches in the tree: the copy, the stored walk, then the draft's other choices, then the pool
    phrases, then in the rows the forward has free (`free_rows`) the draft's less likely choices.
    Each proposer observes the verdict on its own part, through what the proposal carries.
    """

    def __init__(
        self,
        model,
        config: OuroborosConfig,
        pool: PhrasePool,
        max_positions: int = 1 << 30,
        sampler: Sampler | None = None,
        store=None,
    ):
        sampler = sampler or Sampler()  # the target's rule: the draft guesses with the same noise
        # Sampled, rows the target would rarely keep are left out: a verified row costs more than
        # such a token saves (docs/BENCHMARKS.md, "Sampled: rows left out").
        trims = config.lookup_above > 0 and not sampler.greedy
        self.phrases = PoolPhrases(pool, config, trims)
        self.trunk = DraftTrunk(DraftRunner(model), config, sampler, self.phrases, max_positions)
        self.lookup = ContextLookup(config, trims)
        # the branches' proposers, in the order their branches hang (the trunk's alternatives
        # between the copies and the pool phrases)
        self.proposers: list[Proposer] = [self.lookup]
        if store is not None and config.stored_answers:
            self.proposers.append(StoredLookup(config, store))
        self.spare = SpareChoices(config.free_rows)

    def start(self, prompt_ids: list[int]) -> None:
        self.phrases.start(prompt_ids)
        self.trunk.start(prompt_ids)

    def propose(self, committed: list[int], limit: int) -> Proposal:
        step = StepContext(committed, limit, copying=self.lookup.repeating)
        trunk = self.trunk.propose(step)
        proposal = Proposal(trunk.tokens, trunk.sources)
        step = StepContext(committed, limit, trunk=trunk, proposal=proposal)
        for proposer in self.proposers:
            proposal.add(proposer.propose(step))
        proposal.add(trunk.alternatives)
        for proposer in (self.phrases, self.spare):  # these read the branches hung before them
            proposal.add(proposer.propose(step))
        return proposal

    def observe(self, outcome: StepOutcome) -> None:
        for proposer in (self.trunk, *self.proposers, self.phrases):
            proposer.observe(outcome)
