"""The draft tree (tree.DraftTree) on hand-made trees, no model: the acceptance walk, positions
and mask, row groups, row positions, and the cache rows an accepted branch keeps."""

import torch

from ouroboros_core.tree import STANDS_IN, DraftTree, Acceptance
from ouroboros_core.tree import walk as walk_tree


def walk(trunk, branches, trunk_tokens, branch_tokens, attach=None) -> Acceptance:
    return walk_tree(DraftTree.of(trunk, branches, attach), trunk_tokens, branch_tokens)


def tree_layout(pending, trunk, lengths, past, dtype, device, offsets=None, attach=None):
    """The layout of a tree of `trunk` trunk tokens and branches of `lengths` (their tokens do not
    matter to it)."""
    tree = DraftTree.of([0] * trunk, [[0] * n for n in lengths], attach, offsets)
    return tree.layout(pending, past, dtype, device)


# --- the walk: pure cases ------------------------------------------------------------------------


def test_whole_trunk_accepted_gives_the_target_token_after_it():
    assert walk([5, 6, 7], [], [5, 6, 7, 9], []) == Acceptance(3, None, 0, 9)


def test_first_trunk_token_rejected():
    assert walk([5, 6, 7], [], [4, 6, 7, 9], []) == Acceptance(0, None, 0, 4)


def test_rejection_mid_trunk_keeps_the_prefix_and_the_targets_token():
    # Later trunk positions agree again, but nothing after the first mismatch may stand.
    assert walk([5, 6, 7], [], [5, 8, 7, 9], []) == Acceptance(1, None, 0, 8)


def test_branches_are_ignored_when_the_trunk_is_rejected():
    verdict = walk([5, 6], [[6, 1], [8, 2]], [5, 8, 9], [[1, 3], [2, 4]])
    assert verdict == Acceptance(1, None, 0, 8)


def test_empty_proposal_is_one_target_token():
    assert walk([], [], [42], []) == Acceptance(0, None, 0, 42)


def test_branch_fully_matched_keeps_its_bonus_token():
    # After the trunk the target says 10; branch 1 is [10, 20, 30] and the target agrees with all of
    # it, then adds 40 of its own: all three branch tokens stand plus the bonus token.
    verdict = walk([1, 2], [[11, 12], [10, 20, 30]], [1, 2, 10], [[0, 0], [20, 30, 40]])
    assert verdict == Acceptance(2, 1, 3, 40)


def test_branch_partially_matched():
    verdict = walk([1], [[10, 20, 99]], [1, 10], [[20, 30, 50]])
    assert verdict == Acceptance(1, 0, 2, 30)


def test_no_branch_matches():
    verdict = walk([1], [[11, 20], [12]], [1, 10], [[20, 30], [40]])
    assert verdict == Acceptance(1, None, 0, 10)


def test_branches_after_an_empty_trunk():
    verdict = walk([], [[3, 4], [7, 8, 9]], [7], [[0, 0], [8, 9, 1]])
    assert verdict == Acceptance(0, 1, 3, 1)


def test_longest_matching_branch_wins():
    verdict = walk([], [[7, 1], [7, 8, 9]], [7], [[8, 5], [8, 9, 2]])
    assert verdict == Acceptance(0, 1, 3, 2)


def test_shared_prefix_branches_read_one_node():
    # Branches 0 and 1 share [10, 20]. The shared nodes are read from the first live branch (0)
    # only; branch 1's own readings there (21, 30) would reject it at depth 1 if they were used. At
    # depth 2 only branch 1 (31) matches branch 0's reading, and its own reading after that (60) is
    # the bonus token.
    trunk_tokens = [10]
    branches = [[10, 20, 30], [10, 20, 31]]
    branch_tokens = [[20, 31, 50], [21, 30, 60]]
    assert walk([], branches, trunk_tokens, branch_tokens) == Acceptance(0, 1, 3, 60)


def test_shared_node_reading_from_first_live_branch_not_first_branch():
    # Branch 0 dies at depth 0, so the shared node of branches 1 and 2 is read from branch 1.
    branches = [[9], [10, 20], [10, 21]]
    branch_tokens = [[0], [21, 70], [20, 80]]
    assert walk([], branches, [10], branch_tokens) == Acceptance(0, 2, 2, 80)


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


def test_branch_attached_inside_the_trunk_takes_over_where_the_trunk_is_rejected():
    # Trunk [5, 6]: the target keeps nothing (it says 7 first). Branch 0 hangs after the whole trunk
    # and is dead; branch 1 starts at the root, begins with 7 and the target agrees with 7, 8, then
    # says 4.
    verdict = walk([5, 6], [[6, 1], [7, 8, 9]], [7, 0, 0], [[0, 0], [8, 4, 0]], attach=[2, 0])
    assert verdict == Acceptance(0, 1, 2, 4)


