"""The phrase pool (phrases.PhrasePool): newest first, re-insertion, per-key and global bounds,
n-gram filling; then, through requests, context lookup's matches, the trust copies and pool phrases
are cut by, and a verdict read against its own proposal."""

from ouroboros_core.events import Source
from ouroboros_core.phrases import PhrasePool


def phrases(pool, key, k=100):
    return [phrase for phrase, _ in pool.lookup(key, k)]


def test_lookup_is_newest_first_and_bounded_by_k():
    pool = PhrasePool(per_key=8)
    for phrase in [(1, 2), (3, 4), (5, 6)]:
        pool.add(7, phrase, Source.POOL)
    assert phrases(pool, 7) == [(5, 6), (3, 4), (1, 2)]
    assert phrases(pool, 7, k=2) == [(5, 6), (3, 4)]
    assert pool.lookup(7, 0) == []
    assert pool.lookup(8, 3) == []  # unknown key
    assert len(pool) == 3


def test_reinsert_moves_to_front_and_keeps_first_source():
    pool = PhrasePool(per_key=8)
    pool.add(7, (1, 2), Source.PROMPT)
    pool.add(7, (3, 4), Source.POOL)
    pool.add(7, (1, 2), Source.POOL)
    assert pool.lookup(7, 5) == [((1, 2), Source.PROMPT), ((3, 4), Source.POOL)]
    assert len(pool) == 2  # not stored twice


def test_per_key_bound_drops_the_oldest():
    pool = PhrasePool(per_key=2)
    pool.add(1, (10,), Source.POOL)
    pool.add(1, (11,), Source.POOL)
    pool.add(1, (10,), Source.POOL)  # refreshed: now (11,) is the oldest
    pool.add(1, (12,), Source.POOL)
    assert phrases(pool, 1) == [(12,), (10,)]
    pool.add(2, (13,), Source.POOL)  # another key has its own quota
    assert phrases(pool, 2) == [(13,)]
    assert len(pool) == 3


def test_global_bound_drops_the_oldest_over_all_keys():
    pool = PhrasePool(per_key=8, max_phrases=3)
    pool.add(1, (10,), Source.POOL)
    pool.add(2, (20,), Source.POOL)
    pool.add(3, (30,), Source.POOL)
    pool.add(1, (10,), Source.POOL)  # refreshed, so key 2's phrase is now the oldest
    pool.add(4, (40,), Source.POOL)
    assert len(pool) == 3
    assert phrases(pool, 2) == []
    assert phrases(pool, 1) == [(10,)]
    assert phrases(pool, 4) == [(40,)]
    pool.add(5, (50,), Source.POOL)
    assert phrases(pool, 3) == []
    assert len(pool) == 3


def test_empty_phrase_is_ignored():
    pool = PhrasePool()
    pool.add(1, (), Source.POOL)
    assert len(pool) == 0 and pool.lookup(1, 3) == []


def test_add_ngrams_keys_each_phrase_on_the_token_before_it():
    pool = PhrasePool(per_key=8)
    pool.add_ngrams([1, 2, 3, 4, 5], 3, Source.PROMPT)
    assert pool.lookup(1, 5) == [((2, 3), Source.PROMPT)]
    assert phrases(pool, 2) == [(3, 4)]
    assert phrases(pool, 3) == [(4, 5)]
    assert phrases(pool, 4) == []  # too close to the end for a full phrase
    assert len(pool) == 3


def test_add_ngrams_from_start_and_repeated_keys():
    pool = PhrasePool(per_key=8)
    pool.add_ngrams([1, 2, 1, 3, 1, 2], 2, Source.PROMPT, start=2)
    # Only windows starting at index 2 or later: (1->3), (3->1), (1->2).
    assert phrases(pool, 1) == [(2,), (3,)]
    assert phrases(pool, 3) == [(1,)]
    assert phrases(pool, 2) == []
    assert len(pool) == 3


def test_add_ngrams_on_short_input_adds_nothing():
    pool = PhrasePool()
    pool.add_ngrams([1, 2], 4, Source.PROMPT)
    assert len(pool) == 0


def test_context_lookup_prefers_the_latest_match_with_a_full_continuation():
    from ouroboros_core.lookup import context_lookup

    seq = [1, 2, 3, 4, 5, 9, 1, 2, 7, 1, 2]
    assert context_lookup(seq, 2)[0] == [7, 1]  # the latest earlier [1, 2] has two tokens after it
    assert context_lookup(seq, 4)[0] == [3, 4, 5, 9]  # only the first [1, 2] has four
    # The first [1, 2] is out of the window: the longest match in it.
    assert context_lookup(seq, 4, scan=6)[0] == [7, 1, 2]
    assert context_lookup([1, 2, 3], 4)[0] == []
    assert context_lookup([2], 4)[0] == []
    assert context_lookup([2, 2], 4)[0] == [2]  # one token matched is a match
    # A short period: the latest match sits right at the end, an earlier one gives the full run.
    run = [8] + [5, 6] * 6
    assert context_lookup(run, 6)[0] == [5, 6, 5, 6, 5, 6]


