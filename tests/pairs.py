"""A tiny target/draft pair saved as Hugging Face folders, for tests that load from disk."""

from pathlib import Path

import torch
from transformers import LlamaConfig, LlamaForCausalLM

from ouroboros_core.tools.corpus import EOS, load_corpus, train_tokenizer


def save_tiny_pair(root: Path) -> Path:
    tokenizer = train_tokenizer(load_corpus(max_chars=60_000), 300)
    eos = tokenizer.convert_tokens_to_ids(EOS)
    torch.manual_seed(0)
    for name, layers in (("target", 2), ("draft", 1)):
        config = LlamaConfig(
            vocab_size=len(tokenizer),
            hidden_size=32,
            intermediate_size=64,
            num_hidden_layers=layers,
            num_attention_heads=2,
            num_key_value_heads=2,
            max_position_embeddings=1024,
            initializer_range=0.4,
            eos_token_id=eos,
            bos_token_id=eos,
            pad_token_id=eos,
        )
        model = LlamaForCausalLM(config)
        model.generation_config.eos_token_id = eos
        model.save_pretrained(root / name)
        tokenizer.save_pretrained(root / name)
    return root


def lay_out_hub_cache(cache: Path, repo_id: str, folder: Path) -> None:
    """The layout huggingface_hub writes: models--owner--name/{refs/main,
    snapshots/<commit>/...}."""
    commit = "0123456789abcdef0123456789abcdef01234567"
    repo = cache / ("models--" + repo_id.replace("/", "--"))
    (repo / "refs").mkdir(parents=True)
    (repo / "refs" / "main").write_text(commit)
    snapshot = repo / "snapshots" / commit
    snapshot.mkdir(parents=True)
    for file in folder.iterdir():
        (snapshot / file.name).write_bytes(file.read_bytes())
