"""The checks every request passes before it reaches the device: each refusal names what was wrong."""

from __future__ import annotations

import gradio as gr
import pytest

import asyncio
import inspect

from ui.guard import Limits, check_prompt, fit_problem, race_validator, room_line, validate_race

LIMITS = Limits(max_new_tokens=512, max_prompt_chars=100)


@pytest.mark.parametrize("prompt, message", [
    (["def f():"], "Prompt must be text (a string), got list."), (123, "Prompt must be text (a string), got int."),
    (None, "Prompt is empty"), ("  \n", "Prompt is empty"), ("x" * 101, "Prompt is 101 characters; this demo takes "
                                                                   "at most 100."),
    ("def f():\x00", "Prompt has a control character (U+0000) at character 8")])
def test_a_bad_prompt_is_refused_with_what_is_wrong(prompt, message):
    with pytest.raises(gr.Error) as refused:
        check_prompt(prompt, LIMITS.max_prompt_chars)
    assert message in refused.value.message


def test_a_good_prompt_passes_as_it_is():
    assert check_prompt("def f():\n\treturn 1\n", LIMITS.max_prompt_chars) == "def f():\n\treturn 1\n"


def test_the_page_validator_marks_only_the_bad_input():
    marks = validate_race(LIMITS, "def f():\n", 600, 4, 0, 6, 1, 0.0, 1.0, 0, "flag", "flag")
    assert [mark["is_valid"] for mark in marks] == [True, False, True, True, True, True, True, True, True, True, True]
    assert "Max new tokens must be a whole number from 1 to 512" in marks[1]["message"]


class Pair:
    """What the guard reads of a loaded pair: its context and its tokenizer (one token a character here)."""
    max_context = 64

    def encode(self, prompt):
        return list(prompt)


def test_a_prompt_is_measured_in_the_tokens_the_model_can_read_before_it_is_queued():
    pair = Pair()
    assert fit_problem(pair, "x" * 48, 16) is None
    assert fit_problem(pair, "x" * 49, 16) == ("Prompt is 49 tokens; with 16 new tokens the model's 64-token context "
                                               "leaves room for 48. Shorten the prompt or ask for fewer new tokens.")
    assert fit_problem(None, "x" * 49, 16) is None  # no pair yet: the race checks when it starts
    marks = validate_race(LIMITS, "x" * 49, 16, 4, 0, 6, 1, 0.0, 1.0, 0, engine=pair)
    assert [mark["is_valid"] for mark in marks] == [False] + [True] * 8 and "leaves room for 48" in marks[0]["message"]
    assert room_line(pair, "x" * 10, 16) == "10 of the 48 tokens the model can read with 16 new tokens."
    assert "too long: Run will say so, nothing is cut" in room_line(pair, "x" * 50, 16)
    assert "once the model pair has loaded" in room_line(None, "x", 16)
    assert room_line(pair, "x", float("nan")) == "1 of the 64 tokens the model can read with 0 new tokens."


def test_the_validator_is_async_so_a_burst_cannot_overfill_the_queue():
    """Gradio awaits a coroutine validator on its event loop between its queue-size check and queueing the call;
    a plain function would run in a worker thread and let every call of a burst pass the size check first."""
    validate = race_validator(LIMITS, Pair)
    assert inspect.iscoroutinefunction(validate)
    marks = asyncio.run(validate("def f():\n", 8, None, None, None, None, 0.8, 1.0, 3e9))
    assert "Seed must be a whole number from 0 to 2147483647, got 3000000000.0" in marks[8]["message"]
    assert [mark["is_valid"] for mark in asyncio.run(validate("def f():\n", 8, None, None, None, None, 0.8, 1.0, None))
            ] == [True] * 9
