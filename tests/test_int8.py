"""The lean draft forward's int8 narrow forwards: Int8Linear's rounding and product, and the
logits at every width the drafters feed, on the tiny models and the embedded draft; the drafts that
keep float32 instead."""

from __future__ import annotations

import copy
from types import SimpleNamespace

import pytest
import torch
from transformers import LlamaConfig, LlamaForCausalLM

from ouroboros_core.events import StepEvent
from ouroboros_core.lean import NARROW_ROWS, Int8Linear, LeanDecoder, lean_draft
from test_lean import LLAMA_FAMILY, TINY_TEXT, draft_forwards, family_model

# How far the narrow forwards may move the logits from those of the model with the int8 layers' own
# (dequantized) weights: what is left is rounding each matmul's input and output to bfloat16 (8
# significant bits), compounded through the layers and carried by the cached keys and values into
# the forwards after. Measured over every forward of draft_forwards: 0.021 on the init-0.1 tiny
# models (logits up to 2.8), 0.059 on the embedded draft (logits up to 13). The bounds sit about 1.6
# to 2 times above (another CPU's kernels sum in another order); a wrong matrix, split, bias or row
# moves logits by far more (a dropped Qwen2 bias: 0.5 on the tiny model). Against the model's own
# logits the int8 rounding comes on top (0.080 and 0.146): the lean forward must keep the model's
# argmax on nearly every row (75 of 76 on the tiny models, 76 of 76 on the embedded draft).
TINY_BOUND = 0.04
EMBEDDED_BOUND = 0.1
ARGMAX_KEPT = 0.95


class DequantizedReference:
    """The model's own forward, with the weights the lean forward's int8 layers hold (dequantized)
    in forwards of up to NARROW_ROWS rows and its own weights in wider ones, on one cache: the lean
    forward's arithmetic but for rounding its activations to bfloat16."""

    def __init__(self, model, lean):
        self.wide, self.narrow, self.config = model, copy.deepcopy(model), model.config
        for i, layer in enumerate(self.narrow.model.layers):
            qkv, o, gate_up, down = lean._narrow_layers(i)
            attention, mlp = layer.self_attn, layer.mlp
            q, k, v = qkv.dequantized().split(
                [p.out_features for p in (attention.q_proj, attention.k_proj, attention.v_proj)]
            )
            gate, up = gate_up.dequantized().chunk(2)
            for proj, weight in (
                (attention.q_proj, q),
                (attention.k_proj, k),
                (attention.v_proj, v),
                (attention.o_proj, o.dequantized()),
                (mlp.gate_proj, gate),
                (mlp.up_proj, up),
                (mlp.down_proj, down.dequantized()),
            ):
                proj.weight = torch.nn.Parameter(weight, requires_grad=False)
        # A new parameter: a tied head would otherwise change the input embeddings with it.
        self.narrow.lm_head.weight = torch.nn.Parameter(
            Int8Linear(lean.head).dequantized(), requires_grad=False
        )

    @property
    def dtype(self):
        return self.wide.dtype

    def get_input_embeddings(self):
        return self.wide.get_input_embeddings()

    def __call__(self, **inputs):
        """As the lean forward: the int8 layers where up to NARROW_ROWS rows are fed, the int8 head
        where up to NARROW_ROWS rows of logits are kept (a catch-up of 12 rows keeps one)."""
        keep = inputs.pop("logits_to_keep", 0)
        body = (self.narrow if inputs["input_ids"].shape[1] <= NARROW_ROWS else self.wide).model
        hidden = body(**inputs).last_hidden_state
        hidden = hidden[:, -keep:] if keep else hidden
        head = (self.narrow if hidden.shape[1] <= NARROW_ROWS else self.wide).lm_head
        return SimpleNamespace(logits=head(hidden))


def check_every_width(model, lean, text: list[int], bound: float) -> None:
    """At every width, the lean forward (int8 weights up to NARROW_ROWS rows) gives the logits of
    the model with those weights within `bound` (wider: the model's own, the same bound), and the
    model's own argmax on nearly every row."""
    assert lean.narrow_rows, "a float32 draft on the CPU reads int8 weights in narrow forwards"
    reference = DequantizedReference(model, lean)
    rows = kept_rows = 0
    to_reference = to_own = 0.0  # narrow forwards' mean distance to the two
    for (fed, kept, own), (_, _, expected), (_, _, got) in zip(
        draft_forwards(model, text), draft_forwards(reference, text), draft_forwards(lean, text)
    ):
        where = f"{fed} rows fed, {kept} kept"
        assert got.shape == expected.shape == own.shape, where
        error = (got - expected).abs().max().item()
        assert error <= bound, (where, error)
        if fed <= NARROW_ROWS:
            to_reference += (got - expected).abs().mean().item()
            to_own += (got - own).abs().mean().item()
        rows, kept_rows = rows + len(own), kept_rows + int((got.argmax(-1) == own.argmax(-1)).sum())
    assert kept_rows >= ARGMAX_KEPT * rows, (
        f"the model's argmax kept on {kept_rows} of {rows} rows only"
    )
    assert to_reference < to_own, (
        "the narrow forwards should compute with the int8 weights, not the model's own"
    )


