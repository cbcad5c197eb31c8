"""Tree verification: the acceptance walk, the tree layout, and one-forward tree logits against
plain forwards."""

import pytest
import torch

from conftest import ARCHITECTURES, build_model
from ouroboros_core.cache import cache_length, new_cache
from ouroboros_core.verify import Verdict, forward_tree, tree_layout, walk_tree


# --- walk_tree: pure cases ------------------------------------------------------------------------


def test_whole_trunk_accepted_gives_the_target_token_after_it():
    assert walk_tree([5, 6, 7], [], [5, 6, 7, 9], []) == Verdict(3, None, 0, 9)


def test_first_trunk_token_rejected():
    assert walk_tree([5, 6, 7], [], [4, 6, 7, 9], []) == Verdict(0, None, 0, 4)


def test_rejection_mid_trunk_keeps_the_prefix_and_the_targets_token():
    # Later trunk positions agree again, but nothing after the first mismatch may stand.
    assert walk_tree([5, 6, 7], [], [5, 8, 7, 9], []) == Verdict(1, None, 0, 8)


def test_branches_are_ignored_when_the_trunk_is_rejected():
    verdict = walk_tree([5, 6], [[6, 1], [8, 2]], [5, 8, 9], [[1, 3], [2, 4]])
    assert verdict == Verdict(1, None, 0, 8)


def test_empty_proposal_is_one_target_token():
    assert walk_tree([], [], [42], []) == Verdict(0, None, 0, 42)


def test_branch_fully_matched_keeps_its_bonus_token():
    # After the trunk the target says 10; branch 1 is [10, 20, 30] and the target agrees with all of
    # it, then adds 40 of its own: all three branch tokens stand plus the bonus token.
    verdict = walk_tree([1, 2], [[11, 12], [10, 20, 30]], [1, 2, 10], [[0, 0], [20, 30, 40]])
    assert verdict == Verdict(2, 1, 3, 40)


def test_branch_partially_matched():
    verdict = walk_tree([1], [[10, 20, 99]], [1, 10], [[20, 30, 50]])
    assert verdict == Verdict(1, 0, 2, 30)


def test_no_branch_matches():
    verdict = walk_tree([1], [[11, 20], [12]], [1, 10], [[20, 30], [40]])
    assert verdict == Verdict(1, None, 0, 10)


def test_branches_after_an_empty_trunk():
    verdict = walk_tree([], [[3, 4], [7, 8, 9]], [7], [[0, 0], [8, 9, 1]])
    assert verdict == Verdict(0, 1, 3, 1)


def test_longest_matching_branch_wins():
    verdict = walk_tree([], [[7, 1], [7, 8, 9]], [7], [[8, 5], [8, 9, 2]])
    assert verdict == Verdict(0, 1, 3, 2)


def test_shared_prefix_branches_read_one_node():
    # Branches 0 and 1 share [10, 20]. The shared nodes are read from the first live branch (0)
    # only; branch 1's own readings there (21, 30) would reject it at depth 1 if they were used. At
    # depth 2 only branch 1 (31) matches branch 0's reading, and its own reading after that (60) is
    # the bonus token.
    trunk_tokens = [10]
    branches = [[10, 20, 30], [10, 20, 31]]
    branch_tokens = [[20, 31, 50], [21, 30, 60]]
    assert walk_tree([], branches, trunk_tokens, branch_tokens) == Verdict(0, 1, 3, 60)


def test_shared_node_reading_from_first_live_branch_not_first_branch():
    # Branch 0 dies at depth 0, so the shared node of branches 1 and 2 is read from branch 1.
    branches = [[9], [10, 20], [10, 21]]
    branch_tokens = [[0], [21, 70], [20, 80]]
    assert walk_tree([], branches, [10], branch_tokens) == Verdict(0, 2, 2, 80)


# --- tree_layout ----------------------------------------------------------------------------------


def test_tree_layout_positions_and_mask():
    past, pending, trunk, lengths = 4, 1, 2, [2, 3]
    positions, mask = tree_layout(pending, trunk, lengths, past, torch.float32, torch.device("cpu"))
    n = pending + trunk + sum(lengths)
    assert positions.shape == (1, n)
    assert mask.shape == (1, 1, n, past + n)
    assert mask.dtype == torch.float32
    # Pending + trunk run on from the cache; every branch continues after the trunk.
    assert positions[0].tolist() == [4, 5, 6, 7, 8, 7, 8, 9]
    allowed = mask[0, 0] == 0.0
    assert set(mask.unique().tolist()) == {0.0, torch.finfo(torch.float32).min}
    expected = torch.zeros(n, past + n, dtype=torch.bool)
    expected[:, :past] = True  # everything sees the cache
    for i in range(3):  # causal run over pending + trunk
        expected[i, past : past + i + 1] = True
    for rows in ([3, 4], [5, 6, 7]):
        for j, row in enumerate(rows):
            expected[row, past : past + 3] = True  # the whole trunk
            # its own earlier tokens and itself
            expected[row, past + rows[0] : past + row + 1] = True
    assert torch.equal(allowed, expected)


