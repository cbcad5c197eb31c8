"""What a drafter offers the target for one step, and the contract of the proposers it composes:
each proposes from the step's context (StepContext) and observes the step's outcome (StepOutcome),
reading back its own note. LookupTrust: how far one request's drafts of a kind stood, which context
lookup, stored walks and pool phrases end their branches by."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol

from .events import Source
from .fitted import TRUST_PRIOR
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
    # reads it (tree.StateTap)
    target_state: Any = None


class Proposer(Protocol):
    """A part of the Ouroboros drafter: its branches (`name` in the tree) and what it learns."""

    name: str

    def propose(self, step: StepContext) -> Branches: ...

    def observe(self, outcome: StepOutcome) -> None: ...


class LookupTrust:
    """How far one request's drafts of a kind have stood, by row (a copy's row: how many tokens it
    matched): at each depth, how many the target reached there and how many of those tokens it kept.

    A copy after one matching token is rarely right for long; after four, it often runs to the end
    (docs/BENCHMARKS.md, "Sampled: rows where they stand"). Each request learns its own rates,
    starting from the prior fitted.TRUST_PRIOR until the verdicts say otherwise. The last row holds
    every copy that matched `longest` tokens or more, so a proposer keyed on longer matches (stored
    walks) shares it rather than needing a row of its own.
    """

    def __init__(self, longest: int, length: int):
        self.kept = [[0] * length for _ in range(longest + 1)]
        self.reached = [[0] * length for _ in range(longest + 1)]

    def length(self, matched: int, reach: float, most: int, above: float) -> int:
        """How many of a copy's tokens have a chance above `above` of standing, where the copy is
        reached with chance `reach` (at most `most`)."""
        row = self.row(matched)
        chance, kept, reached = reach, self.kept[row], self.reached[row]
        for depth in range(most):
            chance *= (kept[depth] + TRUST_PRIOR[0]) / (reached[depth] + TRUST_PRIOR[1])
            if chance <= above:
                return depth
        return most

    def observe(self, matched: int, length: int, accepted: int) -> None:
        """A copy of `length` tokens was reached and its first `accepted` tokens stood."""
        row = self.row(matched)
        for depth in range(min(accepted + 1, length)):
            self.reached[row][depth] += 1
            self.kept[row][depth] += depth < accepted

    def row(self, matched: int) -> int:
        """The row of a copy that matched `matched` tokens: that length, or the longest row."""
        if matched < 0:
            raise ValueError(f"a copy matched {matched} tokens: a match is 0 tokens or more")
        return min(matched, len(self.kept) - 1)
