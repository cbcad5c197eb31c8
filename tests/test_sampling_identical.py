"""Sampled lanes that stay identical: each position's randomness comes from the seed and the
position alone, so vanilla, speculative and Ouroboros write the same sampled text token for token
(test_sampling checks that the tokens follow the target's distribution)."""

from __future__ import annotations

import itertools
import math
from collections import Counter

import pytest
import torch

from gpu_checks import assert_noise_as_on_the_cpu
from ouroboros_core import load_engine
from ouroboros_core import sampling
from ouroboros_core.sampling import (
    Sampler,
    keyed_scores,
    noise_bits,
    nucleus,
    position_key,
    position_noise,
    tensor_noise_bits,
)
from ouroboros_core.tree import DraftTree

PROMPTS = [
    "def fizzbuzz(n):\n",
    'def sort_by_length(words):\n    """Return the words sorted by length, shortest first."""\n',
    "class Stack:\n    def __init__(self):\n        self.items = []\n\n    def push(self, item):\n",
]


@pytest.fixture(scope="module")
def engine():
    return load_engine("demo", device="cpu")


# --- the noise, from SplitMix64's definition, in Python's unbounded integers ---------------------
# Nothing taken from the module.

MASK = (1 << 64) - 1
GAMMA = 0x9E3779B97F4A7C15  # SplitMix64's increment, the golden ratio in 64 bits


def splitmix64_mix(z: int) -> int:
    """SplitMix64's output function (Stafford's Mix13 variant of MurmurHash3's finaliser)."""
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK
    return z ^ (z >> 31)


def splitmix64(state: int):
    """SplitMix64's stream from `state`: add GAMMA, output the mix of the new state (Vigna's
    splitmix64.c)."""
    while True:
        state = (state + GAMMA) & MASK
        yield splitmix64_mix(state)


def reference_key(seed: int, position: int) -> int:
    """A position's key as sampling.position_key derives it: the mix of seed * GAMMA +
    (position + 1) times the mix's first multiplier, modulo 2^64."""
    return splitmix64_mix((seed * GAMMA + (position + 1) * 0xBF58476D1CE4E5B9) & MASK)


def reference_bits(seed: int, position: int, token: int) -> int:
    """53 random bits: the top of output number `token` (from 0) of SplitMix64's stream whose first
    output is the mix of the key, i.e. the stream from key - GAMMA; output n of it is the mix of
    key + n * GAMMA."""
    return splitmix64_mix((reference_key(seed, position) + token * GAMMA) & MASK) >> 11


def splitmix_noise(seed: int, position: int, token: int) -> float:
    """The noise of one token: Gumbel(0, 1) of the uniform in the middle of its 2^-53 step."""
    return -math.log(-math.log((reference_bits(seed, position, token) + 0.5) * 2.0**-53))


def test_the_reference_is_splitmix64s_stream():
    key = reference_key(5, 9)
    stream = splitmix64((key - GAMMA) & MASK)
    assert [next(stream) >> 11 for _ in range(1000)] == [
        reference_bits(5, 9, token) for token in range(1000)
    ]
    # The published first outputs of splitmix64.c from state 0.
    assert list(itertools.islice(splitmix64(0), 4)) == [
        0xE220A8397B1DCDAF,
        0x6E789E6AA1B965F4,
        0x06C45D188009454F,
        0xF88BB8A8724C81EC,
    ]


# (seed, position, token id) -> the position's key, the token's 53 bits and its noise, computed with
# the reference above and written down: a change to any step of the key or of the stream changes
# every one of them.
PINNED_NOISE = [
    (0, 0, 0, 0xF2FEA5823ED3A667, 5445156731172977, 0.6865735654400769),
    (1, 0, 0, 0xE4BACEA5C4B9B499, 352751230379466, -1.17557838382148),
    (0, 1, 0, 0x2A3D0F6B368CAA96, 3219082759584716, -0.028517204686974638),
    (11, 17, 777, 0xD41A7A5760623E24, 1357951935982075, -0.6376590683688076),
    (3, 65_537, 151_935, 0xD06F750EB454D1AE, 6944172689823462, 1.346607107615778),
    (2**63 - 1, 2**20, 4095, 0xE63ED2D41CE3423F, 972781039366024, -0.8000357232690322),
    (2**31 - 1, 511, 50_000, 0x6D963AFF08F46882, 6350243873122128, 1.0511631450272096),
    (2**63, 3, 1, 0x0357F5ACBE6D4467, 2038047882664280, -0.39610930899698343),
]


