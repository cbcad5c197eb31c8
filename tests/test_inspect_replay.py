"""The step inspector and the replay as pure functions of recorded lanes: a hand-made tree, then every step of
a real Ouroboros race on the embedded pair; replays rebuilt from events at their true relative timings."""

from __future__ import annotations

import re
import threading
import time

import pytest

from ouroboros_core import load_engine
from ouroboros_core.events import DoneEvent, Source, Stats, StepEvent, Token
from ouroboros_core.race import Lane, race
from ui.inspect import best_step, step_html
from ui.replay import replay, timeline


def tok(i, text, source):
    return Token(i, text, source)


def hand_made_lane() -> Lane:
    """One step: trunk a b c (draft, draft, pool); the target keeps a, then walks the prompt-lookup branch
    hanging after a (x kept, y rejected) and adds its own z; a pool branch after the whole trunk is unwalked."""
    a, b, c = tok(1, "a", Source.DRAFT), tok(2, "b", Source.DRAFT), tok(3, "c", Source.POOL)
    x, y = tok(4, "x", Source.PROMPT), tok(5, "y", Source.PROMPT)
    q = tok(6, "q", Source.POOL)
    step = StepEvent(index=0, drafted=(a, x, y), branches=((x, y), (q,)), accepted=(a, x), rejected=(y,),
                     target_token=tok(7, "z", Source.TARGET), draft_ms=1.5, verify_ms=20.25, elapsed_s=0.03,
                     trunk=(a, b, c), attach=(1, 3), trunk_accepted=1, branch=0)
    lane = Lane("ouroboros")
    lane.apply(step)
    return lane


def chips(html: str, state: str) -> list[str]:
    return re.findall(rf'<span class="chip tok-\w+ {state}"[^>]*>([^<]*)</span>', html)


def test_the_inspector_draws_the_tree_the_walk_and_the_timings():
    html = step_html(hand_made_lane(), 1)
    assert "Step 1 of 1" in html and "drafted in 1.5 ms" in html and "verified in 20.2 ms" in html
    assert "one target forward over 7 tokens" in html and "3 tokens landed" in html
    rows = re.findall(r"<tr class=\"([^\"]+)\"><th>([^<]+)</th><td>([^<]+)</td><td>([^<]+)</td>", html)
    assert rows == [("trunk", "trunk", "draft model + pool phrase", "the text so far"),
                    ("branch walked", "branch 1 (walked)", "prompt lookup", "trunk token 1"),
                    ("branch", "branch 2", "pool phrase", "the whole trunk")]
    assert chips(html, "kept") == ["a", "x", "a", "x"]  # trunk head; branch head; the walked path
    assert chips(html, "rejected") == ["b", "c", "y", "y"]  # the trunk after its mismatch; the branch's tail
    assert chips(html, "unwalked") == ["q"] and chips(html, "own") == ["z"]


@pytest.fixture(scope="module")
def raced():
    engine = load_engine(device="cpu")
    prompt = "class Point:\n    def __init__(self, x, y):\n        self.x = x\n        self.y = y\n\n    def __repr__(self):\n"
    lanes = None
    for lanes in race(engine, prompt, ["vanilla", "ouroboros"], 64):
        pass
    return lanes


def test_every_step_of_a_real_race_shows_what_landed(raced):
    lane = raced["ouroboros"]
    assert any(event.branches for event in lane.events), "the race verified no branch: nothing to inspect"
    for number, event in enumerate(lane.events, 1):
        html = step_html(lane, number)
        walked = html.split('<span class="what">The target walked:</span>')[1].split("</div>")[0]
        assert walked.count('class="chip') == len(event.committed)
        assert html.count("<tr class=\"branch") == len(event.branches)
    best = best_step(lane)
    assert len(lane.events[best - 1].committed) == max(len(event.committed) for event in lane.events)
    assert step_html(lane, 10_000) == step_html(lane, len(lane.events))  # out of range: the nearest step
    assert "Run a race" in step_html(Lane("ouroboros"), 1)


def test_replay_rebuilds_the_race_at_its_true_relative_timings(raced):
    moments = timeline(raced)
    assert [m[0] for m in moments] == sorted(m[0] for m in moments)
    assert sum(isinstance(m[2], DoneEvent) for m in moments) == 2
    length = max(lane.done.stats.seconds for lane in raced.values())
    speed = 0.5
    started = time.perf_counter()
    seen = []
    for frame in replay(raced, speed, threading.Event(), frame_s=0.02):
        now = time.perf_counter() - started
        # Nothing is shown before its time: each lane's clock, slowed by `speed`, has reached it.
        for lane in frame.values():
            if lane.events:
                assert lane.events[-1].elapsed_s / speed <= now + 0.02 + 1e-3
        seen.append({method: lane.tokens for method, lane in frame.items()})
    assert time.perf_counter() - started >= length / speed - 0.02
    assert len(seen) > 3 and seen == sorted(seen, key=lambda tokens: sum(tokens.values()))
    for method, lane in frame.items():
        assert [t.id for t in lane.committed] == list(raced[method].done.token_ids)
        assert lane.done == raced[method].done


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
    stats = Stats(new_tokens=3, target_forwards=1, drafted_tokens=3, accepted_tokens=2, seconds=0.03,
                  draft_seconds=0.0015, verify_seconds=0.02, rejected_steps=1)
    lane.apply(DoneEvent((1, 4, 7), "axz", stats, "max_new_tokens"))
    again = next(f for f in replay({"ouroboros": lane}, 100.0, None) if f["ouroboros"].done)
    assert again["ouroboros"].done.stats == stats and again["ouroboros"].tokens == 3
