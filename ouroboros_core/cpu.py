"""How many CPU threads torch should run: the cores this container may use, not the cores its host
has.

A Hugging Face Space, a Kubernetes pod or a `docker --cpus` container limits CPU with a cgroup
quota, while `os.cpu_count()` and torch's default thread count see every core of the host. torch
then runs more threads than the quota serves and they stall each other at every barrier (measured on
a busy 2-core machine: a one-token forward took 789 ms with 2 threads, 31 ms with 1).

Pure Python at import; torch is imported only inside the functions that use it.
"""

from __future__ import annotations

import os
import statistics
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

from .config import ConfigError

ENV_VAR = "OUROBOROS_THREADS"
MAX_THREADS = 1024  # far above any CPU a Space rents; a typo like 10000 fails loudly instead
CGROUP_ROOT = "/sys/fs/cgroup"
SELF_CGROUP = "/proc/self/cgroup"
# cgroup v1 mounts the cpu controller under either name, depending on the distribution.
V1_CPU_DIRS = ("cpu", "cpu,cpuacct")


@dataclass(frozen=True)
class ThreadChoice:
    count: int  # threads torch should run, at least 1
    source: str  # where the count came from, in words, for the one start-up log line

    def __str__(self) -> str:
        return f"{self.count} ({self.source})"


