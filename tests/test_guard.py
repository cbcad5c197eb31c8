"""The checks every request passes before it reaches the device: each refusal names what was wrong."""

from __future__ import annotations

import asyncio
import inspect
import math

import gradio as gr
import pytest

from ui.guard import Limits, check_prompt, check_request, fit_problem, race_validator, room_line, validate_race

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


# A race's inputs that pass: prompt, max new tokens, gamma, window, ngram, branches, temperature, top-p, seed.
GOOD = ("def f():\n", 8, 4, 0, 6, 1, 0.8, 1.0, 0)
# Each bounded input: its place in GOOD, its lowest and highest allowed values, the nearest values past them,
# and how its refusal starts.
BOUNDS = [
    (1, 1, 512, 0, 513, "Max new tokens must be a whole number from 1 to 512"),
    (2, 1, 16, 0, 17, "gamma (minimum draft length) must be a whole number from 1 to 16"),
    (3, 0, 32, -1, 33, "window W (lookahead columns) must be a whole number from 0 to 32"),
    (4, 2, 8, 1, 9, "n-gram size N must be a whole number from 2 to 8"),
    (5, 0, 8, -1, 9, "branches k must be a whole number from 0 to 8"),
    (6, 0.0, 2.0, math.nextafter(0.0, -1.0), math.nextafter(2.0, 3.0), "Temperature must be a number from 0 to 2"),
    (7, 0.05, 1.0, math.nextafter(0.05, 0.0), math.nextafter(1.0, 2.0), "Top-p must be a number from 0.05 to 1"),
    (8, 0, 2**31 - 1, -1, 2**31, "Seed must be a whole number from 0 to 2147483647"),
]


def with_input(index: int, value) -> list:
    inputs = list(GOOD)
    inputs[index] = value
    return inputs


@pytest.mark.parametrize("index, lowest, highest, below, above, refusal", BOUNDS,
                         ids=["max_new_tokens", "gamma", "window", "ngram", "branches", "temperature", "top_p", "seed"])
def test_each_input_is_taken_at_its_limits_and_refused_one_past_them(index, lowest, highest, below, above, refusal):
    for value in (lowest, highest):
        marks = validate_race(LIMITS, *with_input(index, value))
        assert [mark["is_valid"] for mark in marks] == [True] * 9, (value, marks)
    for value in (below, above):
        marks = validate_race(LIMITS, *with_input(index, value))
        assert [mark["is_valid"] for mark in marks] == [i != index for i in range(9)], (value, marks)
        assert marks[index]["message"] == f"{refusal}, got {value!r}.", marks[index]["message"]


def test_the_hosts_limits_hold_at_the_limit_and_not_one_past_it(monkeypatch):
    for name in ("OUROBOROS_MAX_NEW_TOKENS", "OUROBOROS_MAX_PROMPT_CHARS"):
        monkeypatch.delenv(name, raising=False)
    assert Limits() == Limits.from_env() == Limits(max_new_tokens=512, max_prompt_chars=32000)
    for limits in (Limits(), LIMITS):
        assert check_request("def f():\n", 512, {}, limits) == ("def f():\n", 512, {})
        with pytest.raises(gr.Error, match="Max new tokens must be a whole number from 1 to 512, got 513"):
            check_request("def f():\n", 513, {}, limits)
        assert validate_race(limits, *with_input(1, 513))[1]["message"].startswith("Max new tokens")
    assert check_request("x" * 100, 8, {"gamma": 16}, LIMITS) == ("x" * 100, 8, {"gamma": 16})
    with pytest.raises(gr.Error, match="Prompt is 101 characters; this demo takes at most 100"):
        check_request("x" * 101, 8, {}, LIMITS)
    assert [mark["is_valid"] for mark in validate_race(LIMITS, *with_input(0, "x" * 101))] == [False] + [True] * 8
    monkeypatch.setenv("OUROBOROS_MAX_NEW_TOKENS", "64")
    with pytest.raises(gr.Error, match="from 1 to 64, got 65"):
        check_request("def f():\n", 65, {}, Limits.from_env())


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
    assert all(mark["is_valid"] for mark in validate_race(LIMITS, "x" * 48, 16, 4, 0, 6, 1, 0.0, 1.0, 0, engine=pair))
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


def test_the_validator_measures_the_prompt_in_the_pair_its_loader_returns():
    """The page's validator is handed a loader, not a pair: the prompt's length in tokens is checked against what
    the loader returns, and left to the race while it returns None (no pair yet)."""
    pair = Pair()
    validate = race_validator(LIMITS, lambda: pair)
    fits = asyncio.run(validate("x" * 48, 16, 4, 0, 6, 1, 0.0, 1.0, 0))
    assert [mark["is_valid"] for mark in fits] == [True] * 9
    over = asyncio.run(validate("x" * 49, 16, 4, 0, 6, 1, 0.0, 1.0, 0))
    assert [mark["is_valid"] for mark in over] == [False] + [True] * 8
    assert over[0]["message"].startswith("Prompt is 49 tokens; with 16 new tokens the model's 64-token context")
    not_loaded = asyncio.run(race_validator(LIMITS)("x" * 49, 16, 4, 0, 6, 1, 0.0, 1.0, 0))
    assert [mark["is_valid"] for mark in not_loaded] == [True] * 9


def test_the_clicks_validator_waits_for_the_pair():
    """Run's first step checks once the pair is loaded: before, the page's loading ticks resend the prompt and the
    token count every half second, and each answer wipes a message beside them; the race's own step checks then."""
    pair = None
    waiting = race_validator(LIMITS, lambda: pair, wait=True)
    assert [mark["is_valid"] for mark in asyncio.run(waiting("   ", 0, 4, 0, 6, 1, 0.0, 1.0, 0))] == [True] * 9
    pair = Pair()
    marks = asyncio.run(waiting("   ", 0, 4, 0, 6, 1, 0.0, 1.0, 0))
    assert [mark["is_valid"] for mark in marks] == [False, False] + [True] * 7
    assert marks[1]["message"] == "Max new tokens must be a whole number from 1 to 512, got 0."
