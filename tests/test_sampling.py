"""Sampling: reproducible with a seed, and every method's tokens follow the target's own distribution.

The distribution tests run many seeded requests and compare the sequences of new tokens they return with
the target's exact distribution over them (enumerated in float64 from the model itself): a chi-square test
at alpha 0.001, plus a check that no sequence the target gives probability 0 (outside its nucleus) appears.
How much they catch is computed, not guessed:

* First tokens (3 new tokens, 1000 seeds per case, temperature 0.8, gamma 2). For sampling at temperature 1.0
  instead of 0.8, and for returning the draft's samples instead of the target's,
  test_the_distribution_test_catches_the_wrong_samplers takes the wrong sampler's exact distribution and
  simulates the chi-square test under it (20,000 times), asserting a power of at least 0.95. Measured with
  100,000 simulations: power 1.0000 against both, at top_p 1 and 0.8 (noncentrality 150 for temperature 1.0
  at top_p 1, 336 for the draft; the smallest statistic in 100,000 runs, 93, is still above the critical
  65). The same design catches the old 1.5%-noise draft with power 0.9996 at top_p 1, and temperature 0.9
  instead of 0.8 with 0.74 at top_p 1 and 1.0 at top_p 0.8. False alarms, simulated under the target itself
  (10^6 times): 0.15% at top_p 1, 0.13% at 0.8, for the nominal 0.1% (cells of at least 5 expected counts,
  Wilson-Hilferty critical value).
* Trees (12 new tokens, 1000 seeds per case, temperature 1.0).
  test_sampled_tokens_through_branches_follow_the_targets_distribution runs Ouroboros on a target that
  copies, so its branches are verified and accepted: a node shared by two branches (the lookup branch and a
  pool phrase) is read in every run, and with gamma 3 the lookup branch is walked from inside a rejected
  trunk in about 38% of runs. Power against bugs patched into the loop, estimated from 3000 runs of each
  (noncentral chi-square, with the estimate's own noise taken out of the noncentrality): reading a shared
  node from each branch's own sample (the bias the shared-node rule in verify.py prevents), 0.9998
  (noncentrality 67 at df 9); reading a node from a branch that already died, 1.0; accepting a branch's
  first token without comparing it with the sample, 1.0 (both cases); laying out a branch that hangs
  inside the trunk after the whole trunk, 1.0 (1.4% of runs return a sequence outside the target's
  nucleus; the chi-square alone would catch it 12% of the time). A third case has neither lookup nor pool:
  the draft's trunk, extended while it is sure, and its second choices as one-token branches, walked in 642
  of 1000 runs; its power was not simulated. The gamma-3 and second-choice cases draft with a draft that
  ignores the target's noise (`unkeyed_guesses`): the real drafter, guessing with the same noise, is right
  so often on these texts (its trunk rejected in 81 of 1000 runs) that those branches would rarely be walked.
  Not seen here: a walk that ignores where a
  branch hangs never reaches another verdict on these texts; test_verify's hand-written walks cover it.
"""

from __future__ import annotations

import itertools
import math
import random
from collections import Counter
from dataclasses import dataclass

import numpy as np
import pytest
import torch

import ouroboros_core.engine as engine_module
import ouroboros_core.trunk as trunk_module
from conftest import build_model, noisy_copy
from engine_checks import PROMPTS, run
from ouroboros_core import Engine, Source
from ouroboros_core.drafters import Ouroboros
from ouroboros_core.verify import Verdict

# --- sampling --------------------------------------------------------------------------------------------


