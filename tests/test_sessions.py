"""The app's handlers in-process: one visitor's warm phrase pool never reaches another visitor,
sessions are bounded, Replay waits for the last Run's race, and an unexpected error reaches the
visitor as a short message (never a traceback)."""

from __future__ import annotations

import inspect
import logging
import re
import time
import types

import gradio as gr
import pytest

import app
from ui import racing
from ui.guard import KNOBS
from ui.sessions import Sessions, Stops
from ouroboros_core.events import Source

PROMPT = 'def count_words(text):\n    """Count the words in text."""\n'
OUROBOROS_TEXT, OUROBOROS_STATS = app.VIEW.lanes["ouroboros"]


def page(prompt: str = PROMPT, max_new_tokens: int = 48, warm: bool = True) -> dict:
    """The page's inputs for Run, by name: a greedy race at the pair's own settings."""
    return {
        "prompt": prompt,
        "max_new_tokens": max_new_tokens,
        "gamma": None,
        "window": None,
        "ngram": None,
        "branches": None,
        "temperature": 0.0,
        "top_p": 1.0,
        "seed": None,
        "with_speculative": False,
        "colour": True,
        "warm_pool": warm,
        "raw": False,
    }


def run(who: str, prompt: str = PROMPT, warm: bool = True, max_new_tokens: int = 48):
    """One race from visitor `who`; returns (per-token sources of the Ouroboros lane,
    tokens/forward)."""
    request = types.SimpleNamespace(session_hash=who)
    out = None
    for out in app.race_ui(request, **page(prompt, max_new_tokens, warm)):
        pass
    sources = re.findall(r'class="tok tok-(\w+)"', out[OUROBOROS_TEXT])
    per_forward = float(re.search(r"([\d.]+) tokens/forward", out[OUROBOROS_STATS]).group(1))
    return sources, per_forward


@pytest.fixture()
def fresh_sessions(monkeypatch):
    monkeypatch.setattr(app.RACES, "sessions", Sessions())
    return app.RACES.sessions


def test_a_warm_pool_helps_its_own_visitor_and_never_another(fresh_sessions):
    cold = run("alice")
    warm = run("alice")
    # Precondition: the pool kept warm across alice's requests changes how her second race is
    # drafted.
    assert warm != cold, "a warm pool made no difference, so this test could not see a shared one"
    assert len(fresh_sessions.get("alice")["pool"]) > 0
    # Bob's first race is exactly a cold race: nothing of alice's phrases reaches his drafts.
    assert run("bob") == cold
    assert fresh_sessions.get("bob")["pool"] is not fresh_sessions.get("alice")["pool"]


def test_a_visitor_who_turns_the_warm_pool_off_races_cold(fresh_sessions):
    cold = run("carol")
    run("carol")
    assert run("carol", warm=False) == cold


def test_sessions_are_bounded_and_dropping_one_stops_its_race():
    sessions = Sessions(capacity=3)
    items = {key: sessions.get(key) for key in "abcde"}
    assert len(sessions) == 3
    assert sessions.get("a") is not items["a"], (
        "the least recently used visitor should have fallen out"
    )
    armed, flag = items["e"]["stops"].take(items["e"]["stops"].arm())
    sessions.drop("e")
    assert flag.is_set()
    assert len(sessions) == 2  # a came back in place of c; e is gone
    sessions.drop("nobody")  # unknown visitors are fine


def test_a_run_stops_what_ran_before_and_a_stop_is_never_undone():
    stops = Stops()
    first = stops.arm()
    _, first_flag = stops.take(first)
    second = stops.arm()  # Run during the first race: it stops, the second goes on
    assert first_flag.is_set()
    _, second_flag = stops.take(second)
    assert not second_flag.is_set()
    assert stops.take(second) == (second, None), "a race is taken once"
    stops.stop_all()  # Stop, then Run at once: the Stop still ends the race it was meant for
    third = stops.arm()
    assert second_flag.is_set()
    fourth = stops.arm()  # two quick Runs: the race of the first click never starts
    assert stops.take(third) == (third, None)
    assert not stops.take(fourth)[1].is_set()
    # Stop while a race waits in the queue: it starts, and stops before its first step.
    stops.stop_all()
    fifth = stops.arm()
    stops.stop_all()
    assert stops.take(fifth)[1].is_set()
    for number in (first, second, fourth, fifth):
        stops.release(number)
    assert len(stops) == 0, "finished races leave no flag behind"


