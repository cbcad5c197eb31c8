"""Each Ouroboros proposer at its own boundary, no model: given a step's context, what it proposes;
given the step's outcome, what it learns (proposal.Proposer's contract)."""

from ouroboros_core.config import OuroborosConfig
from ouroboros_core.events import Source
from ouroboros_core.lookup import COPY_RUN, ContextLookup
from ouroboros_core.phrases import PoolPhrases
from ouroboros_core.phrases import PhrasePool
from ouroboros_core.proposal import Branches, Copy, Proposal, StepContext, StepOutcome
from ouroboros_core.tree import Acceptance
from ouroboros_core.trunk import Alternative, DraftTrunk, SpareChoices, Trunk

# the text's last [1, 2] was followed by 5, 9, 10, 11 before
COMMITTED = [1, 2, 5, 9, 10, 11, 3, 1, 2]


def trunk_of(tokens, spare=(), stands=None) -> Trunk:
    stands = list(stands) if stands is not None else [0.9] * len(tokens)
    return Trunk(
        list(tokens),
        [Source.DRAFT] * len(tokens),
        stands,
        {},
        Branches(DraftTrunk.name),
        list(spare),
    )


def step_on(trunk: Trunk, committed=COMMITTED, limit: int = 8, proposal=None) -> StepContext:
    proposal = proposal or Proposal(trunk.tokens, trunk.sources)
    return StepContext(committed, limit, trunk=trunk, proposal=proposal)


def outcome(proposal: Proposal, verdict: Acceptance, new: list[int], committed=COMMITTED):
    trunk_tokens = list(proposal.trunk[: verdict.trunk_accepted]) + [0]
    return StepOutcome(committed + new, len(committed), proposal, verdict, trunk_tokens)


def test_context_lookup_hangs_its_copy_where_it_parts_from_the_trunk():
    lookup = ContextLookup(OuroborosConfig(lookup=4), trims=False)
    offered = lookup.propose(step_on(trunk_of([5, 6])))
    # the copy [5, 9, 10, 11] shares the trunk's 5: [9, 10, 11] after one trunk token
    assert offered.tokens == [[9, 10, 11]] and offered.attach == [1]
    assert offered.sources == [Source.PROMPT] and offered.note == Copy(2, 1, 3)
    # within the step's limit: two tokens in all, one of them the trunk's
    assert lookup.propose(step_on(trunk_of([5, 6]), limit=2)).tokens == [[9]]
    # nothing to copy: no branch, no note
    assert lookup.propose(step_on(trunk_of([5]), committed=[1, 2, 3])) == Branches("lookup")


def test_context_lookup_learns_how_far_its_copy_stood_and_when_to_lead():
    lookup = ContextLookup(OuroborosConfig(lookup=4), trims=False)
    trunk = trunk_of([5, 6])
    proposal = Proposal(trunk.tokens, trunk.sources)
    proposal.add(lookup.propose(step_on(trunk, proposal=proposal)))
    lookup.observe(outcome(proposal, Acceptance(1, 0, 2, 42), [5, 9, 10, 42]))
    assert lookup.trust.reached[2][:3] == [1, 1, 1] and lookup.trust.kept[2][:3] == [1, 1, 0]
    assert not lookup.repeating  # two copied tokens: no run
    # A long copy that stood whole: the text repeats itself, lookup leads the next step.
    text = [7, 1, 2, 3, 4, 5, 6, 8, 7, 1, 2]
    long = ContextLookup(OuroborosConfig(lookup=6), trims=False)
    proposal = Proposal()
    proposal.add(long.propose(step_on(trunk_of([]), committed=text, proposal=proposal)))
    assert proposal.branches == [[3, 4, 5, 6, 8, 7]]
    long.observe(outcome(proposal, Acceptance(0, 0, COPY_RUN, 9), [3, 4, 5, 6, 9], committed=text))
    assert long.repeating