def test_sampling_with_a_seed_is_reproducible(make_engine):
    engine = make_engine("gpt2", "noisy")
    for method in ("vanilla", "speculative", "ouroboros"):
        a = run(engine, PROMPTS[0], method, 8, temperature=0.9, seed=7)
        b = run(engine, PROMPTS[0], method, 8, temperature=0.9, seed=7)
        c = run(engine, PROMPTS[0], method, 8, temperature=0.9, seed=8)
        assert a.token_ids == b.token_ids and a.text == b.text
        assert a.token_ids != c.token_ids
    top_p = [
        run(engine, PROMPTS[0], "ouroboros", 8, temperature=0.9, top_p=0.5, seed=3).token_ids
        for _ in range(2)
    ]
    assert top_p[0] == top_p[1]


# --- the target's exact distribution over sequences ------------------------------------------------------


def nucleus(probs: torch.Tensor, top_p: float) -> torch.Tensor:
    """The smallest set of most likely tokens whose mass reaches top_p, renormalised (rows of (n, V))."""
    sorted_probs, order = probs.sort(dim=-1, descending=True)
    before = sorted_probs.cumsum(dim=-1) - sorted_probs
    sorted_probs = torch.where(before < top_p, sorted_probs, torch.zeros_like(sorted_probs))
    out = torch.zeros_like(probs).scatter(-1, order, sorted_probs)
    return out / out.sum(dim=-1, keepdim=True)


def next_token_probs(
    model, rows: list[list[int]], temperature: float, top_p: float
) -> torch.Tensor:
    """P(next token | row) for rows of equal length: (len(rows), V), in float64."""
    with torch.no_grad():
        logits = model(input_ids=torch.tensor(rows)).logits[:, -1].double()
    return nucleus(torch.softmax(logits / temperature, dim=-1), top_p)


def sequence_distribution(
    model,
    prompt_ids: list[int],
    length: int,
    temperature: float,
    top_p: float,
    min_prob: float,
    eos,
) -> dict[tuple[int, ...], float]:
    """Every sequence of new tokens the sampler can return (`length` tokens, or fewer ending in an EOS)
    whose probability is at least min_prob, with that probability. Exact: a sequence is never likelier than
    its prefixes, so pruning prefixes below min_prob loses none."""
    found: dict[tuple[int, ...], float] = {}
    frontier: dict[tuple[int, ...], float] = {(): 1.0}
    for step in range(length):
        if not frontier:
            break
        prefixes = list(frontier)
        probs = next_token_probs(
            model, [prompt_ids + list(p) for p in prefixes], temperature, top_p
        )
        probs *= torch.tensor([frontier[p] for p in prefixes], dtype=torch.float64)[:, None]
        frontier = {}
        for row, token in (probs >= min_prob).nonzero().tolist():
            done = token in eos or step == length - 1
            (found if done else frontier)[prefixes[row] + (token,)] = float(probs[row, token])
    return found


def sequence_probabilities(
    model, prompt_ids: list[int], sequences, temperature: float, top_p: float
) -> list[float]:
    """The exact probability of each sequence of new tokens (one batched forward per prefix length)."""
    prefixes = sorted({s[:j] for s in sequences for j in range(len(s))}, key=len)
    after: dict[tuple[int, ...], torch.Tensor] = {}
    for _, group in itertools.groupby(prefixes, key=len):
        group = list(group)
        after.update(
            zip(
                group,
                next_token_probs(model, [prompt_ids + list(p) for p in group], temperature, top_p),
            )
        )
    return [math.prod(float(after[s[:j]][s[j]]) for j in range(len(s))) for s in sequences]


# --- the chi-square test and its power -------------------------------------------------------------------


def chi_square_critical(df: int, z: float = 3.0902) -> float:
    """Upper critical value of chi-square (Wilson-Hilferty); z = 3.0902 is the normal's 0.999 quantile."""
    h = 2.0 / (9.0 * df)
    return df * (1.0 - h + z * math.sqrt(h)) ** 3


def test_chi_square_critical_value_matches_tables():
    # Tabulated 0.999 quantiles: df 5 -> 20.515, 10 -> 29.588, 20 -> 45.315, 40 -> 73.402, 60 -> 99.607.
    for df, table in ((5, 20.515), (10, 29.588), (20, 45.315), (40, 73.402), (60, 99.607)):
        assert chi_square_critical(df) == pytest.approx(table, rel=0.02)


