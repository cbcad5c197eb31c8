"""The fair race: lanes interleave by their own clocks and end with the same output as running
alone."""

import threading

import pytest

from ouroboros_core import ConfigError, load_engine
from ouroboros_core.race import race
from pairs import save_tiny_pair


@pytest.fixture(scope="module")
def engine(tmp_path_factory):
    root = save_tiny_pair(tmp_path_factory.mktemp("race-pair"))
    return load_engine(str(root / "target"), str(root / "draft"), "cpu")


def test_race_advances_the_lane_behind_and_matches_solo_runs(engine):
    prompt = "def total(items):\n    result = 0\n    for item in items:\n"
    methods = ["vanilla", "ouroboros", "speculative"]
    seen = []
    lanes = None
    for lanes in race(engine, prompt, methods, 40):
        seen.append(
            {m: (lane.clock_s, lane.steps, lane.done is not None) for m, lane in lanes.items()}
        )
    # Each update advanced exactly one lane, and it was one with the smallest clock among running
    # lanes.
    for before, after in zip(seen, seen[1:]):
        moved = [m for m in methods if after[m][1] != before[m][1] or after[m][2] != before[m][2]]
        assert len(moved) == 1
        running = [m for m in methods if not before[m][2]]
        assert before[moved[0]][0] == min(before[m][0] for m in running)
    for method in methods:
        lane = lanes[method]
        solo = engine.generate(prompt, method, 40)
        assert list(lane.done.token_ids) == solo.token_ids
        assert [t.id for t in lane.committed] == solo.token_ids
        assert "".join(t.text for t in lane.committed) == solo.text
        clocks = [point[0] for point in lane.trace]
        assert clocks == sorted(clocks) and lane.trace[-1][1] == len(solo.token_ids)


def test_race_validates_before_the_first_update(engine):
    with pytest.raises(ConfigError, match="prompt is empty"):
        race(engine, " ", ["vanilla", "ouroboros"], 10).__next__()
    with pytest.raises(ConfigError, match="gamma"):
        next(race(engine, "x = 1", ["vanilla", "ouroboros"], 10, {"ouroboros": {"gamma": 0}}))


def test_race_stops_every_lane_within_one_step(engine):
    stop = threading.Event()
    updates = 0
    lanes = None
    for lanes in race(engine, "import os\n", ["vanilla", "ouroboros"], 200, stop=stop):
        updates += 1
        if updates == 3:
            stop.set()
    assert updates <= 3 + 2  # each lane notices the flag at its next step and finishes
    assert {lane.done.stop_reason for lane in lanes.values()} == {"cancelled"}
    assert all(lane.tokens < 200 for lane in lanes.values())