@dataclass(frozen=True)
class Quota:
    quota_us: int  # CPU time the cgroup may use per period, summed over its cores
    period_us: int
    source: str  # which file said so

    @property
    def cores(self) -> int:
        # A fractional quota cannot run a fraction of a thread: round down, but one thread always
        # runs.
        return max(1, self.quota_us // self.period_us)


def parse_override(text: str | None) -> int | None:
    """OUROBOROS_THREADS as a thread count; None when unset or blank (so `OUROBOROS_THREADS=` clears
    it).

    Anything else that is not a whole number from 1 to MAX_THREADS is the user's mistake, said at
    start-up (ConfigError, a ValueError) rather than silently replaced by a guess."""
    if text is None or not text.strip():
        return None
    cleaned = text.strip()
    if not (cleaned.isascii() and cleaned.isdecimal()) or not 1 <= int(cleaned) <= MAX_THREADS:
        raise ConfigError(
            f"{ENV_VAR} must be a whole number of threads from 1 to {MAX_THREADS} "
            f"(or unset, to follow the container's CPU quota); got {text!r}"
        )
    return int(cleaned)


def read_text(path: Path) -> str | None:
    """A small kernel file's text, or None when it is missing or unreadable: no cgroup file may stop
    start-up."""
    try:
        return path.read_text(encoding="ascii")
    except (OSError, UnicodeDecodeError):
        return None


def parse_whole(text: str) -> int | None:
    text = text.strip()
    sign, digits = (-1, text[1:]) if text.startswith("-") else (1, text)
    return sign * int(digits) if digits.isdecimal() else None


def parse_cpu_max(text: str | None) -> tuple[int, int] | None:
    """cgroup v2 `cpu.max` ("150000 100000") as (quota, period); None when unlimited ("max ...") or
    malformed."""
    fields = (text or "").split()
    if len(fields) != 2 or fields[0] == "max":
        return None
    quota, period = parse_whole(fields[0]), parse_whole(fields[1])
    if quota is None or period is None or quota <= 0 or period <= 0:
        return None
    return quota, period


def parse_cfs(quota_text: str | None, period_text: str | None) -> tuple[int, int] | None:
    """cgroup v1 `cpu.cfs_quota_us` and `cpu.cfs_period_us` as (quota, period); None when the quota
    is -1 (unlimited), a file is missing or either is malformed."""
    if quota_text is None or period_text is None:
        return None
    quota, period = parse_whole(quota_text), parse_whole(period_text)
    if quota is None or period is None or quota <= 0 or period <= 0:
        return None
    return quota, period


def v2_cgroup_dirs(root: Path, self_cgroup_text: str | None) -> list[Path]:
    """The process's cgroup v2 directory and each parent up to `root`, innermost first.

    A quota set on any ancestor (a pod's, a systemd slice's) binds the process too. Without a cgroup
    namespace /proc/self/cgroup names a nested path ("0::/kubepods/pod1/c1"); inside one it says
    "0::/". A nested directory missing under `root` is skipped when its file is read; a path that
    climbs out of the namespace ("0::/../x") is not followed at all."""
    parts: list[str] = []
    for line in (self_cgroup_text or "").splitlines():
        if line.startswith("0::"):
            parts = [part for part in line[3:].strip().split("/") if part]
    if ".." in parts:
        parts = []
    return [root.joinpath(*parts[:depth]) for depth in range(len(parts), 0, -1)] + [root]


def cgroup_quota(root: Path, self_cgroup_text: str | None) -> Quota | None:
    """The tightest CPU quota cgroup v2 sets on this process, else the v1 cfs quota at `root`; None
    if unlimited."""
    found = []
    for directory in v2_cgroup_dirs(root, self_cgroup_text):
        parsed = parse_cpu_max(read_text(directory / "cpu.max"))
        if parsed:
            where = "" if directory == root else f" at /{directory.relative_to(root).as_posix()}"
            found.append(Quota(*parsed, f"cgroup v2 cpu.max quota {parsed[0]}/{parsed[1]}{where}"))
    if found:
        return min(found, key=lambda q: q.quota_us / q.period_us)
    for name in V1_CPU_DIRS:
        parsed = parse_cfs(
            read_text(root / name / "cpu.cfs_quota_us"),
            read_text(root / name / "cpu.cfs_period_us"),
        )
        if parsed:
            return Quota(*parsed, f"cgroup v1 cfs quota {parsed[0]}/{parsed[1]}")
    return None


def cores_seen(affinity: int | None, cpu_count: int | None) -> ThreadChoice | None:
    """The cores the scheduler lets this process run on (affinity), else all the host's; None if
    neither is known."""
    if affinity:
        return ThreadChoice(affinity, f"CPU affinity ({affinity} cores)")
    if cpu_count:
        return ThreadChoice(cpu_count, "cores seen")
    return None


def choose_threads(
    override: str | None,
    cgroup_root: str | Path = CGROUP_ROOT,
    self_cgroup_text: str | None = None,
    affinity: int | None = None,
    cpu_count: int | None = None,
) -> ThreadChoice:
    """The thread count from explicit inputs: OUROBOROS_THREADS, else the cgroup quota (never above
    the cores seen), else the CPU affinity set, else os.cpu_count(), else 1. Raises ConfigError for
    a bad override."""
    wanted = parse_override(override)
    if wanted is not None:
        return ThreadChoice(wanted, ENV_VAR)
    seen = cores_seen(affinity, cpu_count)
    quota = cgroup_quota(Path(cgroup_root), self_cgroup_text)
    if quota is None:
        return seen or ThreadChoice(1, "no CPU count known")
    if seen is not None and quota.cores > seen.count:
        return ThreadChoice(seen.count, f"{quota.source}, capped at the {seen.count} cores seen")
    return ThreadChoice(quota.cores, quota.source)


def choose_threads_here(environ: Mapping[str, str] = os.environ) -> ThreadChoice:
    """choose_threads with this process's environment, cgroup files, affinity and core count."""
    affinity = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None
    return choose_threads(
        environ.get(ENV_VAR), CGROUP_ROOT, read_text(Path(SELF_CGROUP)), affinity, os.cpu_count()
    )


def set_torch_threads(environ: Mapping[str, str] = os.environ) -> ThreadChoice:
    """Size torch's CPU thread pools to the CPU this container may use; return the choice to log.

    Call it once at start-up, before the first torch op of the process: the inter-op pool can only
    be sized before it starts, and a thread that already ran a parallel op keeps the intra-op count
    it began with. It does not touch CUDA. Raises ConfigError for a bad OUROBOROS_THREADS."""
    import torch

    choice = choose_threads_here(environ)
    torch.set_num_threads(choice.count)
    try:
        torch.set_num_interop_threads(choice.count)
    except RuntimeError:
        pass  # the inter-op pool already started (or was sized); eager decoding barely uses it
    return choice


# The share of its threads' CPU time below which a step counts as starved: torch's threads spin
# while they wait, so on a quiet machine a step's CPU time is nearly its wall time times the
# threads; with another job holding a core the share falls well below, and steps take several
# times as long (docs/BENCHMARKS.md, *The constants behind the code*).
BUSY_SHARE = 0.75
# wall time of steps summed before the share is judged: a few steps, not one noisy one
WINDOW_S = 0.5
RETRY_S = 30.0  # after falling back to one thread, try the chosen count again this much later
# A load's first look at the machine, judged at once: on 2 cores its products got 0.97-1.02 of
# their threads' time quiet, 0.68-0.76 beside a one-thread job, 0.49-0.50 beside a two-thread one.
SOUNDING_S = 0.05


def thread_candidates(ceiling: int) -> list[int]:
    """The thread counts worth timing up to `ceiling`: each up to 4, then doubling, and the ceiling
    itself."""
    counts = {c for c in range(1, min(ceiling, 4) + 1)}
    count = 8
    while count < ceiling:
        counts.add(count)
        count *= 2
    return sorted(counts | {max(1, ceiling)})


def fastest_threads(
    run, ceiling: int, set_threads, clock=time.perf_counter, rounds: int = 2
) -> tuple[int, dict]:
    """The thread count from 1 to `ceiling` at which `run()` (a short decode of the loaded pair)
    takes least time, each count timed `rounds` times in turn and its median kept (one more than
    twice as slow as the fastest is timed once); a count within 5% of a faster one with fewer
    threads loses to it (fewer threads stall less when the machine gets busy). Returns (count,
    {count: seconds}) with the count set."""
    counts = thread_candidates(ceiling)
    times: dict[int, list[float]] = {count: [] for count in counts}
    for round_ in range(rounds):
        fastest = min((seen[0] for seen in times.values() if seen), default=None)
        for count in counts:
            if round_ and times[count][0] > 2 * fastest:
                # twice as slow as another count already: timing it again only delays the start
                continue
            set_threads(count)
            started = clock()
            run()
            times[count].append(clock() - started)
    medians = {count: statistics.median(seen) for count, seen in times.items()}
    best = counts[0]
    for count in counts[1:]:
        if medians[count] < 0.95 * medians[best]:
            best = count
    set_threads(best)
    return best, medians


class BusyWatch:
    """Keeps torch's thread count fit for the machine as its load changes. Each decode step is timed
    in wall and process CPU time; when the steps of the last WINDOW_S got less than BUSY_SHARE of
    the CPU time their threads could use, another job holds cores and the threads stall each other
    at every barrier: the watch drops to one thread, and RETRY_S later tries the chosen count again
    (falling back at once if the job is still there). `busy_windows` counts the starved windows, so
    a caller can tell whether a race met a busy machine. Call `begin` and `end` around each step, on
    the thread that runs torch."""

    def __init__(
        self,
        chosen: int,
        set_threads,
        clock=time.perf_counter,
        cpu=time.process_time,
        log=None,
        fixed: bool = False,
    ):
        """chosen: the count for a quiet machine (`fit` measures it); fixed: never change it (a
        count the host set with OUROBOROS_THREADS), only count the busy windows."""
        self.chosen = self.threads = chosen
        self.fixed = fixed
        self.set_threads, self.clock, self.cpu, self.log = (
            set_threads,
            clock,
            cpu,
            log or (lambda text: None),
        )
        self.busy_windows = 0
        self.last_share: float | None = None  # of the latest window judged
        self.busy_share: float | None = None  # of the latest starved window
        self._wall = self._used = 0.0
        self._started: tuple[float, float] | None = None
        self._fell_at: float | None = None

    def begin(self) -> None:
        self._started = (self.clock(), self.cpu())
        if self._fell_at is not None and self._started[0] - self._fell_at >= RETRY_S:
            self._switch(self.chosen, f"trying {self.chosen} again after {RETRY_S:.0f} s")
            self._fell_at = None
            self._started = (self.clock(), self.cpu())

    def end(self, judge: bool = False) -> None:  # judge: weigh the window now, however short
        if self._started is None:
            return
        wall, used = self.clock() - self._started[0], self.cpu() - self._started[1]
        self._started = None
        self._wall, self._used = self._wall + wall, self._used + used
        if self._wall < WINDOW_S and not (judge and self._wall > 0):
            return
        self.last_share = self._used / (self._wall * self.threads)
        self._wall = self._used = 0.0
        if self.last_share >= BUSY_SHARE:
            return
        self.busy_windows += 1
        self.busy_share = self.last_share
        if self.threads > 1 and not self.fixed:
            self._switch(
                1, f"busy: its {self.threads} threads got {self.last_share:.0%} of their CPU time"
            )
            self._fell_at = self.clock()

    def sound(self, run, seconds: float = SOUNDING_S) -> None:
        """Judge the machine before a load: `run()` (a small parallel product) over and over for
        `seconds`, weighed at once, so that a busy machine loads on one thread too (packing the
        target on two starved threads cost a busy 2-core machine seconds); a fixed count or one
        thread has nothing to judge."""
        if self.fixed or self.threads == 1:
            return
        self.begin()
        started = self._started[0]
        while self.clock() - started < seconds:
            run()
        self.end(judge=True)

    def reset(self, chosen: int, fixed: bool = False) -> None:
        """Start again from `chosen` threads (the ceiling `fit` measures up to), as __init__
        does."""
        self.chosen = self.threads = chosen
        self.fixed = fixed
        self._fell_at = None

    def busy_since(self, windows: int) -> float | None:
        """The CPU share of the latest starved window if any window since `windows` (an earlier
        `busy_windows`) was starved, else None: whether a race that began then met a busy
        machine."""
        return self.busy_share if self.busy_windows > windows else None

    def fit(self, run) -> str:
        """Time `run()` (a short decode of the loaded pair) at each count up to the chosen one and
        keep the fastest (fastest_threads); returns the line for the log. A fixed count is kept
        without timing."""
        if self.fixed or self.chosen == 1:
            why = "set by " + ENV_VAR if self.fixed else "one core"
            return f"torch threads: {self.chosen} (not measured: {why})"
        ceiling = self.chosen
        best, medians = fastest_threads(run, ceiling, self.set_threads, self.clock)
        self.chosen = self.threads = best
        timed = ", ".join(f"{count}: {seconds:.2f} s" for count, seconds in medians.items())
        return f"torch threads: {best} of up to {ceiling}, the fastest on a short race ({timed})"

    def _switch(self, count: int, why: str) -> None:
        self.log(f"torch threads: {self.threads} -> {count} ({why})")
        self.threads = count
        self._wall = self._used = 0.0  # a window judges one thread count only
        self.set_threads(count)


def engine_watch(environ: Mapping[str, str] = os.environ, log=None) -> BusyWatch:
    """The watch an engine loaded from Python or the CLI decodes under: torch's threads capped at
    the container's CPU quota (a count OUROBOROS_THREADS sets stays), dropping to one while another
    job holds the cores. log: where a change is said (default: the `ouroboros_core` logger's
    warnings, which Python prints on stderr unless told otherwise)."""
    import logging

    import torch

    choice = choose_threads_here(environ)
    fixed = choice.source == ENV_VAR
    count = choice.count if fixed else min(torch.get_num_threads(), choice.count)
    torch.set_num_threads(count)
    log = log or logging.getLogger("ouroboros_core").warning
    return BusyWatch(count, torch.set_num_threads, log=log, fixed=fixed)


def small_product():
    """A parallel product of some 0.2 ms for `BusyWatch.sound`, its threads already started."""
    import torch

    square = torch.randn(256, 256)
    torch.mm(square, square)
    return lambda: torch.mm(square, square)


def watched(steps: Iterator, watch: BusyWatch) -> Iterator:
    """`steps` (an engine's event stream) with each step timed by `watch`, so a decode that meets a
    busy machine drops to one thread as the app's races do."""
    while True:
        watch.begin()
        try:
            item = next(steps)
        except StopIteration:
            return
        finally:
            watch.end()
        yield item