def test_context_lookup_prefers_the_occurrence_that_matches_more_of_the_tail():
    from ouroboros_core.lookup import context_lookup

    # After [4, 1, 2]: the [4, 1, 2] at the start (three tokens matched) beats the later [1, 2]
    # and [2].
    seq = [4, 1, 2, 30, 31, 9, 2, 40, 1, 2, 50, 51, 4, 1, 2]
    assert context_lookup(seq, 2) == ([30, 31], 3)  # with how many tokens it matched
    # Matching two at most: the latest [1, 2].
    assert context_lookup(seq, 2, longest=2) == ([50, 51], 2)
    assert context_lookup(seq, 2, longest=1) == ([50, 51], 1)  # [2]'s latest occurrence
    # Only the last token matches: still a continuation.
    assert context_lookup([7, 8, 9, 7], 3) == ([8, 9, 7], 1)
    assert context_lookup([1, 2, 3], 4) == ([], 0)


def test_lookup_trust_learns_how_far_copies_stand_by_how_much_they_matched():
    from ouroboros_core.proposal import LookupTrust

    trust = LookupTrust(longest=4, length=12)
    # Untried, a copy is trusted (80% a token): all 12 tokens while reached for sure, fewer when
    # rarely reached.
    assert trust.length(1, 1.0, 12, 0.05) == 12
    assert trust.length(1, 0.2, 12, 0.05) == 6  # 0.2 * 0.8 ** 6 = 0.052, ** 7 = 0.042
    assert trust.length(1, 1.0, 5, 0.05) == 5  # never more than there is
    for _ in range(20):  # copies after one matching token keep their first token, never the second
        trust.observe(1, 12, 1)
    assert trust.reached[1][:3] == [20, 20, 0] and trust.kept[1][:3] == [20, 0, 0]
    assert trust.length(1, 1.0, 12, 0.05) == 1
    # What one matched length taught says nothing of another.
    assert trust.length(4, 1.0, 12, 0.05) == 12
    for _ in range(20):  # copies after four matching tokens stand in full
        trust.observe(4, 12, 12)
    assert trust.length(4, 1.0, 12, 0.05) == 12 and trust.length(4, 0.2, 12, 0.05) == 12


def sampled_drafter(models, trunk, stands, choices_at, sampler=None, **options):
    """An Ouroboros drafter whose draft always proposes `trunk` (its chances of standing `stands`),
    having seen `choices_at` (trunk position -> its other best keyed guesses there), sampled as the
    target would (unless `sampler` says otherwise)."""
    from ouroboros_core.config import OuroborosConfig
    from ouroboros_core.drafters import Ouroboros
    from ouroboros_core.proposal import Branches
    from ouroboros_core.sampling import Sampler
    from ouroboros_core.trunk import DraftTrunk, Trunk

    drafter = Ouroboros(
        models.draft("llama", "noisy"),
        OuroborosConfig(**options),
        PhrasePool(8, 1000),
        sampler=sampler or Sampler(0.8, 0.95, 1),
    )
    drafted = Trunk(
        list(trunk),
        [Source.DRAFT] * len(trunk),
        list(stands),
        dict(choices_at),
        Branches(DraftTrunk.name),
    )
    drafter.trunk.propose = lambda step: drafted
    return drafter


def test_sampled_copy_parting_from_the_trunk_off_the_drafts_best_guesses_is_left_out(models):
    """A context-lookup copy hangs where it parts from the draft's trunk; sampled, one whose token
    there is not among the draft's best keyed guesses at that position is not verified at all, one
    whose token is keeps its length. A copy after the whole trunk is not judged so. Greedy, every
    copy is verified."""
    from ouroboros_core.sampling import Sampler

    committed = [1, 2, 5, 9, 10, 11, 3, 1, 2]  # the last [1, 2] was followed by 5, 9, 10, 11 ...
    options = {"lookup": 4, "branches": 0, "gamma": 1}
    kept = sampled_drafter(models, [5, 6], [0.9, 0.5], {1: {9, 8}}, **options).propose(committed, 8)
    # It parts from the trunk at its 6: it hangs there.
    assert kept.branches == [[9, 10, 11]] and kept.branch_attach == [1]
    dropped = sampled_drafter(models, [5, 6], [0.9, 0.5], {1: {7, 8}}, **options)
    dropped = dropped.propose(committed, 8)
    assert dropped.branches == []
    after = sampled_drafter(models, [5], [0.9], {0: {7}}, **options).propose(committed, 8)
    assert after.branches == [[9, 10, 11]] and after.branch_attach == [1]
    greedy = sampled_drafter(models, [5, 6], [0.9, 0.5], {1: {7, 8}}, sampler=Sampler(), **options)
    assert greedy.propose(committed, 8).branches == [[9, 10, 11]]


