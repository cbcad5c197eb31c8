"""Step costs measured apart from a race (ui/calibration.py) and the expected speedup the summary
builds on them (ui/render.expected): lanes built from hand-made events, no model."""

from __future__ import annotations

from dataclasses import replace

from test_render import race_lanes, step, tok

from ouroboros_core.events import DoneEvent, Stats
from ouroboros_core.race import Lane
from ui.calibration import Calibration, StepCosts
from ui.render import expected


def test_calibration_medians_come_from_races_before_this_one():
    calibration = Calibration(window=3)
    assert calibration.take(race_lanes()) is None  # nothing measured before the first race
    costs = calibration.costs()
    assert costs.races == 1 and costs.step_ms == {"vanilla": 100.0, "ouroboros": 100.0}
    assert costs.ratio("ouroboros") == 1.0 and costs.ratio("speculative") is None
    calibration.add(race_lanes(reason="cancelled"))  # a stopped race is not a measurement
    assert calibration.costs().races == 1
    # Nor is one that met a busy machine: its steps took what another job left them.
    assert calibration.take(race_lanes(), busy=True).races == 1 and calibration.costs().races == 1
    calibration.add(race_lanes())
    assert calibration.costs().races == 2


def timed_lane(method: str, first_ms: float, draft_ms: float, step_ms: float, forwards: int):
    """A finished lane of 128 tokens whose first step (the prefill) took first_ms verifying and
    draft_ms drafting, and every later one step_ms."""
    lane = Lane(method)
    lane.apply(replace(step(0, (), tok(1, "a")), draft_ms=draft_ms, verify_ms=first_ms))
    for i in range(1, forwards):
        lane.apply(replace(step(i, (), tok(1, "a")), verify_ms=step_ms))
    seconds = (first_ms + draft_ms + (forwards - 1) * step_ms) / 1000
    stats = Stats(128, forwards, 0, 0, seconds, draft_ms / 1000, seconds - draft_ms / 1000)
    lane.apply(DoneEvent((1,) * 128, "a" * 128, stats, "max_new_tokens"))
    return lane


def test_the_expected_figure_counts_the_prefill_a_long_prompt_makes_most_of_a_race():
    # A 2,600-token prompt: 7.9 s of prefill in each lane, 1 s more for the draft's, then steps of
    # 100 ms (vanilla) and 150 ms (Ouroboros, 60 forwards for 128 tokens).
    vanilla = timed_lane("vanilla", 8000.0, 0.0, 100.0, 128)
    ouroboros = timed_lane("ouroboros", 8050.0, 1000.0, 150.0, 60)
    clock = vanilla.done.stats.seconds / ouroboros.done.stats.seconds
    costs = StepCosts({"vanilla": 100.0, "ouroboros": 150.0}, races=2)
    value, why = expected("ouroboros", ouroboros, vanilla, costs)
    # Tokens per forward over the step ratio alone (2.13 / 1.5 = 1.42x) would promise far more than
    # the clock's 1.15x; with the prefill in both lanes the prediction meets it.
    assert abs(value / clock - 1) < 0.02 and 1.1 < clock < 1.2
    assert "after the prefill (7.90 s in both lanes, 1.00 s more for the draft)" in why
    assert "In this race a step cost 1.50x a vanilla one (150.0 ms against 100.0 ms)" in why
    # The calibration takes a step's cost after the prefill, so a long prompt does not inflate it.
    calibration = Calibration()
    calibration.add({"vanilla": vanilla, "ouroboros": ouroboros})
    assert calibration.costs().step_ms == {"vanilla": 100.0, "ouroboros": 150.0}
