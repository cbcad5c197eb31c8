"""What one step of each method costs on this server, measured apart from the race being shown: at
warm-up, then a rolling median over the races the server finished before it. A race's expected
speedup is its own tokens per target forward times these costs, so it predicts instead of restating
the race's own step times, and where the measured figure differs the summary can say which step cost
more than usual."""

from __future__ import annotations

import statistics
import threading
from collections import deque
from dataclasses import dataclass

from ouroboros_core.race import Lane


def first_step_ms(lane: Lane) -> float:
    """A lane's first step in milliseconds: the prompt's prefill (the target's, and the draft's for
    a drafting lane) with one step's work."""
    return lane.events[0].draft_ms + lane.events[0].verify_ms if lane.events else 0.0


def step_ms(lane: Lane) -> float | None:
    """A finished lane's mean milliseconds per step after its first (drafting and the target's
    verify forward; the first carries the prompt's prefill, which grows with the prompt, not with
    the steps), or None. A lane of one step has only that one."""
    stats = lane.stats
    if stats is None or not stats.target_forwards or lane.done.stop_reason == "cancelled":
        return None
    total = 1000 * (stats.draft_seconds + stats.verify_seconds)
    if stats.target_forwards == 1 or len(lane.events) != stats.target_forwards:
        return total / stats.target_forwards
    return (total - first_step_ms(lane)) / (stats.target_forwards - 1)


@dataclass(frozen=True)
class StepCosts:
    """Median milliseconds per step, by method, over `races` earlier races (the warm-up counts as
    one)."""

    step_ms: dict[str, float]
    races: int

    def ratio(self, method: str) -> float | None:
        """One step of `method` against one vanilla step, or None where either was never
        measured."""
        if method not in self.step_ms or not self.step_ms.get("vanilla"):
            return None
        return self.step_ms[method] / self.step_ms["vanilla"]


class Calibration:
    """The last `window` finished races' step costs, per method; thread-safe (races end on many
    threads)."""

    def __init__(self, window: int = 9):
        self._seen: dict[str, deque[float]] = {}
        self._races = 0
        self._window = window
        self._lock = threading.Lock()

    def add(self, lanes: dict[str, Lane], busy: bool = False) -> None:
        """Count a finished race's steps (a stopped one, one that never reached a vanilla step, or
        one that met a busy machine, whose steps took what the other job left them, is skipped)."""
        costs = {method: step_ms(lane) for method, lane in lanes.items()}
        if costs.get("vanilla") is None or busy:
            return
        with self._lock:
            self._races += 1
            for method, ms in costs.items():
                if ms is not None:
                    self._seen.setdefault(method, deque(maxlen=self._window)).append(ms)

    def costs(self) -> StepCosts | None:
        """The medians so far, or None before anything was measured."""
        with self._lock:
            if not self._seen:
                return None
            return StepCosts(
                {method: statistics.median(seen) for method, seen in self._seen.items()},
                self._races,
            )

    def take(self, lanes: dict[str, Lane], busy: bool = False) -> StepCosts | None:
        """The costs measured before this race, then this race counted for the next ones (unless
        `busy`)."""
        before = self.costs()
        self.add(lanes, busy)
        return before