def test_context_lookup_copies_further_while_whole_copies_stand_and_falls_back_after_one_short():
    loop = [7, 1, 2, 3, 4, 5, 6] * 6  # a text that loops with a period of 7

    def step(lookup, committed, accepted=None):
        """Propose on `committed`; the target keeps `accepted` of the copy (all of it if None)."""
        proposal = Proposal()
        proposal.add(lookup.propose(step_on(trunk_of([]), committed, 16, proposal)))
        (copy,) = proposal.branches
        kept = len(copy) if accepted is None else accepted
        new = copy[:kept] + [99]
        lookup.observe(outcome(proposal, Acceptance(0, 0, kept, 99), new, committed=committed))
        return copy

    lookup = ContextLookup(OuroborosConfig(lookup=4, lookup_grow=12), trims=False)
    lengths = [len(step(lookup, loop)) for _ in range(4)]
    assert lengths == [4, 8, 12, 12]  # doubled after each whole copy, up to lookup_grow
    assert step(lookup, loop) == [7, 1, 2, 3, 4, 5, 6, 7, 1, 2, 3, 4]  # the loop, copied on
    step(lookup, loop, accepted=5)  # a copy that fell short
    assert len(step(lookup, loop)) == 4  # back to L
    # Without lookup_grow a copy stays L tokens however often copies stand whole.
    plain = ContextLookup(OuroborosConfig(lookup=4), trims=False)
    assert [len(step(plain, loop)) for _ in range(3)] == [4, 4, 4]


def test_pool_phrases_hang_after_the_trunk_unlike_the_branches_already_there():
    pool = PhrasePool(8, 100)
    phrases = PoolPhrases(pool, OuroborosConfig(branches=2, lookup=0, ngram=4), trims=False)
    pool.add(6, (30, 31, 32), Source.POOL)
    pool.add(6, (20, 21, 22), Source.POOL)
    trunk = trunk_of([5, 6])
    proposal = Proposal(trunk.tokens, trunk.sources)
    proposal.add(Branches("lookup", [[20, 21, 22, 23]], [Source.PROMPT], [2]))  # holds one
    offered = phrases.propose(step_on(trunk, proposal=proposal))
    assert offered.tokens == [[30, 31, 32]] and offered.attach == [2] and offered.note is None
    # keyed on the text's last token where there is no trunk
    pool.add(2, (40, 41), Source.POOL)
    assert phrases.propose(step_on(trunk_of([]))).tokens == [[40, 41]]


def test_pool_phrases_learn_the_targets_tokens_over_a_rejected_trunk_tail():
    pool = PhrasePool(8, 100)
    phrases = PoolPhrases(pool, OuroborosConfig(branches=1, lookup=0, ngram=3), trims=False)
    proposal = Proposal([5, 6, 7], [Source.DRAFT] * 3)
    # The target kept 5, then wrote 8 and would have gone on 9: the pool keeps (8, 9) after 5.
    step = StepOutcome(
        COMMITTED + [5, 8], len(COMMITTED), proposal, Acceptance(1, None, 0, 8), [5, 8, 9]
    )
    phrases.observe(step)
    assert ((8, 9), Source.POOL) in pool.lookup(5, 4)


def test_spare_choices_fill_the_free_rows_and_skip_a_place_already_offered():
    spare = [Alternative(0, [7], 0.3), Alternative(1, [8, 9], 0.2), Alternative(0, [4], 0.1)]
    trunk = trunk_of([5, 6], spare)
    proposal = Proposal(trunk.tokens, trunk.sources)
    proposal.add(Branches("lookup", [[7, 1]], [Source.PROMPT], [0]))  # 7 at place 0 already
    # 8 rows free: 1 pending + 2 trunk + 2 lookup leave 3
    chosen = SpareChoices(8).propose(step_on(trunk, proposal=proposal))
    assert chosen.tokens == [[8, 9], [4]] and chosen.attach == [1, 0]
    assert SpareChoices(6).propose(step_on(trunk, proposal=proposal)).tokens == [[4]]
    assert SpareChoices(0).propose(step_on(trunk, proposal=proposal)).tokens == []
