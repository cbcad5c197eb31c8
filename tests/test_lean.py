"""The lean draft forward: the draft model's own logits, in every way the drafters call it, or not
used at all. Its int8 narrow forwards: test_int8."""

from __future__ import annotations

import pytest
import torch
from transformers import DynamicCache, LlamaConfig, LlamaForCausalLM

from conftest import build_model
from ouroboros_core.tree import DraftTree, forward_tree, new_cache, truncate
from ouroboros_core.trunk import DraftRunner
from ouroboros_core.lean import NARROW_ROWS, LeanCache, LeanDecoder, lean_draft

LLAMA_FAMILY = ("llama", "qwen2", "mistral")
# Rows fed to one draft forward: up to NARROW_ROWS its layers read int8 weights, at 12 and 17 (and
# in the prefill) float32; up to NARROW_ROWS rows of logits come from the int8 output head, whatever
# the width.
WIDTHS = tuple(range(1, NARROW_ROWS + 1)) + (12, 17)
EXACT = 1e-4  # float32 throughout: the same logits up to the order of float sums
TINY_TEXT = [(7 * i + 3) % 500 for i in range(128)]  # token ids for the tiny models' draft_forwards


def llama3_scaled(eos_id: int):
    """A Llama with Llama 3.x's rope scaling and tied embeddings, as the 1B drafts are."""
    torch.manual_seed(5)
    config = LlamaConfig(
        vocab_size=512,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=1,
        max_position_embeddings=1024,
        tie_word_embeddings=True,
        eos_token_id=eos_id,
        bos_token_id=eos_id,
        rope_parameters={
            "rope_type": "llama3",
            "rope_theta": 500000.0,
            "factor": 8.0,
            "low_freq_factor": 1.0,
            "high_freq_factor": 4.0,
            "original_max_position_embeddings": 64,
        },
    )
    return LlamaForCausalLM(config).eval()


def family_model(kind: str, eos_id: int, init: float = 0.4):
    """A tiny model of the kind, its weights drawn with spread `init` (llama3 keeps transformers'
    0.02). Qwen2's q, k and v biases get random values: its init zeroes them, and a zero bias cannot
    show whether the lean forward adds it."""
    if kind == "llama3":
        return llama3_scaled(eos_id)
    model = build_model(kind, eos_id, seed=7, attn="sdpa", init=init)
    if kind == "qwen2":
        generator = torch.Generator().manual_seed(8)
        with torch.no_grad():
            for layer in model.model.layers:
                for proj in (
                    layer.self_attn.q_proj,
                    layer.self_attn.k_proj,
                    layer.self_attn.v_proj,
                ):
                    # About the size of q, k and v themselves at init 0.1 (0.7), a fifth of it at
                    # 0.4.
                    proj.bias.copy_(torch.randn(proj.bias.shape, generator=generator) * 0.5)
    return model


def calls(model):
    """The forwards a drafter makes, in order: a prefill, one token, two, a tree with offset
    branches, a prefix kept after a crop; each returns forward_tree's logits."""
    cache = new_cache(model)
    prompt = [(7 * i + 3) % 500 for i in range(40)]
    out = [forward_tree(model, cache, prompt)]
    out.append(forward_tree(model, cache, [11]))
    out.append(forward_tree(model, cache, [12, 13]))
    out.append(
        forward_tree(
            model, cache, [14], DraftTree.of([], [[15, 16, 17], [18, 19], [20]], offsets=[0, 1, 0])
        )
    )
    truncate(cache, 42)
    out.append(
        forward_tree(model, cache, [21], DraftTree.of([22, 23], [[24], [25, 26]], attach=[1, 2]))
    )
    return out


