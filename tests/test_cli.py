"""The command line as a user runs it: generate (text, --json, --events), bench, and the pair training smoke."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from safetensors.torch import load_file

from pairs import save_tiny_pair

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def pair(tmp_path_factory):
    root = save_tiny_pair(tmp_path_factory.mktemp("cli-pair"))
    return ["--target", str(root / "target"), "--draft", str(root / "draft")]


def cli(*args, stdin=None) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run(
        [sys.executable, "-m", "ouroboros_core", *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
        input=stdin,
        cwd=ROOT,
    )


def test_generate_json_matches_events_and_text(pair):
    prompt = "def square(x):\n    return"
    as_json = cli(
        "generate", "--method", "ouroboros", "--max-new-tokens", "20", "--json", *pair, prompt
    )
    assert as_json.returncode == 0, as_json.stderr[-2000:]
    result = json.loads(as_json.stdout)
    assert len(result["token_ids"]) == result["stats"]["new_tokens"] <= 20
    assert result["stats"]["target_forwards"] >= 1 and "tokens_per_second" in result["stats"]

    events = cli(
        "generate", "--method", "ouroboros", "--max-new-tokens", "20", "--events", *pair, prompt
    )
    lines = [json.loads(line) for line in events.stdout.splitlines()]
    assert [e["type"] for e in lines] == ["step"] * (len(lines) - 1) + ["done"]
    committed = [
        t["id"]
        for e in lines[:-1]
        for t in e["accepted"] + ([e["target_token"]] if e["target_token"] else [])
    ]
    assert committed == result["token_ids"] == lines[-1]["token_ids"]
    assert (
        "".join(
            t["text"]
            for e in lines[:-1]
            for t in e["accepted"] + [e["target_token"] or {"text": ""}]
        )
        == result["text"]
    )

    plain = cli("generate", "--method", "vanilla", "--max-new-tokens", "20", *pair, prompt)
    assert plain.returncode == 0
    assert plain.stdout.strip() == result["text"].strip()  # lossless: same text by either method
    assert "tokens in" in plain.stderr and "target forwards" in plain.stderr


def test_generate_reads_prompt_from_stdin(pair):
    done = cli("generate", "--json", "--max-new-tokens", "5", *pair, "-", stdin="class A:\n")
    assert done.returncode == 0, done.stderr[-2000:]
    assert json.loads(done.stdout)["stats"]["new_tokens"] == 5


@pytest.mark.parametrize(
    "args, message",
    [
        (["--max-new-tokens", "0", "x"], "max_new_tokens must be from 1"),
        (["--gamma", "0", "x"], "gamma must be from 1 to 64"),
        (["--temperature", "-1", "x"], "temperature must be from 0.0"),
        (["--draft-candidates", "99", "x"], "draft_candidates must be from 0 to 32"),
        (["   "], "prompt is empty"),
    ],
)
def test_bad_input_is_one_clear_line(pair, args, message):
    done = cli("generate", *pair, *args)
    assert done.returncode == 2
    assert message in done.stderr
    assert "Traceback" not in done.stderr


def test_bench_smoke_writes_table_json_and_chart(pair, tmp_path):
    out, chart = tmp_path / "bench.json", tmp_path / "bench.png"
    done = cli(
        "bench",
        "--limit",
        "2",
        "--max-new-tokens",
        "16",
        "--out",
        str(out),
        "--chart",
        str(chart),
        "--no-progress",
        *pair,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    for label in (
        "transformers generate (greedy)",
        "transformers assisted generation",
        "transformers prompt lookup",
        "engine vanilla",
        "engine speculative",
        "engine ouroboros",
    ):
        assert f"| {label} |" in done.stdout
    report = json.loads(out.read_text())
    assert report["prompts"] == 2 and report["max_new_tokens"] == 16
    for method in ("vanilla", "speculative", "ouroboros"):
        assert report["methods"][method]["mismatches"] == 0, report["methods"][method][
            "mismatch_detail"
        ]
    assert "expected_speedup" in report["methods"]["speculative"]
    assert chart.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_bench_takes_a_jsonl_prompt_file(pair, tmp_path):
    prompts = tmp_path / "prompts.jsonl"
    prompts.write_text('{"id": "a", "prompt": "def a():\\n"}\n{"prompt": "import os\\n"}\n')
    done = cli(
        "bench",
        "--prompts",
        str(prompts),
        "--methods",
        "hf_greedy,ouroboros",
        "--max-new-tokens",
        "8",
        "--no-progress",
        *pair,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert "| engine ouroboros |" in done.stdout and "| engine vanilla |" not in done.stdout
    prompts.write_text("not json\n")
    bad = cli("bench", "--prompts", str(prompts), "--no-progress", *pair)
    assert bad.returncode == 2 and "is not valid JSON" in bad.stderr


def test_bench_on_held_out_python(pair):
    """--heldout: function stubs from pip's source, which the embedded pair never trained on."""
    from ouroboros_core.tools.corpus import heldout_prompts

    stubs = heldout_prompts(5)
    assert (
        len(stubs) == 5 and len({s["id"].split(":")[0] for s in stubs}) == 5
    )  # five different files
    for stub in stubs:
        compile(
            stub["prompt"] + "    pass\n", stub["id"], "exec"
        )  # a whole def and docstring, dedented
        assert stub["prompt"].startswith(("def ", "async def ")) and '"""' in stub["prompt"]
    done = cli(
        "bench",
        "--heldout",
        "--limit",
        "2",
        "--methods",
        "hf_greedy,ouroboros",
        "--max-new-tokens",
        "8",
        "--no-progress",
        *pair,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert (
        "Held-out (pip) function prompts: 2," in done.stdout
        and "| engine ouroboros |" in done.stdout
    )


def test_train_pair_smoke_is_loadable_and_deterministic(tmp_path):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    for run in ("a", "b"):
        done = subprocess.run(
            [
                sys.executable,
                "-m",
                "ouroboros_core.tools.train_pair",
                "--smoke",
                "--out",
                str(tmp_path / run),
            ],
            capture_output=True,
            text=True,
            env=env,
            timeout=600,
        )
        assert done.returncode == 0, done.stderr[-3000:]
    for name in ("target", "draft"):
        folder = tmp_path / "a" / name
        AutoModelForCausalLM.from_pretrained(folder)
        tokenizer = AutoTokenizer.from_pretrained(folder)
        assert (
            tokenizer.decode(tokenizer("def f(x):\n    return x")["input_ids"])
            == "def f(x):\n    return x"
        )
        first, second = (
            load_file(folder / "model.safetensors"),
            load_file(tmp_path / "b" / name / "model.safetensors"),
        )
        assert first.keys() == second.keys()
        assert all((first[k] == second[k]).all() for k in first), "same seed, different weights"
    assert (
        json.loads((tmp_path / "a" / "target" / "generation_config.json").read_text())[
            "eos_token_id"
        ]
        == 0
    )
    # Held-out checks every 2 steps of 4 (smoke settings): the learning curve the card draws.
    curve = json.loads((tmp_path / "a" / "training.json").read_text())["heldout_curve"]
    assert [c["step"] for c in curve] == [2, 4]
    assert all(
        c["heldout_tokens"] > 0 and 0 < c["target_bits_per_char"] < 16 and 0 <= c["agreement"] <= 1
        for c in curve
    )

    # The model card measures the run it finds: figures in card.json, the goals table in README.md.
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "ouroboros_core.tools.pair_card",
            "--models",
            str(tmp_path / "a"),
            "--heldout-chars",
            "3000",
            "--humaneval-limit",
            "2",
            "--on-policy-stubs",
            "2",
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    figures = json.loads((tmp_path / "a" / "card.json").read_text())
    assert figures["humaneval_problems"] == 2 and 0 <= figures["humaneval_bodies_parsing"] <= 2
    assert (
        figures["target_latency_ms"] > 0
        and figures["draft_latency_ms"] > 0
        and figures["heldout_tokens"] > 0
    )
    assert figures["latency_ratio"] == round(
        figures["target_latency_ms"] / figures["draft_latency_ms"], 3
    )
    card = (tmp_path / "a" / "README.md").read_text()
    assert "| goal | wanted | measured | met |" in card and f"{figures['agreement']:.1%}" in card
    assert f"| 4 | {curve[-1]['target_bits_per_char']} |" in card
    assert (tmp_path / "a" / "training.png").read_bytes().startswith(b"\x89PNG")
    assert figures["on_policy_stubs"] == 2 and all(
        0 <= figures[f"on_policy_t{t}"] <= 1 for t in ("0", "0.3", "0.8")
    )
    assert f"greedy agreement {figures['on_policy_t0']:.1%}" in " ".join(card.split())
    check_on_policy_continuation(tmp_path / "a", tmp_path, env)


def test_on_policy_figures_are_one_for_a_draft_that_is_its_target():
    """The overlap measure itself: a draft identical to the target guesses every token (1.0 greedy and sampled);
    a different draft does not."""
    from ouroboros_core import load_engine
    from ouroboros_core.tools.pair_card import on_policy_figures

    engine = load_engine("demo", device="cpu")
    same = on_policy_figures(engine.target, engine.target, engine.tokenizer, stubs=2, new_tokens=8)
    assert (
        same["on_policy_stubs"] == 2
        and [same[f"on_policy_t{t}"] for t in ("0", "0.3", "0.8")] == [1.0] * 3
    )
    other = on_policy_figures(engine.target, engine.draft, engine.tokenizer, stubs=2, new_tokens=8)
    assert all(0 < other[f"on_policy_t{t}"] < 1 for t in ("0.3", "0.8"))


def check_on_policy_continuation(run, tmp_path, env):
    """On-policy distillation: the target of `run` continues corpus stubs (a rerun resumes, adding only what is
    missing), then its draft alone continues training on batches that mix those continuations in."""
    from transformers import AutoTokenizer

    samples = tmp_path / "samples.jsonl"
    for limit, lines in ((3, 3), (5, 5)):
        done = subprocess.run(
            [
                sys.executable,
                "-m",
                "ouroboros_core.tools.target_samples",
                "--models",
                str(run),
                "--out",
                str(samples),
                "--limit",
                str(limit),
                "--max-new-tokens",
                "6",
                "--batch-size",
                "2",
            ],
            capture_output=True,
            text=True,
            env=env,
            timeout=600,
        )
        assert done.returncode == 0, done.stderr[-3000:]
        rows = [json.loads(line) for line in samples.read_text().splitlines()]
        assert len(rows) == len({row["id"] for row in rows}) == lines
    tokenizer = AutoTokenizer.from_pretrained(run / "target")
    for row in rows:
        prompt = tokenizer.decode(row["ids"][: row["prompt_tokens"]])
        assert (
            prompt.lstrip().startswith(("def ", "async def "))
            and 0 < len(row["ids"]) - row["prompt_tokens"] <= 6
        )
    assert {row["temperature"] for row in rows} == {0.0, 0.3, 0.8, 1.0}
    done = subprocess.run(
        [
            sys.executable,
            "-m",
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
            str(tmp_path / "c"),
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    continued = json.loads((tmp_path / "c" / "training.json").read_text())
    assert continued["samples"]["count"] == 5 and continued["config"]["samples_share"] == 0.5
    before, after = (
        load_file(folder / "draft" / "model.safetensors") for folder in (run, tmp_path / "c")
    )
    assert any((before[k] != after[k]).any() for k in before), "the draft did not train"
    before, after = (
        load_file(folder / "target" / "model.safetensors") for folder in (run, tmp_path / "c")
    )
    assert all((before[k] == after[k]).all() for k in before), "the frozen target changed"
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "ouroboros_core.tools.train_pair",
            "--smoke",
            "--samples",
            str(tmp_path / "missing.jsonl"),
            "--out",
            str(tmp_path / "d"),
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
    )
    assert done.returncode == 2 and "--samples" in done.stderr and "no such file" in done.stderr


def test_card_tells_a_continued_run_whole(tmp_path):
    """A pair continued with `train_pair --init` (say the draft alone) keeps its first run under "previous":
    the card names both stages and their total wall time, and draws one curve whose steps count on."""
    from ouroboros_core.tools import pair_card

    def run(steps, models, wall_s, checks, previous=None):
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

    first = run(4, ["target", "draft"], 600.0, [(2, 3.5), (4, 3.0)])
    continued = run(2, ["draft"], 120.0, [(2, 2.9)], previous=first)
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
        "50% of each batch was the target's own writing: its continuations of 3,200 documented functions of "
        "the corpus (812,345 tokens, temperatures 0, 0.3, 0.8, 1, `target_samples`), wall time 2 min."
    ) in " ".join(pair_card.card(figures, continued).split())
    pair_card.save_curve_chart(continued, tmp_path / "curve.png")
    assert (tmp_path / "curve.png").read_bytes().startswith(b"\x89PNG")


def test_pair_card_reads_the_embedded_pair_by_default():
    from ouroboros_core.tools import pair_card

    assert (pair_card.MODELS / "target" / "config.json").is_file() and (
        pair_card.MODELS / "draft"
    ).is_dir()


def test_ab_engine_compares_a_revision_with_the_working_tree(tmp_path):
    out = tmp_path / "ab.json"
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "ouroboros_core.tools.ab_engine",
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
        ],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=Path(__file__).resolve().parent.parent,
    )
    assert done.returncode == 0, done.stderr
    report = json.loads(out.read_text())["methods"]["vanilla"]
    assert (
        report["runs"] == 2 and len(report["seconds"]["old"]) == len(report["seconds"]["new"]) == 2
    )
    assert report["forwards"] == {
        "old": 4,
        "new": 4,
    }  # vanilla: one forward per token, first round only
    assert report["old_over_new_total"] > 0


def test_ab_engine_puts_an_old_draft_against_the_working_trees(tmp_path):
    """--old-draft: the old side drafts with another model (here a copy of the same one, so the target forwards
    must match too); the tokens are the target's either way."""
    out = tmp_path / "ab.json"
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "ouroboros_core.tools.ab_engine",
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
        ],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=ROOT,
    )
    assert done.returncode == 0, done.stderr
    report = json.loads(out.read_text())
    assert report["old_draft"] == "assets/models/draft" and report["sampling"]["temperature"] == 0.8
    forwards = report["methods"]["ouroboros"]["forwards"]
    assert forwards["old"] == forwards["new"] > 0


def test_ab_engine_samples_both_revisions_with_the_same_seeds(tmp_path):
    """Sampled, the two revisions must still write the same tokens (the same seed per prompt in each)."""
    out = tmp_path / "ab.json"
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "ouroboros_core.tools.ab_engine",
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
        ],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=Path(__file__).resolve().parent.parent,
    )
    assert done.returncode == 0, done.stderr
    report = json.loads(out.read_text())
    assert report["sampling"] == {"temperature": 0.8, "top_p": 0.95, "seed": 3}
    assert report["methods"]["ouroboros"]["runs"] == 2
