"""Sampled tokens that come through Ouroboros' trees (branches, shared nodes and the
context-lookup branch) follow the target's own distribution: test_sampling's chi-square design, on
a target that copies.

Trees (12 new tokens, 1000 seeds per case, temperature 1.0).
test_sampled_tokens_through_branches_follow_the_targets_distribution runs Ouroboros on a target
that copies, so its branches are verified and accepted: a node shared by two branches (the lookup
branch and a pool phrase) is read in every run, and with gamma 3 the lookup branch is walked from
inside a rejected trunk in about 38% of runs. Power against bugs patched into the loop, estimated
from 3000 runs of each (noncentral chi-square, with the estimate's own noise taken out of the
noncentrality): reading a shared node from each branch's own sample (the bias the shared-node rule
in tree.walk prevents), 0.9998 (noncentrality 67 at df 9); reading a node from a branch that
already died, 1.0; accepting a branch's first token without comparing it with the sample, 1.0
(both cases); laying out a branch that hangs inside the trunk after the whole trunk, 1.0 (1.4% of
runs return a sequence outside the target's nucleus; the chi-square alone would catch it 12% of
the time). A third case has neither lookup nor pool: the draft's trunk, extended while it is sure,
and its second choices as one-token branches, walked in 642 of 1000 runs; its power was not
simulated. The gamma-3 and second-choice cases draft with a draft that ignores the target's noise
(`unkeyed_guesses`): the real drafter, guessing with the same noise, is right so often on these
texts (its trunk rejected in 81 of 1000 runs) that those branches would rarely be walked. Not seen
here: a walk that ignores where a branch hangs never reaches another verdict on these texts;
test_verify's hand-written walks cover it.
"""

from __future__ import annotations

import random
from collections import Counter
from dataclasses import dataclass

import pytest
import torch

import ouroboros_core.decode as decode_module
import ouroboros_core.trunk as trunk_module
from chi_square import Cells, assert_follows_the_target
from conftest import build_model, noisy_copy
from engine_checks import run
from ouroboros_core import Engine, Source
from ouroboros_core.drafters import Ouroboros
from ouroboros_core.tree import Acceptance

# --- trees: branches, shared nodes and the context-lookup branch, verified on samples -------------

COPY_PROMPT = "self.a = a\nself.b = b\nself.c = c\nself.a = a\n"
TREE_LENGTH = 12  # two lines: two letters sampled, each copied once
TREE_SAMPLES = 1000


def copying_model(tokenizer, eos_id: int):
    """A tiny target trained (a second) on lines `self.X = X` with X drawn from a, b, c
    (weights .5, .3, .2): after `self.` it cannot know the letter and samples one, after `self.X =`
    it copies X. So Ouroboros' branches (what followed before, from the prompt) are often right, and
    often differ where it samples."""
    model = build_model("llama", eos_id, seed=0, layers=1, hidden=16)
    lines = {x: tokenizer(f"self.{x} = {x}\n")["input_ids"] for x in "abc"}
    rng = random.Random(0)
    optimizer = torch.optim.Adam(model.parameters(), lr=0.02)
    model.train()
    for _ in range(250):
        ids = torch.tensor(
            [[t for x in rng.choices("abc", (5, 3, 2), k=6) for t in lines[x]] for _ in range(8)]
        )
        loss = model(input_ids=ids, labels=ids).loss
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    return model.eval().requires_grad_(False)


@pytest.fixture(scope="module")
def copying_pair(tokenizer, models):
    target = copying_model(tokenizer, models.eos_id)
    return Engine(target, noisy_copy(target, 0.05, seed=4), tokenizer)