def test_a_verdict_is_read_against_the_proposal_it_is_for(models):
    """Nothing waits on the drafter between propose and observe: the context-lookup copy's note
    travels in the proposal, credited to the lookup as its branch is, so a verdict teaches the copy
    it was for even after the drafter proposed again."""
    from ouroboros_core.lookup import ContextLookup
    from ouroboros_core.proposal import Copy, StepOutcome
    from ouroboros_core.tree import Acceptance

    committed = [1, 2, 5, 9, 10, 11, 3, 1, 2]  # the last [1, 2] was followed by 5, 9, 10, 11 ...
    drafter = sampled_drafter(models, [5], [0.9], {}, lookup=4, branches=0)
    first = drafter.propose(committed, 8)
    assert first.branches == [[9, 10, 11]] and first.branch_owners == [ContextLookup.name]
    assert first.notes == {ContextLookup.name: Copy(matched=2, hangs=1, length=3)}
    drafter.propose([7, 8, 7], 8)  # another proposal in between
    # The target takes the trunk and the copy's first two tokens.
    verdict = Acceptance(1, 0, 2, 42)
    drafter.observe(StepOutcome(committed + [5, 9, 10, 42], len(committed), first, verdict, [5, 9]))
    trust = drafter.lookup.trust
    assert trust.reached[2] == [1, 1, 1, 0] and trust.kept[2] == [1, 1, 0, 0]
    assert sum(map(sum, trust.reached)) == 3
    assert not drafter.lookup.repeating  # a copy of 3 tokens: no run to copy on


def test_sampled_pool_phrases_are_cut_to_how_far_this_requests_pool_phrases_stood(models):
    """Sampled, a pool phrase after the trunk is verified as far as the request's pool phrases have
    stood (row POOL_PHRASE of the pool proposer's LookupTrust, learned from the verdicts where the
    target reached them): trusted at first, cut to one token once phrases keep only their first,
    left out where the trunk is unlikely to stand. The phrases offered travel in the proposal,
    credited to the pool."""
    from ouroboros_core.phrases import POOL_PHRASE, PoolPhrases
    from ouroboros_core.proposal import Offered, StepOutcome
    from ouroboros_core.tree import Acceptance

    committed = [1, 2, 3, 4]
    drafter = sampled_drafter(models, [5], [0.9], {}, lookup=0, branches=1)
    drafter.phrases.pool.add(5, (20, 21, 22, 23, 24), Source.POOL)
    proposal = drafter.propose(committed, 8)
    assert proposal.branches == [[20, 21, 22, 23, 24]]
    assert proposal.branch_owners == [PoolPhrases.name]
    assert proposal.notes[PoolPhrases.name] == Offered([[20, 21, 22, 23, 24]])
    # The target takes the trunk and the phrase's first token, then goes its own way.
    for _ in range(30):
        verdict = Acceptance(1, 0, 1, 99)
        drafter.observe(
            StepOutcome(committed + [5, 20, 99], len(committed), proposal, verdict, [5, 99])
        )
    trust = drafter.phrases.trust
    assert trust.reached[POOL_PHRASE][:3] == [30, 30, 0] and trust.kept[POOL_PHRASE][:2] == [30, 0]
    assert drafter.propose(committed, 8).branches == [[20]]
    unlikely = sampled_drafter(models, [5], [0.04], {}, lookup=0, branches=1)
    unlikely.phrases.pool.add(5, (20, 21), Source.POOL)
    assert unlikely.propose(committed, 8).branches == []


def test_shared_prefix_finds_the_first_difference_within_the_limit():
    import random

    from ouroboros_core.trunk import shared_prefix

    rng = random.Random(0)
    for _ in range(500):
        a = [rng.randrange(3) for _ in range(rng.randrange(40))]
        b = a[: rng.randrange(len(a) + 1)] + [rng.randrange(3) for _ in range(rng.randrange(10))]
        limit = rng.randrange(min(len(a), len(b)) + 1)
        expected = 0
        while expected < limit and a[expected] == b[expected]:
            expected += 1
        assert shared_prefix(a, b, limit) == expected, (a, b, limit)
