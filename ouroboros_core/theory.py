"""What the speculative-decoding papers predict from a run's measured rates, so a measured speedup
can be read beside the one its own acceptance and costs imply."""

from __future__ import annotations


def per_token_acceptance(accepted_tokens: int, rejected_steps: int) -> float:
    """The chance that a drafted token is accepted, given that the ones before it were.

    Each drafted token up to and including the first rejection of its step is one trial: the
    accepted ones succeeded, and each step that rejected a token failed once. Tokens after a
    rejection are never judged, so counting them (accepted / drafted) would understate the rate.
    """
    trials = accepted_tokens + rejected_steps
    return accepted_tokens / trials if trials else 0.0


def expected_tokens_per_forward(acceptance: float, gamma: int) -> float:
    """(1 - a^(g+1)) / (1 - a): tokens one target forward yields when it checks g drafts that each
    stand with chance a, plus its own token (Leviathan et al. 2023)."""
    assert 0.0 <= acceptance <= 1.0 and gamma >= 0
    if acceptance == 1.0:
        return float(gamma + 1)
    return (1 - acceptance ** (gamma + 1)) / (1 - acceptance)


def expected_speedup(acceptance: float, gamma: int, cost_ratio: float) -> float:
    """Speedup over plain decoding of speculative decoding with a draft model: tokens per forward
    over the cost of one step, g draft forwards at c target forwards each plus the target's one
    ("Decoding Speculative Decoding", Yan et al. 2024, after Leviathan et al.)."""
    assert cost_ratio >= 0.0
    return expected_tokens_per_forward(acceptance, gamma) / (gamma * cost_ratio + 1)


def draft_cost_ratio(
    draft_seconds: float, drafted_tokens: int, verify_seconds: float, forwards: int
) -> float:
    """c: one draft forward's cost over one target forward's, for a draft that proposes one token
    per forward."""
    if not drafted_tokens or not forwards or verify_seconds <= 0:
        return 0.0
    return (draft_seconds / drafted_tokens) / (verify_seconds / forwards)


def expected_step_speedup(
    tokens_per_forward: float, step_seconds: float, vanilla_step_seconds: float
) -> float:
    """Speedup of a method that lands tokens_per_forward tokens per step, each step costing
    step_seconds against plain decoding's one token per vanilla_step_seconds: what a run's own steps
    predict, before the per-request costs (prefill, setting up the draft) that a whole request
    adds."""
    if step_seconds <= 0:
        return 0.0
    return tokens_per_forward * vanilla_step_seconds / step_seconds
