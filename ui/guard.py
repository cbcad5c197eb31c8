"""Everything a visitor sends, checked before it reaches the device; and the shield that turns
anything unexpected into a short message for the visitor and a logged traceback for the host."""

from __future__ import annotations

import functools
import logging
import math
import os
import re
import secrets
from collections.abc import Sequence
from dataclasses import dataclass

import gradio as gr

from ouroboros_core.config import OuroborosConfig, SamplingConfig, knobs

# The Ouroboros knobs a visitor may set (config.py defines each): their sliders' ranges, checked
# again on the server for every caller.
KNOBS = {name: setting for name, setting in knobs(OuroborosConfig).items() if setting.page}
# Sampling on the page and in /race (config.py defines each option too): temperature 0 is greedy;
# a seed makes a sampled race repeat exactly.
SAMPLING = {name: setting for name, setting in knobs(SamplingConfig).items() if setting.page}
# C0/C1 controls, except tab, newlines and form feed.
CONTROL = re.compile(r"[\x00-\x08\x0b\x0e-\x1f\x7f-\x9f]")
UNEXPECTED = "Something went wrong on the server; it has been logged. Please try again."
log = logging.getLogger("ouroboros.app")


@dataclass(frozen=True)
class Limits:
    max_new_tokens: int = 512  # the most tokens a visitor may ask for
    # A cap on what is read at all; the model's context is the real limit, checked in tokens
    # (fit_problem).
    max_prompt_chars: int = 32000

    @classmethod
    def from_env(cls) -> "Limits":
        """The host's limits (a Space's variables); nothing on the page can change them."""
        return cls(
            int(os.environ.get("OUROBOROS_MAX_NEW_TOKENS", "512")),
            int(os.environ.get("OUROBOROS_MAX_PROMPT_CHARS", "32000")),
        )


def refuse(message: str) -> gr.Error:
    """An expected refusal of a visitor's input: one line in the server's log, no traceback there or
    anywhere."""
    log.info("refused: %s", message)
    return gr.Error(message, print_exception=False)


def check_prompt(prompt, max_chars: int) -> str:
    if prompt is not None and not isinstance(prompt, str):
        raise refuse(f"Prompt must be text (a string), got {type(prompt).__name__}.")
    if not prompt or not prompt.strip():
        raise refuse("Prompt is empty: type a request or pick an example.")
    if len(prompt) > max_chars:
        raise refuse(
            f"Prompt is {len(prompt):,} characters; this demo takes at most {max_chars:,}."
        )
    found = CONTROL.search(prompt)  # lone surrogates are the engine's to refuse, for every caller
    if found:
        raise refuse(
            f"Prompt has a control character (U+{ord(found.group()):04X}) at character "
            f"{found.start()}; only printable text, tabs and newlines are accepted."
        )
    return prompt


def check_whole(label: str, value, low: int, high: int) -> int:
    """A whole number in [low, high] from the page or the API (sliders send floats like 3.0)."""
    ok = (
        not isinstance(value, bool)
        and isinstance(value, (int, float))
        and math.isfinite(value)
        and value == int(value)
        and low <= value <= high
    )
    if not ok:
        raise refuse(f"{label} must be a whole number from {low} to {high}, got {value!r}.")
    return int(value)


def check_number(label: str, value, low: float, high: float) -> float:
    """A number in [low, high] from the page or the API."""
    ok = not isinstance(value, bool) and isinstance(value, (int, float)) and math.isfinite(value)
    if not ok or not low <= value <= high:
        raise refuse(f"{label} must be a number from {low:g} to {high:g}, got {value!r}.")
    return float(value)


def check_knob(name: str, value) -> int | float | None:
    """A knob's value (an Ouroboros knob or a sampling option) within its page's range, or None:
    left empty, for the default (the pair's setting; a sampled race's seed is drawn)."""
    setting = KNOBS.get(name) or SAMPLING[name]
    if isinstance(value, str) and setting.default is None:
        # the page's seed box sends its text: empty for none, else the number typed
        text = value.strip()
        value = None if not text else int(text) if text.isdigit() else value
    if value is None:
        return None
    check = check_number if setting.kind is float else check_whole
    return check(setting.page.label, value, setting.page.low, setting.page.high)


def check_sampling(inputs: dict) -> dict:
    """The sampling options shared by every lane of a race, from its inputs by name: {} for greedy
    (temperature 0 or None), else each option, one left empty at its default. A sampled race
    without a seed gets one here, for all its lanes (and reported), so it can be repeated."""
    values = {name: check_knob(name, inputs.get(name)) for name in SAMPLING}
    if not values["temperature"]:
        return {}
    sampling = {
        name: setting.default if values[name] is None else values[name]
        for name, setting in SAMPLING.items()
    }
    if sampling["seed"] is None:
        sampling["seed"] = secrets.randbelow(SAMPLING["seed"].page.high + 1)
    return sampling


def prompt_tokens(engine, prompt) -> int | None:
    """How many tokens the loaded pair reads `prompt` as; None when that cannot be said here (no
    pair yet, or a prompt the engine refuses with its own message when the race starts)."""
    if engine is None or not isinstance(prompt, str) or not prompt.strip():
        return None
    try:
        return len(engine.encode(prompt))
    # A lone surrogate, a tokenizer busy in another thread: the race says why.
    except Exception:  # noqa: BLE001
        return None


def fit_problem(engine, prompt, max_new_tokens) -> str | None:
    """The page's sentence when the prompt and the new tokens do not fit in the model's context,
    else None."""
    used = prompt_tokens(engine, prompt)
    if used is None or not isinstance(max_new_tokens, (int, float)):
        return None
    room = engine.max_context - int(max_new_tokens)
    if used <= room:
        return None
    return (
        f"Prompt is {used:,} tokens; with {int(max_new_tokens):,} new tokens the model's "
        f"{engine.max_context:,}-token context leaves room for {max(room, 0):,}. Shorten the "
        "prompt or ask for fewer new tokens."
    )


