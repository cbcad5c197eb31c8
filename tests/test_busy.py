"""Threads fitted to the machine as it is: the fastest count measured at start-up, one thread while
another job holds cores, the chosen count tried again later; and a real neighbour pinned to our
cores makes the fall."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch

from ouroboros_core.cpu import watched as cpu_watched
from ouroboros_core.cpu import (
    BUSY_SHARE,
    RETRY_S,
    SOUNDING_S,
    WINDOW_S,
    BusyWatch,
    fastest_threads,
    thread_candidates,
)

ROOT = Path(__file__).resolve().parent.parent


class Machine:
    """A fake clock and CPU-time counter: each step takes `step_s` of wall time and gets `share` of
    the CPU time its threads could use."""

    def __init__(self):
        self.now = self.used = 0.0
        self.threads = None

    def set_threads(self, count: int) -> None:
        self.threads = count

    def step(self, watch: BusyWatch, share: float, step_s: float = 0.1) -> None:
        watch.begin()
        self.now += step_s
        self.used += step_s * share * watch.threads
        watch.end()


def watched(chosen: int = 2, fixed: bool = False):
    machine = Machine()
    lines = []
    watch = BusyWatch(
        chosen,
        machine.set_threads,
        clock=lambda: machine.now,
        cpu=lambda: machine.used,
        log=lines.append,
        fixed=fixed,
    )
    return machine, watch, lines


def test_a_starved_window_falls_back_to_one_thread_and_tries_again_later():
    machine, watch, lines = watched()
    for _ in range(20):
        machine.step(watch, 0.9)  # quiet: torch's spinning threads use nearly all their time
    assert (watch.threads, watch.busy_windows, lines) == (2, 0, [])
    assert watch.busy_since(0) is None  # a race over those steps met a quiet machine
    steps = 0
    while watch.threads == 2:
        machine.step(watch, 0.55)
        steps += 1
    assert steps * 0.1 <= WINDOW_S + 0.1 + 1e-9  # within one window of steps
    assert machine.threads == 1 and watch.busy_windows == 1 and "busy" in lines[-1]
    assert watch.busy_since(0) == pytest.approx(0.55) and watch.busy_since(1) is None
    fell = machine.now
    while machine.now < fell + 20:
        machine.step(watch, 0.95)  # one thread runs well: no switch before RETRY_S
    assert watch.threads == 1
    while watch.threads == 1:
        machine.step(watch, 0.95)
    assert machine.threads == 2 and RETRY_S <= machine.now - fell < RETRY_S + 0.2
    for _ in range(20):
        machine.step(watch, 0.9)  # the neighbour has gone: the chosen count stays
    assert watch.threads == 2 and len(lines) == 2


def test_after_a_busy_spell_the_retry_returns_to_the_fitted_count_not_to_two():
    # On a larger machine the watch fitted 4 threads: a busy spell drops it to one, and the retry
    # goes back to all 4 (a retry to 2, or to the quota, would only show with 3 cores or more).
    machine, watch, lines = watched(chosen=6)
    watch.reset(4)  # `fit` measured 4 of up to 6 fastest
    while watch.threads == 4:
        machine.step(watch, 0.4)
    assert (
        machine.threads == 1
        and lines[-1] == "torch threads: 4 -> 1 (busy: its 4 threads got 40% of their CPU time)"
    )
    fell = machine.now
    while watch.threads == 1:
        machine.step(watch, 0.95)
    assert machine.threads == 4 and RETRY_S <= machine.now - fell < RETRY_S + 0.2
    assert lines[-1] == f"torch threads: 1 -> 4 (trying 4 again after {RETRY_S:.0f} s)"


def test_a_count_the_host_fixed_is_kept_but_busy_windows_are_counted():
    machine, watch, lines = watched(fixed=True)
    for _ in range(30):
        machine.step(watch, 0.4)
    assert (
        watch.threads == 2 and machine.threads is None and watch.busy_windows >= 5 and lines == []
    )
    assert "OUROBOROS_THREADS" in watch.fit(lambda: None)


def test_one_slow_step_is_not_a_busy_machine():
    machine, watch, _ = watched()
    for share in [0.9] * 12 + [0.3] + [0.9] * 12:
        machine.step(watch, share)
    assert watch.threads == 2 and watch.busy_windows == 0 and watch.last_share > BUSY_SHARE


@pytest.mark.parametrize("share, threads", [(0.98, 2), (0.5, 1)])
def test_a_sounding_before_the_load_is_judged_at_once(share, threads):
    machine, watch, lines = watched()

    def product():  # 0.2 ms of wall time at `share` of the threads' CPU time
        machine.now += 0.0002
        machine.used += 0.0002 * share * watch.threads

    watch.sound(product, seconds=SOUNDING_S)
    assert SOUNDING_S <= machine.now < SOUNDING_S + 0.001 < WINDOW_S
    assert watch.threads == threads and watch.busy_windows == 2 - threads
    assert (machine.threads, len(lines)) == ((1, 1) if threads == 1 else (None, 0))
    fixed_machine, fixed, _ = watched(fixed=True)
    fixed.sound(product)
    assert fixed_machine.now == 0 and fixed.busy_windows == 0  # a fixed count is not sounded


@pytest.mark.parametrize(
    "times, expected",
    [
        ({1: 1.0, 2: 0.7}, 2),
        ({1: 1.0, 2: 0.97}, 1),  # within 5%: fewer threads
        ({1: 1.0, 2: 1.3}, 1),
        ({1: 1.0, 2: 0.8, 3: 0.78, 4: 0.6}, 4),
    ],
)
def test_the_fastest_count_is_kept_and_ties_go_to_fewer_threads(times, expected):
    machine = Machine()

    def run():
        machine.now += times[machine.threads]

    best, medians = fastest_threads(run, max(times), machine.set_threads, clock=lambda: machine.now)
    assert best == expected == machine.threads
    assert medians == pytest.approx(times)


def test_a_count_twice_as_slow_is_timed_once():
    machine, runs = Machine(), []

    def run():
        runs.append(machine.threads)
        machine.now += {1: 1.0, 2: 3.0}[machine.threads]

    assert fastest_threads(run, 2, machine.set_threads, clock=lambda: machine.now, rounds=3)[0] == 1
    assert runs == [1, 2, 1, 1]


def test_fit_logs_the_measured_times_and_keeps_the_choice():
    machine, watch, _ = watched(chosen=2)
    line = watch.fit(
        lambda: setattr(machine, "now", machine.now + (0.5 if machine.threads == 1 else 0.3))
    )
    assert watch.chosen == watch.threads == machine.threads == 2
    assert line == "torch threads: 2 of up to 2, the fastest on a short race (1: 0.50 s, 2: 0.30 s)"


def test_candidates_cover_small_machines_and_double_on_large_ones():
    assert thread_candidates(1) == [1]
    assert thread_candidates(2) == [1, 2]
    assert thread_candidates(16) == [1, 2, 3, 4, 8, 16]
    assert thread_candidates(12) == [1, 2, 3, 4, 8, 12]


NEIGHBOUR = textwrap.dedent("""
    import os, sys, time
    os.sched_setaffinity(0, {int(sys.argv[1])})
    while True:
        pass