def test_root_branch_is_not_walked_when_the_trunk_stands():
    verdict = walk([5], [[6, 1], [5, 6]], [5, 6], [[1, 2], [6, 3]], attach=[1, 0])
    assert verdict == Acceptance(1, 0, 2, 2)


def test_branch_attached_mid_trunk():
    verdict = walk([5, 6, 7], [[9, 9]], [5, 9, 0, 0], [[9, 3]], attach=[1])
    assert verdict == Acceptance(1, 0, 2, 3)


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


# --- rows, groups and the cache rows a walk keeps -------------------------------------------------


def test_groups_and_branch_rows_follow_the_feeding_order():
    tree = DraftTree.of([1, 2], [[3, 4, 5], [6], [7, 8]], attach=[2, 0, 1])
    assert tree.tokens() == [1, 2, 3, 4, 5, 6, 7, 8]
    # row 0 follows the last pending token, rows 1-2 the trunk's tokens, then each branch's
    assert tree.groups() == [3, 3, 1, 2]
    assert [tree.branch_row(b) for b in range(3)] == [3, 6, 7]
    assert tree.row_positions(20) == [20, 21, 22, 23, 24, 25, 21, 22, 23]


def test_kept_rows_move_the_walked_branch_behind_the_kept_trunk():
    tree = DraftTree.of([1, 2], [[3, 4, 5], [6, 9]], attach=[2, 2])
    # the trunk stood and branch 1 stood for two tokens: its rows start after the trunk and branch 0
    assert tree.kept_rows(Acceptance(2, 1, 2, 0)) == (2, 5, 2)
    assert tree.kept_rows(Acceptance(1, None, 0, 0)) == (
        1,
        1,
        0,
    )  # no branch: the trunk's head alone
    assert tree.kept_rows(Acceptance(2, 0, 1, 0)) == (2, 2, 1)


def test_extra_rows_stand_in_for_the_last_token_and_columns_sit_further_on():
    extra_rows = DraftTree.extra_rows(
        columns=[[10, 11], [12]], phrases=[[13, 14]], stand_ins=[15, 16]
    )
    assert extra_rows.trunk == () and extra_rows.attach == (0, 0, 0, STANDS_IN, STANDS_IN)
    assert extra_rows.offsets == (0, 1, 0, 0, 0)
    # 7 tokens in the sequence: its next token is at 7; a stand-in's row guesses that same place
    assert extra_rows.row_positions(7) == [7, 8, 9, 9, 8, 9, 7, 7]
    positions, mask = extra_rows.layout(2, 5, torch.float32, "cpu")
    # pending 5, 6; the columns from 7 (the second one place further), the stand-ins at 6
    assert positions.tolist() == [[5, 6, 7, 8, 8, 7, 8, 6, 6]]
    allowed = (mask[0, 0] == 0).int().tolist()
    # A stand-in sees the cache and the pending tokens before the last one, then itself.
    assert allowed[7] == [1] * 5 + [1, 0] + [0] * 5 + [1, 0]
    assert allowed[8] == [1] * 5 + [1, 0] + [0] * 6 + [1]
    # A phrase sees all the pending tokens and its own earlier tokens, never a column.
    assert allowed[5] == [1] * 5 + [1, 1] + [0, 0, 0] + [1] + [0, 0, 0]
    assert allowed[6] == [1] * 5 + [1, 1] + [0, 0, 0] + [1, 1] + [0, 0]


# --- the row the target's own token came from ----------------------------------------------------


def test_the_next_tokens_row_follows_the_last_accepted_token():
    """Rows: the last pending token's (0), the trunk's, then each branch's; the target's own token
    is read after the last accepted token, whose state a state-fed draft reads next."""
    from ouroboros_core.tree import next_token_row

    tree = DraftTree.of([5, 6], [[7, 8], [9, 10, 11]])  # rows 0-2 trunk, 3-4 and 5-7 branches
    trunk, branches = [5, 6, 9], [[8, 1], [10, 12, 1]]
    assert next_token_row(tree, walk_tree(tree, [4, 6, 9], branches)) == 0  # trunk rejected
    assert next_token_row(tree, walk_tree(tree, [5, 3, 9], branches)) == 1
    verdict = walk_tree(tree, trunk, branches)  # trunk, then branch 1: 9 and 10 stand
    assert (verdict.branch, verdict.branch_accepted) == (1, 2)
    assert next_token_row(tree, verdict) == 6
    assert next_token_row(tree, walk_tree(tree, [5, 6, 7], branches)) == 4  # 7 and 8 stand
    assert next_token_row(tree, walk_tree(tree, [5, 6, 7], [[2, 1], [1, 1, 1]])) == 3  # 7 stands
