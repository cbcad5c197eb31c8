"""The three drafters at their boundary: Vanilla proposes nothing; Speculative drafts gamma tokens,
one forward each, as the target's rule would pick them; Ouroboros composes its proposers, hangs
their branches in its documented order and passes every verdict on to each of them."""

from __future__ import annotations

import pytest
import torch

from ouroboros_core.config import OuroborosConfig, SpeculativeConfig
from ouroboros_core.drafters import Ouroboros, Speculative, Vanilla
from ouroboros_core.events import Source
from ouroboros_core.lookup import ContextLookup, StoredLookup
from ouroboros_core.phrases import PhrasePool
from ouroboros_core.proposal import Branches, Copy, Proposal, StepOutcome
from ouroboros_core.sampling import Sampler
from ouroboros_core.tree import Acceptance
from ouroboros_core.trunk import Alternative, DraftTrunk, Trunk

VOCAB = 16


@pytest.fixture(scope="module")
def tiny_model():
    """A one-layer Llama of 16 tokens, far from ties (initializer_range 0.5)."""
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=VOCAB,
        hidden_size=16,
        intermediate_size=32,
        num_hidden_layers=1,
        num_attention_heads=2,
        num_key_value_heads=1,
        max_position_embeddings=64,
        initializer_range=0.5,
        attn_implementation="eager",
    )
    return LlamaForCausalLM(config).eval()


def after(token: int) -> int:
    """The scripted draft's choice after `token`."""
    return (3 * token + 1) % VOCAB


class ScriptedRunner:
    """Stands in for the draft's DraftRunner: sure of after(last token), or flat, and records every
    sequence it is fed."""

    def __init__(self, flat: bool = False):
        self.flat, self.fed = flat, []

    def forward(self, sequence: list[int]) -> torch.Tensor:
        self.fed.append(list(sequence))
        logits = torch.zeros(1, VOCAB)
        if not self.flat:
            logits[0, after(sequence[-1])] = 1000.0
        return logits


def scripted(tiny_model, gamma: int, sampler=None, flat=False) -> Speculative:
    drafter = Speculative(tiny_model, SpeculativeConfig(gamma=gamma), sampler)
    drafter.runner = ScriptedRunner(flat)
    return drafter


def test_vanilla_proposes_nothing_whatever_the_text_and_learns_nothing():
    vanilla = Vanilla()
    assert vanilla.start([1, 2, 3]) is None
    assert vanilla.propose([1, 2, 3], 8) == Proposal() == vanilla.propose([], 0)
    assert Proposal().trunk == [] and Proposal().branches == []
    verdict = Acceptance(0, None, 0, 4)
    assert vanilla.observe(StepOutcome([1, 2, 3, 4], 3, Proposal(), verdict, [4])) is None


def test_speculative_drafts_gamma_tokens_each_after_the_text_and_the_tokens_before_it(tiny_model):
    drafter = scripted(tiny_model, gamma=4)
    proposal = drafter.propose([7, 2], 10)
    assert proposal.trunk == [7, 6, 3, 10]  # after(2) = 7, after(7) = 6, ...
    assert proposal.trunk_sources == [Source.DRAFT] * 4
    assert proposal.branches == [] and proposal.notes == {}
    assert drafter.runner.fed == [[7, 2], [7, 2, 7], [7, 2, 7, 6], [7, 2, 7, 6, 3]]
    assert isinstance(drafter, Vanilla)  # it starts and observes as Vanilla does: not at all


def test_speculative_drafts_no_more_than_the_step_allows(tiny_model):
    drafter = scripted(tiny_model, gamma=4)
    assert drafter.propose([2], 2).trunk == [7, 6]
    assert len(drafter.runner.fed) == 2
    drafter.runner.fed.clear()
    assert drafter.propose([2], 0) == Proposal()  # no room: no forward at all
    assert drafter.runner.fed == []


def test_speculative_sampled_keeps_a_sure_drafts_token(tiny_model):
    sampled = scripted(tiny_model, gamma=3, sampler=Sampler(0.8, 0.95, 5))
    assert sampled.propose([2], 8).trunk == [7, 6, 3]


