"""A draft folder's draft_vocabulary.json: the lean draft proposes those tokens alone, the output
stays the target's."""

from __future__ import annotations

import json
import shutil

import pytest
import torch

from conftest import reference_ids
from ouroboros_core import LoadError, load_engine
from ouroboros_core.lean import lean_draft
from ouroboros_core.models import ASSETS, DRAFT_VOCABULARY, load_model

PROMPT = (
    "def has_close_elements(numbers, threshold):\n"
    '    """Check if any two numbers are closer than threshold."""\n'
)
N = 32


@pytest.fixture(scope="module")
def narrowed(tmp_path_factory):
    """The embedded draft with a vocabulary of its even ids alone."""
    folder = tmp_path_factory.mktemp("narrow") / "draft"
    shutil.copytree(ASSETS / "models" / "draft", folder)
    vocab = json.loads((folder / "config.json").read_text())["vocab_size"]
    (folder / DRAFT_VOCABULARY).write_text(json.dumps(list(range(0, vocab, 2))))
    return folder, vocab


def test_the_lean_draft_scores_its_vocabulary_as_the_model_does_and_nothing_else(narrowed):
    folder, vocab = narrowed
    model = load_model(folder, torch.device("cpu"), torch.float32, False)
    assert model.draft_vocabulary.tolist() == list(range(0, vocab, 2))
    decoder = lean_draft(model)
    assert decoder is not None and decoder.vocabulary is not None
    ids = torch.arange(5, 25)[None]
    with torch.no_grad():
        expected = model(input_ids=ids).logits
    for rows in (1, 3, 20):  # int8 rows and the float32 prefill
        cache = decoder.new_cache()
        got = decoder(
            input_ids=ids[:, :rows],
            position_ids=torch.arange(rows)[None],
            attention_mask=None,
            past_key_values=cache,
        ).logits
        assert got.shape == expected[:, :rows].shape
        assert torch.isinf(got[..., 1::2]).all() and (got[..., 1::2] < 0).all()
        kept, wanted = got[..., 0::2], expected[:, :rows, 0::2]
        assert torch.allclose(kept, wanted, atol=0.1 * (1 + wanted.abs().max().item()), rtol=0)


def test_a_narrowed_draft_keeps_every_method_lossless(narrowed, tokenizer):
    folder, _ = narrowed
    engine = load_engine(str(ASSETS / "models" / "target"), str(folder), "cpu")
    expected = reference_ids(engine.target, engine.tokenizer, PROMPT, N)
    for method in ("speculative", "ouroboros"):
        result = engine.generate(PROMPT, method, N)
        assert result.token_ids == expected, method
        drafted = [
            t.id for step in result.events for t in step.drafted if t.source.value == "draft"
        ]
        # the draft proposed its vocabulary alone
        assert drafted and all(t % 2 == 0 for t in drafted), method
    sampled = {
        m: engine.generate(PROMPT, m, N, temperature=0.8, top_p=0.95, seed=3).token_ids
        for m in ("vanilla", "ouroboros")
    }
    assert sampled["vanilla"] == sampled["ouroboros"]


@pytest.mark.parametrize(
    "content", ["[]", "[1, 1]", "[-1]", "[100000]", '{"ids": [1]}', "not json"]
)
def test_a_broken_vocabulary_file_is_refused_with_its_path(narrowed, tmp_path, content):
    folder = tmp_path / "draft"
    shutil.copytree(narrowed[0], folder)
    (folder / DRAFT_VOCABULARY).write_text(content)
    with pytest.raises(LoadError, match=DRAFT_VOCABULARY):
        load_model(folder, torch.device("cpu"), torch.float32, False)
