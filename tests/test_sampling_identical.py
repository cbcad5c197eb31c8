"""Sampled lanes that stay identical: each position's randomness comes from the seed and the position alone,
so vanilla, speculative and Ouroboros write the same sampled text token for token (test_sampling checks that
the tokens follow the target's distribution)."""

from __future__ import annotations

import itertools
from collections import Counter

import pytest
import torch

import ouroboros_core.engine as engine_module
from ouroboros_core import load_engine
from ouroboros_core.verify import position_uniform, row_positions, target_tokens

PROMPTS = ["def fizzbuzz(n):\n",
           'def sort_by_length(words):\n    """Return the words sorted by length, shortest first."""\n',
           "class Stack:\n    def __init__(self):\n        self.items = []\n\n    def push(self, item):\n"]


@pytest.fixture(scope="module")
def engine():
    return load_engine(device="cpu")


def test_position_uniform_is_fixed_by_seed_and_position_and_uniform():
    assert position_uniform(3, 17) == position_uniform(3, 17)
    assert position_uniform(3, 17) != position_uniform(4, 17) != position_uniform(3, 18)
    draws = [position_uniform(seed, position) for seed in range(20) for position in range(1000)]
    assert all(0.0 <= u < 1.0 for u in draws)
    counts = Counter(int(u * 20) for u in draws)
    expected = len(draws) / 20
    chi2 = sum((counts[b] - expected) ** 2 / expected for b in range(20))
    assert chi2 < 43.8  # chi-square, 19 degrees of freedom, alpha 0.001
    # Neighbouring positions are not correlated (lag-1 correlation of 20,000 draws: sd ~0.007).
    a = torch.tensor(draws[:-1]) - 0.5
    b = torch.tensor(draws[1:]) - 0.5
    assert abs(float((a * b).mean() / (a * a).mean())) < 0.03


def test_target_tokens_sample_the_distribution_and_never_a_zero_probability_token():
    probs = torch.tensor([0.5, 0.0, 0.3, 0.15, 0.05])
    logits = probs.clamp(min=1e-30).log().expand(20_000, -1)
    tokens = target_tokens(logits, 1.0, 1.0, seed=9, positions=list(range(20_000)))
    counts = Counter(tokens)
    assert counts[1] == 0
    chi2 = sum((counts[t] - 20_000 * p) ** 2 / (20_000 * p) for t, p in enumerate(probs.tolist()) if p)
    assert chi2 < 16.3  # 3 degrees of freedom, alpha 0.001
    nucleus = Counter(target_tokens(logits, 1.0, 0.75, seed=9, positions=list(range(20_000))))
    assert set(nucleus) == {0, 2}  # 0.5 + 0.3 reaches 0.75: the rest is cut
    assert target_tokens(logits[:3], 0.0, 1.0, None, []) == [0, 0, 0]


def test_row_positions_follow_the_tree():
    # 10 tokens committed; a trunk of 3; a branch of 2 after the whole trunk, a branch of 2 after trunk[:1].
    assert row_positions(10, 3, [[7, 8], [5, 6]], [3, 1]) == [10, 11, 12, 13, 14, 15, 12, 13]
    assert row_positions(10, 0, [], None) == [10]


@pytest.mark.parametrize("prompt", PROMPTS)
def test_sampled_lanes_are_identical_token_for_token(engine, prompt):
    greedy = engine.generate(prompt, "vanilla", 48).token_ids
    runs = {method: engine.generate(prompt, method, 48, temperature=0.8, top_p=0.95, seed=11)
            for method in ("vanilla", "speculative", "ouroboros")}
    reference = runs["vanilla"].token_ids
    for method, result in runs.items():
        assert result.token_ids == reference, method
        ids = [t.id for event in result.events for t in event.committed]
        assert ids == result.token_ids
    assert reference != greedy
    assert runs["ouroboros"].stats.accepted_tokens > 0  # the drafts really stood in for target forwards
    again = engine.generate(prompt, "ouroboros", 48, temperature=0.8, top_p=0.95, seed=11).token_ids
    other = engine.generate(prompt, "ouroboros", 48, temperature=0.8, top_p=0.95, seed=12).token_ids
    assert again == reference and other != reference


def test_a_randomness_stream_per_request_would_part_the_lanes(engine, monkeypatch):
    """The check above has teeth: draws taken in order from one stream per request, as before, split the
    lanes, because Ouroboros samples more rows per forward than it keeps."""
    counter = itertools.count()

    def streamed(logits, temperature, top_p, seed, positions):
        return target_tokens(logits, temperature, top_p, seed, [next(counter) for _ in positions])

    monkeypatch.setattr(engine_module, "target_tokens", streamed)
    differ = 0
    for prompt in PROMPTS:
        counter = itertools.count()
        vanilla = engine.generate(prompt, "vanilla", 48, temperature=0.8, seed=11).token_ids
        counter = itertools.count()
        ouroboros = engine.generate(prompt, "ouroboros", 48, temperature=0.8, seed=11).token_ids
        differ += vanilla != ouroboros
    assert differ >= 2