def test_int8_linear_rounds_each_row_to_its_scale_and_multiplies_as_the_kernel_should():
    generator = torch.Generator().manual_seed(3)
    # rows of many sizes
    weight = torch.randn(96, 64, generator=generator) * torch.rand(96, 1, generator=generator)
    weight[5] = 0.0  # an all-zero row keeps a usable scale
    bias = torch.randn(96, generator=generator)
    layer = Int8Linear(weight, bias)
    assert layer.weight.dtype == torch.int8 and layer.scale.dtype == torch.bfloat16
    assert torch.equal(
        layer.scale[torch.arange(96) != 5],
        (weight.abs().amax(dim=1) / 127).to(torch.bfloat16)[torch.arange(96) != 5],
    )
    steps = (layer.dequantized() - weight).abs() / layer.scale.float()[:, None]
    # Half a step from rounding; the row's largest entry may reach a little over 127 steps of the
    # bfloat16-rounded scale and be clamped, one step at most.
    assert steps.max().item() <= 1.0 and (steps > 0.5 + 1e-6).float().mean().item() < 0.02
    x = torch.randn(1, 5, 64, generator=generator)
    product = x.bfloat16().float() @ layer.dequantized().T
    got = layer(x)
    assert got.shape == (1, 5, 96) and got.dtype == torch.float32
    # The kernel's product comes out in bfloat16 (8 significant bits: here bit for bit the rounded
    # float32 product; another CPU may sum in another order), and the bias is added after.
    assert torch.allclose(got - bias, product, rtol=2**-7, atol=1e-4), (
        (got - bias - product).abs().max().item()
    )
    assert (
        Int8Linear(weight)(x) - product
    ).abs().max().item() <= 2**-7 * product.abs().max().item()
    assert (got - Int8Linear(weight)(x) - bias).abs().max().item() < 1e-5, (
        "the bias must be added once"
    )


@pytest.mark.parametrize("kind", LLAMA_FAMILY + ("llama3",))
def test_every_width_the_drafters_feed_gives_the_models_own_logits(kind, eos_id):
    model = family_model(kind, eos_id, init=0.1)
    check_every_width(model, lean_draft(model), TINY_TEXT, TINY_BOUND)


def test_a_model_drafting_for_itself_keeps_float32(make_engine):
    engine = make_engine("llama", "same")
    assert (
        isinstance(engine.draft_forward(), LeanDecoder) and not engine.draft_forward().narrow_rows
    )


@pytest.fixture(scope="module")
def embedded():
    from ouroboros_core import load_engine

    return load_engine("demo", device="cpu")  # the CPU suite, also on a machine with CUDA


# Enough Python for the prefill and every width of draft_forwards in the embedded pair's tokens.
EMBEDDED_TEXT = '''def count_words(text):
    """Return a dict of word -> count."""
    counts = {}
    for word in text.split():
        word = word.strip(".,;:!?").lower()
        if word:
            counts[word] = counts.get(word, 0) + 1
    return counts


def most_common(counts, n=3):
    """Return the n most common words, most frequent first."""
    return sorted(counts.items(), key=lambda item: (-item[1], item[0]))[:n]


class Stack:
    def __init__(self):
        self.items = []

    def push(self, item):
        self.items.append(item)

    def pop(self):
        return self.items.pop()
'''


def test_the_embedded_draft_gives_its_own_logits_at_every_width(embedded):
    """At a trained model's scale: the embedded draft."""
    check_every_width(
        embedded.draft, lean_draft(embedded.draft), embedded.encode(EMBEDDED_TEXT), EMBEDDED_BOUND
    )


def test_the_embedded_pair_drafts_with_the_lean_forward_step_for_step(embedded):
    """In float32 the lean forward drafts exactly what transformers' forward drafts, step by step;
    with its int8 narrow forwards (the default on a CPU) the output is still the target's own greedy
    text."""
    engine = embedded
    lean = engine.draft_forward()
    assert isinstance(lean, LeanDecoder) and lean.narrow_rows
    prompt = 'def count_words(text):\n    """Return a dict of word -> count."""\n'

    def run():
        return [
            (e.trunk, e.branches, e.accepted)
            for e in engine.stream(prompt, "ouroboros", 48)
            if isinstance(e, StepEvent)
        ]

    narrow_ids = engine.generate(prompt, "ouroboros", 48).token_ids
    lean.narrow_rows = False
    try:
        lean_steps = run()
        # what the engine does with a draft the lean forward cannot take
        engine._draft_forward = engine.draft
        assert run() == lean_steps
    finally:
        engine._draft_forward = None
    assert narrow_ids == engine.generate(prompt, "vanilla", 48).token_ids


def test_a_draft_whose_widths_the_int8_kernel_cannot_step_keeps_float32(eos_id):
    """The kernel's vector paths read 16 (AVX-512) or 8 (AVX2) inputs at a time with no tail: a
    width of 40 would read past each row, so such a draft keeps the lean forward in float32."""
    torch.manual_seed(5)
    config = LlamaConfig(
        vocab_size=512,
        hidden_size=40,
        intermediate_size=72,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=4,
        eos_token_id=eos_id,
        bos_token_id=eos_id,
    )
    lean = lean_draft(LlamaForCausalLM(config).eval())
    assert isinstance(lean, LeanDecoder) and not lean.narrow_rows
    assert lean_draft(family_model("llama", eos_id)).narrow_rows, (
        "a width of 16s takes the int8 forwards"
    )