""")
RACER = textwrap.dedent("""
    import os, sys, time
    cores = [int(c) for c in sys.argv[1].split(",")]
    os.sched_setaffinity(0, set(cores))
    import torch
    torch.set_num_threads(2)
    from ouroboros_core import load_engine
    from ouroboros_core.cpu import BusyWatch
    from ouroboros_core.race import race
    engine = load_engine("demo", device="cpu", watch_threads=False)
    watch = BusyWatch(2, torch.set_num_threads)
    started = time.perf_counter()
    while time.perf_counter() - started < 20 and watch.threads == 2:
        for _ in race(engine, "def parse(text):\\n", ["vanilla", "ouroboros"], 48, watch=watch):
            if watch.threads == 1:
                break
    print(watch.threads, watch.busy_windows, repr(watch.last_share or 0.0))
""")


TWO_CORES = pytest.mark.skipif(
    not hasattr(os, "sched_setaffinity") or len(os.sched_getaffinity(0)) < 2,
    reason="needs two cores to pin a neighbour onto",
)


def beside_a_neighbour(command: list[str], **kwargs) -> subprocess.CompletedProcess:
    """Run `command` on our first two cores while a busy loop holds the second of them."""
    cores = sorted(os.sched_getaffinity(0))[:2]
    neighbour = subprocess.Popen([sys.executable, "-c", NEIGHBOUR, str(cores[1])])
    try:
        return subprocess.run(
            command,
            cwd=ROOT,
            capture_output=True,
            text=True,
            preexec_fn=lambda: os.sched_setaffinity(0, set(cores)),
            **kwargs,
        )
    finally:
        neighbour.kill()


@TWO_CORES
def test_a_neighbour_on_our_cores_makes_a_real_race_fall_back_to_one_thread():
    cores = sorted(os.sched_getaffinity(0))[:2]
    out = beside_a_neighbour(
        [sys.executable, "-c", RACER, ",".join(map(str, cores))],
        timeout=180,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    assert out.returncode == 0, out.stderr[-2000:]
    threads, busy, share = out.stdout.split()
    assert threads == "1" and int(busy) >= 1 and float(share) < BUSY_SHARE


def test_watched_steps_are_timed_one_by_one_and_the_fall_is_said():
    machine, watch, lines = watched()
    ticks = []

    def steps():
        for _ in range(8):
            machine.now += 0.1  # each step: 0.1 s of wall time at a third of the CPU
            machine.used += 0.1 * watch.threads / 3
            ticks.append(watch.threads)
            yield "step"

    assert list(cpu_watched(steps(), watch)) == ["step"] * 8
    assert ticks[0] == 2 and ticks[-1] == 1 and watch.busy_windows >= 1
    assert lines and "busy" in lines[0]


@TWO_CORES
def test_the_cli_beside_a_neighbour_on_our_cores_falls_back_to_one_thread():
    out = beside_a_neighbour(
        [sys.executable, "-m", "ouroboros_core", "generate", "--target", "demo"]
        + ["--max-new-tokens", "400", "--no-colour", "def parse(text):\n"],
        timeout=300,
        env={**os.environ, "PYTHONPATH": str(ROOT), "OUROBOROS_THREADS": ""},
    )
    assert out.returncode == 0, out.stderr[-2000:]
    assert "torch threads: 2 (CPU affinity" in out.stderr, out.stderr[-2000:]
    assert "torch threads: 2 -> 1 (busy" in out.stderr, out.stderr[-2000:]


PYTHON_USER = textwrap.dedent("""
    import torch
    from ouroboros_core import load_engine
    engine = load_engine("demo", device="cpu")
    result = engine.generate("def parse(text):\\n", "ouroboros", 400)
    print(torch.get_num_threads(), engine.watch.busy_windows, result.stats.new_tokens)
