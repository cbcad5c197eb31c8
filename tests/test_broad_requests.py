"""The broad request set: every kind in both files, and the held-out requests share no phrasing,
subject or passage with training; the bench reads them with their kinds and reports each kind."""

from __future__ import annotations

import json
import random
import re
from collections import Counter
from pathlib import Path

from ouroboros_core.events import Stats
from ouroboros_core.tools import broad_words as words
from ouroboros_core.tools.bench import MethodRun, broad_requests
from ouroboros_core.tools.bench_report import by_kind, kind_table
from ouroboros_core.tools.broad_requests import (
    KINDS,
    PASSAGE_KINDS,
    fill_templates,
    long_requests,
    passages,
    split,
)

DATA = Path(__file__).resolve().parent.parent / "data" / "broad"


def rows(name: str) -> list[dict]:
    return [json.loads(line) for line in (DATA / name).read_text().splitlines() if line]


def test_both_files_hold_every_kind_and_share_no_request():
    train, heldout = rows("requests-train.jsonl"), rows("requests-heldout.jsonl")
    assert set(Counter(r["kind"] for r in train)) == set(KINDS)
    assert min(Counter(r["kind"] for r in train).values()) >= 500
    assert min(Counter(r["kind"] for r in heldout).values()) >= 5
    assert not {r["prompt"] for r in train} & {r["prompt"] for r in heldout}
    assert len({r["id"] for r in train + heldout}) == len(train) + len(heldout)


def test_no_held_out_subject_appears_in_a_training_request():
    train = "\n".join(r["prompt"] for r in rows("requests-train.jsonl"))
    for items in (words.SCIENCE_CONCEPTS, words.HUMANITIES_TOPICS, words.ROLES, words.CODING_TASKS):
        for item in split(items, heldout=True):
            # a held-out subject may sit inside a longer training one ("magnets" in "magnets in
            # motors"); as a whole phrase between the template's own words it never appears
            assert not re.search(rf"\b{re.escape(item)}[.?,]", train), item


def test_held_out_phrasings_are_not_training_ones():
    for kind, templates in words.TEMPLATES.items():
        held, trained = split(templates, True), split(templates, False)
        assert held and trained and not set(held) & set(trained), kind
        text = fill_templates(kind, random.Random(0), True, ["A passage about nothing at all."])
        assert text, kind


def test_the_bench_reads_each_kind_and_reports_it():
    prompts = broad_requests(len(KINDS) * 2)
    assert [p["kind"] for p in prompts[: len(KINDS)]] == list(KINDS)
    vanilla, ouroboros = MethodRun(), MethodRun()
    for index, _ in enumerate(prompts):
        # the first kind twice as fast, the rest alike
        seconds = 5.0 if index % len(KINDS) == 0 else 10.0
        for run, forwards, took in ((vanilla, 100, 10.0), (ouroboros, 40, seconds)):
            run.tokens.append(100)
            run.seconds.append(took)
            run.stats.append(Stats(100, forwards, 0, 0, took, 0.0, took))
    report = by_kind({"vanilla": vanilla, "ouroboros": ouroboros}, [p["kind"] for p in prompts])
    assert list(report) == list(KINDS)
    assert report[KINDS[0]]["ouroboros"]["over_vanilla"] == 2.0
    assert report[KINDS[1]]["ouroboros"]["over_vanilla"] == 1.0
    assert report[KINDS[1]]["ouroboros"]["tokens_per_forward"] == 2.5
    table = kind_table(
        {"by_kind": report, "methods": {"vanilla": {}, "ouroboros": {"label": "Ouroboros"}}}
    )
    assert f"| {KINDS[0]} | 2 | 2.00x | 2.50 |" in table


def test_long_requests_run_over_held_out_passages_of_two_to_three_thousand_tokens():
    from transformers import PreTrainedTokenizerFast

    long = rows("requests-long.jsonl")
    assert long == long_requests(len(long)), "the committed file is what long_requests writes"
    assert [r["kind"] for r in long[:2]] == ["summarization", "passage_qa"] and len(long) >= 5
    folder = Path(__file__).resolve().parent.parent / "assets" / "models" / "smollm2-draft"
    tokenizer = PreTrainedTokenizerFast(tokenizer_file=str(folder / "tokenizer.json"))
    training = passages(heldout=False)
    for row in long:
        assert 2_000 <= len(tokenizer(row["prompt"])["input_ids"]) <= 3_000, row["id"]
        assert not any(paragraph in row["prompt"] for paragraph in training), row["id"]
        assert sum(p in row["prompt"] for p in passages(heldout=True)) >= 5, row["id"]


def test_no_training_request_quotes_a_held_out_paragraph():
    # Some training manuals carry a licence's text, which held-out passages quote: such training
    # requests are left out, so no held-out passage was ever answered in training.
    train = [r["prompt"] for r in rows("requests-train.jsonl") if r["kind"] in PASSAGE_KINDS]
    held = passages(heldout=True)
    assert not [p for p in held if any(p in prompt for prompt in train)]


def test_a_greedy_bench_without_generate_checks_ouroboros_against_the_engines_vanilla():
    """`--methods vanilla,ouroboros` (no transformers' generate, as `bench --broad` runs fastest):
    Ouroboros's tokens are still checked, against the engine's vanilla greedy decoding; a method
    set with neither has nothing to check against and says so (None), not a claim."""
    from ouroboros_core import load_engine
    from ouroboros_core.tools.bench import reference_of, run_bench

    assert reference_of(["vanilla", "ouroboros", "hf_greedy"], None) == "hf_greedy"
    assert reference_of(["vanilla", "ouroboros"], None) == "vanilla"
    assert reference_of(["hf_greedy", "ouroboros"], {"temperature": 0.7}) is None
    engine = load_engine("demo", device="cpu", watch_threads=False)
    prompts = [{"id": "1", "prompt": "def add(a, b):\n"}]
    report = run_bench(engine, prompts, ["vanilla", "ouroboros"], 12, {}, progress=False)
    assert report["checked_against"] == "vanilla"
    ouroboros = report["methods"]["ouroboros"]
    assert ouroboros["mismatches"] == 0 and ouroboros["float_ties"] == 0
    assert report["methods"]["vanilla"]["mismatches"] is None  # the reference itself
