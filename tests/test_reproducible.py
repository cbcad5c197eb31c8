"""The same request twice drafts the same way: every step's trunk, branches and verdict equal,
greedy and sampled with a seed (nothing drawn from the clock or a global random state)."""

from __future__ import annotations

import random

import pytest
import torch

from ouroboros_core import load_engine


@pytest.fixture(scope="module")
def engine():
    return load_engine("demo", device="cpu", watch_threads=False)


def steps(engine, prompt: str, **options) -> list[tuple]:
    result = engine.generate(prompt, "ouroboros", 96, **options)
    return [
        (
            tuple(t.id for t in e.trunk),
            tuple(tuple(t.id for t in b) for b in e.branches),
            e.attach,
            tuple(t.id for t in e.accepted),
            e.branch,
        )
        for e in result.events
    ]


@pytest.mark.parametrize(
    "options",
    [{}, {"temperature": 0.8, "top_p": 0.95, "seed": 7}, {"window": 4, "branches": 2}],
    ids=["greedy", "sampled", "lookahead-window"],
)
def test_a_request_run_twice_takes_the_same_steps(engine, options):
    prompt = "def parse_header(line):\n"
    first = steps(engine, prompt, **options)
    # Whatever else ran in between (other global random draws, another request) changes nothing.
    random.seed(12345)
    torch.manual_seed(12345)
    engine.generate("import os\n", "ouroboros", 16)
    second = steps(engine, prompt, **options)
    assert first == second and len(first) > 5
    assert any(branches for _, branches, *_ in first)  # the tree had branches to compare
