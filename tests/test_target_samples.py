"""target_samples' batched decoding on its own: a batch's answers are each prompt's own greedy
continuation (rows that end leave the batch, the rest go on unchanged), and a sampled token is a
draw from the TOP_P nucleus whichever path found it."""

from __future__ import annotations

import pytest
import torch

from ouroboros_core.sampling import nucleus
from ouroboros_core.tools.target_samples import TOP_P, next_tokens, sample_batch

PROMPTS = [[5, 9, 14, 3], [7, 7, 2, 30, 31, 12, 8], [40], [11, 19, 25, 4, 6]]


def alone(model, ids: list[int], eos: int, new: int) -> list[int]:
    """The prompt's greedy continuation by transformers' generate, unbatched, cut after EOS."""
    out = model.generate(
        torch.tensor([ids]), max_new_tokens=new, do_sample=False, eos_token_id=eos, pad_token_id=eos
    )[0, len(ids) :].tolist()
    return out[: out.index(eos) + 1] if eos in out else out


@pytest.mark.parametrize("arch", ["llama"])
def test_a_batch_answers_each_prompt_as_it_would_alone_and_an_ended_row_stops(models, arch):
    model = models.target(arch).eval()
    # the EOS is a token the second prompt writes third: that row ends early, the others go on
    eos = alone(model, PROMPTS[1], eos=-1, new=3)[2]
    expected = [alone(model, ids, eos, 12) for ids in PROMPTS]
    assert expected[1][-1] == eos and len(expected[1]) == 3
    assert any(len(answer) == 12 for answer in expected)  # a row that runs to the limit
    rows = sample_batch(model, PROMPTS, eos, pad=0, temperature=0.0, max_new_tokens=12)
    assert [n for n, _ in rows] == [len(ids) for ids in PROMPTS]
    assert [ids[: len(prompt)] for (_, ids), prompt in zip(rows, PROMPTS)] == PROMPTS
    assert [ids[len(prompt) :] for (_, ids), prompt in zip(rows, PROMPTS)] == expected


def test_greedy_picks_each_rows_best():
    logits = torch.tensor([[0.0, 2.0, 1.0], [3.0, -1.0, 2.9]])
    assert next_tokens(logits, 0.0).tolist() == [1, 0]


@pytest.mark.parametrize("top", [256, 2])  # the nucleus inside the top tokens, and past them
def test_a_sampled_token_is_a_draw_from_the_nucleus_at_the_temperature(top):
    logits = torch.tensor([[4.0, 3.0, 2.5, 1.0, 0.5, -2.0] + [-9.0] * 300])
    temperature = 0.8
    wanted = nucleus(torch.softmax(logits / temperature, dim=-1), TOP_P)[0]
    wanted = wanted / wanted.sum()
    assert (wanted > 0).sum() == 3  # the nucleus: three tokens, more than `top=2` holds
    torch.manual_seed(0)
    draws = next_tokens(logits.expand(20_000, -1), temperature, top=top)
    counts = torch.bincount(draws, minlength=logits.shape[-1]).float() / len(draws)
    assert counts[wanted == 0].sum() == 0  # never outside the nucleus
    assert torch.allclose(counts, wanted, atol=0.015)


def test_each_row_draws_from_its_own_nucleus_when_only_some_reach_past_their_top_tokens():
    peaked = [6.0, 1.0] + [-9.0] * 40  # nucleus: one token, inside top=2
    flat = [0.0] * 42  # nucleus: 40 of the 42 tokens, past top=2
    torch.manual_seed(1)
    draws = next_tokens(torch.tensor([peaked, flat]).repeat(3000, 1), 1.0, top=2).view(-1, 2)
    assert (draws[:, 0] == 0).all()
    assert len(draws[:, 1].unique()) == 40  # the flat row reaches its whole nucleus
