"""The step inspector and the replay as pure functions of recorded lanes: a hand-made tree, then
every step of a real Ouroboros race on the embedded pair; replays rebuilt from events at their true
relative timings."""

from __future__ import annotations

import re
import threading
import time
import types
from dataclasses import replace

import pytest

import ui.replay as replay_module
from ouroboros_core import load_engine
from ouroboros_core.events import DoneEvent, Source, Stats, StepEvent, Token
from ouroboros_core.race import Lane, race
from ui.inspect import best_step, step_html
from ui.replay import CHOICES, FIT_S, SPEEDS, replay, speed_for, timeline


def tok(i, text, source):
    return Token(i, text, source)


def hand_made_lane() -> Lane:
    """One step: trunk a b c (draft, draft, pool); the target keeps a, then walks the prompt-lookup
    branch hanging after a (x kept, y rejected) and adds its own z; a pool branch after the whole
    trunk is unwalked."""
    a, b, c = tok(1, "a", Source.DRAFT), tok(2, "b", Source.DRAFT), tok(3, "c", Source.POOL)
    x, y = tok(4, "x", Source.PROMPT), tok(5, "y", Source.PROMPT)
    q = tok(6, "q", Source.POOL)
    step = StepEvent(
        index=0,
        drafted=(a, x, y),
        branches=((x, y), (q,)),
        accepted=(a, x),
        rejected=(y,),
        target_token=tok(7, "z", Source.TARGET),
        draft_ms=1.5,
        verify_ms=20.25,
        elapsed_s=0.03,
        trunk=(a, b, c),
        attach=(1, 3),
        trunk_accepted=1,
        branch=0,
    )
    lane = Lane("ouroboros")
    lane.apply(step)
    return lane


def chips(html: str, state: str) -> list[str]:
    return re.findall(rf'<span class="chip tok-\w+ {state}"[^>]*>([^<]*)</span>', html)


def test_the_inspector_draws_the_tree_the_walk_and_the_timings():
    html = step_html(hand_made_lane(), 1)
    assert "Step 1 of 1" in html and "drafted in 1.5 ms" in html and "verified in 20.2 ms" in html
    assert "one target forward over 7 tokens" in html and "3 tokens landed" in html
    rows = re.findall(
        r"<tr class=\"([^\"]+)\"><th>([^<]+)</th><td>([^<]+)</td><td>([^<]+)</td>", html
    )
    assert rows == [
        ("trunk", "trunk", "draft model + pool phrase", "the text so far"),
        ("branch walked", "branch 1 (walked)", "lookup", "trunk token 1"),
        ("branch", "branch 2", "pool phrase", "the whole trunk"),
    ]
    assert chips(html, "kept") == ["a", "x", "a", "x"]  # trunk head; branch head; the walked path
    # the trunk after its mismatch; the branch's tail
    assert chips(html, "rejected") == ["b", "c", "y", "y"]
    assert chips(html, "unwalked") == ["q"] and chips(html, "own") == ["z"]


def test_a_last_step_without_a_token_of_the_targets_says_what_ended_the_answer():
    # The trunk's end-of-turn token stood: the answer ended there, before the target's own token.
    end = tok(2, "<|im_end|>", Source.DRAFT)
    for reason, words in (
        ("eos", "none: the end-of-turn token it kept ended the answer"),
        ("max_new_tokens", "none: the answer reached its token limit"),
    ):
        lane = hand_made_lane()
        step = lane.events[0]
        last = replace(
            step,
            index=1,
            drafted=(end,),
            branches=(),
            accepted=(end,),
            rejected=(),
            target_token=None,
            trunk=(end,),
            attach=(),
            trunk_accepted=1,
            branch=None,
        )
        lane.apply(last)
        stats = Stats(4, 2, 4, 3, 0.05, 0.003, 0.04)
        lane.apply(DoneEvent((1, 4, 7, 2), "axz<|im_end|>", stats, reason))
        html = step_html(lane, 2)
        assert f"<i>{words}</i>" in html and chips(html, "kept")[-1] == "&lt;|im_end|&gt;"
        assert "a limit ended the step" not in html and chips(step_html(lane, 1), "own") == ["z"]


def test_a_branch_on_an_empty_trunk_follows_the_text_so_far():
    """With nothing drafted (lookup alone proposed), the branch hangs after the text, not after a
    trunk."""
    x = tok(4, "x", Source.PROMPT)
    step = StepEvent(
        index=0,
        drafted=(x,),
        branches=((x,),),
        accepted=(x,),
        rejected=(),
        target_token=tok(7, "z", Source.TARGET),
        draft_ms=0.1,
        verify_ms=9.0,
        elapsed_s=0.01,
        trunk=(),
        attach=(0,),
        trunk_accepted=0,
        branch=0,
    )
    lane = Lane("ouroboros")
    lane.apply(step)
    html = step_html(lane, 1)
    rows = re.findall(
        r"<tr class=\"([^\"]+)\"><th>([^<]+)</th><td>([^<]+)</td><td>([^<]+)</td>", html
    )
    assert rows == [
        ("trunk", "trunk", "-", "the text so far"),
        ("branch walked", "branch 1 (walked)", "lookup", "the text so far"),
    ]
    assert "whole trunk" not in html and "nothing drafted" in html


