"""A step's proposal (ouroboros_core/proposal.py): each branch keeps its proposer, source and attach
point through every cut, so a walked branch is credited to the proposer that offered it."""

from __future__ import annotations

from ouroboros_core.decode import verifiable
from ouroboros_core.events import Source
from ouroboros_core.proposal import Branches, Proposal


def three_proposers() -> Proposal:
    proposal = Proposal([1, 2, 3], [Source.DRAFT] * 3)
    proposal.add(Branches("lookup", [[7, 8]], [Source.PROMPT], [1], note="copy"))
    proposal.add(Branches("stored", [[9]], [Source.PROMPT], [3]))
    proposal.add(Branches("trunk", [[4], [5, 6]], [Source.DRAFT, Source.DRAFT], [2, 3], "alt"))
    return proposal


def test_branches_hang_in_order_with_their_owner_source_and_attach_point():
    proposal = three_proposers()
    assert proposal.branches == [[7, 8], [9], [4], [5, 6]]
    assert proposal.branch_owners == ["lookup", "stored", "trunk", "trunk"]
    assert proposal.branch_attach == [1, 3, 2, 3] and proposal.after_trunk() == [[9], [5, 6]]
    assert proposal.notes == {"lookup": "copy", "trunk": "alt"}
    assert proposal.walked("stored", 1) and not proposal.walked("lookup", 1)


def test_a_cut_that_keeps_branches_out_of_a_prefix_keeps_each_ones_owner():
    # An end token at trunk position 2 keeps the branches that hang before it: 0 and 2, not a
    # prefix of the branch list; the cut's branch 1 is the trunk's alternative, not the stored one.
    cut = three_proposers().cut(2, [0, 2])
    assert cut.trunk == [1, 2] and cut.branches == [[7, 8], [4]]
    assert cut.branch_owners == ["lookup", "trunk"] and cut.branch_attach == [1, 2]
    assert cut.branch_sources == [Source.PROMPT, Source.DRAFT]
    assert cut.walked("trunk", 1) and not cut.walked("stored", 1)
    assert cut.notes == {"lookup": "copy", "trunk": "alt"}  # each proposer still reads its note
    bare = three_proposers().cut(1)
    assert bare.branches == [] and bare.branch_owners == [] and bare.trunk == [1]


def test_the_first_token_only_the_draft_has_ends_the_trunk_and_drops_such_branches():
    # A draft padded past the target's 512 rows: id 512 is the first the target has no embedding
    # for; 511 is still the target's own.
    proposal = Proposal([10, 511, 512, 13], [Source.DRAFT] * 4)
    proposal.add(Branches("lookup", [[14, 15]], [Source.PROMPT], [1]))
    cut = verifiable(proposal, eos=frozenset(), draft_only=512)
    assert cut.trunk == [10, 511] and cut.branches == []
    trunk_ok = Proposal([10, 511], [Source.DRAFT] * 2)
    trunk_ok.add(Branches("lookup", [[512, 3]], [Source.PROMPT], [2]))
    assert verifiable(trunk_ok, eos=frozenset(), draft_only=512).branches == []
    fine = Proposal([10, 511], [Source.DRAFT] * 2)
    fine.add(Branches("lookup", [[511, 3]], [Source.PROMPT], [2]))
    assert verifiable(fine, eos=frozenset(), draft_only=512).branches == [[511, 3]]