@pytest.mark.parametrize(
    "seed, position, token, key, bits, noise",
    PINNED_NOISE,
    ids=[f"{seed}-{position}-{token}" for seed, position, token, *_ in PINNED_NOISE],
)
def test_the_noise_is_pinned_to_values_computed_outside_the_module(
    seed, position, token, key, bits, noise
):
    assert (reference_key(seed, position), reference_bits(seed, position, token)) == (key, bits)
    assert splitmix_noise(seed, position, token) == pytest.approx(noise, rel=1e-13, abs=1e-13)
    assert position_key(seed, position) == key
    ids = torch.tensor([token])
    assert int(noise_bits(seed, [position], ids)[0, 0]) == bits
    assert int(tensor_noise_bits(seed, [position], ids)[0, 0]) == bits
    assert float(position_noise(seed, [position], ids)[0, 0]) == pytest.approx(
        noise, rel=1e-13, abs=1e-13
    )


def test_neighbouring_seeds_and_positions_give_uncorrelated_noise():
    """Seeds 0..7 and 2^63 - 1, 2^63 at positions 0..7, seeds 0, 1 at the 24 positions around 2^16:
    128 rows of 16,384 uniforms. A key that mixed seed and position into one sum (seed s at position
    p + 1 is then seed s + 1 at p) gives a correlation of 1; independent rows sit within 0.008 of 0
    (one sd), the largest of the 8,128 pairs here at 0.03."""
    ids = torch.arange(16_384)
    rows = [
        (seed, position)
        for seed in (0, 1, 2, 3, 4, 5, 6, 7, 2**63 - 1, 2**63)
        for position in range(8)
    ]
    rows += [(seed, position) for seed in (0, 1) for position in range(2**16 - 12, 2**16 + 12)]
    uniform = (
        torch.cat([noise_bits(seed, [position], ids) for seed, position in rows]).double()
        * 2.0**-53
    )
    centred = uniform - uniform.mean(dim=1, keepdim=True)
    centred /= centred.norm(dim=1, keepdim=True)
    # 0 on the diagonal
    correlation = (centred @ centred.T - torch.eye(len(rows), dtype=torch.float64)).abs()
    a, b = divmod(int(correlation.argmax()), len(rows))
    assert float(correlation.max()) < 0.05, (rows[a], rows[b], float(correlation.max()))


def test_the_noise_tensor_path_gives_the_numpy_paths_bits_on_the_cpu():
    """The path an accelerator takes (int64 arithmetic with logical shifts emulated), run here on
    the CPU."""
    assert_noise_as_on_the_cpu("cpu")


def test_position_noise_is_splitmix64_of_seed_position_and_token_and_gumbel():
    vocab = torch.arange(4096)
    tokens = [0, 1, 2, 777, 4095, 151_935]  # a Qwen-sized id too: every product wraps as in 64 bits
    got = position_noise(3, [17, 18], torch.tensor(tokens))
    for row, position in enumerate((17, 18)):
        assert got[row].tolist() == pytest.approx(
            [splitmix_noise(3, position, t) for t in tokens], rel=1e-12
        )
    noise = position_noise(3, [17, 18], vocab)
    assert torch.equal(noise[1], position_noise(3, [18], vocab)[0]), (
        "a row does not depend on the others asked for"
    )
    assert torch.equal(
        noise[:, [5, 9]], position_noise(3, [17, 18], torch.tensor([[5, 9], [5, 9]]))
    )
    assert not torch.equal(noise[0], position_noise(4, [17], vocab)[0]) and not torch.equal(
        noise[0], noise[1]
    )
    values = position_noise(5, list(range(50)), vocab).flatten()  # 204,800 values
    uniform = torch.exp(-torch.exp(-values))  # the Gumbel CDF: uniform if the noise is Gumbel(0, 1)
    counts = torch.histc(uniform, bins=20, min=0.0, max=1.0)
    expected = len(uniform) / 20
    # chi-square, 19 dof, alpha 0.001
    assert float(((counts - expected) ** 2 / expected).sum()) < 43.8
    # Neighbouring tokens and neighbouring positions are not correlated (sd of each estimate
    # ~0.003).
    centred = uniform.view(50, 4096) - 0.5
    for a, b in ((centred[:, :-1], centred[:, 1:]), (centred[:-1], centred[1:])):
        assert abs(float((a * b).mean() / (a * a).mean())) < 0.015


