"""The target's packed linear layers: the model's own logits and tokens, its stock layers back on
request."""

from __future__ import annotations

import copy

import pytest
import torch
from transformers import DynamicCache

from conftest import build_model
from ouroboros_core.packed import PackedLinear, pack_linears, unpacked
from ouroboros_core.tree import DraftTree, forward_tree

ROWS = (1, 2, 5, 17)  # a vanilla step, small and wide verifications, beyond the packing's row count


def linear_count(model) -> int:
    return sum(type(m) is torch.nn.Linear for m in model.modules())


@pytest.mark.parametrize("kind", ["llama", "qwen2"])
def test_packed_layers_give_the_models_logits_and_come_off(kind):
    model = build_model(kind, 0, seed=11, attn="sdpa", init=0.4)
    stock = linear_count(model)
    keys = list(model.state_dict())
    torch.manual_seed(0)
    ids = torch.randint(1, 500, (1, 40))
    with torch.no_grad():
        expected = model(input_ids=ids).logits
        assert pack_linears(model, min_parameters=0) == stock > 0
        # same weights, same names
        assert linear_count(model) == 0 and list(model.state_dict()) == keys
        assert pack_linears(model, min_parameters=0) == stock  # a second call packs nothing twice
        twin = copy.deepcopy(model)  # as a user's or a test's copy of the target
        assert torch.equal(twin(input_ids=ids).logits, model(input_ids=ids).logits)
        got = model(input_ids=ids).logits
        with unpacked(model):
            assert linear_count(model) == stock
            assert torch.equal(model(input_ids=ids).logits, expected)
        assert linear_count(model) == 0
    scale = 1 + expected.abs().max().item()
    assert torch.allclose(got, expected, atol=1e-4 * scale, rtol=0)
    assert torch.equal(got.argmax(-1), expected.argmax(-1))


@pytest.mark.parametrize("threads", [1, 2])
def test_packed_forwards_of_any_width_keep_the_models_tokens(threads):
    """Tree forwards of every width the loop makes, on a cache, with one and two threads."""
    model = build_model("llama", 0, seed=12, attn="sdpa", init=0.4)
    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        prompt = list(range(3, 40))
        results = []
        for packed in (False, True):
            if packed:
                assert pack_linears(model, min_parameters=0) > 0
            cache = DynamicCache(config=model.config)
            with torch.no_grad():
                rows = [forward_tree(model, cache, prompt)]
                for width in ROWS:
                    trunk = [(7 * i + width) % 500 for i in range(width)]
                    rows.append(
                        forward_tree(
                            model, cache, [5], DraftTree.of(trunk, [trunk[:2]], attach=[1])
                        )
                    )
            results.append(rows)
    finally:
        torch.set_num_threads(before)
    for stock, packed in zip(*results):
        assert stock.shape == packed.shape
        assert torch.equal(stock.argmax(-1), packed.argmax(-1))
        assert torch.allclose(stock, packed, atol=1e-4 * (1 + stock.abs().max().item()), rtol=0)


def test_a_packed_model_moved_or_changed_after_packing_multiplies_by_its_own_weights():
    model = build_model("llama", 0, seed=15, attn="sdpa", init=0.4)
    pack_linears(model, min_parameters=0)
    ids = torch.arange(3, 20)[None]
    with torch.no_grad():
        doubled = copy.deepcopy(model).double()  # as the tie checks do
        reference = doubled(input_ids=ids).logits
        with unpacked(doubled):
            assert torch.equal(doubled(input_ids=ids).logits, reference)
        model.lm_head.weight.mul_(2)  # stale packed weights would give the old logits
        with unpacked(model):
            expected = model(input_ids=ids).logits
        assert torch.equal(model(input_ids=ids).logits, expected)


def test_only_a_float32_cpu_model_big_enough_to_gain_is_packed():
    model = build_model("llama", 0, seed=13, attn="sdpa")
    # tiny: its weights stay in the caches
    assert pack_linears(model) == 0 and linear_count(model) > 0
    model = model.to(torch.bfloat16)
    assert pack_linears(model, min_parameters=0) == 0 and linear_count(model) > 0


def test_a_layer_whose_packed_product_is_wrong_is_never_used(monkeypatch):
    """The check at packing compares a layer of each shape with F.linear: a kernel that got it wrong
    leaves the model as is."""
    model = build_model("llama", 0, seed=14, attn="sdpa")
    stock = linear_count(model)
    monkeypatch.setattr(
        PackedLinear, "check", lambda self: self.out_features != model.config.vocab_size
    )
    assert pack_linears(model, min_parameters=0) == 0 and linear_count(model) == stock
