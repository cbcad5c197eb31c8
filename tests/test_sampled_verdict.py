"""The verdict for sampled races in 16 bits. A sampled token is where its position's fixed draw falls in the
target's cumulative distribution; a tree forward rounds that distribution a little differently from a one-token
forward, so a draw near the edge between two tokens' slices may pick either: a rounding boundary, said calmly.
A token whose slice lies beyond rounding from the draw is a mismatch (a bug)."""

from __future__ import annotations

import pytest
import torch

from ouroboros_core import load_engine
from ouroboros_core.tools.bench import humaneval_prompts
from ouroboros_core.verdict import drawable, explain, output_verdict, rounding_step
from ui.render import badge_html

SAMPLING = {"temperature": 0.8, "top_p": 0.95}
TOKENS = 40


def three_tokens(first: float, second: float) -> torch.Tensor:
    """Scores (V=3) whose probabilities at temperature 1 are first, second and the rest."""
    return torch.tensor([first, second, 1.0 - first - second]).log()


def test_a_draw_within_rounding_of_a_slice_edge_may_pick_either_token_and_a_far_one_may_not():
    scores = three_tokens(0.5, 0.3).to(torch.bfloat16)  # slices [0, .5), [.5, .8), [.8, 1)
    # One bfloat16 rounding step at these scores (|log p| < 2) moves a probability by under 2%.
    assert drawable(scores, [0, 1], 1.0, 1.0, 0.4999, torch.bfloat16)
    assert drawable(scores, [0, 1], 1.0, 1.0, 0.5001, torch.bfloat16)
    assert not drawable(scores, [0, 1], 1.0, 1.0, 0.30, torch.bfloat16), "token 1's slice starts 0.2 away"
    assert not drawable(scores, [1], 1.0, 1.0, 0.95, torch.bfloat16)
    assert drawable(scores, [1], 1.0, 1.0, 0.65, torch.bfloat16)
    assert not drawable(scores.float(), [0, 1], 1.0, 1.0, 0.5, torch.float32), "float32 rounding excuses nothing"


def test_the_rounding_allowed_is_two_steps_of_each_score_and_no_more():
    """Token 0's slice ends latest when its score rounds two steps up and the others' two steps down: a draw
    just inside that edge may pick it, one just outside may not (a wider allowance would excuse real bugs)."""
    scores = three_tokens(0.5, 0.3).to(torch.bfloat16)
    steps = [2 * rounding_step(torch.bfloat16, abs(float(score))) for score in scores]
    up = torch.tensor([float(scores[0]) + steps[0], float(scores[1]) - steps[1], float(scores[2]) - steps[2]],
                      dtype=torch.float64)
    latest_end = float(torch.softmax(up, dim=0)[0])
    assert 0.5 < latest_end < 0.52  # two steps of scores near -0.7 to -1.6 move the edge by under 0.01
    assert drawable(scores, [0], 1.0, 1.0, latest_end - 1e-4, torch.bfloat16)
    assert not drawable(scores, [0], 1.0, 1.0, latest_end + 1e-4, torch.bfloat16)


def test_the_nucleus_edge_counts_a_token_kept_in_some_rounding_only():
    scores = three_tokens(0.6, 0.3).to(torch.bfloat16)  # top_p 0.6: token 1 is just outside the nucleus
    assert drawable(scores, [1], 1.0, 0.6, 0.99, torch.bfloat16)  # kept in some rounding, then at the top
    assert not drawable(scores, [1], 1.0, 0.3, 0.99, torch.bfloat16), "far outside the nucleus: never drawn"
    assert not drawable(scores, [2], 1.0, 0.6, 0.99, torch.bfloat16)


@pytest.fixture(scope="module")
def bf16_engine():
    return load_engine(device="cpu", dtype="bfloat16")


@pytest.fixture(scope="module")
def sampled_races(bf16_engine):
    """18 sampled races of the embedded pair in bfloat16: (prompt, seed, vanilla's tokens, Ouroboros's)."""
    races = []
    for item in humaneval_prompts(6):
        for seed in (1, 2, 3):
            lanes = [bf16_engine.generate(item["prompt"], method, TOKENS, seed=seed, **SAMPLING).token_ids
                     for method in ("vanilla", "ouroboros")]
            races.append((item["prompt"], seed, *lanes))
    return races


def test_every_sampled_difference_in_bfloat16_is_a_rounding_boundary(bf16_engine, sampled_races):
    kinds = []
    for prompt, seed, vanilla, ouroboros in sampled_races:
        verdict = bf16_engine.verdict(prompt, vanilla, ouroboros, seed=seed, **SAMPLING)
        kinds.append(verdict.kind)
        assert verdict.kind in ("identical", "rounding boundary"), (prompt[:40], seed, explain(verdict))
        if verdict.kind == "rounding boundary":
            at = verdict.first_difference
            assert vanilla[:at] == ouroboros[:at] and vanilla[at] != ouroboros[at]
            # How far the draw lies from vanilla's slice in the verdict's own forward: a few percent at most.
            assert 0.0 <= verdict.margin < 0.05, verdict
    # The check has power only if the lanes do part: in bfloat16 most of these races do (16 of 18 measured).
    assert kinds.count("rounding boundary") >= 9, kinds


def test_an_output_drawn_with_other_draws_is_a_mismatch(bf16_engine, sampled_races):
    """A lane that sampled from the wrong stream (another seed) is no rounding boundary: its tokens lie beyond
    rounding from the draws at their positions, and the verdict says where."""
    for prompt, seed, vanilla, _ in sampled_races[::3]:
        other = bf16_engine.generate(prompt, "ouroboros", TOKENS, seed=seed + 1000, **SAMPLING).token_ids
        if other == vanilla:
            continue
        verdict = bf16_engine.verdict(prompt, vanilla, other, seed=seed, **SAMPLING)
        assert verdict.kind == "mismatch", (prompt[:40], seed, explain(verdict))
        assert "departs from the target's sample" in explain(verdict)


def test_a_greedy_verdict_is_unchanged_by_the_sampled_rule(bf16_engine):
    prompt = humaneval_prompts(1)[0]["prompt"]
    greedy = bf16_engine.generate(prompt, "vanilla", 12).token_ids
    wrong = greedy[:3] + [(greedy[3] + 1) % len(bf16_engine.tokenizer)] + greedy[4:]
    verdict = output_verdict(bf16_engine.target, bf16_engine.encode(prompt), greedy, wrong)
    assert verdict.kind == "mismatch" and not verdict.sampled
    assert verdict.margin > 2 * rounding_step(torch.bfloat16, 8.0)


def test_the_badge_says_a_rounding_boundary_calmly(bf16_engine, sampled_races):
    from ouroboros_core.race import race

    prompt, seed, vanilla, ouroboros = next(race for race in sampled_races if race[2] != race[3])
    options = {"seed": seed, **SAMPLING}
    lanes = None
    for lanes in race(bf16_engine, prompt, ["vanilla", "ouroboros"], TOKENS, {"vanilla": options,
                                                                             "ouroboros": options}):
        pass
    assert list(lanes["ouroboros"].done.token_ids) == ouroboros and list(lanes["vanilla"].done.token_ids) == vanilla
    verdicts = {"ouroboros": bf16_engine.verdict(prompt, vanilla, ouroboros, **options)}
    badge = badge_html(lanes, verdicts)
    assert badge.startswith('<div class="badge tie">Each lane is the target\'s own sample.'), badge
    assert "rounding of the edge between two tokens" in badge and "bug" not in badge