@dataclass(frozen=True)
class Walk:
    """One step's acceptance walk, as the decode loop ran it."""

    looked_up: bool  # the proposal's first branch is the context-lookup branch
    trunk: list[int]
    branches: list[list[int]]
    attach: list[int]  # trunk tokens each branch continues after
    verdict: Acceptance

    def walked(self, lookup: bool = False, inside_trunk: bool = False) -> bool:
        """A branch (the lookup branch; hanging inside the trunk) was walked, and kept at least one
        token."""
        b = self.verdict.branch
        return (
            b is not None
            and self.verdict.branch_accepted > 0
            and (not lookup or (self.looked_up and b == 0))
            and (not inside_trunk or self.attach[b] < len(self.trunk))
        )

    def shared_nodes(self) -> int:
        """Nodes on the walked branch that two or more live branches shared: each read from one
        sample."""
        b, v = self.verdict.branch, self.verdict
        if b is None:
            return 0
        here = [c for c, a in zip(self.branches, self.attach) if a == v.trunk_accepted]
        return sum(
            sum(c[: d + 1] == self.branches[b][: d + 1] for c in here) >= 2
            for d in range(v.branch_accepted)
        )


@pytest.fixture
def walks(monkeypatch):
    """Every acceptance walk of the decode loop during the test, with what the drafter proposed."""
    seen, looked_up = [], []
    walk, propose = decode_module.walk, Ouroboros.propose

    def recording_propose(self, committed, limit):
        proposal = propose(self, committed, limit)
        looked_up.append(proposal.branch_owners[:1] == [self.lookup.name])
        return proposal

    def recording_walk(tree, trunk_tokens, branch_tokens):
        verdict = walk(tree, trunk_tokens, branch_tokens)
        trunk, branches = list(tree.trunk), [list(b) for b in tree.branches]
        seen.append(Walk(looked_up[-1], trunk, branches, list(tree.attach), verdict))
        return verdict

    monkeypatch.setattr(Ouroboros, "propose", recording_propose)
    monkeypatch.setattr(decode_module, "walk", recording_walk)
    return seen


# The draft's trunk alone, extended while it is sure: no lookup, no pool phrases.
TRUNK_ALONE = {
    "gamma": 1,
    "branches": 0,
    "lookup": 0,
    "draft_candidates": 0,
    "max_trunk": 4,
    "extend_above": 0.0,
    "extend_chance": 0.0,
}

TREE_CASES = {
    # The draft proposes `self`; the lookup branch and a pool phrase both continue it with `.` and
    # part at the letter the target samples: the shared node is read in nearly every run.
    "shared node": (
        {"gamma": 1, "branches": 1, "draft_candidates": 0, "max_trunk": 1, "second_above": 1.0},
        1.0,
    ),
    # The draft proposes three tokens; where it guesses the letter wrong, the lookup branch hangs
    # inside the trunk and is walked when the target samples its letter. Nucleus sampling on top
    # (0.9 keeps the three letters, drops the tail).
    "lookup inside the trunk": (
        {"gamma": 3, "branches": 1, "draft_candidates": 0, "max_trunk": 1, "second_above": 1.0},
        0.9,
    ),
    # No lookup, no pool: the draft's trunk (extended while it is sure) and its other choices, each
    # a branch in place of its first choice (with the draft's guess after it where the trunk went
    # on), walked when the target samples that token instead.
    "second choices": ({**TRUNK_ALONE, "second_above": 0.0}, 1.0),
    # The same choices, now only in the rows the tree has free (second_above 1: none otherwise; a
    # trunk of 4 leaves 3 of 8).
    "free rows filled": (
        {**TRUNK_ALONE, "second_above": 1.0, "free_rows": 8, "fill_above": 0.0},
        1.0,
    ),
}


