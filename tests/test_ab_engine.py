"""The A/B tool (ab_engine) as a user runs it: a revision of the engine against the working tree,
greedy and sampled, with the same or an old draft."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def ab_engine(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "ouroboros_core.tools.ab_engine", *args],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=ROOT,
    )


def test_ab_engine_compares_a_revision_with_the_working_tree(tmp_path):
    out = tmp_path / "ab.json"
    done = ab_engine(
        "--target",
        "demo",
        "--rev",
        "HEAD",
        "--limit",
        "1",
        "--max-new-tokens",
        "4",
        "--rounds",
        "2",
        "--methods",
        "vanilla",
        "--out",
        str(out),
    )
    assert done.returncode == 0, done.stderr
    report = json.loads(out.read_text())["methods"]["vanilla"]
    assert (
        report["runs"] == 2 and len(report["seconds"]["old"]) == len(report["seconds"]["new"]) == 2
    )
    # vanilla: one forward per token, first round only
    assert report["forwards"] == {"old": 4, "new": 4}
    assert report["old_over_new_total"] > 0


def test_ab_engine_puts_an_old_draft_against_the_working_trees(tmp_path):
    """--old-draft: the old side drafts with another model (here a copy of the same one, so the
    target forwards must match too); the tokens are the target's either way."""
    out = tmp_path / "ab.json"
    done = ab_engine(
        "--target",
        "demo",
        "--rev",
        "HEAD",
        "--limit",
        "1",
        "--max-new-tokens",
        "12",
        "--rounds",
        "1",
        "--methods",
        "ouroboros",
        "--temperature",
        "0.8",
        "--top-p",
        "0.95",
        "--old-draft",
        "assets/models/draft",
        "--out",
        str(out),
    )
    assert done.returncode == 0, done.stderr
    report = json.loads(out.read_text())
    assert report["old_draft"] == "assets/models/draft" and report["sampling"]["temperature"] == 0.8
    forwards = report["methods"]["ouroboros"]["forwards"]
    assert forwards["old"] == forwards["new"] > 0


def test_ab_engine_samples_both_revisions_with_the_same_seeds(tmp_path):
    """Sampled, the two revisions must still write the same tokens (the same seed per prompt in
    each)."""
    out = tmp_path / "ab.json"
    done = ab_engine(
        "--target",
        "demo",
        "--rev",
        "HEAD",
        "--limit",
        "2",
        "--max-new-tokens",
        "6",
        "--rounds",
        "1",
        "--methods",
        "ouroboros",
        "--temperature",
        "0.8",
        "--top-p",
        "0.95",
        "--seed",
        "3",
        "--out",
        str(out),
    )
    assert done.returncode == 0, done.stderr
    report = json.loads(out.read_text())
    assert report["sampling"] == {"temperature": 0.8, "top_p": 0.95, "seed": 3}
    assert report["methods"]["ouroboros"]["runs"] == 2


def test_ab_engine_on_the_broad_requests_reports_each_kind(tmp_path):
    """--broad races the broad held-out requests, kinds taking turns, and gives old/new per kind."""
    out = tmp_path / "ab.json"
    options = "--target demo --rev HEAD --broad --limit 2 --max-new-tokens 6 --rounds 1"
    done = ab_engine(*options.split(), "--methods", "ouroboros", "--out", str(out))
    assert done.returncode == 0, done.stderr
    report = json.loads(out.read_text())
    assert report["prompt_set"] == "broad" and report["prompts"] == 2
    kinds = report["methods"]["ouroboros"]["old_over_new_by_kind"]
    assert sorted(kinds) == ["roleplay", "writing"] and all(ratio > 0 for ratio in kinds.values())


def test_two_revisions_may_part_only_where_the_target_calls_it_a_tie(make_engine, monkeypatch):
    """Another tree shape moves the target's scores in their last bits, so two revisions may part
    where its two best tokens tie: the A/B names that prompt and goes on. Any other parting is a
    bug in one of them and stops it."""
    from ouroboros_core.tools.ab_engine import tie_or_fail
    from ouroboros_core.verdict import OutputVerdict

    engine = make_engine("llama", "noisy")
    prompt = "def add(a, b):"
    own = engine.generate(prompt, "vanilla", 8).token_ids
    other = own[:3] + [(own[3] + 1) % engine.target.config.vocab_size] + own[4:]
    with pytest.raises(AssertionError, match="prompt 5: mismatch"):
        tie_or_fail(engine, prompt, {"old": own, "new": other}, {}, 5)
    # a tie (the verdict's own tests build real ones): the prompt is reported, not failed
    monkeypatch.setattr(
        engine, "verdict", lambda *args, **kw: OutputVerdict("float tie", 3, 2e-6, "float32")
    )
    assert tie_or_fail(engine, prompt, {"old": own, "new": other}, {}, 5) == [
        5,
        3,
        "float tie",
    ]
