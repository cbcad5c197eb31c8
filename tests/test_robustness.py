"""Hostile and odd input through the launched app's public API (/race), end to end.

Every knob and the token budget out of range, fractional, non-finite, a string or a bool; and a
client that cancels mid-race. Each refusal must name the limit it enforces, no traceback may reach
the caller, and the app must keep serving (and stay lossless) afterwards. (Hostile prompts, with
this module's helpers: tests/test_robustness_prompts.py. An unexpected failure inside the race:
tests/test_unexpected_error.py.)

Like tests/test_app.py, nothing here depends on the generated text, only on behaviour.
"""

from __future__ import annotations

import json
import math
import re
import time

import httpx
import pytest
from gradio_client.exceptions import AppError, ValidationError

from app_server import app_server  # noqa: F401  (the fixture)

CODE_PROMPT = 'def fibonacci(n):\n    """Return the n-th Fibonacci number."""\n'
# The app's default cap (OUROBOROS_MAX_NEW_TOKENS), which the fixture leaves alone.
MAX_NEW_TOKENS = 512
# The app's KNOBS, as a visitor reads them on the sliders: (low, high, label).
KNOBS = {
    "gamma": (1, 16, "gamma (minimum draft length)"),
    "window": (0, 32, "window W (lookahead columns)"),
    "ngram": (2, 8, "n-gram size N"),
    "branches": (0, 8, "branches k"),
}
KNOB_ORDER = ("gamma", "window", "ngram", "branches")
# As the sliders read.
SAMPLING = {"temperature": (0.0, 2.0, "Temperature"), "top_p": (0.05, 1.0, "Top-p")}
RACE_TIMEOUT_S = 120  # two busy cores: a short race can stall for tens of seconds
TRACEBACK_MARKS = ("Traceback", 'File "')


@pytest.fixture(scope="module")
def client(app_server):
    return app_server.client()


def race(client, prompt, max_new_tokens, **knobs):
    return client.predict(
        prompt, max_new_tokens, *(knobs.get(name) for name in KNOB_ORDER), api_name="/race"
    )


def assert_lossless(result, max_new_tokens):
    assert set(result) == {"vanilla", "ouroboros"}
    vanilla, ouroboros = result["vanilla"], result["ouroboros"]
    assert ouroboros["token_ids"] == vanilla["token_ids"]
    assert ouroboros["text"] == vanilla["text"]
    for method, lane in result.items():
        assert isinstance(lane["text"], str), method
        lane["text"].encode("utf-8")  # a valid string: no lone surrogates
        assert lane["stop_reason"] in {"max_new_tokens", "eos"}, method
        assert 1 <= lane["stats"]["new_tokens"] == len(lane["token_ids"]) <= max_new_tokens, method
        if lane["stop_reason"] == "max_new_tokens":
            assert len(lane["token_ids"]) == max_new_tokens, method


def assert_serving(client):
    """A normal request right after the one under test succeeds, and both lanes agree."""
    result = race(client, CODE_PROMPT, 4)
    assert result["vanilla"]["token_ids"] == result["ouroboros"]["token_ids"]
    assert 1 <= result["vanilla"]["stats"]["new_tokens"] <= 4


def assert_names_range(message: str, label: str, low: int, high: int) -> None:
    assert label.lower() in message.lower(), message
    assert f"from {low} to {high}" in message, message


def refusal(client, prompt, max_new_tokens, **knobs) -> str:
    with pytest.raises((AppError, ValidationError)) as error:
        race(client, prompt, max_new_tokens, **knobs)
    message = str(error.value)
    for mark in TRACEBACK_MARKS:
        assert mark not in message, message
    return message


