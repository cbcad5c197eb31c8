"""Real pairs come in shapes the embedded one does not have; each is laid out here as folders and
loaded the way a Hub pair is: a target whose vocabulary is padded past its draft's (Qwen2.5), llama3
rope scaling (Llama 3.x), a draft that ties its embeddings. Every method must stay token-identical
to generate()."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from transformers import LlamaConfig, LlamaForCausalLM, Qwen2Config, Qwen2ForCausalLM

from ouroboros_core import load_engine
from ouroboros_core.packed import unpacked
from ouroboros_core.tools.corpus import EOS, load_corpus, train_tokenizer

PROMPT = "def add(a, b):\n    return a + b\n\nclass Config:\n"


@pytest.fixture(scope="module")
def small_tokenizer():
    return train_tokenizer(load_corpus(max_chars=60_000), 300)


def save(model, tokenizer, folder: Path, eos: int) -> str:
    model.generation_config.eos_token_id = eos
    model.generation_config.pad_token_id = eos
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return str(folder)


def common(tokenizer, layers: int, **extra):
    eos = tokenizer.convert_tokens_to_ids(EOS)
    return dict(
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=layers,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=512,
        initializer_range=0.4,
        bos_token_id=eos,
        eos_token_id=eos,
        pad_token_id=eos,
        **extra,
    )


def qwen_padded(tokenizer, root: Path) -> tuple[str, str]:
    # Qwen2.5-7B pads its embedding matrix to 152,064 rows; its 0.5B draft has 151,936: same
    # tokenizer.
    eos = tokenizer.convert_tokens_to_ids(EOS)
    torch.manual_seed(0)
    target = Qwen2ForCausalLM(
        Qwen2Config(
            vocab_size=len(tokenizer) + 84, tie_word_embeddings=False, **common(tokenizer, 2)
        )
    )
    draft = Qwen2ForCausalLM(
        Qwen2Config(vocab_size=len(tokenizer), tie_word_embeddings=True, **common(tokenizer, 1))
    )
    return save(target, tokenizer, root / "target", eos), save(
        draft, tokenizer, root / "draft", eos
    )


def draft_padded(tokenizer, root: Path) -> tuple[str, str]:
    # The other way round: the draft's rows outnumber the target's, so it can draft a token the
    # target lacks.
    eos = tokenizer.convert_tokens_to_ids(EOS)
    torch.manual_seed(2)
    target = Qwen2ForCausalLM(
        Qwen2Config(vocab_size=len(tokenizer), tie_word_embeddings=False, **common(tokenizer, 2))
    )
    draft = Qwen2ForCausalLM(
        Qwen2Config(
            vocab_size=len(tokenizer) + 84, tie_word_embeddings=True, **common(tokenizer, 1)
        )
    )
    return save(target, tokenizer, root / "target", eos), save(
        draft, tokenizer, root / "draft", eos
    )


def llama3_scaled(tokenizer, root: Path) -> tuple[str, str]:
    eos = tokenizer.convert_tokens_to_ids(EOS)
    scaling = {
        "rope_type": "llama3",
        "factor": 8.0,
        "low_freq_factor": 1.0,
        "high_freq_factor": 4.0,
        "original_max_position_embeddings": 64,
        "rope_theta": 500000.0,
    }
    torch.manual_seed(1)
    target = LlamaForCausalLM(
        LlamaConfig(
            vocab_size=len(tokenizer),
            rope_parameters=scaling,
            tie_word_embeddings=False,
            **common(tokenizer, 2),
        )
    )
    draft = LlamaForCausalLM(
        LlamaConfig(
            vocab_size=len(tokenizer),
            rope_parameters=scaling,
            tie_word_embeddings=True,
            **common(tokenizer, 1),
        )
    )
    assert target.config.rope_parameters["rope_type"] == "llama3"
    return save(target, tokenizer, root / "target", eos), save(
        draft, tokenizer, root / "draft", eos
    )


def greedy(engine, prompt: str, max_new_tokens: int) -> list[int]:
    ids = torch.tensor([engine.encode(prompt)])
    with torch.no_grad(), unpacked(engine.target):
        out = engine.target.generate(
            ids, attention_mask=torch.ones_like(ids), do_sample=False, max_new_tokens=max_new_tokens
        )
    return out[0, ids.shape[1] :].tolist()


@pytest.mark.parametrize(
    "shape",
    [qwen_padded, draft_padded, llama3_scaled],
    ids=["qwen-padded-target-vocab", "padded-draft-vocab", "llama3-rope-tied-draft"],
)
def test_pair_shape_loads_and_stays_lossless(small_tokenizer, tmp_path, shape):
    target_folder, draft_folder = shape(small_tokenizer, tmp_path)
    engine = load_engine(target_folder, draft_folder, "cpu")
    assert engine.draft.config.tie_word_embeddings
    expected = greedy(engine, PROMPT, 40)
    if (
        shape is qwen_padded
    ):  # the random target does pick a padded row, which its draft cannot read
        assert any(
            token >= engine.draft.get_input_embeddings().num_embeddings for token in expected
        )
    drafted = 0
    for method in ("vanilla", "speculative", "ouroboros"):
        result = engine.generate(PROMPT, method, 40)
        assert result.token_ids == expected, method
        drafted += result.stats.drafted_tokens
    assert drafted > 0


@pytest.mark.parametrize(
    "shape", [qwen_padded, draft_padded], ids=["padded-target-vocab", "padded-draft-vocab"]
)
def test_tokens_only_one_model_knows_never_reach_the_other(small_tokenizer, tmp_path, shape):
    # Long answers with one warm pool: the target's tokens over rejected tails and the text so far
    # enter the pool, and the draft's guesses the trunk; none may be fed to a model without an
    # embedding for it.
    engine = load_engine(*shape(small_tokenizer, tmp_path), "cpu")
    pool = engine.new_pool()
    prompts = [
        PROMPT,
        "import os\nimport sys\n",
        "for i in range(3):\n    print(i)\n",
        "x = [1, 2, 3]\n",
    ]
    for prompt in prompts:
        expected = greedy(engine, prompt, 150)
        assert engine.generate(prompt, "ouroboros", 150, pool=pool).token_ids == expected
        assert engine.generate(prompt, "speculative", 150).token_ids == expected
