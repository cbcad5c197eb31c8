"""The checks every request passes before it reaches the device: each refusal names what was
wrong."""

from __future__ import annotations

import asyncio
import inspect
import math

import gradio as gr
import pytest

from ui.guard import (
    KNOBS,
    SAMPLING,
    Limits,
    RaceRequest,
    check_prompt,
    check_race,
    check_request,
    fit_problem,
    race_validator,
    room_line,
    validate_race,
)

LIMITS = Limits(max_new_tokens=512, max_prompt_chars=100)


@pytest.mark.parametrize(
    "prompt, message",
    [
        (["def f():"], "Prompt must be text (a string), got list."),
        (123, "Prompt must be text (a string), got int."),
        (None, "Prompt is empty"),
        ("  \n", "Prompt is empty"),
        ("x" * 101, "Prompt is 101 characters; this demo takes at most 100."),
        ("def f():\x00", "Prompt has a control character (U+0000) at character 8"),
    ],
)
def test_a_bad_prompt_is_refused_with_what_is_wrong(prompt, message):
    with pytest.raises(gr.Error) as refused:
        check_prompt(prompt, LIMITS.max_prompt_chars)
    assert message in refused.value.message


def test_a_good_prompt_passes_as_it_is():
    prompt = "def f():\n\treturn 1\n"
    assert check_prompt(prompt, LIMITS.max_prompt_chars) == prompt


# A race's inputs that pass, by name, in /race's order: prompt, max new tokens, gamma, window,
# ngram, branches, temperature, top-p, seed.
GOOD = {
    "prompt": "def f():\n",
    "max_new_tokens": 8,
    "gamma": 4,
    "window": 0,
    "ngram": 6,
    "branches": 1,
    "temperature": 0.8,
    "top_p": 1.0,
    "seed": 0,
}
NAMES = list(GOOD)  # how the /race validator names the inputs it gets in order


def test_the_page_validator_marks_only_the_bad_input():
    page = {
        **GOOD,
        "max_new_tokens": 600,
        "temperature": 0.0,
        "with_speculative": "flag",
        "colour": "flag",
    }
    marks = validate_race(LIMITS, page)
    assert [mark["is_valid"] for mark in marks] == [True, False] + [True] * 9
    assert "Max new tokens must be a whole number from 1 to 512" in marks[1]["message"]


# Each bounded input: its name, its lowest and highest allowed values, the nearest values past
# them, and how its refusal starts.
BOUNDS = [
    ("max_new_tokens", 1, 512, 0, 513, "Max new tokens must be a whole number from 1 to 512"),
    ("gamma", 1, 16, 0, 17, "gamma (minimum draft length) must be a whole number from 1 to 16"),
    ("window", 0, 32, -1, 33, "window W (lookahead columns) must be a whole number from 0 to 32"),
    ("ngram", 2, 8, 1, 9, "n-gram size N must be a whole number from 2 to 8"),
    ("branches", 0, 8, -1, 9, "branches k must be a whole number from 0 to 8"),
    (
        "temperature",
        0.0,
        2.0,
        math.nextafter(0.0, -1.0),
        math.nextafter(2.0, 3.0),
        "Temperature must be a number from 0 to 2",
    ),
    (
        "top_p",
        0.05,
        1.0,
        math.nextafter(0.05, 0.0),
        math.nextafter(1.0, 2.0),
        "Top-p must be a number from 0.05 to 1",
    ),
    ("seed", 0, 2**31 - 1, -1, 2**31, "Seed must be a whole number from 0 to 2147483647"),
]


def with_input(name: str, value) -> dict:
    return {**GOOD, name: value}


@pytest.mark.parametrize(
    "name, lowest, highest, below, above, refusal", BOUNDS, ids=[bound[0] for bound in BOUNDS]
)
def test_each_input_is_taken_at_its_limits_and_refused_one_past_them(
    name, lowest, highest, below, above, refusal
):
    index = NAMES.index(name)
    for value in (lowest, highest):
        marks = validate_race(LIMITS, with_input(name, value))
        assert [mark["is_valid"] for mark in marks] == [True] * 9, (value, marks)
    for value in (below, above):
        marks = validate_race(LIMITS, with_input(name, value))
        valid = [mark["is_valid"] for mark in marks]
        assert valid == [i != index for i in range(9)], (value, marks)
        assert marks[index]["message"] == f"{refusal}, got {value!r}.", marks[index]["message"]