@pytest.fixture(scope="module")
def raced():
    engine = load_engine("demo", device="cpu")
    prompt = (
        "class Point:\n    def __init__(self, x, y):\n        self.x = x\n        self.y = y\n\n"
        "    def __repr__(self):\n"
    )
    lanes = None
    for lanes in race(engine, prompt, ["vanilla", "ouroboros"], 64):
        pass
    return lanes


def test_every_step_of_a_real_race_shows_what_landed(raced):
    lane = raced["ouroboros"]
    assert any(event.branches for event in lane.events), (
        "the race verified no branch: nothing to inspect"
    )
    for number, event in enumerate(lane.events, 1):
        html = step_html(lane, number)
        walked = html.split('<span class="what">The target walked:</span>')[1].split("</div>")[0]
        assert walked.count('class="chip') == len(event.committed)
        assert html.count('<tr class="branch') == len(event.branches)
    best = best_step(lane)
    assert len(lane.events[best - 1].committed) == max(
        len(event.committed) for event in lane.events
    )
    # out of range: the nearest step
    assert step_html(lane, 10_000) == step_html(lane, len(lane.events))
    assert "Run a race" in step_html(Lane("ouroboros"), 1)


class FakeClock:
    """Wall time that moves only when the replay waits or the viewer draws a frame, so the test
    measures the replay's pace and not the machine's. It stands in for time.perf_counter, for sleep
    and for the stop Event."""

    def __init__(self):
        self.now = 1000.0

    def perf_counter(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        assert seconds > 0, f"the replay asked to wait {seconds} s"
        self.now += seconds

    def wait(self, seconds: float) -> bool:  # stop.wait: never set, so it returns after the timeout
        self.sleep(seconds)
        return False

    def is_set(self) -> bool:
        return False


FRAME_S = 0.06
DRAW_S = 0.01  # what the viewer spends rendering each frame, on the same clock
# each event shows within one frame of its recorded time / speed, early or late
TOLERANCE_S = FRAME_S


def watch(lanes, speed, path, monkeypatch):
    """Replay `lanes` on a fake clock: [(seconds since the replay began, method, event)] for each
    event the moment it first shows, the frame times, and the time the replay ended."""
    clock = FakeClock()
    monkeypatch.setattr(
        replay_module,
        "time",
        types.SimpleNamespace(perf_counter=clock.perf_counter, sleep=clock.sleep),
    )
    frames = (
        replay(lanes, speed, clock, frame_s=FRAME_S)
        if path == "stop"
        else replay(lanes, speed, None, frame_s=FRAME_S, sleep=clock.sleep)
    )
    began, shown, frame_times, last = clock.now, [], [], None
    for frame in frames:
        at = clock.now - began
        frame_times.append(at)
        for method, lane in frame.items():
            counts = (len(lane.events), lane.done is not None)
            before = (0, False) if last is None else last[method]
            shown += [(at, method, event) for event in lane.events[before[0] : counts[0]]]
            if counts[1] and not before[1]:
                shown.append((at, method, lane.done))
        last = {method: (len(lane.events), lane.done is not None) for method, lane in frame.items()}
        clock.sleep(DRAW_S)
    return shown, frame_times, clock.now - began


def recorded_time(event) -> float:
    return event.stats.seconds if isinstance(event, DoneEvent) else event.elapsed_s


def timed_lanes() -> dict[str, Lane]:
    """Two lanes with known timings spread over 0.6 s, far wider than a frame: a pace off by any
    sizeable factor moves the late events by many frames."""
    lanes = {}
    for method, times in {
        "vanilla": [0.05 * k for k in range(1, 13)],
        "ouroboros": [0.07, 0.19, 0.33, 0.4],
    }.items():
        lane = Lane(method)
        for index, elapsed in enumerate(times):
            token = tok(index, f"t{index}", Source.TARGET)
            lane.apply(
                StepEvent(
                    index=index,
                    drafted=(),
                    branches=(),
                    accepted=(),
                    rejected=(),
                    target_token=token,
                    draft_ms=0.0,
                    verify_ms=1.0,
                    elapsed_s=elapsed,
                )
            )
        stats = Stats(
            new_tokens=len(times),
            target_forwards=len(times),
            drafted_tokens=0,
            accepted_tokens=0,
            seconds=times[-1] + 0.01,
            draft_seconds=0.0,
            verify_seconds=times[-1],
        )
        lane.apply(DoneEvent(tuple(range(len(times))), "", stats, "max_new_tokens"))
        lanes[method] = lane
    return lanes


# replay waits on `sleep`, or on the app's stop Event
@pytest.mark.parametrize("path", ["sleep", "stop"])
@pytest.mark.parametrize("speed", list(SPEEDS.values()), ids=list(SPEEDS))
def test_replay_keeps_the_recorded_pace_at_every_speed(speed, path, monkeypatch):
    lanes = timed_lanes()
    shown, frame_times, ended = watch(lanes, speed, path, monkeypatch)
    expected = sorted(
        (recorded_time(e), m) for m, lane in lanes.items() for e in lane.events + [lane.done]
    )
    # every event shown exactly once
    assert sorted((recorded_time(e), m) for _, m, e in shown) == expected
    for at, method, event in shown:
        due = recorded_time(event) / speed
        # Both ways: not before its time (beyond the frame that gathers it), and not after it.
        assert abs(at - due) <= TOLERANCE_S + 1e-9, (
            f"{method} event recorded at {recorded_time(event):.3f} s shown at {at:.3f} s "
            f"of replay at speed {speed}: due at {due:.3f} s, "
            f"{at / due if due else float('inf'):.2f}x its time"
        )
    length = max(lane.done.stats.seconds for lane in lanes.values()) / speed
    assert length - TOLERANCE_S <= ended <= length + TOLERANCE_S + DRAW_S
    gaps = [b - a for a, b in zip(frame_times, frame_times[1:])]
    assert min(gaps) >= FRAME_S - 1e-9, "frames came faster than one per frame_s"


def test_replay_rebuilds_the_race_at_its_true_relative_timings(raced, monkeypatch):
    moments = timeline(raced)
    assert [m[0] for m in moments] == sorted(m[0] for m in moments)
    assert sum(isinstance(m[2], DoneEvent) for m in moments) == 2
    seen = []
    clock = FakeClock()
    monkeypatch.setattr(
        replay_module, "time", types.SimpleNamespace(perf_counter=clock.perf_counter)
    )
    for frame in replay(raced, 0.5, clock, frame_s=FRAME_S):
        seen.append({method: lane.tokens for method, lane in frame.items()})
    assert len(seen) > 3 and seen == sorted(seen, key=lambda tokens: sum(tokens.values()))
    for method, lane in frame.items():
        assert [t.id for t in lane.committed] == list(raced[method].done.token_ids)
        assert lane.done == raced[method].done
    # the real race's timings keep their pace too
    shown, _, _ = watch(raced, 0.5, "stop", monkeypatch)
    for at, _, event in shown:
        assert abs(at - recorded_time(event) / 0.5) <= TOLERANCE_S + 1e-9


def test_stop_ends_a_replay_at_once(raced):
    stop = threading.Event()
    frames = replay(raced, 0.01, stop, frame_s=0.02)  # a hundredth of the speed: seconds of replay
    next(frames)
    stop.set()
    started = time.perf_counter()
    assert list(frames) == []
    assert time.perf_counter() - started < 0.5


def test_stats_survive_the_round_trip():
    lane = hand_made_lane()
    stats = Stats(
        new_tokens=3,
        target_forwards=1,
        drafted_tokens=3,
        accepted_tokens=2,
        seconds=0.03,
        draft_seconds=0.0015,
        verify_seconds=0.02,
        rejected_steps=1,
    )
    lane.apply(DoneEvent((1, 4, 7), "axz", stats, "max_new_tokens"))
    again = next(f for f in replay({"ouroboros": lane}, 100.0, None) if f["ouroboros"].done)
    assert again["ouroboros"].done.stats == stats and again["ouroboros"].tokens == 3


def test_fit_to_ten_seconds_plays_any_race_in_ten_seconds(monkeypatch):
    """The page's first replay choice: whatever the race's length, the replay lasts FIT_S seconds at
    its true relative timings (the other choices keep their fixed speeds)."""
    lanes = timed_lanes()
    length = max(lane.done.stats.seconds for lane in lanes.values())
    speed = speed_for(CHOICES[0], lanes)
    assert speed == pytest.approx(length / FIT_S)
    _, _, ended = watch(lanes, speed, "stop", monkeypatch)
    assert FIT_S - TOLERANCE_S <= ended <= FIT_S + TOLERANCE_S + DRAW_S
    assert [speed_for(choice, lanes) for choice in SPEEDS] == list(SPEEDS.values())
    with pytest.raises(
        ValueError, match="Replay speed must be one of fit to 10 s, 1x, 1/4, 1/10, got '2x'"
    ):
        speed_for("2x", lanes)
