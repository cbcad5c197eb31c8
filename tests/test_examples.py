"""The page's examples say what their race shows, and a race on their pair (float32, greedy, the
example's own length, a cold pool, as a visitor's first race) shows it: where most of Ouroboros's
drafted tokens came from and how large a share (one source, or several each with a fair share), and
its tokens per target forward (at least a figure, or at most one where the label says the gain is
little). The tiny embedded pair's examples continue code (examples.json); the
default pair's answer requests (examples-chat.json)."""

from __future__ import annotations

from collections import Counter

import pytest
import torch

from ouroboros_core import load_engine
from ouroboros_core.race import race
from ui.page import examples

PAIRS = ("demo", "smollm2")
CASES = [(pair, index) for pair in PAIRS for index in range(len(examples(pair)))]

NAMES = {"draft": "the draft model", "prompt": "lookup", "pool": "pool phrases"}


@pytest.fixture(scope="module")
def raced():
    """Each pair's examples' finished lanes, raced as the page races them: {pair: [lanes, ...]}."""
    out = {}
    for pair in PAIRS:
        engine = load_engine(pair, device="cpu")
        assert engine.target.dtype == torch.float32
        out[pair] = []
        for example in examples(pair):
            lanes = None
            for lanes in race(
                engine, example["prompt"], ["vanilla", "ouroboros"], example["max_new_tokens"]
            ):
                pass
            out[pair].append(lanes)
    return out


@pytest.mark.parametrize(
    "pair,index", CASES, ids=[f"{pair}: {examples(pair)[i]['label']}" for pair, i in CASES]
)
def test_each_example_label_holds_for_its_race(raced, pair, index):
    example, lanes = examples(pair)[index], raced[pair][index]
    claim, lane = example["claim"], lanes["ouroboros"]
    # lossless, or nothing else counts
    assert lane.done.token_ids == lanes["vanilla"].done.token_ids
    drafted = Counter(
        token.source.value for token in lane.committed if token.source.value != "target"
    )
    shown = (
        f"{example['label']!r}: {dict(drafted)} of {lane.tokens}, "
        f"{lane.stats.tokens_per_forward:.2f} tok/forward"
    )
    if "most_from" in claim:
        source, count = drafted.most_common(1)[0]
        assert source == claim["most_from"], shown
        assert count / lane.tokens >= claim.get("share", 0.0), shown
        assert NAMES[source] in example["label"], shown  # the label names the source it claims
    for source, share in claim.get("at_least", {}).items():  # several sources, each a fair share
        assert drafted[source] / lane.tokens >= share, shown
        assert NAMES[source] in example["label"], shown
    if "tokens_per_forward" in claim:
        assert lane.stats.tokens_per_forward >= claim["tokens_per_forward"], shown
    if "small_gain" in claim:  # the example that shows where Ouroboros gains little says so
        assert lane.stats.tokens_per_forward <= claim["small_gain"], shown
        assert "little" in example["label"], shown


@pytest.mark.parametrize("index", range(len(examples("smollm2"))))
def test_each_answer_the_page_suggests_ends_within_its_length_unless_its_label_says_it_loops(
    raced, index
):
    # A length that cuts the answer shows a class without its last method, an explanation
    # mid-example; an answer that loops (its label says it repeats itself) runs to its length.
    example, lanes = examples("smollm2")[index], raced["smollm2"][index]
    loops = "repeats itself" in example["label"]
    assert lanes["vanilla"].done.stop_reason == ("max_new_tokens" if loops else "eos"), example
