"""Cache surgery: after truncate or keep_span the cache must behave exactly like one built from the
kept tokens."""

import pytest
import torch

from conftest import ARCHITECTURES, build_model
from ouroboros_core.tree import (
    DraftTree,
    cache_length,
    forward_tree,
    keep_span,
    new_cache,
    truncate,
)

TOL = dict(rtol=1e-5, atol=1e-5)


@pytest.fixture(scope="module")
def cache_models(eos_id):
    return {arch: build_model(arch, eos_id, seed=11) for arch in ARCHITECTURES}


def fresh_logits(model, kept, following):
    """Logits for `following` after a cache built directly from `kept`."""
    cache = new_cache(model)
    forward_tree(model, cache, kept)
    return forward_tree(model, cache, following)


@pytest.mark.parametrize("arch", ARCHITECTURES)
def test_truncate_equals_a_cache_of_the_kept_tokens(cache_models, arch):
    model = cache_models[arch]
    tokens = [3, 14, 15, 92, 65, 35, 89, 79, 32, 38]
    following = [46, 26, 43]
    cache = new_cache(model)
    forward_tree(model, cache, tokens)
    truncate(cache, 6)
    assert cache_length(cache) == 6
    logits = forward_tree(model, cache, following)
    torch.testing.assert_close(logits, fresh_logits(model, tokens[:6], following), **TOL)
    # Truncating to the current length is a no-op.
    truncate(cache, cache_length(cache))
    assert cache_length(cache) == 6 + len(following)


@pytest.mark.parametrize("arch", ARCHITECTURES)
def test_keep_span_equals_a_cache_of_trunk_plus_branch(cache_models, arch):
    model = cache_models[arch]
    prefix, trunk = [3, 14, 15, 92, 65], [35, 89]
    branches = [[7, 9, 11], [20, 21, 22, 23], [30]]
    following = [50, 51]
    for chosen, kept_rows in [(1, 3), (1, 4), (0, 2), (2, 1)]:
        cache = new_cache(model)
        forward_tree(model, cache, prefix, DraftTree.of(trunk, branches))
        length = len(prefix) + len(trunk)
        span_start = length + sum(map(len, branches[:chosen]))
        keep_span(cache, length, span_start, kept_rows)
        assert cache_length(cache) == length + kept_rows
        logits = forward_tree(model, cache, following)
        expected = fresh_logits(model, prefix + trunk + branches[chosen][:kept_rows], following)
        torch.testing.assert_close(logits, expected, **TOL)


@pytest.mark.parametrize("arch", ["llama", "gpt2"])
def test_keep_span_of_nothing_drops_all_branches(cache_models, arch):
    model = cache_models[arch]
    prefix, trunk = [3, 14, 15], [92, 65, 35]
    cache = new_cache(model)
    forward_tree(model, cache, prefix, DraftTree.of(trunk, [[1, 2], [3]]))
    keep_span(cache, 4, 6, 0)  # keep part of the trunk only, as after a rejection inside it
    assert cache_length(cache) == 4
    logits = forward_tree(model, cache, [8, 9])
    torch.testing.assert_close(logits, fresh_logits(model, (prefix + trunk)[:4], [8, 9]), **TOL)