def test_replay_comes_back_when_the_last_run_is_over_not_when_an_earlier_one_is(fresh_sessions):
    request = types.SimpleNamespace(session_hash="gina")
    run("gina", max_new_tokens=8)  # a race to replay
    assert fresh_sessions.replayable(request)
    stops = fresh_sessions.get("gina")["stops"]
    first = fresh_sessions.arm(request)  # Run: Replay stays off while its race waits and runs
    stops.take(first)
    assert not fresh_sessions.replayable(request)
    # Run again during that race: the first one ends, the second waits.
    second = fresh_sessions.arm(request)
    stops.release(first)
    assert not fresh_sessions.replayable(request), (
        "the first race's end brought Replay back before the second ran"
    )
    stops.take(second)
    stops.release(second)
    assert fresh_sessions.replayable(request)
    fresh_sessions.forget_race(request)  # Clear: nothing to replay
    assert not fresh_sessions.replayable(request)


def test_a_second_run_ends_the_first_race_within_a_step():
    """Run twice: the first race's flag is set by the second click, so it stops where it is."""
    request = types.SimpleNamespace(session_hash="frank")
    stops = app.RACES.sessions.get("frank")["stops"]
    first = stops.arm()
    outputs = app.race_ui(request, first, **page(max_new_tokens=256, warm=False))
    next(outputs), next(outputs)  # the first race streams
    stops.arm()  # the second click
    badge = list(outputs)[-1][app.VIEW.badge]
    assert "Stopped" in badge, badge
    assert len(stops) == 1, "the stopped race let its flag go; the second click's is waiting"


def test_a_chat_answer_opens_empty_and_raw_text_opens_on_the_prompts_last_line(monkeypatch):
    """The first frame, before any step: on a chat pair an answer is a new text, so its lane opens
    empty; Raw text continues the prompt, so its lane opens on the prompt's last line (dimmed)."""
    monkeypatch.setattr(app.get_engine(), "chat", True)
    request = types.SimpleNamespace(session_hash="ivy")
    opened = {}
    for raw in (False, True):
        outputs = app.race_ui(request, **{**page(max_new_tokens=4, warm=False), "raw": raw})
        opened[raw] = next(outputs)[OUROBOROS_TEXT]
        outputs.close()
    assert "prompt-tail" not in opened[False], opened[False]
    assert 'class="prompt-tail"' in opened[True] and "Count the words" in opened[True]


def test_session_pools_are_capped():
    pool = app.get_engine().new_pool(pool_size=app.SESSION_POOL_SIZE)
    for key in range(app.SESSION_POOL_SIZE):
        for shift in range(4):
            pool.add(key, (key + shift, shift + 1), Source.POOL)
    assert len(pool) == app.SESSION_POOL_SIZE


def test_an_unexpected_error_becomes_a_short_message_and_is_logged(monkeypatch, caplog):
    def broken(*args, **kwargs):
        raise RuntimeError("secret detail /srv/models/target")
        yield  # a generator, like the real one

    monkeypatch.setattr(racing, "race", broken)
    request = types.SimpleNamespace(session_hash="dave")
    with caplog.at_level(logging.ERROR, logger="ouroboros.app"):
        with pytest.raises(gr.Error) as caught:
            list(app.race_ui(request, **page(max_new_tokens=8, warm=False)))
        with pytest.raises(gr.Error) as caught_api:
            list(app.race_api(PROMPT, 8))
    for err in (caught.value, caught_api.value):
        assert str(err.message) == app.UNEXPECTED
        assert "secret" not in str(err.message) and "Traceback" not in str(err.message)
    assert "secret detail" in caplog.text, "the server's log should keep what went wrong"


def test_the_chart_redraws_at_most_twice_a_second(monkeypatch):
    from ui import frames

    monkeypatch.setattr(frames, "TEXT_EVERY_S", 0.0)  # every step streams text
    request = types.SimpleNamespace(session_hash="erin")
    stamps, redraws = [], []
    for out in app.race_ui(request, **page(warm=False)):
        stamps.append(time.perf_counter())
        redraws.append(app.VIEW.chart in out)  # a frame without the chart leaves it as it is
    assert len(stamps) > sum(redraws) >= 2, "some updates should leave the chart alone"
    assert redraws[-1], "the last update draws the finished chart"
    times = [t for t, redraw in zip(stamps[:-1], redraws[:-1]) if redraw]
    assert all(b - a >= frames.CHART_EVERY_S * 0.9 for a, b in zip(times, times[1:])), times


def test_race_keeps_its_signature_and_takes_every_knob_of_the_page():
    """/race's callers pass its parameters by position as well as by name: they stay as they are,
    and every knob a visitor may set (config.py's, on the page) is among them."""
    parameters = inspect.signature(app.race_api).parameters
    assert [(name, parameter.default) for name, parameter in parameters.items()] == [
        ("prompt", inspect.Parameter.empty),
        ("max_new_tokens", 128),
        ("gamma", None),
        ("window", None),
        ("ngram", None),
        ("branches", None),
        ("temperature", 0.0),
        ("top_p", 1.0),
        ("seed", None),
        ("raw", False),
    ]
    assert set(KNOBS) <= set(parameters)
    assert app.API_PARAMETERS == list(parameters)  # how its validator names what it gets
