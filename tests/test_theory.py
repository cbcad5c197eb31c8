"""The speedup theory the benchmark and the app print beside measured figures: checked against
closed forms and against a simulated speculative decoder whose per-token acceptance is known."""

from __future__ import annotations

import random

import pytest

from ouroboros_core.events import Stats
from ouroboros_core.theory import (
    expected_speedup,
    expected_tokens_per_forward,
    per_token_acceptance,
)


def test_closed_forms():
    # nothing accepted: the target's own token only
    assert expected_tokens_per_forward(0.0, 4) == 1.0
    assert expected_tokens_per_forward(1.0, 4) == 5.0  # everything accepted: gamma drafts plus one
    assert expected_tokens_per_forward(0.5, 2) == pytest.approx(1 + 0.5 + 0.25)
    assert expected_speedup(0.5, 2, 0.0) == pytest.approx(1.75)  # free drafts: tokens per forward
    assert expected_speedup(0.5, 2, 0.25) == pytest.approx(1.75 / 1.5)
    assert expected_speedup(0.0, 4, 0.1) < 1.0  # a useless draft only costs


def simulate(rate: float, gamma: int, steps: int, seed: int = 0) -> tuple[int, int, int, int]:
    """A speculative decoder whose drafts each stand with chance `rate`: (accepted, drafted,
    rejected steps, tokens), counted the way the engine counts them (drafted: the whole trunk,
    judged or not)."""
    rng = random.Random(seed)
    accepted = rejected_steps = tokens = 0
    for _ in range(steps):
        run = 0
        while run < gamma and rng.random() < rate:
            run += 1
        accepted += run
        rejected_steps += run < gamma
        tokens += run + 1
    return accepted, gamma * steps, rejected_steps, tokens


@pytest.mark.parametrize("rate", [0.3, 0.69, 0.9])
def test_per_token_acceptance_recovers_a_known_rate(rate):
    gamma, steps = 4, 20_000
    accepted, drafted, rejected_steps, tokens = simulate(rate, gamma, steps)
    estimate = per_token_acceptance(accepted, rejected_steps)
    assert estimate == pytest.approx(rate, abs=0.01)
    # The formula, fed the estimate, predicts the tokens per forward the simulation produced.
    assert expected_tokens_per_forward(estimate, gamma) == pytest.approx(tokens / steps, rel=0.01)
    # Accepted over drafted counts the never-judged tokens after a rejection, and reads low.
    assert accepted / drafted < rate - 0.02


def test_stats_carry_the_per_token_rate():
    stats = Stats(
        new_tokens=10,
        target_forwards=4,
        drafted_tokens=16,
        accepted_tokens=6,
        seconds=1.0,
        draft_seconds=0.5,
        verify_seconds=0.4,
        rejected_steps=3,
    )
    assert stats.per_token_acceptance == pytest.approx(6 / 9)
    assert stats.to_dict()["per_token_acceptance"] == pytest.approx(0.6667)
    assert per_token_acceptance(0, 0) == 0.0


@pytest.mark.parametrize("method", ["speculative", "ouroboros"])
def test_the_engine_counts_each_rejecting_step_once(make_engine, method):
    engine = make_engine("llama", "noisy")
    result = engine.generate("def add(a, b):\n    return a + b\n", method, 32, gamma=4)
    rejecting = sum(bool(step.rejected) for step in result.events)
    assert 0 < rejecting < len(result.events), (
        "the noisy draft should be rejected in some steps, not all"
    )
    assert result.stats.rejected_steps == rejecting
    # Tokens drafted after a rejection are never judged: counting them (accepted over drafted) reads
    # lower.
    assert result.stats.per_token_acceptance > result.stats.acceptance_rate