@dataclass(frozen=True)
class Cells:
    """The chi-square cells of a design: each sequence the target is expected to return at least 5 times
    in `samples` runs has a cell of its own; all the others share one, or join the smallest cell when
    together they are expected fewer than 5 times."""

    sequences: list[tuple[int, ...]]
    rest: int  # the cell of every other sequence
    expected: np.ndarray  # expected counts under the target
    samples: int

    @classmethod
    def of(cls, model, prompt_ids, length, temperature, top_p, samples, eos) -> Cells:
        exact = sequence_distribution(
            model, prompt_ids, length, temperature, top_p, 5.0 / samples, eos
        )
        sequences = sorted(exact, key=exact.get, reverse=True)  # the smallest cell last
        rest = len(sequences) if (1.0 - sum(exact.values())) * samples >= 5 else len(sequences) - 1
        return cls(
            sequences,
            rest,
            samples * cls(sequences, rest, np.zeros(0), samples).probabilities(exact),
            samples,
        )

    def probabilities(self, probs: dict) -> np.ndarray:
        """Each cell's probability, given the probability of every sequence that has a cell of its own."""
        cells = np.array([probs[s] for s in self.sequences])
        rest = max(0.0, 1.0 - cells.sum())
        if self.rest == len(self.sequences):
            return np.append(cells, rest)
        cells[self.rest] += rest
        return cells

    @property
    def critical(self) -> float:
        return chi_square_critical(len(self.expected) - 1)

    def statistic(self, observed: Counter) -> float:
        index = {s: i for i, s in enumerate(self.sequences)}
        counts = np.zeros(len(self.expected))
        for sequence, count in observed.items():
            counts[index.get(sequence, self.rest)] += count
        return float(((counts - self.expected) ** 2 / self.expected).sum())

    def rejection_rate(self, probabilities: np.ndarray, repeats: int, seed: int = 0) -> float:
        """How often the test rejects when the runs' sequences follow `probabilities` (simulated)."""
        draws = np.random.default_rng(seed).multinomial(
            self.samples, probabilities / probabilities.sum(), repeats
        )
        statistics = ((draws - self.expected) ** 2 / self.expected).sum(axis=1)
        return float((statistics > self.critical).mean())


def assert_follows_the_target(
    cells: Cells, observed: Counter, engine, prompt_ids, temperature, top_p
) -> None:
    known = set(cells.sequences)
    others = [s for s in observed if s not in known]
    probs = sequence_probabilities(engine.target, prompt_ids, others, temperature, top_p)
    impossible = [s for s, p in zip(others, probs) if p == 0.0]
    assert not impossible, f"sequences the target can never produce were sampled: {impossible[:3]}"
    statistic = cells.statistic(observed)
    assert statistic < cells.critical, (statistic, cells.critical, len(cells.expected))


# --- first tokens: every method, with rejections and acceptances ------------------------------------------

PROMPT = "def f(x):\n    return"
TEMPERATURE = 0.8
LENGTH = 3
SAMPLES = 1000


@pytest.fixture(scope="module")
def sampling_pair(tokenizer, models):
    # A sharper target (larger initializer range) puts enough mass on few 3-token sequences that a thousand
    # runs fill 35 chi-square cells at top_p 1 and 50 at top_p 0.8. Its draft is a noisy copy that clearly
    # differs (weights perturbed by 5% of their spread: total variation 0.16 on the first token) but shares
    # its argmax there, so drafts are accepted (31% of drafted tokens at top_p 1, 39% at 0.8) and rejected.
    target = build_model("llama", models.eos_id, seed=2, layers=1, hidden=32, init=0.6)
    return Engine(target, noisy_copy(target, 0.05, seed=4), tokenizer)


