"""The lean draft forward: the draft model's own logits, in every way the drafters call it, or not used at all."""

from __future__ import annotations

import pytest
import torch
from transformers import DynamicCache, LlamaConfig, LlamaForCausalLM

from conftest import build_model
from ouroboros_core.cache import new_cache, truncate
from ouroboros_core.drafters import DraftRunner
from ouroboros_core.events import StepEvent
from ouroboros_core.lean import LeanCache, LeanDecoder, lean_draft
from ouroboros_core.verify import forward_tree

LLAMA_FAMILY = ("llama", "qwen2", "mistral")


def llama3_scaled(eos_id: int):
    """A Llama with Llama 3.x's rope scaling and tied embeddings, as the 1B drafts are."""
    torch.manual_seed(5)
    config = LlamaConfig(vocab_size=512, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=1, max_position_embeddings=1024,
                         tie_word_embeddings=True, eos_token_id=eos_id, bos_token_id=eos_id,
                         rope_parameters={"rope_type": "llama3", "rope_theta": 500000.0, "factor": 8.0,
                                          "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                                          "original_max_position_embeddings": 64})
    return LlamaForCausalLM(config).eval()


def family_model(kind: str, eos_id: int):
    return llama3_scaled(eos_id) if kind == "llama3" else build_model(kind, eos_id, seed=7, attn="sdpa")


def calls(model):
    """The forwards a drafter makes, in order: a prefill, one token, two, a tree with offset branches, a
    prefix kept after a crop; each returns forward_tree's logits."""
    cache = new_cache(model)
    prompt = [(7 * i + 3) % 500 for i in range(40)]
    out = [forward_tree(model, cache, prompt, [], [])]
    out.append(forward_tree(model, cache, [11], [], []))
    out.append(forward_tree(model, cache, [12, 13], [], []))
    out.append(forward_tree(model, cache, [14], [], [[15, 16, 17], [18, 19], [20]], offsets=[0, 1, 0]))
    truncate(cache, 42)
    out.append(forward_tree(model, cache, [21], [22, 23], [[24], [25, 26]], attach=[1, 2]))
    return out


@pytest.mark.parametrize("kind", LLAMA_FAMILY + ("llama3",))
def test_the_lean_forward_gives_the_models_own_logits(kind, eos_id):
    model = family_model(kind, eos_id)
    lean = lean_draft(model)
    assert isinstance(lean, LeanDecoder), f"{kind} should take the lean forward"
    assert isinstance(new_cache(lean), LeanCache)
    assert lean.half_rows, "a float32 draft on the CPU reads float16 weights in narrow forwards"
    lean.half_rows = False
    for step, (expected, got) in enumerate(zip(calls(model), calls(lean))):
        assert got.shape == expected.shape, step
        assert torch.allclose(got, expected, atol=1e-4, rtol=0), (step, (got - expected).abs().max().item())
        assert torch.equal(got.argmax(-1), expected.argmax(-1)), step


@pytest.mark.parametrize("kind", LLAMA_FAMILY)
def test_narrow_forwards_with_float16_weights_move_logits_by_rounding_only(kind, eos_id):
    model = family_model(kind, eos_id)
    lean = lean_draft(model)
    exact, rounded = calls(model), calls(lean)
    for step, (expected, got) in enumerate(zip(exact, rounded)):
        scale = 1 + expected.abs().max().item()
        # Steps 1-4 feed at most HALF_ROWS tokens (every layer reads float16 weights); the 40-token prefill runs
        # its layers in float32 and keeps one row of logits, which the output head gives in float16. The tree
        # forwards (steps 3-4, several rows over keys and values that are themselves float16-rounded) compound
        # more rounding than the one- and two-token steps.
        bound = 1e-2 if step >= 3 else 4e-3
        assert (got - expected).abs().max().item() <= bound * scale, step
        top2 = expected.topk(2, dim=-1).values
        clear = (top2[:, 0] - top2[:, 1]) > 2 * bound * scale  # where the lead is well above float16 rounding
        assert torch.equal(got.argmax(-1)[clear], expected.argmax(-1)[clear]), step
    assert (rounded[1] != exact[1]).any(), "the one-row forward should have used the float16 weights"
    assert (rounded[3] != exact[3]).any(), "the 7-row tree forward should have used the float16 weights"


def test_a_model_drafting_for_itself_keeps_float32(make_engine):
    engine = make_engine("llama", "same")
    assert isinstance(engine.draft_forward(), LeanDecoder) and not engine.draft_forward().half_rows


def test_the_lean_forward_in_bfloat16_rounds_as_the_model_does(eos_id):
    model = build_model("llama", eos_id, seed=7, attn="sdpa").to(torch.bfloat16)
    lean = lean_draft(model)
    assert lean is not None and not lean.half_rows
    for expected, got in zip(calls(model), calls(lean)):
        assert got.dtype == torch.bfloat16
        # Same operations in the same order: bfloat16 rounding lands on the same values.
        assert (got.float() - expected.float()).abs().max().item() <= 0.0625


def test_the_cache_grows_past_its_first_capacity(eos_id):
    model = build_model("llama", eos_id, seed=7, attn="sdpa")
    lean = lean_draft(model)
    lean.half_rows = False
    cache, reference = lean.new_cache(), DynamicCache(config=model.config)
    capacity = cache.buffer.shape[-2]
    ids = [(5 * i + 1) % 500 for i in range(capacity + 20)]
    forward_tree(lean, cache, ids[:100], [], [])
    forward_tree(model, reference, ids[:100], [], [])
    got = forward_tree(lean, cache, ids[100:], [], [])
    expected = forward_tree(model, reference, ids[100:], [], [])
    assert cache.get_seq_length() == len(ids) and cache.buffer.shape[-2] >= len(ids)
    assert torch.allclose(got, expected, atol=1e-4, rtol=0)


def test_other_models_keep_the_transformers_forward(eos_id):
    assert lean_draft(build_model("gpt2", eos_id)) is None
    windowed = build_model("mistral", eos_id, seed=7, attn="sdpa")
    windowed.config.sliding_window = 16
    assert lean_draft(windowed) is None


def test_a_model_the_lean_forward_would_misread_is_caught_by_its_check(eos_id):
    """A model whose arithmetic the lean forward does not copy (here an output bias it ignores) gives other
    logits on the check, so the drafters keep the model's own forward."""
    model = build_model("llama", eos_id, seed=7, attn="sdpa")
    model.lm_head.bias = torch.nn.Parameter(torch.linspace(-3, 3, model.lm_head.out_features))
    assert lean_draft(model) is None


def test_draft_runner_proposes_the_same_with_either_forward(eos_id):
    model = build_model("qwen2", eos_id, seed=7, attn="sdpa")
    lean = lean_draft(model)
    lean.half_rows = False
    runners = DraftRunner(model), DraftRunner(lean)
    sequence = [(3 * i + 2) % 500 for i in range(30)]
    for _ in range(12):
        tokens = [int(runner.forward(sequence)[0].argmax()) for runner in runners]
        assert tokens[0] == tokens[1]
        sequence = sequence[:-3] + [tokens[0], 9, tokens[0]] if len(sequence) % 4 == 0 else sequence + tokens[:1]


def test_the_embedded_pair_drafts_with_the_lean_forward_step_for_step():
    """In float32 the lean forward drafts exactly what transformers' forward drafts, step by step; with its
    float16 one-row forwards (the default on a CPU) the output is still the target's own greedy text."""
    from ouroboros_core import load_engine

    engine = load_engine()
    lean = engine.draft_forward()
    assert isinstance(lean, LeanDecoder) and lean.half_rows
    prompt = "def count_words(text):\n    \"\"\"Return a dict of word -> count.\"\"\"\n"

    def run():
        return [(e.trunk, e.branches, e.accepted) for e in engine.stream(prompt, "ouroboros", 48)
                if isinstance(e, StepEvent)]

    half_ids = engine.generate(prompt, "ouroboros", 48).token_ids
    lean.half_rows = False
    try:
        lean_steps = run()
        engine._draft_forward = engine.draft  # what the engine does with a draft the lean forward cannot take
        assert run() == lean_steps
    finally:
        engine._draft_forward = None
    assert half_ids == engine.generate(prompt, "vanilla", 48).token_ids
