"""What a drafter offers the target for one step, and the contract of the proposers it composes:
each proposes from the step's context (StepContext) and observes the step's outcome (StepOutcome),
reading back its own note."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol

from .events import Source
from .tree import DraftTree, Acceptance


@dataclass(frozen=True)
class Copy:
    """Context lookup's note: the copy it offered."""

    matched: int  # how many of the text's last tokens its earlier occurrence matched
    hangs: int  # trunk tokens it continues after
    length: int  # its tokens


@dataclass(frozen=True)
class Offered:
    """The pool phrases' note: the phrases offered, as trimmed."""

    phrases: list[list[int]]


Note = Copy | Offered


@dataclass(frozen=True)
class Branches:
    """One proposer's branches for the tree, and its note: what its `observe` reads with the
    verdict."""

    owner: str  # the proposer's name
    tokens: list[list[int]] = field(default_factory=list)
    sources: list[Source] = field(default_factory=list)  # one per branch: how its tokens came to be
    attach: list[int] = field(default_factory=list)  # a branch's: trunk tokens it continues after
    note: Note | None = None


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
    notes: dict[str, Note] = field(default_factory=dict)  # proposer's name -> its note

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
        """Whether the walked branch (an Acceptance's `branch`) is one that `owner` offered."""
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


@dataclass(frozen=True)
class StepContext:
    """What a proposer proposes from."""

    committed: list[int]  # the text so far
    limit: int  # the most drafted tokens a path may hold this step
    copying: bool = False  # the text repeats itself: context lookup leads, the draft rests
    # the draft's trunk (trunk.Trunk), once proposed: the branches hang on it
    trunk: Any = None
    proposal: Proposal | None = None  # the tree so far: the branches already hung


@dataclass(frozen=True)
class StepOutcome:
    """What a proposer observes after the target's forward."""

    committed: list[int]  # the text after the step
    old_length: int  # its length before the step
    proposal: Proposal  # what was verified, each proposer's note in it
    verdict: Acceptance
    trunk_tokens: list[int]  # the target's token after each trunk prefix (len(trunk) + 1)
    # the target's final state that chose the newest committed token, where the engine's draft
    # reads it (verify.StateTap)
    target_state: Any = None


class Proposer(Protocol):
    """A part of the Ouroboros drafter: its branches (`name` in the tree) and what it learns."""

    name: str

    def propose(self, step: StepContext) -> Branches: ...

    def observe(self, outcome: StepOutcome) -> None: ...
