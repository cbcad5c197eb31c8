"""The checks every request passes before it reaches the device: each refusal names what was wrong."""

from __future__ import annotations

import gradio as gr
import pytest

from ui.guard import Limits, check_prompt, validate_race

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