@pytest.mark.parametrize("top_p", [1.0, 0.8])
def test_the_distribution_test_catches_the_wrong_samplers(sampling_pair, top_p):
    engine = sampling_pair
    prompt_ids = engine.encode(PROMPT)
    cells = Cells.of(engine.target, prompt_ids, LENGTH, TEMPERATURE, top_p, SAMPLES, engine.eos)
    assert len(cells.expected) >= 20
    exact = cells.expected / SAMPLES
    assert cells.rejection_rate(exact, 200_000) < 0.002, "false alarms well above alpha"
    wrong = {
        "sampling at temperature 1.0": (engine.target, 1.0),
        "the draft's samples": (engine.draft, TEMPERATURE),
    }
    for name, (model, temperature) in wrong.items():
        probs = sequence_probabilities(model, prompt_ids, cells.sequences, temperature, top_p)
        power = cells.rejection_rate(cells.probabilities(dict(zip(cells.sequences, probs))), 20_000)
        assert power >= 0.95, f"the test catches {name} with probability {power:.3f} only"


# Each case its own seeds: on this prompt Ouroboros finds nothing to look up, so with the same seeds it would
# return exactly the samples speculative decoding does, and the two cases would be one test, not two.
@pytest.mark.parametrize(
    "method,top_p,first_seed",
    [("speculative", 1.0, 0), ("ouroboros", 1.0, SAMPLES), ("ouroboros", 0.8, 2 * SAMPLES)],
)
def test_sampled_first_tokens_follow_the_targets_distribution(
    sampling_pair, method, top_p, first_seed
):
    engine = sampling_pair
    prompt_ids = engine.encode(PROMPT)
    cells = Cells.of(engine.target, prompt_ids, LENGTH, TEMPERATURE, top_p, SAMPLES, engine.eos)
    observed, accepted, drafted = Counter(), 0, 0
    for seed in range(first_seed, first_seed + SAMPLES):
        result = run(
            engine, PROMPT, method, LENGTH, temperature=TEMPERATURE, top_p=top_p, seed=seed, gamma=2
        )
        observed[tuple(result.token_ids)] += 1
        accepted += result.stats.accepted_tokens
        drafted += result.stats.drafted_tokens
    # Both acceptance and rejection happen, so both paths feed the distribution.
    assert 0.1 * drafted < accepted < 0.9 * drafted, (accepted, drafted)
    assert_follows_the_target(cells, observed, engine, prompt_ids, TEMPERATURE, top_p)


# --- trees: branches, shared nodes and the context-lookup branch, verified on samples ---------------------

COPY_PROMPT = "self.a = a\nself.b = b\nself.c = c\nself.a = a\n"
TREE_LENGTH = 12  # two lines: two letters sampled, each copied once
TREE_SAMPLES = 1000


def copying_model(tokenizer, eos_id: int):
    """A tiny target trained (a second) on lines `self.X = X` with X drawn from a, b, c (weights .5, .3, .2):
    after `self.` it cannot know the letter and samples one, after `self.X =` it copies X. So Ouroboros'
    branches (what followed before, from the prompt) are often right, and often differ where it samples."""
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
    verdict: Verdict

    def walked(self, lookup: bool = False, inside_trunk: bool = False) -> bool:
        """A branch (the lookup branch; hanging inside the trunk) was walked, and kept at least one token."""
        b = self.verdict.branch
        return (
            b is not None
            and self.verdict.branch_accepted > 0
            and (not lookup or (self.looked_up and b == 0))
            and (not inside_trunk or self.attach[b] < len(self.trunk))
        )

    def shared_nodes(self) -> int:
        """Nodes on the walked branch that two or more live branches shared: each read from one sample."""
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
    walk_tree, propose = engine_module.walk_tree, Ouroboros.propose

    def recording_propose(self, committed, limit):
        proposal = propose(self, committed, limit)
        looked_up.append(proposal.branch_owners[:1] == [self.lookup.name])
        return proposal

    def recording_walk(trunk, branches, trunk_tokens, branch_tokens, attach=None):
        verdict = walk_tree(trunk, branches, trunk_tokens, branch_tokens, attach)
        attach = list(attach) if attach else [len(trunk)] * len(branches)
        seen.append(Walk(looked_up[-1], list(trunk), [list(b) for b in branches], attach, verdict))
        return verdict

    monkeypatch.setattr(Ouroboros, "propose", recording_propose)
    monkeypatch.setattr(engine_module, "walk_tree", recording_walk)
    return seen


