"""Replay a finished race from its recorded events, with their true relative timings, slowed down at
will: a race that took 0.3 s on a GPU can be watched at a tenth of its speed."""

from __future__ import annotations

import time
from collections.abc import Iterator

from ouroboros_core.race import Lane

SPEEDS = {
    "1x": 1.0,
    "1/4": 0.25,
    "1/10": 0.1,
}  # each event at its recorded time divided by the speed
FIT_S = 10.0
CHOICES = [f"fit to {FIT_S:g} s", *SPEEDS]  # the page's choices; the first fits any race's length


def speed_for(choice: str, lanes: dict[str, Lane]) -> float:
    """The replay speed a choice means for these lanes: a fixed one, or the one that makes the whole
    race last FIT_S seconds (a 0.3 s GPU race slowed down, a 40 s CPU race sped up)."""
    if choice in SPEEDS:
        return SPEEDS[choice]
    if choice != CHOICES[0]:
        raise ValueError(f"Replay speed must be one of {', '.join(CHOICES)}, got {choice!r}.")
    length = max((moment for moment, _, _ in timeline(lanes)), default=0.0)
    return length / FIT_S if length > 0 else 1.0


def timeline(lanes: dict[str, Lane]) -> list[tuple[float, str, object]]:
    """Every lane's events on one clock, each at the moment its own lane's clock reached it; every
    lane ends with its done event at its final time."""
    moments = []
    for method, lane in lanes.items():
        moments += [(event.elapsed_s, method, event) for event in lane.events]
        if lane.done is not None:
            moments.append((lane.done.stats.seconds, method, lane.done))
    return sorted(moments, key=lambda moment: moment[0])


def replay(
    lanes: dict[str, Lane], speed: float, stop=None, frame_s: float = 0.06, sleep=time.sleep
) -> Iterator[dict[str, Lane]]:
    """Fresh lanes rebuilt event by event, yielded at most once per frame_s of wall time, each when
    the race's clock, slowed by `speed`, reaches its latest event. A set `stop` ends the replay at
    once."""
    shown = {method: Lane(method) for method in lanes}
    started = time.perf_counter()
    moments = timeline(lanes)
    i = 0
    while i < len(moments):
        due = moments[i][0] / speed
        wait = due - (time.perf_counter() - started)
        if wait > 0:
            if stop is not None and stop.wait(wait):
                return
            if stop is None:
                sleep(wait)
        # Apply everything due within this frame, then show it.
        horizon = (time.perf_counter() - started + frame_s) * speed
        while i < len(moments) and moments[i][0] <= horizon:
            _, method, event = moments[i]
            shown[method].apply(event)
            i += 1
        yield shown
        if stop is not None and stop.is_set():
            return