def room_line(engine, prompt, max_new_tokens) -> str:
    """Under the prompt box, as the visitor types: how many tokens it is, and how many the model can
    take at the chosen length."""
    if engine is None:
        return "The prompt's limit in tokens shows once the model pair has loaded."
    # As the box sends it, unchecked (the slider's own bounds check would log a traceback for a
    # typed 0).
    finite = isinstance(max_new_tokens, (int, float)) and math.isfinite(max_new_tokens)
    length = int(max_new_tokens) if finite else 0
    room = engine.max_context - max(length, 0)
    used = prompt_tokens(engine, prompt) or 0
    over = " — too long: Run will say so, nothing is cut" if used > room else ""
    tokens = "token" if length == 1 else "tokens"
    return (
        f"{used:,} of the {max(room, 0):,} tokens the model can read with {length:,} new "
        f"{tokens}{over}."
    )


def check_request(
    prompt, max_new_tokens, knobs: dict | None, limits: Limits
) -> tuple[str, int, dict]:
    """The prompt, max new tokens and the Ouroboros options of a request, or a gr.Error naming the
    limit."""
    prompt = check_prompt(prompt, limits.max_prompt_chars)
    max_new_tokens = check_whole("Max new tokens", max_new_tokens, 1, limits.max_new_tokens)
    options = {
        name: check_knob(name, value) for name, value in (knobs or {}).items() if value is not None
    }
    return prompt, max_new_tokens, options


@dataclass(frozen=True)
class RaceRequest:
    """A race's inputs, checked: from the page's Run or from /race."""

    prompt: str
    max_new_tokens: int
    options: dict  # the Ouroboros knobs set; the others keep the pair's own settings
    sampling: dict  # temperature, top_p and seed, shared by every lane; {} for greedy
    seed_drawn: bool  # no seed was given: a sampled race drew one (and says so)
    raw: bool  # the prompt as it is, not as a user's chat turn


def check_race(inputs: dict, limits: Limits) -> RaceRequest:
    """A race's inputs by name (the page's, or /race's arguments) checked, or a gr.Error naming the
    first wrong one; the page's other inputs (its switches) are left to its handler."""
    knobs = {name: inputs.get(name) for name in KNOBS}  # one left out keeps the pair's setting
    prompt, max_new_tokens, options = check_request(
        inputs["prompt"], inputs["max_new_tokens"], knobs, limits
    )
    sampling = check_sampling(inputs)
    return RaceRequest(
        prompt,
        max_new_tokens,
        options,
        sampling,
        seed_drawn=check_knob("seed", inputs["seed"]) is None,
        raw=bool(inputs["raw"]),
    )


def input_problems(inputs: dict, limits: Limits) -> dict[str, str | None]:
    """Each input's message by name, or None where it is fine (or not one a race checks)."""
    checks = {
        "prompt": lambda value: check_prompt(value, limits.max_prompt_chars),
        "max_new_tokens": lambda value: check_whole(
            "Max new tokens", value, 1, limits.max_new_tokens
        ),
        **{name: functools.partial(check_knob, name) for name in (*KNOBS, *SAMPLING)},
    }
    problems = {}
    for name, value in inputs.items():
        try:
            checks.get(name, lambda value: None)(value)
            problems[name] = None
        except gr.Error as err:  # logged once by refuse()
            problems[name] = err.message
    return problems


def shielded(handler):
    """Visitors see our own messages (gr.Error) and never a traceback; anything else is logged
    here."""

    @functools.wraps(handler)
    def wrapper(*args, **kwargs):
        try:
            yield from handler(*args, **kwargs)
        except gr.Error:
            raise
        except Exception:
            log.exception("request failed")
            raise gr.Error(UNEXPECTED) from None

    return wrapper


def validate_race(limits: Limits, inputs: dict, engine=None) -> list[dict]:
    """A race's inputs by name, checked before it is queued: a bad one gets its message beside it,
    once, and the outputs are left alone (the race checks again, for every other caller). One mark
    per input, in the order given. engine: the loaded pair, if any, to check that the prompt fits
    its context in tokens."""
    problems = input_problems(inputs, limits)
    if problems["prompt"] is None and problems["max_new_tokens"] is None:
        problems["prompt"] = fit_problem(engine, inputs["prompt"], inputs["max_new_tokens"])
        if problems["prompt"]:
            log.info("refused: %s", problems["prompt"])
    return [gr.validate(problem is None, problem or "") for problem in problems.values()]


def race_validator(
    limits: Limits, engine=lambda: None, wait: bool = False, names: Sequence[str] = ()
):
    """validate_race as Gradio's validator for an endpoint (engine: returns the loaded pair or
    None). Gradio hands it the inputs as it hands them to the handler: by name (the page's), or in
    order, named by `names` (/race's parameters). Async on purpose: Gradio checks the queue's size,
    awaits the validator, then queues the call; an async validator runs on the event loop with no
    pause between those, so a burst cannot overfill the queue (a plain function runs in a worker
    thread, and every call of a burst passes the size check before any is queued). wait: while no
    pair is loaded, every input passes (for a later step's validator to check once it is)."""

    async def validate(*values, **named):
        inputs = {**dict(zip(names, values, strict=True)), **named}
        pair = engine()
        if wait and pair is None:
            return [gr.validate(True, "")] * len(inputs)
        return validate_race(limits, inputs, engine=pair)

    return validate
