"""How much slower than its own CPU time this machine runs work right now, so that the end-to-end
tests' waits scale with the load instead of being fixed seconds: the wall time of a small
single-threaded torch workload over the CPU time it used. On an idle machine that is 1; with other
jobs on the cores it grows as they take turns (measured here: 789 ms against 31 ms for one forward
on a busy 2-core machine)."""

from __future__ import annotations

import time

import torch

MAX_SLOWDOWN = 8.0  # past this a wait would outlast CI's own limit: better to fail and say so


def slowdown(seconds: float = 0.3) -> float:
    """Wall time over CPU time of `seconds` of CPU work on this thread (long enough to span many of
    the scheduler's time slices); at least 1, at most MAX_SLOWDOWN."""
    a = torch.randn(192, 192)
    wall_start, cpu_start = time.perf_counter(), time.thread_time()
    while time.thread_time() - cpu_start < seconds:
        a = torch.tanh(a @ a.T / 192)
    wall, cpu = time.perf_counter() - wall_start, time.thread_time() - cpu_start
    return min(MAX_SLOWDOWN, max(1.0, wall / cpu))


def scaled(seconds: float) -> float:
    """A wait of `seconds` on an idle machine, stretched by the load measured now."""
    return seconds * slowdown()