""")


@TWO_CORES
def test_an_engine_loaded_from_python_beside_a_neighbour_falls_back_to_one_thread():
    out = beside_a_neighbour(
        [sys.executable, "-c", PYTHON_USER],
        timeout=300,
        env={**os.environ, "PYTHONPATH": str(ROOT), "OUROBOROS_THREADS": ""},
    )
    assert out.returncode == 0, out.stderr[-2000:]
    threads, busy, tokens = out.stdout.split()
    assert threads == "1" and int(busy) >= 1 and int(tokens) > 0
    assert "torch threads: 2 -> 1 (busy" in out.stderr, out.stderr[-2000:]


def test_an_engine_watches_its_threads_unless_told_not_to(monkeypatch):
    from ouroboros_core import load_engine
    from ouroboros_core.race import race

    monkeypatch.setenv("OUROBOROS_THREADS", "1")
    before = torch.get_num_threads()
    try:
        engine = load_engine("demo", device="cpu")
    finally:
        torch.set_num_threads(before)  # the engine set them; the other tests keep theirs
    assert engine.watch.fixed and engine.watch.chosen == 1  # a count the host set is kept
    with pytest.raises(ValueError, match="watches its threads itself"):
        next(race(engine, "def f():\n", ["vanilla"], 4, watch=engine.watch))
    assert load_engine("demo", device="cpu", watch_threads=False).watch is None
