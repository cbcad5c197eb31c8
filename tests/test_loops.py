"""The loop note: an answer that repeats its own earlier text (a run of LOOP_RUN tokens seen
before) for LOOP_SHARE of its tokens or more gets a note under the verdict; a normal one does
not."""

from __future__ import annotations

import pytest

from ouroboros_core import load_engine
from ouroboros_core.race import race
from ui.loops import LOOP_RUN, loop_note, repeated_share

LOOP_PROMPT = (
    "def get_a(self):\n    return self.a\n\ndef get_b(self):\n    return self.b\n\n"
    "def get_c(self):\n"
)
CODE_PROMPT = 'def fibonacci(n):\n    """Return the n-th Fibonacci number."""\n'


def test_the_share_counts_tokens_that_end_a_run_written_before():
    assert repeated_share(list(range(40))) == 0.0
    loop = list(range(10)) * 4  # period 10: every token past the first period and a run repeats
    assert repeated_share(loop) == pytest.approx((40 - 10 - LOOP_RUN + 1 + 1) / 40, abs=0.03)
    # a phrase shorter than a run, said twice, is no loop
    phrase = [1, 2, 3, 4, 5]
    assert repeated_share(phrase + list(range(10, 30)) + phrase + list(range(40, 60))) == 0.0
    assert repeated_share([]) == 0.0


@pytest.fixture(scope="module")
def engine():
    return load_engine("demo", device="cpu")


def finished(engine, prompt: str, tokens: int):
    lanes = None
    for lanes in race(engine, prompt, ["vanilla", "ouroboros"], tokens):
        pass
    return lanes


def test_a_looping_answer_gets_the_note_and_a_normal_one_does_not(engine):
    looping = finished(engine, LOOP_PROMPT, 64)
    note = loop_note(looping)
    assert "The answer repeats itself" in note and "lookup copied" in note
    assert loop_note(finished(engine, CODE_PROMPT, 64)) == ""
    # a race not finished yet says nothing
    for lanes in race(engine, LOOP_PROMPT, ["vanilla", "ouroboros"], 64):
        assert lanes["ouroboros"].done is not None or loop_note(lanes) == ""
