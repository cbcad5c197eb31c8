"""What a drafter offers the target for one step: a trunk, branches that continue it, and what each
proposer will read back with the verdict."""

from __future__ import annotations

from dataclasses import dataclass, field

from .events import Source
from .tree import DraftTree


@dataclass(frozen=True)
class Branches:
    """One proposer's branches for the tree, and its note: what its `observe` reads with the
    verdict."""

    owner: str  # the proposer's name
    tokens: list[list[int]] = field(default_factory=list)
    sources: list[Source] = field(default_factory=list)  # one per branch: how its tokens came to be
    attach: list[int] = field(default_factory=list)  # a branch's: trunk tokens it continues after
    note: object = None


@dataclass
class Proposal:
    """The tree one target forward verifies. Each branch is credited to the proposer that offered it
    (branch_owners), and each proposer's note travels here to its `observe`, so nothing waits on a
    proposer between its propose and its observe."""

    trunk: list[int] = field(default_factory=list)
    trunk_sources: list[Source] = field(default_factory=list)
    branches: list[list[int]] = field(default_factory=list)  # each continues the trunk: see attach
    branch_sources: list[Source] = field(default_factory=list)  # one per branch
    branch_attach: list[int] = field(default_factory=list)  # per branch: trunk tokens it follows
    branch_owners: list[str] = field(default_factory=list)  # a branch's proposer, where named
    notes: dict[str, object] = field(default_factory=dict)  # proposer's name -> its note

    def add(self, part: Branches) -> None:
        """Hang one proposer's branches after those already here."""
        assert len(part.attach) == len(part.sources) == len(part.tokens), part
        self.branches += part.tokens
        self.branch_sources += part.sources
        self.branch_attach += part.attach
        self.branch_owners += [part.owner] * len(part.tokens)
        if part.note is not None:
            self.notes[part.owner] = part.note

    def after_trunk(self) -> list[list[int]]:
        """The branches that continue the whole trunk."""
        return [b for b, at in zip(self.branches, self.branch_attach) if at == len(self.trunk)]

    def tree(self) -> DraftTree:
        """The tree the target's forward reads."""
        return DraftTree.of(self.trunk, self.branches, self.branch_attach)

    def walked(self, owner: str, branch: int | None) -> bool:
        """Whether the walked branch (a Verdict's `branch`) is one that `owner` offered."""
        return branch is not None and self.branch_owners[branch] == owner

    def cut(self, trunk_length: int, kept=()) -> Proposal:
        """The trunk's first `trunk_length` tokens and the branches at the indices `kept`; the notes
        stay, so each proposer still reads what it offered."""
        attach, owners = self.branch_attach, self.branch_owners
        return Proposal(
            self.trunk[:trunk_length],
            self.trunk_sources[:trunk_length],
            [self.branches[k] for k in kept],
            [self.branch_sources[k] for k in kept],
            [attach[k] for k in kept],
            [owners[k] for k in kept] if owners else [],
            self.notes,
        )