def draft_forwards(model, text: list[int], prompt: int = 24) -> list[tuple[int, int, torch.Tensor]]:
    """The forwards a DraftRunner makes on `text`, as (rows fed, rows of logits, logits): the
    prompt's prefill, then for each width a catch-up on that many tokens (the target's accepted
    ones: one row of logits) and a tree of that many rows (the draft's newest token, then a pool
    phrase and a lookahead column one position further on: a row of logits each), every one after
    the tokens before it are in the cache."""
    assert len(text) >= prompt + sum(width + 1 for width in WIDTHS) + WIDTHS[-1], (
        "text too short for every width"
    )
    runner = DraftRunner(model)
    sequence = text[:prompt]
    out = [(prompt, 1, runner.forward(sequence))]
    for width in WIDTHS:
        sequence = text[: len(sequence) + width]
        out.append((width, 1, runner.forward(sequence)))
        sequence = text[: len(sequence) + 1]
        after = text[len(sequence) : len(sequence) + width - 1]
        branches = [b for b in (after[: width // 2], after[width // 2 :]) if b]
        extra_rows = DraftTree.of([], branches, offsets=[0, 1][: len(branches)])
        out.append((width, width, runner.forward(sequence, extra_rows)))
    return out


@pytest.mark.parametrize("kind", LLAMA_FAMILY + ("llama3",))
def test_the_lean_forward_gives_the_models_own_logits(kind, eos_id):
    model = family_model(kind, eos_id)
    lean = lean_draft(model)
    assert isinstance(lean, LeanDecoder), f"{kind} should take the lean forward"
    assert isinstance(new_cache(lean), LeanCache)
    assert lean.narrow_rows, "a float32 draft on the CPU reads int8 weights in narrow forwards"
    lean.narrow_rows = False
    for step, (expected, got) in enumerate(zip(calls(model), calls(lean))):
        assert got.shape == expected.shape, step
        assert torch.allclose(got, expected, atol=EXACT, rtol=0), (
            step,
            (got - expected).abs().max().item(),
        )
        assert torch.equal(got.argmax(-1), expected.argmax(-1)), step
    for (fed, kept, expected), (_, _, got) in zip(
        draft_forwards(model, TINY_TEXT), draft_forwards(lean, TINY_TEXT)
    ):
        assert torch.allclose(got, expected, atol=EXACT, rtol=0), (
            fed,
            kept,
            (got - expected).abs().max().item(),
        )


def test_the_lean_forward_in_bfloat16_rounds_as_the_model_does(eos_id):
    model = build_model("llama", eos_id, seed=7, attn="sdpa").to(torch.bfloat16)
    lean = lean_draft(model)
    assert lean is not None and not lean.narrow_rows
    for expected, got in zip(calls(model), calls(lean)):
        assert got.dtype == torch.bfloat16
        # Same operations in the same order: bfloat16 rounding lands on the same values.
        assert (got.float() - expected.float()).abs().max().item() <= 0.0625


def test_the_cache_grows_past_its_first_capacity(eos_id):
    model = build_model("llama", eos_id, seed=7, attn="sdpa")
    lean = lean_draft(model)
    lean.narrow_rows = False
    cache, reference = lean.new_cache(), DynamicCache(config=model.config)
    capacity = cache.buffer.shape[-2]
    ids = [(5 * i + 1) % 500 for i in range(capacity + 20)]
    forward_tree(lean, cache, ids[:100])
    forward_tree(model, reference, ids[:100])
    got = forward_tree(lean, cache, ids[100:])
    expected = forward_tree(model, reference, ids[100:])
    assert cache.get_seq_length() == len(ids) and cache.buffer.shape[-2] >= len(ids)
    assert torch.allclose(got, expected, atol=1e-4, rtol=0)


def test_other_models_keep_the_transformers_forward(eos_id):
    assert lean_draft(build_model("gpt2", eos_id)) is None
    windowed = build_model("mistral", eos_id, seed=7, attn="sdpa")
    windowed.config.sliding_window = 16
    assert lean_draft(windowed) is None


def test_a_model_the_lean_forward_would_misread_is_caught_by_its_check(eos_id):
    """A model whose arithmetic the lean forward does not copy (here an output bias it ignores)
    gives other logits on the check, so the drafters keep the model's own forward."""
    model = build_model("llama", eos_id, seed=7, attn="sdpa")
    model.lm_head.bias = torch.nn.Parameter(torch.linspace(-3, 3, model.lm_head.out_features))
    assert lean_draft(model) is None


def test_draft_runner_proposes_the_same_with_either_forward(eos_id):
    model = family_model("qwen2", eos_id)
    lean = lean_draft(model)
    lean.narrow_rows = False
    runners = DraftRunner(model), DraftRunner(lean)
    sequence = [(3 * i + 2) % 500 for i in range(30)]
    for _ in range(12):
        tokens = [int(runner.forward(sequence)[0].argmax()) for runner in runners]
        assert tokens[0] == tokens[1]
        sequence = (
            sequence[:-3] + [tokens[0], 9, tokens[0]]
            if len(sequence) % 4 == 0
            else sequence + tokens[:1]
        )
