"""Tree verification: the acceptance walk, the tree layout, and one-forward tree logits against
plain forwards."""

import pytest
import torch

from conftest import ARCHITECTURES, build_model
from ouroboros_core.tree import DraftTree, cache_length, forward_tree, new_cache


# --- one tree forward == plain sequential forwards ------------------------------------------------


@pytest.fixture(scope="module")
def tree_models(eos_id):
    # float64: a tree forward multiplies other shapes than a plain one, so its sums run in another
    # order; in float32 that alone moved a logit by 1.2e-5 on AVX-512 kernels. In float64 the order
    # costs ~1e-15, so the 1e-5 tolerances below only ever see a wrong mask or position.
    return {
        (arch, attn): build_model(arch, eos_id, seed=7, attn=attn).double()
        for arch in ARCHITECTURES
        for attn in ("eager", "sdpa")
    }


def plain_logits(model, tokens):
    with torch.no_grad():
        return model(input_ids=torch.tensor([tokens])).logits[0]


@pytest.mark.parametrize("attn", ["eager", "sdpa"])
@pytest.mark.parametrize("arch", ARCHITECTURES)
def test_tree_logits_equal_sequential_forwards(tree_models, arch, attn):
    model = tree_models[arch, attn]
    generator = torch.Generator().manual_seed(1)
    prefix = torch.randint(0, 512, (9,), generator=generator).tolist()
    cached, pending = prefix[:7], prefix[7:]
    trunk = [11, 12, 13]
    branches = [[21, 22], [31], [41, 42, 43], [21, 23]]  # two share a first token

    cache = new_cache(model)
    forward_tree(model, cache, cached)
    logits = forward_tree(model, cache, pending, DraftTree.of(trunk, branches))
    assert cache_length(cache) == len(prefix) + len(trunk) + sum(map(len, branches))
    assert logits.shape == (1 + len(trunk) + sum(map(len, branches)), model.config.vocab_size)

    tol = dict(rtol=1e-5, atol=1e-5)
    # The last pending token and the trunk: exactly the plain logits.
    reference = plain_logits(model, prefix + trunk)[len(prefix) - 1 :]
    torch.testing.assert_close(logits[: 1 + len(trunk)], reference, **tol)
    start = 1 + len(trunk)
    for branch in branches:
        reference = plain_logits(model, prefix + trunk + branch)[len(prefix) + len(trunk) :]
        torch.testing.assert_close(logits[start : start + len(branch)], reference, **tol)
        start += len(branch)
    # Sanity: the branches differ from each other, so equal logits are not a coincidence of the
    # inputs.
    assert not torch.allclose(logits[1 + len(trunk)], logits[1 + len(trunk) + 2], atol=1e-2)


@pytest.mark.parametrize("arch", ARCHITECTURES)
def test_tree_forward_without_cache_and_empty_trunk(tree_models, arch):
    model = tree_models[arch, "sdpa"]
    prefix = [5, 9, 33, 2, 7]
    branches = [[1, 2, 3], [4]]
    logits = forward_tree(model, new_cache(model), prefix, DraftTree.of([], branches))
    torch.testing.assert_close(logits[0], plain_logits(model, prefix)[-1], rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(
        logits[1:4], plain_logits(model, prefix + [1, 2, 3])[-3:], rtol=1e-5, atol=1e-5
    )
    torch.testing.assert_close(
        logits[4], plain_logits(model, prefix + [4])[-1], rtol=1e-5, atol=1e-5
    )


@pytest.mark.parametrize("arch", ARCHITECTURES)
def test_tree_logits_with_a_root_branch_equal_sequential_forwards(tree_models, arch):
    model = tree_models[arch, "eager"]
    prefix = [5, 9, 33, 2, 7]
    trunk = [11, 12]
    branches = [[21, 22, 23], [31, 32]]
    logits = forward_tree(
        model, new_cache(model), prefix, DraftTree.of(trunk, branches, attach=[0, 1])
    )
    tol = dict(rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(logits[:3], plain_logits(model, prefix + trunk)[-3:], **tol)
    torch.testing.assert_close(logits[3:6], plain_logits(model, prefix + [21, 22, 23])[-3:], **tol)
    torch.testing.assert_close(logits[6:8], plain_logits(model, prefix + [11, 31, 32])[-2:], **tol)


def test_a_long_prompt_before_a_tree_runs_unmasked_and_only_the_tree_is_masked(
    tree_models, monkeypatch
):
    # A long prompt's prefill under a tree mask computes every masked score and takes the slower
    # kernels: the pending run goes first through the model's own causal path.
    model = tree_models[ARCHITECTURES[0], "sdpa"]
    calls = []
    forward = model.forward

    def recording(**kwargs):
        mask = kwargs.get("attention_mask")
        calls.append((kwargs["input_ids"].shape[1], None if mask is None else tuple(mask.shape)))
        return forward(**kwargs)

    model.forward = recording
    prompt = list(range(3, 40))
    monkeypatch.setattr("ouroboros_core.tree.PLAIN_RUN", 16)  # a "long" prompt for this model
    try:
        logits = forward_tree(
            model, new_cache(model), prompt, DraftTree.of([11, 12], [[21], [31, 32]])
        )
        short = forward_tree(
            model, new_cache(model), prompt[-10:], DraftTree.of([11, 12], [[21], [31, 32]])
        )
    finally:
        del model.forward
    # The prompt but its last token unmasked; that token, the trunk and the branches under the mask.
    # A short prompt stays in the one masked forward, where a second call would cost more.
    assert calls == [(36, None), (6, (1, 1, 6, 42)), (15, (1, 1, 15, 15))]
    torch.testing.assert_close(short[:3], plain_logits(model, prompt[-10:] + [11, 12])[9:])
    reference = plain_logits(model, prompt + [11, 12])[len(prompt) - 1 :]
    torch.testing.assert_close(logits[:3], reference, rtol=1e-5, atol=1e-5)