def test_the_seed_box_starts_empty_and_its_text_is_read_as_a_number_or_none():
    from ui.settings import knob_input

    box = knob_input("seed", SAMPLING["seed"])
    assert box.value == "" and "empty" in box.info  # no seed until one is typed: each race draws
    sampled = {**GOOD, "temperature": 0.8, "raw": False}
    for empty in ("", "   ", None):
        asked = check_race({**sampled, "seed": empty}, LIMITS)
        assert asked.seed_drawn and 0 <= asked.sampling["seed"] <= 2**31 - 1
    asked = check_race({**sampled, "seed": " 42 "}, LIMITS)
    assert asked.sampling["seed"] == 42 and not asked.seed_drawn
    for typed in ("abc", "-1", "4.5", "2147483648"):
        with pytest.raises(gr.Error, match="Seed must be a whole number from 0 to 2147483647"):
            check_race({**sampled, "seed": typed}, LIMITS)


def test_the_page_offers_no_knob_value_the_engine_refuses():
    for name, knob in KNOBS.items():
        assert knob.low <= knob.page.low <= knob.default <= knob.page.high <= knob.high, name


def test_a_race_is_checked_by_name_and_a_knob_left_empty_keeps_the_pairs_setting():
    page = {
        **GOOD,
        "gamma": 16.0,
        "window": None,
        "ngram": None,
        "branches": None,
        "seed": None,
        "raw": 1,
        "colour": True,
    }
    asked = check_race(page, LIMITS)
    assert asked == RaceRequest(
        "def f():\n",
        8,
        options={"gamma": 16},
        sampling={"temperature": 0.8, "top_p": 1.0, "seed": asked.sampling["seed"]},
        seed_drawn=True,
        raw=True,
    )
    assert check_race({**GOOD, "temperature": 0.0, "raw": False}, LIMITS) == RaceRequest(
        "def f():\n",
        8,
        options={"gamma": 4, "window": 0, "ngram": 6, "branches": 1},
        sampling={},
        seed_drawn=False,
        raw=False,
    )
    with pytest.raises(gr.Error, match=r"branches k must be a whole number from 0 to 8, got 9\."):
        check_race({**GOOD, "branches": 9, "raw": False}, LIMITS)


def test_the_hosts_limits_hold_at_the_limit_and_not_one_past_it(monkeypatch):
    for name in ("OUROBOROS_MAX_NEW_TOKENS", "OUROBOROS_MAX_PROMPT_CHARS"):
        monkeypatch.delenv(name, raising=False)
    assert Limits() == Limits.from_env() == Limits(max_new_tokens=512, max_prompt_chars=32000)
    for limits in (Limits(), LIMITS):
        assert check_request("def f():\n", 512, {}, limits) == ("def f():\n", 512, {})
        with pytest.raises(
            gr.Error, match="Max new tokens must be a whole number from 1 to 512, got 513"
        ):
            check_request("def f():\n", 513, {}, limits)
        marks = validate_race(limits, with_input("max_new_tokens", 513))
        assert marks[1]["message"].startswith("Max new tokens")
    assert check_request("x" * 100, 8, {"gamma": 16}, LIMITS) == ("x" * 100, 8, {"gamma": 16})
    with pytest.raises(gr.Error, match="Prompt is 101 characters; this demo takes at most 100"):
        check_request("x" * 101, 8, {}, LIMITS)
    marks = validate_race(LIMITS, with_input("prompt", "x" * 101))
    assert [mark["is_valid"] for mark in marks] == [False] + [True] * 8
    monkeypatch.setenv("OUROBOROS_MAX_NEW_TOKENS", "64")
    with pytest.raises(gr.Error, match="from 1 to 64, got 65"):
        check_request("def f():\n", 65, {}, Limits.from_env())


class Pair:
    """What the guard reads of a loaded pair: its context and its tokenizer (one token a character
    here)."""

    max_context = 64

    def encode(self, prompt):
        return list(prompt)