def test_keyed_scores_of_the_top_tokens_equal_those_of_the_whole_vocabulary(monkeypatch):
    """The fast path (noise for the most likely tokens only, where the nucleus ends among them) and
    the whole vocabulary's give every row the same scores, the nucleus's edge included."""
    torch.manual_seed(1)
    # flat rows (long nuclei) to sharp ones
    logits = torch.randn(40, 4096) * torch.linspace(0.3, 6, 40)[:, None]
    positions = list(range(100, 140))
    fast = keyed_scores(logits, 0.8, 0.95, 7, positions)
    monkeypatch.setattr(sampling, "NUCLEUS_TIERS", ())  # every row ranked over the whole vocabulary
    whole = keyed_scores(logits, 0.8, 0.95, 7, positions)
    assert torch.equal(fast, whole)
    kept = nucleus(torch.softmax(logits.double() / 0.8, dim=-1), 0.95) > 0
    assert torch.equal(fast > float("-inf"), kept)
    assert int(kept.sum(-1).min()) <= 256 < int(kept.sum(-1).max())  # both paths ran


def test_keyed_samples_follow_the_distribution_and_never_a_zero_probability_token():
    probs = torch.tensor([0.5, 0.0, 0.3, 0.15, 0.05])
    logits = probs.clamp(min=1e-30).log().expand(20_000, -1)
    tokens = Sampler(1.0, 1.0, seed=9).tokens(logits, list(range(20_000)))
    counts = Counter(tokens)
    assert counts[1] == 0
    chi2 = sum(
        (counts[t] - 20_000 * p) ** 2 / (20_000 * p) for t, p in enumerate(probs.tolist()) if p
    )
    assert chi2 < 16.3  # 3 degrees of freedom, alpha 0.001
    nucleus = Counter(Sampler(1.0, 0.75, seed=9).tokens(logits, list(range(20_000))))
    assert set(nucleus) == {0, 2}  # 0.5 + 0.3 reaches 0.75: the rest is cut
    assert abs(nucleus[0] / 20_000 - 0.625) < 0.015  # renormalised: 0.5 / 0.8
    assert Sampler().tokens(logits[:3], []) == [0, 0, 0]


def test_a_draft_keyed_with_the_same_noise_agrees_as_often_as_close_distributions_can():
    """Why the noise is per token: a draft whose distribution is close to the target's (total
    variation 0.1) picks the target's sample nearly as often as any coupling allows (0.9), where an
    inverse-CDF draw in vocabulary order loses it wherever the shift passes a small token's
    slice."""
    torch.manual_seed(0)
    target = torch.softmax(torch.randn(64) * 2, dim=0)
    draft = 0.9 * target + 0.1 * torch.softmax(torch.randn(64) * 2, dim=0)
    tv = float((target - draft).abs().sum() / 2)
    positions = list(range(20_000))
    picks = [
        Sampler(1.0, 1.0, seed=2).tokens(dist.log().expand(len(positions), -1), positions)
        for dist in (target, draft)
    ]
    agree = sum(a == b for a, b in zip(*picks)) / len(positions)
    assert 1 - 2 * tv / (1 + tv) - 0.01 <= agree <= 1 - tv + 0.01, (agree, tv)


def test_row_positions_follow_the_tree():
    # 10 tokens committed; a trunk of 3; a branch of 2 after the whole trunk, a branch of 2 after
    # trunk[:1].
    tree = DraftTree.of([1, 2, 3], [[7, 8], [5, 6]], [3, 1])
    assert tree.row_positions(10) == [10, 11, 12, 13, 14, 15, 12, 13]
    assert DraftTree.of().row_positions(10) == [10]