def test_speculative_sampled_guesses_the_targets_keyed_sample_at_each_position(tiny_model):
    """With the draft's logits flat, only the noise decides its guess: the same noise as the
    target's keyed sample at that position (top_p 1: every token in the nucleus)."""
    committed = [1, 2, 3]
    trunks = {}
    for seed in (1, 2):
        target = Sampler(0.8, 1.0, seed)
        trunk = scripted(tiny_model, 4, target, flat=True).propose(committed, 8).trunk
        flat = torch.zeros(1, VOCAB)
        positions = range(len(committed), len(committed) + 4)
        assert trunk == [target.tokens(flat, [p])[0] for p in positions], seed
        trunks[seed] = trunk
    assert trunks[1] != trunks[2]  # the seed's noise, not the logits, chose them


def test_speculative_with_a_real_draft_proposes_its_greedy_continuation(tiny_model):
    def greedy(sequence, n):
        sequence = list(sequence)
        for _ in range(n):
            with torch.no_grad():
                logits = tiny_model(torch.tensor([sequence])).logits[0, -1]
            top = logits.topk(2).values
            assert top[0] - top[1] > 1e-3, "a near tie: the check would be float noise"
            sequence.append(int(logits.argmax()))
        return sequence[-n:]

    drafter = Speculative(tiny_model, SpeculativeConfig(gamma=3))
    assert drafter.propose([1, 5, 9], 8).trunk == greedy([1, 5, 9], 3)
    # the next step's text shares the runner's cache up to where it parts
    assert drafter.propose([1, 5, 9, 4, 11], 8).trunk == greedy([1, 5, 9, 4, 11], 3)


# --- Ouroboros ------------------------------------------------------------------------------------

# The text's last [1, 2] was followed by 5, 9, 10, 11 before.
COMMITTED = [1, 2, 5, 9, 10, 11, 3, 1, 2]


class Answers:
    """A stored-answers store (lookup.AnswerStore's walk) that always walks the same tokens."""

    def __init__(self, walked: list[int], matched: int):
        self.walked, self.matched, self.asked = walked, matched, []

    def walk(self, sequence, length):
        self.asked.append(length)
        return self.walked[:length], self.matched


def ouroboros(model, sampler=None, store=None, **options) -> Ouroboros:
    pool = PhrasePool(8, 100)
    return Ouroboros(model, OuroborosConfig(**options), pool, sampler=sampler, store=store)


def trunk_of(tokens, alternatives=None, spare=()) -> Trunk:
    return Trunk(
        list(tokens),
        [Source.DRAFT] * len(tokens),
        [0.9] * len(tokens),
        {},
        alternatives or Branches(DraftTrunk.name),
        list(spare),
    )


def fixed_trunk(drafter: Ouroboros, trunk: Trunk) -> list:
    """Make the drafter's draft propose `trunk`; returns the steps it is asked with, as asked."""
    steps = []
    drafter.trunk.propose = lambda step: steps.append(step) or trunk
    return steps


def test_ouroboros_walks_stored_answers_only_with_a_store_and_stored_answers(tiny_model):
    plain = ouroboros(tiny_model, stored_answers=8)
    assert plain.proposers == [plain.lookup] and type(plain.lookup) is ContextLookup
    store = Answers([5, 40], 2)
    stored = ouroboros(tiny_model, store=store, stored_answers=8)
    assert len(stored.proposers) == 2 and stored.proposers[0] is stored.lookup
    walk = stored.proposers[1]
    assert isinstance(walk, StoredLookup) and walk.store is store and walk.length == 8
    off = ouroboros(tiny_model, store=store, stored_answers=0)
    assert off.proposers == [off.lookup]


def test_ouroboros_trims_copies_and_phrases_only_sampled_with_a_threshold(tiny_model):
    sampled = Sampler(0.8, 0.95, 1)
    for sampler, above, trims in (
        (sampled, 0.05, True),
        (Sampler(), 0.05, False),  # greedy keeps L tokens
        (sampled, 0.0, False),  # 0: no trimming
    ):
        drafter = ouroboros(tiny_model, sampler, lookup_above=above)
        assert drafter.lookup.trims is trims and drafter.phrases.trims is trims, (above, sampler)
        assert drafter.trunk.sampler is sampler  # the draft guesses with the target's noise
    drafter = ouroboros(tiny_model, free_rows=5)
    assert drafter.trunk.sampler.greedy  # no sampler: the target's greedy rule
    assert drafter.trunk.pool is drafter.phrases.pool  # the draft checks the phrases offered
    assert drafter.spare.free_rows == 5