def raw_race(url: str, prompt, max_new_tokens, **knobs) -> tuple[str, object, str]:
    """/race through Gradio's raw HTTP API, for what gradio_client cannot send (NaN, infinities,
    lone surrogates): the body is ASCII JSON with escapes, built here. Returns (last event, its
    data, the whole stream).

    POST gradio_api/call/race {"data": [...]} -> {"event_id"}; GET
    gradio_api/call/race/{event_id} streams SSE "event: generating|complete|error|heartbeat" /
    "data: <json>" pairs. The raw route wants every input. A call the app's checks refuse is
    answered at once, before any queue: 422 with each parameter's verdict, returned here as an
    "error" event whose data is the refused parameters' messages.
    """
    sampling = {
        "temperature": 0.0,
        "top_p": 1.0,
        "seed": None,
        **{k: v for k, v in knobs.items() if k in SAMPLING},
    }
    data = [
        prompt,
        max_new_tokens,
        *(knobs.get(name) for name in KNOB_ORDER),
        *sampling.values(),
        False,  # raw
    ]
    body = json.dumps({"data": data}, ensure_ascii=True, allow_nan=True)
    with httpx.Client(timeout=RACE_TIMEOUT_S) as http:
        posted = http.post(
            f"{url}gradio_api/call/race", content=body, headers={"Content-Type": "application/json"}
        )
        if posted.status_code == 422:
            refused = [item["message"] for item in posted.json()["detail"] if not item["is_valid"]]
            return "error", " ".join(refused), posted.text
        assert posted.status_code == 200, posted.text
        event_id = posted.json()["event_id"]
        stream, event, payload = [], None, None
        with http.stream("GET", f"{url}gradio_api/call/race/{event_id}") as response:
            assert response.status_code == 200
            for line in response.iter_lines():
                stream.append(line)
                if line.startswith("event:"):
                    event = line.split(":", 1)[1].strip()
                elif line.startswith("data:") and event in {"complete", "error"}:
                    payload = json.loads(line.split(":", 1)[1])
                    break
    return event, payload, "\n".join(stream)


def raw_error(url: str, prompt, max_new_tokens, **knobs) -> str:
    event, payload, stream = raw_race(url, prompt, max_new_tokens, **knobs)
    assert event == "error", f"expected an error event, got {event}: {stream[-2000:]}"
    for mark in TRACEBACK_MARKS:
        assert mark not in stream, stream
    message = payload.get("error") if isinstance(payload, dict) else payload
    assert isinstance(message, str), f"the error carries no message: {stream[-2000:]}"
    return message


# ------------------------------------------------------------------------------------------ knobs


def bad_values(low: int, high: int) -> list[tuple[str, object]]:
    return [
        ("below", low - 1),
        ("negative", -5),
        ("above", high + 1),
        ("huge", 10**9),
        ("fractional", low + 1.5),
        ("string", "many"),
        ("bool", True),
    ]


KNOB_CASES = [
    (name, value) for name, (low, high, _) in KNOBS.items() for _, value in bad_values(low, high)
]
KNOB_IDS = [
    f"{name}-{kind}" for name, (low, high, _) in KNOBS.items() for kind, _ in bad_values(low, high)
]


@pytest.mark.parametrize("knob, value", KNOB_CASES, ids=KNOB_IDS)
def test_bad_knob_is_refused_by_name_and_range(client, knob, value):
    low, high, label = KNOBS[knob]
    message = refusal(client, CODE_PROMPT, 8, **{knob: value})
    assert_names_range(message, label, low, high)
    assert_serving(client)


def test_an_expected_refusal_is_one_log_line_without_a_traceback(client, app_server):
    if not hasattr(app_server, "log_text"):
        pytest.skip("the app at $OUROBOROS_APP_URL has no log to read")
    before = set(app_server.log_text().splitlines())  # the log's tail; its lines carry timestamps

    def new_lines() -> str:
        return "\n".join(line for line in app_server.log_text().splitlines() if line not in before)

    with pytest.raises(ValidationError, match="Prompt is empty"):
        race(client, "   ", 8)
    deadline = time.monotonic() + 10
    while "refused: Prompt is empty" not in new_lines() and time.monotonic() < deadline:
        time.sleep(0.1)
    time.sleep(0.5)  # anything the refusal would print after its line
    new = new_lines()
    assert new.count("refused: Prompt is empty") == 1, new
    assert "Traceback" not in new and "gradio.exceptions.Error" not in new, new
    assert_serving(client)


# Those tests/test_app.py does not cover: just past the cap, and a bool (True == 1 would pass a
# plain range check).
@pytest.mark.parametrize("value", [MAX_NEW_TOKENS + 1, True], ids=["above-cap", "bool"])
def test_bad_max_new_tokens_is_refused_by_range(client, value):
    message = refusal(client, CODE_PROMPT, value)
    assert_names_range(message, "Max new tokens", 1, MAX_NEW_TOKENS)
    assert_serving(client)


# gradio_client (httpx) refuses to encode NaN and the infinities, so these go through raw HTTP.
NONFINITE = [("max_new_tokens", value) for value in (math.nan, math.inf, -math.inf)] + [
    (knob, value)
    for knob in KNOB_ORDER + tuple(SAMPLING)
    for value in (math.nan, math.inf, -math.inf)
]


