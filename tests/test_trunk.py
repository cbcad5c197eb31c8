"""The draft's runner (trunk.DraftRunner): its cache stays a prefix of what it is asked
to extend, and a long prompt is read from its last tokens only."""

from __future__ import annotations

import pytest
import torch
from conftest import build_model

from ouroboros_core.tree import DraftTree, cache_length
from ouroboros_core.trunk import DraftRunner, shared_prefix


@pytest.fixture(scope="module")
def draft(eos_id):
    return build_model("llama", eos_id, seed=3).double()


def plain_logits(model, tokens):
    with torch.no_grad():
        return model(input_ids=torch.tensor([tokens])).logits[0]


def test_shared_prefix_finds_where_two_lists_part():
    assert shared_prefix([1, 2, 3, 4], [1, 2, 3, 4, 5], 4) == 4
    assert shared_prefix([1, 2, 9, 4], [1, 2, 3, 4], 4) == 2
    assert shared_prefix([7], [1], 1) == 0


def test_the_cache_keeps_the_sequence_and_feeds_only_what_is_new(draft):
    runner = DraftRunner(draft)
    prompt = list(range(5, 25))
    logits = runner.forward(prompt)
    torch.testing.assert_close(logits[0], plain_logits(draft, prompt)[-1])
    # A branch rides along; the cache keeps the sequence alone.
    logits = runner.forward(prompt + [30], DraftTree.of([], [[31, 32]]))
    assert cache_length(runner.cache) == len(prompt) + 1 and runner.fed == prompt + [30]
    torch.testing.assert_close(logits[1:], plain_logits(draft, prompt + [30, 31, 32])[-2:])
    # The target kept another token than the draft's: the cache goes back to where they part.
    logits = runner.forward(prompt + [40, 41])
    torch.testing.assert_close(logits[0], plain_logits(draft, prompt + [40, 41])[-1])
    assert cache_length(runner.cache) == len(prompt) + 2


def test_a_long_prompt_is_read_from_its_last_tokens(draft):
    prompt = list(range(5, 45))
    runner = DraftRunner(draft, context=8)
    logits = runner.forward(prompt)
    assert cache_length(runner.cache) == 8 and runner.start == len(prompt) - 8
    torch.testing.assert_close(logits[0], plain_logits(draft, prompt[-8:])[-1])
    # What follows extends that window; the prompt's earlier tokens are never read.
    logits = runner.forward(prompt + [50, 51], DraftTree.of([], [[52]]))
    assert cache_length(runner.cache) == 10
    torch.testing.assert_close(logits[0], plain_logits(draft, prompt[-8:] + [50, 51])[-1])
    torch.testing.assert_close(logits[1], plain_logits(draft, prompt[-8:] + [50, 51, 52])[-1])
    # A prompt within the window is read whole.
    short = DraftRunner(draft, context=64)
    short.forward(prompt)
    assert short.start == 0 and cache_length(short.cache) == len(prompt)