def test_ouroboros_hangs_copy_then_stored_walk_then_draft_choices_then_pool_then_spare(tiny_model):
    store = Answers([5, 6, 40, 41], 2)
    drafter = ouroboros(tiny_model, store=store, lookup=4, branches=1, free_rows=16)
    drafter.phrases.pool.add(6, (20, 21, 22), Source.POOL)
    alternatives = Branches(DraftTrunk.name, [[7]], [Source.DRAFT], [0])
    fixed_trunk(drafter, trunk_of([5, 6], alternatives, [Alternative(1, [8], 0.2)]))
    proposal = drafter.propose(COMMITTED, 8)
    assert proposal.trunk == [5, 6] and proposal.trunk_sources == [Source.DRAFT] * 2
    assert proposal.branches == [[9, 10, 11], [40, 41], [7], [20, 21, 22], [8]]
    assert proposal.branch_attach == [1, 2, 0, 2, 1]
    assert proposal.branch_owners == ["lookup", "answers", "draft", "pool", "draft"]
    assert proposal.branch_sources == [
        Source.PROMPT,
        Source.PROMPT,  # the stored answers are the text's kind of source
        Source.DRAFT,
        Source.POOL,
        Source.DRAFT,
    ]
    assert proposal.notes == {"lookup": Copy(2, 1, 3), "answers": Copy(2, 2, 2)}
    assert store.asked == [8]  # as many as the step allows


def test_ouroboros_asks_the_draft_to_rest_while_the_text_repeats_itself(tiny_model):
    drafter = ouroboros(tiny_model, lookup=4)
    steps = fixed_trunk(drafter, trunk_of([5]))
    drafter.propose(COMMITTED, 8)
    drafter.lookup.repeating = True  # the latest copy ran long
    drafter.propose(COMMITTED, 6)
    assert [(s.copying, s.limit, s.committed) for s in steps] == [
        (False, 8, COMMITTED),
        (True, 6, COMMITTED),
    ]
    assert steps[0].trunk is None and steps[0].proposal is None  # nothing drafted yet


def test_ouroboros_passes_each_verdict_to_the_draft_and_every_proposer_in_turn(tiny_model):
    drafter = ouroboros(tiny_model, store=Answers([], 0), stored_answers=8)
    seen = []
    for part in (drafter.trunk, *drafter.proposers, drafter.phrases):
        part.observe = lambda outcome, name=part.name: seen.append((name, outcome))
    verdict = Acceptance(1, None, 0, 8)
    outcome = StepOutcome(COMMITTED + [5, 8], len(COMMITTED), Proposal([5]), verdict, [5, 8])
    drafter.observe(outcome)
    assert [name for name, _ in seen] == ["draft", "lookup", "answers", "pool"]
    assert all(observed is outcome for _, observed in seen)


def test_ouroboros_learns_from_a_verdict_what_a_step_commits_and_what_the_target_wrote(tiny_model):
    drafter = ouroboros(tiny_model)
    before = drafter.trunk.recent_tokens
    # The target kept the trunk's 5, wrote 8 in place of its 6 and would have gone on with 9.
    verdict = Acceptance(1, None, 0, 8)
    new = COMMITTED + [5, 8]
    drafter.observe(StepOutcome(new, len(COMMITTED), Proposal([5, 6]), verdict, [5, 8, 9]))
    assert drafter.trunk.recent_tokens == pytest.approx(0.8 * before + 0.2 * 2)  # two committed
    assert drafter.phrases.pool.lookup(5, 8) == [((8, 9), Source.POOL)]
    # the text's newest phrases are pooled too
    assert drafter.phrases.pool.lookup(11, 8) == [((3, 1, 2, 5, 8), Source.PROMPT)]


def test_ouroboros_start_pools_the_prompts_phrases_and_seeds_the_lookahead_window(tiny_model):
    drafter = ouroboros(tiny_model, window=2, ngram=3)
    prompt = [4, 5, 6, 7]
    drafter.start(prompt)
    assert drafter.phrases.pool.lookup(4, 8) == [((5, 6), Source.PROMPT)]
    assert drafter.phrases.pool.lookup(5, 8) == [((6, 7), Source.PROMPT)]
    levels = drafter.trunk.window.levels
    assert len(levels) == 1 and len(levels[0]) == 2 and set(levels[0]) <= set(prompt)