TREE_CASES = {
    # The draft proposes `self`; the lookup branch and a pool phrase both continue it with `.` and part at
    # the letter the target samples: the shared node is read in nearly every run.
    "shared node": (
        {"gamma": 1, "branches": 1, "draft_candidates": 0, "max_trunk": 1, "second_above": 1.0},
        1.0,
    ),
    # The draft proposes three tokens; where it guesses the letter wrong, the lookup branch hangs inside
    # the trunk and is walked when the target samples its letter. Nucleus sampling on top (0.9 keeps the
    # three letters, drops the tail).
    "lookup inside the trunk": (
        {"gamma": 3, "branches": 1, "draft_candidates": 0, "max_trunk": 1, "second_above": 1.0},
        0.9,
    ),
    # No lookup, no pool: the draft's trunk (extended while it is sure) and its other choices, each a branch
    # in place of its first choice (with the draft's guess after it where the trunk went on), walked when the
    # target samples that token instead.
    "second choices": (
        {
            "gamma": 1,
            "branches": 0,
            "lookup": 0,
            "draft_candidates": 0,
            "max_trunk": 4,
            "extend_above": 0.0,
            "extend_chance": 0.0,
            "second_above": 0.0,
        },
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
    """The tokens a step accepted past the trunk are the walked branch's, credited to where it came from."""
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
            if Source.DRAFT in {
                t.source for t in kept
            }:  # only another choice, and at most the draft's guess after it
                assert len(walk.branches[walk.verdict.branch]) <= 2


def unkeyed_guesses(logits, temperature, seed, positions, top=64):
    """A draft that ignores the target's noise: its own most likely tokens, as drafters guessed before the noise
    was shared. Wrong far more often, so the branches that stand in for a wrong trunk token get walked."""
    values, ids = logits.topk(min(top, logits.shape[-1]), dim=-1)
    return values.double() / temperature, ids


@pytest.mark.parametrize("case", list(TREE_CASES))
def test_sampled_tokens_through_branches_follow_the_targets_distribution(
    copying_pair, walks, case, monkeypatch
):
    engine = copying_pair
    options, top_p = TREE_CASES[case]
    if (
        case != "shared node"
    ):  # a draft guessing with the target's noise is rarely wrong here (81 of 1000 runs)
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
    # Measured, in runs of 1000: "shared node": branch tokens accepted 1000, lookup branch accepted 998,
    # shared node read 1000; "lookup inside the trunk": branch tokens accepted 1000, lookup branch accepted
    # inside the trunk 380, trunk token rejected 577; "second choices": a second choice accepted in 642.
    assert (
        counts["branch tokens accepted"]
        >= (0.4 if case == "second choices" else 0.8) * TREE_SAMPLES
    ), counts
    if case == "shared node":
        assert counts["shared node read"] >= 0.8 * TREE_SAMPLES, counts
        assert counts["lookup branch accepted"] >= 0.8 * TREE_SAMPLES, counts
    elif case == "second choices":
        assert counts["second choice accepted"] >= 0.4 * TREE_SAMPLES, counts
    else:
        assert counts["lookup branch accepted inside the trunk"] >= 0.2 * TREE_SAMPLES, counts
        assert counts["trunk token rejected"] >= 0.2 * TREE_SAMPLES, counts
    assert_follows_the_target(cells, observed, engine, prompt_ids, 1.0, top_p)
