"""Sampling: reproducible with a seed, and every method's tokens follow the target's own distribution."""

from __future__ import annotations

import math

import pytest
import torch

from conftest import build_model, noisy_copy
from engine_checks import PROMPTS, run
from ouroboros_core import Engine

# --- sampling --------------------------------------------------------------------------------------------

def test_sampling_with_a_seed_is_reproducible(make_engine):
    engine = make_engine("gpt2", "noisy")
    for method in ("vanilla", "speculative", "ouroboros"):
        a = run(engine, PROMPTS[0], method, 8, temperature=0.9, seed=7)
        b = run(engine, PROMPTS[0], method, 8, temperature=0.9, seed=7)
        c = run(engine, PROMPTS[0], method, 8, temperature=0.9, seed=8)
        assert a.token_ids == b.token_ids and a.text == b.text
        assert a.token_ids != c.token_ids
    top_p = [run(engine, PROMPTS[0], "ouroboros", 8, temperature=0.9, top_p=0.5, seed=3).token_ids for _ in range(2)]
    assert top_p[0] == top_p[1]


def nucleus(probs: torch.Tensor, top_p: float) -> torch.Tensor:
    """The smallest set of most likely tokens whose mass reaches top_p, renormalised (rows of (n, V))."""
    sorted_probs, order = probs.sort(dim=-1, descending=True)
    before = sorted_probs.cumsum(dim=-1) - sorted_probs
    sorted_probs = torch.where(before < top_p, sorted_probs, torch.zeros_like(sorted_probs))
    out = torch.zeros_like(probs).scatter(-1, order, sorted_probs)
    return out / out.sum(dim=-1, keepdim=True)


def first_two_token_distribution(model, prompt_ids: list[int], temperature: float, top_p: float) -> torch.Tensor:
    """P(t1, t2 | prompt) under the target itself: (V, V), in float64."""
    vocab = model.config.vocab_size
    with torch.no_grad():
        first = model(input_ids=torch.tensor([prompt_ids])).logits[0, -1].double()
        p1 = nucleus(torch.softmax(first / temperature, dim=-1)[None], top_p)[0]
        batch = torch.cat([torch.tensor([prompt_ids]).repeat(vocab, 1), torch.arange(vocab)[:, None]], dim=1)
        second = model(input_ids=batch).logits[:, -1].double()
        p2 = nucleus(torch.softmax(second / temperature, dim=-1), top_p)
    return p1[:, None] * p2


def chi_square_critical(df: int, z: float = 3.0902) -> float:
    """Upper critical value of chi-square (Wilson-Hilferty); z = 3.0902 is the normal's 0.999 quantile."""
    h = 2.0 / (9.0 * df)
    return df * (1.0 - h + z * math.sqrt(h)) ** 3


def test_chi_square_critical_value_matches_tables():
    # Tabulated 0.999 quantiles: df 5 -> 20.515, df 10 -> 29.588, df 20 -> 45.315.
    for df, table in ((5, 20.515), (10, 29.588), (20, 45.315)):
        assert chi_square_critical(df) == pytest.approx(table, rel=0.02)


@pytest.fixture(scope="module")
def sampling_pair(tokenizer, models):
    # A sharper target (larger initializer range) puts most mass on a few pairs, so a few hundred
    # samples fill the chi-square cells; its noisy copy drafts, agreeing often but not always.
    target = build_model("llama", models.eos_id, seed=2, layers=1, hidden=32, init=0.6)
    return Engine(target, noisy_copy(target, 0.015, seed=4), tokenizer)


@pytest.mark.parametrize("method,temperature,top_p", [
    ("speculative", 0.8, 1.0), ("ouroboros", 0.8, 1.0), ("ouroboros", 0.8, 0.8),
])
def test_sampled_first_two_tokens_follow_the_targets_distribution(sampling_pair, method, temperature, top_p):
    engine = sampling_pair
    prompt = "def f(x):\n    return"
    samples = 200
    joint = first_two_token_distribution(engine.target, engine.encode(prompt), temperature, top_p)
    counts = torch.zeros_like(joint)
    accepted = 0
    for seed in range(samples):
        result = engine.generate(prompt, method, 2, temperature=temperature, top_p=top_p, seed=seed, gamma=1)
        first, second = result.token_ids
        counts[first, second] += 1
        accepted += result.stats.accepted_tokens
    # Both acceptance and rejection happen, so both paths feed the distribution.
    assert 0 < accepted < samples
    assert counts[joint == 0].sum() == 0, "a pair the target can never produce was sampled"
    # Cells: every pair expected at least 5 times; the rest lumped into one cell (if it is big enough).
    expected = joint * samples
    cells = expected >= 5
    observed_cells = counts[cells].tolist()
    expected_cells = expected[cells].tolist()
    rest_expected = float(expected[~cells].sum())
    if rest_expected >= 5:
        observed_cells.append(float(counts[~cells].sum()))
        expected_cells.append(rest_expected)
    assert len(expected_cells) >= 5
    statistic = sum((o - e) ** 2 / e for o, e in zip(observed_cells, expected_cells))
    assert statistic < chi_square_critical(len(expected_cells) - 1), (statistic, len(expected_cells))
