"""The pair's training tools as a user runs them: the train_pair smoke, its model card (pair_card),
on-policy samples from the target (target_samples) and a draft continued on them."""

import json
import os
import subprocess
import sys
from pathlib import Path

from safetensors.torch import load_file

ROOT = Path(__file__).resolve().parent.parent


def run_tool(module: str, *args: str, env: dict) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", module, *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
    )


def check_loadable_and_same(folder: Path, again: Path) -> None:
    """`folder` loads with transformers, its tokenizer round-trips code, and `again` (the same smoke
    run a second time) holds the same weights."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    AutoModelForCausalLM.from_pretrained(folder)
    tokenizer = AutoTokenizer.from_pretrained(folder)
    assert (
        tokenizer.decode(tokenizer("def f(x):\n    return x")["input_ids"])
        == "def f(x):\n    return x"
    )
    first, second = (
        load_file(folder / "model.safetensors"),
        load_file(again / "model.safetensors"),
    )
    assert first.keys() == second.keys()
    assert all((first[k] == second[k]).all() for k in first), "same seed, different weights"


def check_heldout_curve(run: Path) -> list[dict]:
    # Held-out checks every 2 steps of 4 (smoke settings): the learning curve the card draws.
    curve = json.loads((run / "training.json").read_text())["heldout_curve"]
    assert [c["step"] for c in curve] == [2, 4]
    assert all(
        c["heldout_tokens"] > 0 and 0 < c["target_bits_per_char"] < 16 and 0 <= c["agreement"] <= 1
        for c in curve
    )
    return curve


def check_card(run: Path, curve: list[dict], env: dict) -> None:
    # The model card measures the run it finds: figures in card.json, the goals table in README.md.
    done = run_tool(
        "ouroboros_core.tools.pair_card",
        "--models",
        str(run),
        "--heldout-chars",
        "3000",
        "--humaneval-limit",
        "2",
        "--on-policy-stubs",
        "2",
        env=env,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    figures = json.loads((run / "card.json").read_text())
    assert figures["humaneval_problems"] == 2 and 0 <= figures["humaneval_bodies_parsing"] <= 2
    assert (
        figures["target_latency_ms"] > 0
        and figures["draft_latency_ms"] > 0
        and figures["heldout_tokens"] > 0
    )
    assert figures["latency_ratio"] == round(
        figures["target_latency_ms"] / figures["draft_latency_ms"], 3
    )
    card = (run / "README.md").read_text()
    assert "| goal | wanted | measured | met |" in card and f"{figures['agreement']:.1%}" in card
    assert f"| 4 | {curve[-1]['target_bits_per_char']} |" in card
    assert (run / "training.png").read_bytes().startswith(b"\x89PNG")
    assert figures["on_policy_stubs"] == 2 and all(
        0 <= figures[f"on_policy_t{t}"] <= 1 for t in ("0", "0.3", "0.8")
    )
    assert f"greedy agreement {figures['on_policy_t0']:.1%}" in " ".join(card.split())


def test_train_pair_smoke_is_loadable_and_deterministic(tmp_path):
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    for run in ("a", "b"):
        done = run_tool(
            "ouroboros_core.tools.train_pair", "--smoke", "--out", str(tmp_path / run), env=env
        )
        assert done.returncode == 0, done.stderr[-3000:]
    for name in ("target", "draft"):
        check_loadable_and_same(tmp_path / "a" / name, tmp_path / "b" / name)
    assert (
        json.loads((tmp_path / "a" / "target" / "generation_config.json").read_text())[
            "eos_token_id"
        ]
        == 0
    )
    curve = check_heldout_curve(tmp_path / "a")
    check_card(tmp_path / "a", curve, env)
    check_on_policy_continuation(tmp_path / "a", tmp_path, env)


def test_on_policy_figures_are_one_for_a_draft_that_is_its_target():
    """The overlap measure itself: a draft identical to the target guesses every token (1.0 greedy
    and sampled); a different draft does not."""
    from ouroboros_core import load_engine
    from ouroboros_core.tools.pair_figures import on_policy_figures

    engine = load_engine("demo", device="cpu")
    same = on_policy_figures(engine.target, engine.target, engine.tokenizer, stubs=2, new_tokens=8)
    assert (
        same["on_policy_stubs"] == 2
        and [same[f"on_policy_t{t}"] for t in ("0", "0.3", "0.8")] == [1.0] * 3
    )
    other = on_policy_figures(engine.target, engine.draft, engine.tokenizer, stubs=2, new_tokens=8)
    assert all(0 < other[f"on_policy_t{t}"] < 1 for t in ("0.3", "0.8"))


def check_target_samples(run: Path, samples: Path, env: dict) -> None:
    """The target of `run` continues corpus stubs into `samples`, twice: the second run resumes; a
    third, into a file of its own, skips the stubs the first run answered."""
    from transformers import AutoTokenizer

    def sample(out: Path, *args: str) -> list[dict]:
        done = run_tool(
            "ouroboros_core.tools.target_samples",
            "--models",
            str(run),
            "--out",
            str(out),
            "--max-new-tokens",
            "6",
            "--batch-size",
            "2",
            *args,
            env=env,
        )
        assert done.returncode == 0, done.stderr[-3000:]
        return [json.loads(line) for line in out.read_text().splitlines()]

    first = {row["id"] for row in sample(samples, "--limit", "3")}
    rows = sample(samples, "--limit", "5")
    assert len(first) == 3 and len(rows) == len({row["id"] for row in rows}) == 5
    rest = sample(samples.with_name("rest.jsonl"), "--limit", "5", "--skip", "3")
    assert {row["id"] for row in rest} == {row["id"] for row in rows} - first
    tokenizer = AutoTokenizer.from_pretrained(run / "target")
    for row in rows:
        prompt = tokenizer.decode(row["ids"][: row["prompt_tokens"]])
        assert (
            prompt.lstrip().startswith(("def ", "async def "))
            and 0 < len(row["ids"]) - row["prompt_tokens"] <= 6
        )
    assert {row["temperature"] for row in rows} == {0.0, 0.3, 0.8, 1.0}


def check_draft_continues(run: Path, samples: Path, out: Path, env: dict) -> None:
    """The draft of `run` alone continues training on batches that mix the samples in."""
    done = run_tool(
        "ouroboros_core.tools.train_pair",
        "--smoke",
        "--init",
        str(run),
        "--models",
        "draft",
        "--samples",
        str(samples),
        "--samples-share",
        "0.5",
        "--out",
        str(out),
        env=env,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    continued = json.loads((out / "training.json").read_text())
    assert continued["samples"]["count"] == 5 and continued["config"]["samples_share"] == 0.5
    before, after = (load_file(folder / "draft" / "model.safetensors") for folder in (run, out))
    assert any((before[k] != after[k]).any() for k in before), "the draft did not train"
    before, after = (load_file(folder / "target" / "model.safetensors") for folder in (run, out))
    assert all((before[k] == after[k]).all() for k in before), "the frozen target changed"


def check_on_policy_continuation(run, tmp_path, env):
    """On-policy distillation: the target of `run` continues corpus stubs (a rerun resumes, adding
    only what is missing), then its draft alone continues training on batches that mix those
    continuations in."""
    samples = tmp_path / "samples.jsonl"
    check_target_samples(run, samples, env)
    check_draft_continues(run, samples, tmp_path / "c", env)
    done = run_tool(
        "ouroboros_core.tools.train_pair",
        "--smoke",
        "--samples",
        str(tmp_path / "missing.jsonl"),
        "--out",
        str(tmp_path / "d"),
        env=env,
    )
    assert done.returncode == 2 and "--samples" in done.stderr and "no such file" in done.stderr


def training_json(steps, models, wall_s, checks, previous=None) -> dict:
    """A training.json of `steps` over `models`, with held-out checks (step, target bits/char)."""
    training = {
        "config": {
            "steps": steps,
            "models": models,
            "lr": 0.002,
            "warmup": 80,
            "eval_every": 2,
            "batch_size": 4,
            "seq_len": 64,
            "distill_weight": 0.8,
            "seed": 0,
            "bf16": True,
            "vocab_size": 512,
            "target": {"layers": 2, "width": 64, "heads": 2, "ffn": 128},
            "draft": {"layers": 1, "width": 64, "heads": 2, "ffn": 128},
        },
        "corpus_files": 3,
        "corpus_chars": 1000,
        "corpus_tokens": 300,
        "wall_s": wall_s,
        "heldout_curve": [
            {
                "step": s,
                "heldout_chars": 900,
                "target_bits_per_char": b,
                "draft_bits_per_char": b + 0.2,
                "agreement": 0.5,
            }
            for s, b in checks
        ],
    }
    if previous:
        training["previous"] = previous
    return training


def test_card_tells_a_continued_run_whole(tmp_path):
    """A pair continued with `train_pair --init` (say the draft alone) keeps its first run under
    "previous": the card names both stages and their total wall time, and draws one curve whose
    steps count on."""
    from ouroboros_core.tools import pair_card

    first = training_json(4, ["target", "draft"], 600.0, [(2, 3.5), (4, 3.0)])
    continued = training_json(2, ["draft"], 120.0, [(2, 2.9)], previous=first)
    assert [c["step"] for c in pair_card.whole_curve(continued)] == [2, 4, 6]
    figures = json.loads((ROOT / "assets" / "models" / "card.json").read_text())
    text = pair_card.card(figures, continued)
    assert "4 steps of 4 x\n  64 tokens" in text and "wall time 10 min" in text
    assert "continued the draft alone from it for 2 steps" in text and "12 min in all" in text
    assert "| 6 | 2.9 | 3.1 |" in text
    assert "continued" not in pair_card.card(figures, first)
    assert "of each batch was the target's own writing" not in text
    continued["samples"] = {"count": 3200, "tokens": 812345, "temperatures": [0.0, 0.3, 0.8, 1.0]}
    continued["config"]["samples_share"] = 0.5
    assert (
        "50% of each batch was the target's own writing: its continuations of 3,200 documented "
        "functions of the corpus (812,345 tokens, temperatures 0, 0.3, 0.8, 1, `target_samples`), "
        "wall time 2 min."
    ) in " ".join(pair_card.card(figures, continued).split())
    pair_card.save_curve_chart(continued, tmp_path / "curve.png")
    assert (tmp_path / "curve.png").read_bytes().startswith(b"\x89PNG")


def test_pair_card_reads_the_embedded_pair_by_default():
    from ouroboros_core.tools import pair_card

    assert (pair_card.MODELS / "target" / "config.json").is_file()
    assert (pair_card.MODELS / "draft").is_dir()