@pytest.mark.parametrize(
    "name, value", NONFINITE, ids=[f"{name}-{value}" for name, value in NONFINITE]
)
def test_non_finite_number_is_refused_by_name_and_range(
    client,
    app_server,
    name,
    value,
):
    if name == "max_new_tokens":
        message = raw_error(app_server.url, CODE_PROMPT, value)
        assert_names_range(message, "Max new tokens", 1, MAX_NEW_TOKENS)
    elif name in SAMPLING:
        low, high, label = SAMPLING[name]
        message = raw_error(app_server.url, CODE_PROMPT, 8, **{name: value})
        assert f"{label} must be a number from {low:g} to {high:g}" in message, message
    else:
        low, high, label = KNOBS[name]
        message = raw_error(app_server.url, CODE_PROMPT, 8, **{name: value})
        assert_names_range(message, label, low, high)
    assert_serving(client)


@pytest.mark.parametrize(
    "knobs",
    [
        {"gamma": 16, "window": 32, "ngram": 8, "branches": 8},
        {"gamma": 1, "window": 0, "ngram": 2, "branches": 0},
        {"gamma": 16, "window": 32, "ngram": 2, "branches": 0},
        {"gamma": 1, "window": 0, "ngram": 8, "branches": 8},
        # what the page's sliders send
        {"gamma": 2.0, "window": 4.0, "ngram": 3.0, "branches": 1.0},
    ],
    ids=["all-high", "all-low", "mixed-1", "mixed-2", "whole-floats"],
)
def test_boundary_knobs_are_accepted_and_lossless(client, knobs):
    result = race(client, CODE_PROMPT, 24, **knobs)
    assert_lossless(result, 24)
    # Vanilla ignores the knobs: the same output as with the defaults, so Ouroboros matches that
    # too.
    assert result["vanilla"]["token_ids"] == race(client, CODE_PROMPT, 24)["vanilla"]["token_ids"]
    assert_serving(client)


# ----------------------------------------------------------------------------------- cancellation

RACE_LINE = re.compile(
    r"race (\S+): vanilla (\d+) tokens (\S+) [\d.]+ s, "
    r"ouroboros (\d+) tokens (\S+) [\d.]+ s"
)


def test_cancelled_api_race_stops_early_and_frees_the_device(client, app_server):
    has_log = hasattr(app_server, "log_text")
    before = set(app_server.log_text().splitlines()) if has_log else set()
    job = client.submit(CODE_PROMPT, MAX_NEW_TOKENS, None, None, None, None, api_name="/race")
    deadline = time.monotonic() + RACE_TIMEOUT_S
    while not job.outputs():
        assert not job.done(), f"the race ended before streaming anything: {job.status()}"
        assert time.monotonic() < deadline, "the race never streamed"
        time.sleep(0.02)
    # Still running when the cancel goes out.
    assert job.outputs()[-1]["vanilla"]["stop_reason"] is None
    job.cancel()

    started = time.monotonic()
    result = race(client, CODE_PROMPT, 8)
    assert result["vanilla"]["token_ids"] == result["ouroboros"]["token_ids"]
    assert len(result["vanilla"]["token_ids"]) <= 8
    assert time.monotonic() - started < RACE_TIMEOUT_S

    # Only the server knows whether the race was cancelled or ran out (see test_browser.py).
    if not has_log:
        pytest.skip("the app at $OUROBOROS_APP_URL has no log to read the cancelled race from")
    cancelled = None
    deadline = time.monotonic() + 10
    while cancelled is None and time.monotonic() < deadline:
        for line in app_server.log_text().splitlines():
            match = RACE_LINE.search(line)
            if (
                line not in before
                and match
                and match.group(1) == "api"
                and ({match.group(3), match.group(5)} & {"unfinished", "cancelled"})
            ):
                cancelled = match
        time.sleep(0.2)
    assert cancelled, f"no unfinished or cancelled 'race api:' line:\n{app_server.log_text()}"
    # group 2: vanilla, the slower lane
    assert int(cancelled.group(2)) < MAX_NEW_TOKENS, cancelled.group(0)


def test_race_ratio_tool_reads_the_lanes_own_clocks(app_server):
    """tools/race_ratio.py, which the README's /race figures come from, on two short races."""
    from ouroboros_core.tools.race_ratio import measure

    figures = measure(app_server.url, [CODE_PROMPT, "def add(a, b):\n"], 12)
    assert figures["races"] == 2 and figures["identical"] == 2
    assert 0 < figures["median"] and 0 < figures["total"]