@pytest.mark.parametrize("prompt", PROMPTS)
def test_sampled_lanes_are_identical_token_for_token(engine, prompt):
    greedy = engine.generate(prompt, "vanilla", 48).token_ids
    runs = {
        method: engine.generate(prompt, method, 48, temperature=0.8, top_p=0.95, seed=11)
        for method in ("vanilla", "speculative", "ouroboros")
    }
    reference = runs["vanilla"].token_ids
    for method, result in runs.items():
        assert result.token_ids == reference, method
        ids = [t.id for event in result.events for t in event.committed]
        assert ids == result.token_ids
    assert reference != greedy
    # the drafts really stood in for target forwards
    assert runs["ouroboros"].stats.accepted_tokens > 0
    again = engine.generate(prompt, "ouroboros", 48, temperature=0.8, top_p=0.95, seed=11).token_ids
    other = engine.generate(prompt, "ouroboros", 48, temperature=0.8, top_p=0.95, seed=12).token_ids
    assert again == reference and other != reference


def test_a_randomness_stream_per_request_would_part_the_lanes(engine, monkeypatch):
    """The check above has teeth: noise taken in order from one stream per request, as before,
    splits the lanes, because Ouroboros samples more rows per forward than it keeps."""
    counter = itertools.count()
    keyed = Sampler.tokens

    def streamed(self, logits, positions):
        return keyed(self, logits, [next(counter) for _ in positions])

    monkeypatch.setattr(Sampler, "tokens", streamed)
    differ = 0
    for prompt in PROMPTS:
        counter = itertools.count()
        vanilla = engine.generate(prompt, "vanilla", 48, temperature=0.8, seed=11).token_ids
        counter = itertools.count()
        ouroboros = engine.generate(prompt, "ouroboros", 48, temperature=0.8, seed=11).token_ids
        differ += vanilla != ouroboros
    assert differ >= 2


@pytest.fixture
def sampled_rows(monkeypatch) -> list[int]:
    """The number of rows of each keyed_scores call from here on (each call samples a group of
    rows)."""
    rows = []
    keyed = sampling.keyed_scores

    def counting(logits, *args):
        rows.append(len(logits))
        return keyed(logits, *args)

    monkeypatch.setattr(sampling, "keyed_scores", counting)
    return rows


def test_sampled_rows_are_read_in_groups_and_only_when_walked(sampled_rows):
    """The verifier samples the trunk's rows and a branch's rows only when it reads them (a sampled
    row costs a nucleus search); what it reads equals sampling every row at once, and greedy groups
    are plain argmaxes."""
    torch.manual_seed(3)
    logits = torch.randn(7, 50) * 3
    positions = list(range(20, 27))
    sampler = Sampler(0.8, 0.9, seed=4)
    every = sampler.tokens(logits, positions)
    sampled_rows.clear()
    trunk, first, second = sampler.row_groups(logits, positions, [3, 2, 2])
    assert sampled_rows == []
    assert [trunk[i] for i in range(3)] == every[:3] and list(trunk[1:]) == every[1:3]
    assert second[1] == every[6] and second[0] == every[5]
    assert sampled_rows == [3, 2] and len(first) == 2  # the first branch was never read
    assert Sampler().row_groups(logits, [], [3, 4]) == [
        logits[:3].argmax(-1).tolist(),
        logits[3:].argmax(-1).tolist(),
    ]


def test_ouroboros_samples_fewer_rows_than_it_verifies(engine, sampled_rows):
    """In the engine: fewer rows sampled than the target verified (branches off the walked path are
    skipped), with the lanes still identical to vanilla's."""
    vanilla = engine.generate(
        PROMPTS[2], "vanilla", 48, temperature=0.8, top_p=0.95, seed=5
    ).token_ids
    sampled_rows.clear()
    result = engine.generate(PROMPTS[2], "ouroboros", 48, temperature=0.8, top_p=0.95, seed=5)
    verified = sum(len(e.trunk) + 1 + sum(map(len, e.branches)) for e in result.events)
    assert result.token_ids == vanilla
    assert any(e.branches for e in result.events)
    assert sum(sampled_rows) < verified, (sum(sampled_rows), verified)
