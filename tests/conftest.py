"""Shared fixtures: an in-process BPE tokenizer and tiny, randomly initialised models of four
architectures.

Nothing is downloaded. The models are built with a large initializer_range so their logits are far
from ties, and every greedy reference is checked to be so (check_margin): a lossless test must fail
on a real mismatch, not pass or fail on float noise.
"""

from __future__ import annotations

import copy
import os

import pytest
import torch

from ouroboros_core.packed import unpacked
from ouroboros_core.tools.corpus import EOS, load_corpus, train_tokenizer

torch.set_num_threads(1)
# The suite races the tiny embedded pair unless a test asks for another: in-process apps and the
# launched app inherit this. The tests of the default pair (tests/test_default_pair.py) clear it.
os.environ.setdefault("OUROBOROS_PRESET", "demo")

ARCHITECTURES = ("llama", "qwen2", "mistral", "gpt2")
VOCAB_SIZE = 512
CONTEXT = 256  # the tiny models' max positions: keeps the "prompt too long" cases small


@pytest.fixture(scope="session")
def tokenizer():
    # A few hundred KB of stdlib source trains a 512-token byte-level BPE in a few seconds.
    docs = load_corpus(max_chars=300_000)
    return train_tokenizer(docs, VOCAB_SIZE)


@pytest.fixture(scope="session")
def eos_id(tokenizer):
    return tokenizer.convert_tokens_to_ids(EOS)


def gpt2_model(ids: dict, *, attn: str, layers: int, hidden: int, init: float):
    from transformers import GPT2Config, GPT2LMHeadModel

    config = GPT2Config(
        vocab_size=VOCAB_SIZE,
        n_embd=hidden,
        n_layer=layers,
        n_head=4,
        n_positions=CONTEXT,
        initializer_range=init,
        attn_implementation=attn,
        **ids,
    )
    return GPT2LMHeadModel(config)


def llama_family_model(arch: str, ids: dict, *, attn: str, layers: int, hidden: int, init: float):
    """A Llama, Qwen2 or Mistral model: the three share every setting the tests use."""
    from transformers import (
        LlamaConfig,
        LlamaForCausalLM,
        MistralConfig,
        MistralForCausalLM,
        Qwen2Config,
        Qwen2ForCausalLM,
    )

    common = dict(
        vocab_size=VOCAB_SIZE,
        hidden_size=hidden,
        intermediate_size=2 * hidden,
        num_hidden_layers=layers,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=CONTEXT,
        initializer_range=init,
        attn_implementation=attn,
        tie_word_embeddings=False,
        **ids,
    )
    if arch == "llama":
        return LlamaForCausalLM(LlamaConfig(**common))
    if arch == "qwen2":
        return Qwen2ForCausalLM(Qwen2Config(**common))
    if arch == "mistral":
        return MistralForCausalLM(MistralConfig(sliding_window=None, **common))
    raise ValueError(arch)


def build_model(
    arch: str,
    eos_id: int,
    *,
    seed: int = 0,
    attn: str = "eager",
    layers: int = 2,
    hidden: int = 48,
    init: float = 0.4,
):
    """A tiny causal LM of the given architecture, deterministic for a given seed."""
    ids = dict(bos_token_id=eos_id, eos_token_id=eos_id, pad_token_id=eos_id)
    sizes = dict(attn=attn, layers=layers, hidden=hidden, init=init)
    torch.manual_seed(seed)
    if arch == "gpt2":
        model = gpt2_model(ids, **sizes)
    else:
        model = llama_family_model(arch, ids, **sizes)
    model.generation_config.eos_token_id = eos_id
    model.generation_config.bos_token_id = eos_id
    model.generation_config.pad_token_id = eos_id
    assert model.config._attn_implementation == attn
    return model.eval()


def noisy_copy(model, scale: float, seed: int):
    """The same architecture with every weight perturbed: agrees with the model on some tokens, not
    all."""
    import copy

    other = copy.deepcopy(model)
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for param in other.parameters():
            param.add_(
                torch.randn(param.shape, generator=generator) * scale * param.std().clamp(min=1e-3)
            )
    return other.eval()


class Models:
    """Per architecture: the target and its three drafts, built once per session."""

    def __init__(self, eos_id: int):
        self.eos_id = eos_id
        self._cache = {}

    def target(self, arch: str, attn: str = "eager"):
        key = ("target", arch, attn)
        if key not in self._cache:
            self._cache[key] = build_model(
                arch, self.eos_id, seed=ARCHITECTURES.index(arch), attn=attn
            )
        return self._cache[key]

    def draft(self, arch: str, kind: str):
        """kind: "same" (the target itself: everything accepted), "noisy" (partial acceptance),
        "random" (an unrelated model: rejections from the first token on)."""
        target = self.target(arch)
        if kind == "same":
            return target
        key = ("draft", arch, kind)
        if key not in self._cache:
            if kind == "noisy":
                self._cache[key] = noisy_copy(target, 0.015, seed=100 + ARCHITECTURES.index(arch))
            elif kind == "random":
                self._cache[key] = build_model(
                    arch, self.eos_id, seed=1000 + ARCHITECTURES.index(arch), layers=1
                )
            else:
                raise ValueError(kind)
        return self._cache[key]