def test_a_prompt_is_measured_in_the_tokens_the_model_can_read_before_it_is_queued():
    pair = Pair()
    assert fit_problem(pair, "x" * 48, 16) is None
    assert fit_problem(pair, "x" * 49, 16) == (
        "Prompt is 49 tokens; with 16 new tokens the model's 64-token context leaves room for 48. "
        "Shorten the prompt or ask for fewer new tokens."
    )
    assert fit_problem(None, "x" * 49, 16) is None  # no pair yet: the race checks when it starts
    marks = validate_race(LIMITS, {**GOOD, "prompt": "x" * 49, "max_new_tokens": 16}, engine=pair)
    assert [mark["is_valid"] for mark in marks] == [False] + [True] * 8
    assert "leaves room for 48" in marks[0]["message"]
    fits = {**GOOD, "prompt": "x" * 48, "max_new_tokens": 16}
    assert all(mark["is_valid"] for mark in validate_race(LIMITS, fits, engine=pair))
    assert room_line(pair, "x" * 10, 16) == (
        "10 of the 48 tokens the model can read with 16 new tokens."
    )
    assert "too long: Run will say so, nothing is cut" in room_line(pair, "x" * 50, 16)
    assert "once the model pair has loaded" in room_line(None, "x", 16)
    assert room_line(pair, "x", float("nan")) == (
        "1 of the 64 tokens the model can read with 0 new tokens."
    )


def test_the_validator_is_async_so_a_burst_cannot_overfill_the_queue():
    """Gradio awaits a coroutine validator on its event loop between its queue-size check and
    queueing the call; a plain function would run in a worker thread and let every call of a burst
    pass the size check first."""
    validate = race_validator(LIMITS, Pair, names=NAMES)
    assert inspect.iscoroutinefunction(validate)
    marks = asyncio.run(validate("def f():\n", 8, None, None, None, None, 0.8, 1.0, 3e9))
    assert (
        "Seed must be a whole number from 0 to 2147483647, got 3000000000.0" in marks[8]["message"]
    )
    marks = asyncio.run(validate("def f():\n", 8, None, None, None, None, 0.8, 1.0, None))
    assert [mark["is_valid"] for mark in marks] == [True] * 9


def test_the_validator_measures_the_prompt_in_the_pair_its_loader_returns():
    """The page's validator is handed a loader, not a pair: the prompt's length in tokens is checked
    against what the loader returns, and left to the race while it returns None (no pair yet)."""
    pair = Pair()
    validate = race_validator(LIMITS, lambda: pair, names=NAMES)
    fits = asyncio.run(validate("x" * 48, 16, 4, 0, 6, 1, 0.0, 1.0, 0))
    assert [mark["is_valid"] for mark in fits] == [True] * 9
    over = asyncio.run(validate("x" * 49, 16, 4, 0, 6, 1, 0.0, 1.0, 0))
    assert [mark["is_valid"] for mark in over] == [False] + [True] * 8
    assert over[0]["message"].startswith(
        "Prompt is 49 tokens; with 16 new tokens the model's 64-token context"
    )
    not_loaded = asyncio.run(
        race_validator(LIMITS, names=NAMES)("x" * 49, 16, 4, 0, 6, 1, 0.0, 1.0, 0)
    )
    assert [mark["is_valid"] for mark in not_loaded] == [True] * 9
    # The page's validator gets its inputs by name, the switches and the race's number among them:
    # a mark for each, in the order they came.
    page = {
        "armed": 3,
        **GOOD,
        "prompt": "x" * 49,
        "max_new_tokens": 16,
        "colour": True,
        "raw": False,
    }
    marks = asyncio.run(race_validator(LIMITS, lambda: pair)(**page))
    assert [mark["is_valid"] for mark in marks] == [name != "prompt" for name in page]
    assert marks[1]["message"].startswith("Prompt is 49 tokens; with 16 new tokens")


def test_the_clicks_validator_waits_for_the_pair():
    """Run's first step checks once the pair is loaded: before, the page's loading ticks resend the
    prompt and the token count every half second, and each answer wipes a message beside them; the
    race's own step checks then."""
    pair = None
    waiting = race_validator(LIMITS, lambda: pair, wait=True)
    inputs = {**GOOD, "prompt": "   ", "max_new_tokens": 0, "temperature": 0.0}
    assert [mark["is_valid"] for mark in asyncio.run(waiting(**inputs))] == [True] * 9
    pair = Pair()
    marks = asyncio.run(waiting(**inputs))
    assert [mark["is_valid"] for mark in marks] == [False, False] + [True] * 7
    assert marks[1]["message"] == "Max new tokens must be a whole number from 1 to 512, got 0."
