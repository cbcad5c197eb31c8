"""Shared fixtures: an in-process BPE tokenizer and tiny, randomly initialised models of four architectures.

Nothing is downloaded. The models are built with a large initializer_range so their logits are far from
ties: a lossless test must fail on a real mismatch, not pass or fail on float noise.
"""

from __future__ import annotations

import pytest
import torch

from ouroboros_core.tools.corpus import EOS, load_corpus, train_tokenizer

torch.set_num_threads(1)

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


def build_model(arch: str, eos_id: int, *, seed: int = 0, attn: str = "eager", layers: int = 2,
                hidden: int = 48, init: float = 0.4):
    """A tiny causal LM of the given architecture, deterministic for a given seed."""
    from transformers import (GPT2Config, GPT2LMHeadModel, LlamaConfig, LlamaForCausalLM, MistralConfig,
                              MistralForCausalLM, Qwen2Config, Qwen2ForCausalLM)

    ids = dict(bos_token_id=eos_id, eos_token_id=eos_id, pad_token_id=eos_id)
    torch.manual_seed(seed)
    if arch == "gpt2":
        config = GPT2Config(vocab_size=VOCAB_SIZE, n_embd=hidden, n_layer=layers, n_head=4, n_positions=CONTEXT,
                            initializer_range=init, attn_implementation=attn, **ids)
        model = GPT2LMHeadModel(config)
    else:
        common = dict(vocab_size=VOCAB_SIZE, hidden_size=hidden, intermediate_size=2 * hidden,
                      num_hidden_layers=layers, num_attention_heads=4, num_key_value_heads=2,
                      max_position_embeddings=CONTEXT, initializer_range=init, attn_implementation=attn,
                      tie_word_embeddings=False, **ids)
        if arch == "llama":
            model = LlamaForCausalLM(LlamaConfig(**common))
        elif arch == "qwen2":
            model = Qwen2ForCausalLM(Qwen2Config(**common))
        elif arch == "mistral":
            model = MistralForCausalLM(MistralConfig(sliding_window=None, **common))
        else:
            raise ValueError(arch)
    model.generation_config.eos_token_id = eos_id
    model.generation_config.bos_token_id = eos_id
    model.generation_config.pad_token_id = eos_id
    assert model.config._attn_implementation == attn
    return model.eval()


def noisy_copy(model, scale: float, seed: int):
    """The same architecture with every weight perturbed: agrees with the model on some tokens, not all."""
    import copy

    other = copy.deepcopy(model)
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for param in other.parameters():
            param.add_(torch.randn(param.shape, generator=generator) * scale * param.std().clamp(min=1e-3))
    return other.eval()


class Models:
    """Per architecture: the target and its three drafts, built once per session."""

    def __init__(self, eos_id: int):
        self.eos_id = eos_id
        self._cache = {}

    def target(self, arch: str, attn: str = "eager"):
        key = ("target", arch, attn)
        if key not in self._cache:
            self._cache[key] = build_model(arch, self.eos_id, seed=ARCHITECTURES.index(arch), attn=attn)
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
                self._cache[key] = build_model(arch, self.eos_id, seed=1000 + ARCHITECTURES.index(arch), layers=1)
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


def reference_ids(model, tokenizer, prompt: str, max_new_tokens: int, eos_token_id=None) -> list[int]:
    """The target's own greedy output (new tokens only), from stock transformers generate()."""
    input_ids = tokenizer(prompt, return_tensors="pt").input_ids
    kwargs = {} if eos_token_id is None else {"eos_token_id": eos_token_id}
    with torch.no_grad():
        out = model.generate(input_ids, attention_mask=torch.ones_like(input_ids), do_sample=False,
                             max_new_tokens=max_new_tokens, pad_token_id=tokenizer.eos_token_id, **kwargs)
    return out[0, input_ids.shape[1]:].tolist()


@pytest.fixture(scope="module")
def reference(tokenizer):
    """The target's own generate() output, memoised per (model, prompt, max_new_tokens, eos).

    Keyed by the model object (modules hash by identity), not its id(): a model freed by its test could
    hand its id() to the next test's model, which would then be compared with the first one's output.
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
    import ouroboros_core.engine as engine_module

    seen = []
    original = engine_module.walk_tree

    def recording(trunk, branches, trunk_tokens, branch_tokens, attach=None):
        verdict = original(trunk, branches, trunk_tokens, branch_tokens, attach)
        seen.append((list(trunk), [list(b) for b in branches], verdict))
        return verdict

    monkeypatch.setattr(engine_module, "walk_tree", recording)
    return seen