@pytest.fixture(scope="session")
def models(eos_id):
    return Models(eos_id)


@pytest.fixture(scope="session")
def make_engine(models, tokenizer):
    from ouroboros_core import Engine

    def make(arch: str, draft: str = "noisy") -> "Engine":
        return Engine(models.target(arch), models.draft(arch, draft), tokenizer)

    return make


# --- greedy references, checked to be far from ties -----------------------------------------------

# The smallest lead, in logits, a greedy reference's token must have over every other token at every
# position, measured in float64. Every float32 path differs from float64 by float noise, measured
# over the test prompts: a step-by-step cached decode vs one full forward differs by at most 4.5e-5
# on the init-0.4 models (|logits| up to 13.5), 1.9e-6 on the init-0.1 ones (|logits| up to 3.5) and
# 1.3e-5 on the embedded pair (|logits| up to 17.7); the engine's verify logits (cached,
# tree-masked, with branches) differ from a float64 full forward by at most 5.9e-5, 1.8e-6 and
# 1.3e-5. A float32 path can only pick another token where the float64 lead is under twice that,
# 1.2e-4: a lead above 1e-3 leaves 8 times that headroom.
TIE_MARGIN = 1e-3


def token_margins(logits: torch.Tensor, chosen) -> torch.Tensor:
    """Per row of logits (n, V): the chosen token's logit minus the best other token's (negative
    when the chosen token is not the argmax, 0 on an exact tie)."""
    logits = logits.double()
    index = torch.as_tensor(list(chosen), dtype=torch.long).unsqueeze(1)
    picked = logits.gather(1, index)[:, 0]
    others = logits.scatter(1, index, float("-inf")).max(dim=1).values
    return picked - others


def reference_margins(model, prompt_ids, new_ids) -> torch.Tensor:
    """The lead of each reference token, from one float64 forward of a copy of the model over the
    prompt and the reference (the logits at position i pick token i + 1)."""
    if not new_ids:
        return torch.zeros(0, dtype=torch.float64)
    double = copy.deepcopy(model).double()
    ids = torch.tensor(
        [list(prompt_ids) + list(new_ids)[:-1]], device=double.get_input_embeddings().weight.device
    )
    with torch.no_grad():
        logits = double(ids, attention_mask=torch.ones_like(ids)).logits[0, len(prompt_ids) - 1 :]
    return token_margins(logits, new_ids)


def check_margin(model, prompt_ids, new_ids, margin: float = TIE_MARGIN) -> float:
    """Fail unless every reference token leads every other token by more than margin; returns the
    lead."""
    margins = reference_margins(model, prompt_ids, new_ids)
    if len(margins) == 0:
        return float("inf")
    smallest = margins.min().item()
    if smallest <= margin:
        close = [(i, round(m, 7)) for i, m in enumerate(margins.tolist()) if m <= margin]
        raise AssertionError(
            f"greedy reference too close to a tie for a lossless test: lead {smallest:.3g} "
            f"<= {margin:g} at (position, lead) {close}; pick another seed, prompt or "
            "max_new_tokens"
        )
    return smallest


def reference_ids(
    model, tokenizer, prompt: str, max_new_tokens: int, eos_token_id=None
) -> list[int]:
    """The target's own greedy output (new tokens only), from stock transformers generate(), checked
    to be more than TIE_MARGIN from a tie at every token."""
    input_ids = tokenizer(prompt, return_tensors="pt").input_ids
    kwargs = {} if eos_token_id is None else {"eos_token_id": eos_token_id}
    with torch.no_grad(), unpacked(model):  # the target's stock layers, as transformers runs them
        out = model.generate(
            input_ids,
            attention_mask=torch.ones_like(input_ids),
            do_sample=False,
            max_new_tokens=max_new_tokens,
            pad_token_id=tokenizer.eos_token_id,
            **kwargs,
        )
    new_ids = out[0, input_ids.shape[1] :].tolist()
    check_margin(model, input_ids[0].tolist(), new_ids)
    return new_ids


@pytest.fixture(scope="module")
def reference(tokenizer):
    """The target's own generate() output, memoised per (model, prompt, max_new_tokens, eos), each
    checked by reference_ids to lead by more than TIE_MARGIN at every token.

    Keyed by the model object (modules hash by identity), not its id(): a model freed by its test
    could hand its id() to the next test's model, which would then be compared with the first one's
    output.
    """
    memo = {}

    def get(model, prompt, max_new_tokens, eos_token_id=None):
        key = (model, prompt, max_new_tokens, eos_token_id)
        if key not in memo:
            memo[key] = reference_ids(model, tokenizer, prompt, max_new_tokens, eos_token_id)
        return memo[key]

    return get


@pytest.fixture
def verdicts(monkeypatch):
    """Every (trunk, branches, verdict) the loop's acceptance walk produces during the test."""
    import ouroboros_core.decode as decode_module

    seen = []
    original = decode_module.walk

    def recording(tree, trunk_tokens, branch_tokens):
        verdict = original(tree, trunk_tokens, branch_tokens)
        seen.append((list(tree.trunk), [list(b) for b in tree.branches], verdict))
        return verdict

    monkeypatch.setattr(decode_module, "walk", recording)
    return seen
