"""The tree's attention (ouroboros_core/attention.py): torch's grouped SDPA in place of
transformers' copied key/value heads gives the same outputs, and the engine's tokens stay the
target's own."""

from __future__ import annotations

import pytest
import torch
from conftest import build_model, noisy_copy, reference_ids
from transformers.integrations.sdpa_attention import sdpa_attention_forward

from ouroboros_core import Engine
from ouroboros_core.attention import NAME, tree_sdpa, use_tree_attention
from ouroboros_core.tree import DraftTree, cache_length, forward_tree, new_cache, truncate
from ouroboros_core.packed import unpacked


class Grouped(torch.nn.Module):
    num_key_value_groups = 3
    is_causal = True


def tree_call(rows: int, past: int, seed: int = 0):
    generator = torch.Generator().manual_seed(seed)
    query = torch.randn(1, 9, rows, 16, generator=generator)
    key, value = (torch.randn(1, 3, past + rows, 16, generator=generator) for _ in range(2))
    mask = torch.zeros(1, 1, rows, past + rows)
    mask[..., past:] = torch.full((rows, rows), torch.finfo(torch.float32).min).triu(1)
    if rows > 2:
        mask[0, 0, -1, past + 1] = torch.finfo(
            torch.float32
        ).min  # a branch row that does not see row 1
    return query, key, value, mask


@pytest.mark.parametrize("rows,past", [(2, 0), (6, 37), (17, 300)])
def test_a_masked_forward_of_several_rows_equals_transformers_sdpa(rows, past):
    query, key, value, mask = tree_call(rows, past, seed=rows)
    ours, _ = tree_sdpa(Grouped(), query, key, value, mask, scaling=0.25)
    theirs, _ = sdpa_attention_forward(Grouped(), query, key, value, mask, scaling=0.25)
    assert ours.shape == theirs.shape == (1, rows, 9, 16)
    assert torch.equal(ours, theirs)


def test_one_row_and_unmasked_calls_are_transformers_own(monkeypatch):
    calls = []
    monkeypatch.setattr(
        "ouroboros_core.attention.sdpa_attention_forward",
        lambda *args, **kwargs: calls.append(args[1].shape[2]) or ("theirs", None),
    )
    query, key, value, mask = tree_call(1, 10)
    assert tree_sdpa(Grouped(), query, key, value, mask)[0] == "theirs"
    query, key, value, _ = tree_call(5, 10)
    assert tree_sdpa(Grouped(), query, key, value, None)[0] == "theirs"
    assert calls == [1, 5]
    # Two masked rows (a trunk token and one branch row) are already a tree: torch's grouped SDPA,
    # never the path that copies every cached key and value head.
    for rows in (2, 3):
        query, key, value, mask = tree_call(rows, 10)
        out, _ = tree_sdpa(Grouped(), query, key, value, mask)
        assert out.shape == (1, rows, 9, 16)
    assert calls == [1, 5]


@pytest.fixture
def target(eos_id):
    return build_model("llama", eos_id, attn="sdpa", layers=2, hidden=48, seed=3)


def test_the_engine_routes_its_target_through_the_tree_attention_and_stays_lossless(
    target, eos_id, tokenizer
):
    draft = noisy_copy(target, 0.3, seed=5)
    engine = Engine(target, draft, tokenizer)
    assert target.config._attn_implementation == NAME
    with unpacked(target):  # the reference runs transformers' own attention
        assert target.config._attn_implementation == "sdpa"
    assert target.config._attn_implementation == NAME
    for prompt in ("def add(a, b):\n    return", "import os\n\nfor name in os.listdir(path):\n"):
        expected = reference_ids(target, tokenizer, prompt, 24, eos_token_id=eos_id)
        for method in ("speculative", "ouroboros"):
            assert engine.generate(prompt, method, 24).token_ids == expected, (method, prompt)


def test_a_tree_forward_gives_the_same_logits_through_either_attention(target):
    prompt = list(range(5, 45))
    cache = new_cache(target)
    forward_tree(target, cache, prompt)
    past = cache_length(cache)
    tree = DraftTree.of([8, 9, 10], [[11, 12], [13, 14, 15]], attach=[1, 3])
    stock = forward_tree(target, cache, [7], tree)
    truncate(cache, past)
    assert use_tree_attention(target)
    routed = forward_tree(target, cache, [7], tree)
    assert torch.equal(stock, routed)


def test_a_model_off_sdpa_is_left_alone(eos_id):
    model = build_model("llama", eos_id, attn="eager")
    assert not use_tree_attention(model)
    assert model.config._attn_implementation == "eager"
