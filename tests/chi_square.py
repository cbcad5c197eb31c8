"""The target's exact distribution over sequences of new tokens, enumerated in float64 from the
model itself, and the chi-square test at alpha 0.001 that compares the sequences many seeded runs
return with it (test_sampling, test_sampling_trees)."""

from __future__ import annotations

import itertools
import math
from collections import Counter
from dataclasses import dataclass

import numpy as np
import torch

# --- the target's exact distribution over sequences -----------------------------------------------


def nucleus(probs: torch.Tensor, top_p: float) -> torch.Tensor:
    """The smallest set of most likely tokens whose mass reaches top_p, renormalised (rows of
    (n, V))."""
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
    """Every sequence of new tokens the sampler can return (`length` tokens, or fewer ending in an
    EOS) whose probability is at least min_prob, with that probability. Exact: a sequence is never
    likelier than its prefixes, so pruning prefixes below min_prob loses none."""
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
    """The exact probability of each sequence of new tokens (one batched forward per prefix
    length)."""
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


# --- the chi-square test and its power ------------------------------------------------------------


def chi_square_critical(df: int, z: float = 3.0902) -> float:
    """Upper critical value of chi-square (Wilson-Hilferty); z = 3.0902 is the normal's 0.999
    quantile."""
    h = 2.0 / (9.0 * df)
    return df * (1.0 - h + z * math.sqrt(h)) ** 3


@dataclass(frozen=True)
class Cells:
    """The chi-square cells of a design: each sequence the target is expected to return at least 5
    times in `samples` runs has a cell of its own; all the others share one, or join the smallest
    cell when together they are expected fewer than 5 times."""

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
        """Each cell's probability, given the probability of every sequence that has a cell of its
        own."""
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
        """How often the test rejects when the runs' sequences follow `probabilities`
        (simulated)."""
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
