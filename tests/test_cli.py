"""The command line as a user runs it: generate (text, --json, --events) and bench. The pair
training smoke is in test_train_pair.py, the A/B tool in test_ab_engine.py."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

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


# A chat template of our own, so the test knows the text a user's turn becomes.
TEMPLATE = (
    "{% for m in messages %}<user>{{ m['content'] }}</user>{% endfor %}"
    "{% if add_generation_prompt %}<bot>{% endif %}"
)


@pytest.fixture(scope="module")
def chat_pair(tmp_path_factory):
    """The tiny pair with a chat template: a folder pair that is not a preset, as a user's own."""
    root = save_tiny_pair(tmp_path_factory.mktemp("cli-chat-pair"))
    for name in ("target", "draft"):
        (root / name / "chat_template.jinja").write_text(TEMPLATE)
    return ["--target", str(root / "target"), "--draft", str(root / "draft")]


def test_chat_sends_a_folder_pairs_prompt_as_a_users_turn(chat_pair):
    def ids(*args):
        done = cli("generate", "--json", "--max-new-tokens", "12", *chat_pair, *args)
        assert done.returncode == 0, done.stderr[-2000:]
        return json.loads(done.stdout)["token_ids"]

    as_chat = ids("--chat", "def f(x):")
    assert as_chat == ids("<user>def f(x):</user><bot>")  # the template's text, continued
    assert as_chat != ids("def f(x):")  # without --chat a folder pair continues the prompt raw
    assert ids("--chat", "--raw", "def f(x):") == ids("def f(x):")
    shown = cli("generate", "--chat", "--no-colour", "--max-new-tokens", "4", *chat_pair, "hi")
    assert "the prompt is sent as a user's chat turn" in shown.stderr


def test_chat_on_a_pair_without_a_template_is_one_clear_line(pair):
    done = cli("generate", "--chat", "--max-new-tokens", "4", *pair, "hi")
    assert done.returncode == 2
    assert "tokenizer has no chat template" in done.stderr and "Traceback" not in done.stderr


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
    # five different files
    assert len(stubs) == 5 and len({s["id"].split(":")[0] for s in stubs}) == 5
    for stub in stubs:
        # a whole def and docstring, dedented
        compile(stub["prompt"] + "    pass\n", stub["id"], "exec")
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