def tree_counts(runs) -> dict[str, int]:
    """In how many runs each thing happened at least once (runs: the walks of each run)."""

    def count(happened) -> int:
        return sum(any(happened(w) for w in walks) for walks in runs)

    return {
        "branch tokens accepted": count(lambda w: w.walked()),
        "lookup branch accepted": count(lambda w: w.walked(lookup=True)),
        "shared node read": count(lambda w: w.shared_nodes() > 0),
        "lookup branch accepted inside the trunk": count(
            lambda w: w.walked(lookup=True, inside_trunk=True)
        ),
        "trunk token rejected": count(lambda w: w.verdict.trunk_accepted < len(w.trunk)),
        "second choice accepted": count(
            lambda w: (
                w.walked() and len(w.branches[w.verdict.branch]) <= 2 and not w.walked(lookup=True)
            )
        ),
    }


def check_branch_tokens(result, walks) -> None:
    """The tokens a step accepted past the trunk are the walked branch's, credited to where it came
    from."""
    assert len(walks) == len(result.events)
    for step, walk in zip(result.events, walks):
        if walk.walked():
            kept = step.accepted[walk.verdict.trunk_accepted :]
            assert [t.id for t in kept] == walk.branches[walk.verdict.branch][: len(kept)]
            allowed = (
                {Source.PROMPT}
                if walk.walked(lookup=True)
                else {Source.PROMPT, Source.POOL, Source.DRAFT}
            )
            assert {t.source for t in kept} <= allowed
            # only another choice, and at most the draft's guess after it
            if Source.DRAFT in {t.source for t in kept}:
                assert len(walk.branches[walk.verdict.branch]) <= 2


def unkeyed_guesses(logits, temperature, seed, positions, top=64):
    """A draft that ignores the target's noise: its own most likely tokens, as drafters guessed
    before the noise was shared. Wrong far more often, so the branches that stand in for a wrong
    trunk token get walked."""
    values, ids = logits.topk(min(top, logits.shape[-1]), dim=-1)
    return values.double() / temperature, ids


@pytest.mark.parametrize("case", list(TREE_CASES))
def test_sampled_tokens_through_branches_follow_the_targets_distribution(
    copying_pair, walks, case, monkeypatch
):
    engine = copying_pair
    options, top_p = TREE_CASES[case]
    # a draft guessing with the target's noise is rarely wrong here (81 of 1000 runs)
    if case != "shared node":
        monkeypatch.setattr(trunk_module, "draft_guesses", unkeyed_guesses)
    prompt_ids = engine.encode(COPY_PROMPT)
    cells = Cells.of(engine.target, prompt_ids, TREE_LENGTH, 1.0, top_p, TREE_SAMPLES, engine.eos)
    observed, runs = Counter(), []
    for seed in range(TREE_SAMPLES):
        start = len(walks)
        result = run(
            engine,
            COPY_PROMPT,
            "ouroboros",
            TREE_LENGTH,
            temperature=1.0,
            top_p=top_p,
            seed=seed,
            **options,
        )
        check_branch_tokens(result, walks[start:])
        observed[tuple(result.token_ids)] += 1
        runs.append(walks[start:])
    counts = tree_counts(runs)
    # Measured, in runs of 1000: "shared node": branch tokens accepted 1000, lookup branch accepted
    # 998, shared node read 1000; "lookup inside the trunk": branch tokens accepted 1000, lookup
    # branch accepted inside the trunk 380, trunk token rejected 577; "second choices" and "free
    # rows filled": a second choice accepted in 830 each.
    choices = case in ("second choices", "free rows filled")
    assert counts["branch tokens accepted"] >= (0.4 if choices else 0.8) * TREE_SAMPLES, counts
    if case == "shared node":
        assert counts["shared node read"] >= 0.8 * TREE_SAMPLES, counts
        assert counts["lookup branch accepted"] >= 0.8 * TREE_SAMPLES, counts
    elif choices:
        assert counts["second choice accepted"] >= 0.4 * TREE_SAMPLES, counts
    else:
        assert counts["lookup branch accepted inside the trunk"] >= 0.2 * TREE_SAMPLES, counts
        assert counts["trunk token rejected"] >= 0.2 * TREE_SAMPLES, counts
    assert_follows_the_target(cells, observed, engine, prompt_ids, 1.0, top_p)
