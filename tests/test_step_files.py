"""One Ouroboros step, traced from DecodeLoop.run: the engine files whose code it runs are the eight
that docs/ARCHITECTURE.md walks (*One greedy step, file by file*), plus the models' own forwards."""

import re
import sys
from pathlib import Path

import pytest

from ouroboros_core import load_engine

ROOT = Path(__file__).resolve().parents[1]
ENGINE = ROOT / "ouroboros_core"
# the models' forwards the step calls into, as it calls transformers' modelling code
MODEL_FORWARDS = {"lean.py", "int8.py", "packed.py", "attention.py"}
MOST_FILES = 8


def walked_files() -> list[str]:
    """The files the architecture page's step walk numbers, in its order."""
    page = (ROOT / "docs" / "ARCHITECTURE.md").read_text()
    section = page.split("## One greedy step, file by file", 1)[1].split("\n## ", 1)[0]
    return re.findall(r"^\d+\. `([a-z_]+\.py)`", section, flags=re.M)


def files_of_steps(stream, skip: int, steps: int) -> set[str]:
    """The engine files whose Python code runs during `steps` steps of `stream`, after `skip`."""
    for _ in range(skip):
        next(stream)
    files: set[str] = set()

    def record(frame, event, arg):
        path = Path(frame.f_code.co_filename)
        if event == "call" and path.is_relative_to(ENGINE):
            files.add(str(path.relative_to(ENGINE)))

    sys.setprofile(record)
    try:
        for _ in range(steps):
            next(stream)
    finally:
        sys.setprofile(None)
    return files


@pytest.fixture(scope="module")
def engine():
    return load_engine("demo", device="cpu", dtype="float32", watch_threads=False)


def test_the_architecture_page_walks_at_most_eight_files():
    walked = walked_files()
    assert len(walked) == len(set(walked)) <= MOST_FILES, walked
    assert walked[0] == "decode.py"
    assert all((ENGINE / name).is_file() for name in walked), walked


@pytest.mark.parametrize("temperature", [0.0, 0.7], ids=["greedy", "sampled"])
def test_a_step_runs_only_the_walked_files_and_the_models(engine, temperature):
    stream = iter(
        engine.stream(
            "def fibonacci(n):",
            method="ouroboros",
            max_new_tokens=40,
            temperature=temperature,
            top_p=0.95,
            seed=3,
        )
    )
    files = files_of_steps(stream, skip=2, steps=6)
    step_files = files - MODEL_FORWARDS
    assert step_files <= set(walked_files()), sorted(step_files - set(walked_files()))
    # the trace sees the step at all: the loop, the tree and the draft's trunk
    assert {"decode.py", "tree.py", "trunk.py", "drafters.py"} <= step_files, sorted(files)


def test_the_trace_sees_a_call_into_another_engine_file(engine, monkeypatch):
    """A step that starts calling into a file outside the walk shows in the trace, so the check
    above would fail on it."""
    from ouroboros_core import decode, theory

    original = decode.DecodeLoop.step_event

    def step_event(self, *args):
        theory.per_token_acceptance(3, 1)
        return original(self, *args)

    monkeypatch.setattr(decode.DecodeLoop, "step_event", step_event)
    stream = iter(engine.stream("def add(a, b):", method="ouroboros", max_new_tokens=20))
    files = files_of_steps(stream, skip=1, steps=2)
    assert "theory.py" in files and not set(walked_files()) >= files - MODEL_FORWARDS
