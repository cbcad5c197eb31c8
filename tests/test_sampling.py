"""Sampling: reproducible with a seed, and every method's tokens follow the target's own
distribution.

The distribution tests run many seeded requests and compare the sequences of new tokens they return
with the target's exact distribution over them (enumerated in float64 from the model itself): a
chi-square test at alpha 0.001, plus a check that no sequence the target gives probability 0
(outside its nucleus) appears. How much they catch is computed, not guessed:

* First tokens (3 new tokens, 1000 seeds per case, temperature 0.8, gamma 2). For sampling at
  temperature 1.0 instead of 0.8, and for returning the draft's samples instead of the target's,
  test_the_distribution_test_catches_the_wrong_samplers takes the wrong sampler's exact distribution
  and simulates the chi-square test under it (20,000 times), asserting a power of at least 0.95.
  Measured with 100,000 simulations: power 1.0000 against both, at top_p 1 and 0.8 (noncentrality
  150 for temperature 1.0 at top_p 1, 336 for the draft; the smallest statistic in 100,000 runs, 93,
  is still above the critical 65). The same design catches the old 1.5%-noise draft with power
  0.9996 at top_p 1, and temperature 0.9 instead of 0.8 with 0.74 at top_p 1 and 1.0 at top_p 0.8.
  False alarms, simulated under the target itself (10^6 times): 0.15% at top_p 1, 0.13% at 0.8, for
  the nominal 0.1% (cells of at least 5 expected counts, Wilson-Hilferty critical value).

The trees' design and its power: test_sampling_trees.
"""

from __future__ import annotations

from collections import Counter

import pytest

from chi_square import Cells, assert_follows_the_target, chi_square_critical, sequence_probabilities
from conftest import build_model, noisy_copy
from engine_checks import PROMPTS, run
from ouroboros_core import Engine

# --- sampling -------------------------------------------------------------------------------------


def test_sampling_with_a_seed_is_reproducible(make_engine):
    engine = make_engine("gpt2", "noisy")
    for method in ("vanilla", "speculative", "ouroboros"):
        a = run(engine, PROMPTS[0], method, 8, temperature=0.9, seed=7)
        b = run(engine, PROMPTS[0], method, 8, temperature=0.9, seed=7)
        c = run(engine, PROMPTS[0], method, 8, temperature=0.9, seed=8)
        assert a.token_ids == b.token_ids and a.text == b.text
        assert a.token_ids != c.token_ids
    top_p = [
        run(engine, PROMPTS[0], "ouroboros", 8, temperature=0.9, top_p=0.5, seed=3).token_ids
        for _ in range(2)
    ]
    assert top_p[0] == top_p[1]


# --- the chi-square test's critical value ---------------------------------------------------------


def test_chi_square_critical_value_matches_tables():
    # Tabulated 0.999 quantiles: df 5 -> 20.515, 10 -> 29.588, 20 -> 45.315, 40 -> 73.402,
    # 60 -> 99.607.
    for df, table in ((5, 20.515), (10, 29.588), (20, 45.315), (40, 73.402), (60, 99.607)):
        assert chi_square_critical(df) == pytest.approx(table, rel=0.02)


# --- first tokens: every method, with rejections and acceptances ----------------------------------

PROMPT = "def f(x):\n    return"
TEMPERATURE = 0.8
LENGTH = 3
SAMPLES = 1000


@pytest.fixture(scope="module")
def sampling_pair(tokenizer, models):
    # A sharper target (larger initializer range) puts enough mass on few 3-token sequences that a
    # thousand runs fill 35 chi-square cells at top_p 1 and 50 at top_p 0.8. Its draft is a noisy
    # copy that clearly differs (weights perturbed by 5% of their spread: total variation 0.16 on
    # the first token) but shares its argmax there, so drafts are accepted (31% of drafted tokens at
    # top_p 1, 39% at 0.8) and rejected.
    target = build_model("llama", models.eos_id, seed=2, layers=1, hidden=32, init=0.6)
    return Engine(target, noisy_copy(target, 0.05, seed=4), tokenizer)


@pytest.mark.parametrize("top_p", [1.0, 0.8])
def test_the_distribution_test_catches_the_wrong_samplers(sampling_pair, top_p):
    engine = sampling_pair
    prompt_ids = engine.encode(PROMPT)
    cells = Cells.of(engine.target, prompt_ids, LENGTH, TEMPERATURE, top_p, SAMPLES, engine.eos)
    assert len(cells.expected) >= 20
    exact = cells.expected / SAMPLES
    assert cells.rejection_rate(exact, 200_000) < 0.002, "false alarms well above alpha"
    wrong = {
        "sampling at temperature 1.0": (engine.target, 1.0),
        "the draft's samples": (engine.draft, TEMPERATURE),
    }
    for name, (model, temperature) in wrong.items():
        probs = sequence_probabilities(model, prompt_ids, cells.sequences, temperature, top_p)
        power = cells.rejection_rate(cells.probabilities(dict(zip(cells.sequences, probs))), 20_000)
        assert power >= 0.95, f"the test catches {name} with probability {power:.3f} only"


# Each case its own seeds: on this prompt Ouroboros finds nothing to look up, so with the same seeds
# it would return exactly the samples speculative decoding does, and the two cases would be one
# test, not two.
@pytest.mark.parametrize(
    "method,top_p,first_seed",
    [("speculative", 1.0, 0), ("ouroboros", 1.0, SAMPLES), ("ouroboros", 0.8, 2 * SAMPLES)],
)
def test_sampled_first_tokens_follow_the_targets_distribution(
    sampling_pair, method, top_p, first_seed
):
    engine = sampling_pair
    prompt_ids = engine.encode(PROMPT)
    cells = Cells.of(engine.target, prompt_ids, LENGTH, TEMPERATURE, top_p, SAMPLES, engine.eos)
    observed, accepted, drafted = Counter(), 0, 0
    for seed in range(first_seed, first_seed + SAMPLES):
        result = run(
            engine, PROMPT, method, LENGTH, temperature=TEMPERATURE, top_p=top_p, seed=seed, gamma=2
        )
        observed[tuple(result.token_ids)] += 1
        accepted += result.stats.accepted_tokens
        drafted += result.stats.drafted_tokens
    # Both acceptance and rejection happen, so both paths feed the distribution.
    assert 0.1 * drafted < accepted < 0.9 * drafted, (accepted, drafted)
    assert_follows_the_target(cells, observed, engine, prompt_ids, TEMPERATURE, top_p)