def test_tree_layout_offsets_shift_branch_positions():
    positions, mask = tree_layout(
        2, 0, [2, 2, 1], 3, torch.float16, torch.device("cpu"), offsets=[0, 1, 2]
    )
    assert positions[0].tolist() == [3, 4, 5, 6, 6, 7, 7]
    assert mask.dtype == torch.float16
    assert set(mask.unique().tolist()) == {0.0, torch.finfo(torch.float16).min}
    # A branch never sees another branch.
    allowed = mask[0, 0] == 0
    assert not allowed[4, 3 + 2 : 3 + 4].any()
    assert not allowed[6, 3 + 2 : 3 + 6].any()
    assert allowed[6, : 3 + 2].all()


def test_tree_layout_without_branches_is_causal():
    positions, mask = tree_layout(3, 2, [], 1, torch.float32, torch.device("cpu"))
    assert positions[0].tolist() == [1, 2, 3, 4, 5]
    allowed = mask[0, 0] == 0
    assert torch.equal(allowed[:, 1:], torch.ones(5, 5, dtype=torch.bool).tril())
    assert allowed[:, 0].all()


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
    forward_tree(model, cache, cached, [], [])
    logits = forward_tree(model, cache, pending, trunk, branches)
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
    logits = forward_tree(model, new_cache(model), prefix, [], branches)
    torch.testing.assert_close(logits[0], plain_logits(model, prefix)[-1], rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(
        logits[1:4], plain_logits(model, prefix + [1, 2, 3])[-3:], rtol=1e-5, atol=1e-5
    )
    torch.testing.assert_close(
        logits[4], plain_logits(model, prefix + [4])[-1], rtol=1e-5, atol=1e-5
    )


def test_branch_attached_inside_the_trunk_takes_over_where_the_trunk_is_rejected():
    # Trunk [5, 6]: the target keeps nothing (it says 7 first). Branch 0 hangs after the whole trunk
    # and is dead; branch 1 starts at the root, begins with 7 and the target agrees with 7, 8, then
    # says 4.
    verdict = walk_tree([5, 6], [[6, 1], [7, 8, 9]], [7, 0, 0], [[0, 0], [8, 4, 0]], attach=[2, 0])
    assert verdict == Verdict(0, 1, 2, 4)


def test_root_branch_is_not_walked_when_the_trunk_stands():
    verdict = walk_tree([5], [[6, 1], [5, 6]], [5, 6], [[1, 2], [6, 3]], attach=[1, 0])
    assert verdict == Verdict(1, 0, 2, 2)


def test_branch_attached_mid_trunk():
    verdict = walk_tree([5, 6, 7], [[9, 9]], [5, 9, 0, 0], [[9, 3]], attach=[1])
    assert verdict == Verdict(1, 0, 2, 3)


def test_tree_layout_attach_points():
    positions, mask = tree_layout(
        1, 2, [2, 1], past=3, dtype=torch.float32, device="cpu", attach=[0, 2]
    )
    assert positions.tolist() == [[3, 4, 5, 4, 5, 6]]
    allowed = (mask[0, 0] == 0).int().tolist()
    # Root branch: cache and the pending token only, then itself; never the trunk.
    assert allowed[3] == [1, 1, 1, 1, 0, 0, 1, 0, 0]
    assert allowed[4] == [1, 1, 1, 1, 0, 0, 1, 1, 0]
    # The other branch sees the whole trunk.
    assert allowed[5] == [1, 1, 1, 1, 1, 1, 0, 0, 1]


@pytest.mark.parametrize("arch", ARCHITECTURES)
def test_tree_logits_with_a_root_branch_equal_sequential_forwards(tree_models, arch):
    model = tree_models[arch, "eager"]
    prefix = [5, 9, 33, 2, 7]
    trunk = [11, 12]
    branches = [[21, 22, 23], [31, 32]]
    logits = forward_tree(model, new_cache(model), prefix, trunk, branches, attach=[0, 1])
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
    monkeypatch.setattr("ouroboros_core.verify.PLAIN_RUN", 16)  # a "long" prompt for this model
    try:
        logits = forward_tree(model, new_cache(model), prompt, [11, 12], [[21], [31, 32]])
        short = forward_tree(model, new_cache(model), prompt[-10:], [11, 12], [[21], [31, 32]])
    finally:
        del model.forward
    # The prompt but its last token unmasked; that token, the trunk and the branches under the mask.
    # A short prompt stays in the one masked forward, where a second call would cost more.
    assert calls == [(36, None), (6, (1, 1, 6, 42)), (15, (1, 1, 15, 15))]
    torch.testing.assert_close(short[:3], plain_logits(model, prompt[-10:] + [11, 12])[9:])
    reference = plain_logits(model, prompt + [11, 12])[len(prompt) - 1 :]
    torch.testing.assert_close(logits[:3], reference, rtol=1e-5, atol=1e-5)
