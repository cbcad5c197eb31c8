"""How many CPU threads torch should run: the cores this container may use, not the cores its host has.

A Hugging Face Space, a Kubernetes pod or a `docker --cpus` container limits CPU with a cgroup quota, while
`os.cpu_count()` and torch's default thread count see every core of the host. torch then runs more threads
than the quota serves and they stall each other at every barrier (measured on a busy 2-core machine: a
one-token forward took 789 ms with 2 threads, 31 ms with 1).

Pure Python at import; torch is imported only by `set_torch_threads`.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
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
        # A fractional quota cannot run a fraction of a thread: round down, but one thread always runs.
        return max(1, self.quota_us // self.period_us)


def parse_override(text: str | None) -> int | None:
    """OUROBOROS_THREADS as a thread count; None when unset or blank (so `OUROBOROS_THREADS=` clears it).

    Anything else that is not a whole number from 1 to MAX_THREADS is the user's mistake, said at start-up
    (ConfigError, a ValueError) rather than silently replaced by a guess."""
    if text is None or not text.strip():
        return None
    cleaned = text.strip()
    if not (cleaned.isascii() and cleaned.isdecimal()) or not 1 <= int(cleaned) <= MAX_THREADS:
        raise ConfigError(f"{ENV_VAR} must be a whole number of threads from 1 to {MAX_THREADS} "
                          f"(or unset, to follow the container's CPU quota); got {text!r}")
    return int(cleaned)


def read_text(path: Path) -> str | None:
    """A small kernel file's text, or None when it is missing or unreadable: no cgroup file may stop start-up."""
    try:
        return path.read_text(encoding="ascii")
    except (OSError, UnicodeDecodeError):
        return None


def parse_whole(text: str) -> int | None:
    text = text.strip()
    sign, digits = (-1, text[1:]) if text.startswith("-") else (1, text)
    return sign * int(digits) if digits.isdecimal() else None


def parse_cpu_max(text: str | None) -> tuple[int, int] | None:
    """cgroup v2 `cpu.max` ("150000 100000") as (quota, period); None when unlimited ("max ...") or malformed."""
    fields = (text or "").split()
    if len(fields) != 2 or fields[0] == "max":
        return None
    quota, period = parse_whole(fields[0]), parse_whole(fields[1])
    if quota is None or period is None or quota <= 0 or period <= 0:
        return None
    return quota, period


def parse_cfs(quota_text: str | None, period_text: str | None) -> tuple[int, int] | None:
    """cgroup v1 `cpu.cfs_quota_us` and `cpu.cfs_period_us` as (quota, period); None when the quota is -1
    (unlimited), a file is missing or either is malformed."""
    if quota_text is None or period_text is None:
        return None
    quota, period = parse_whole(quota_text), parse_whole(period_text)
    if quota is None or period is None or quota <= 0 or period <= 0:
        return None
    return quota, period


def v2_cgroup_dirs(root: Path, self_cgroup_text: str | None) -> list[Path]:
    """The process's cgroup v2 directory and each parent up to `root`, innermost first.

    A quota set on any ancestor (a pod's, a systemd slice's) binds the process too. Without a cgroup
    namespace /proc/self/cgroup names a nested path ("0::/kubepods/pod1/c1"); inside one it says "0::/".
    A nested directory missing under `root` is skipped when its file is read; a path that climbs out of
    the namespace ("0::/../x") is not followed at all."""
    parts: list[str] = []
    for line in (self_cgroup_text or "").splitlines():
        if line.startswith("0::"):
            parts = [part for part in line[3:].strip().split("/") if part]
    if ".." in parts:
        parts = []
    return [root.joinpath(*parts[:depth]) for depth in range(len(parts), 0, -1)] + [root]


def cgroup_quota(root: Path, self_cgroup_text: str | None) -> Quota | None:
    """The tightest CPU quota cgroup v2 sets on this process, else the v1 cfs quota at `root`; None if unlimited."""
    found = []
    for directory in v2_cgroup_dirs(root, self_cgroup_text):
        parsed = parse_cpu_max(read_text(directory / "cpu.max"))
        if parsed:
            where = "" if directory == root else f" at /{directory.relative_to(root).as_posix()}"
            found.append(Quota(*parsed, f"cgroup v2 cpu.max quota {parsed[0]}/{parsed[1]}{where}"))
    if found:
        return min(found, key=lambda q: q.quota_us / q.period_us)
    for name in V1_CPU_DIRS:
        parsed = parse_cfs(read_text(root / name / "cpu.cfs_quota_us"), read_text(root / name / "cpu.cfs_period_us"))
        if parsed:
            return Quota(*parsed, f"cgroup v1 cfs quota {parsed[0]}/{parsed[1]}")
    return None


def cores_seen(affinity: int | None, cpu_count: int | None) -> ThreadChoice | None:
    """The cores the scheduler lets this process run on (affinity), else all the host's; None if neither is known."""
    if affinity:
        return ThreadChoice(affinity, f"CPU affinity ({affinity} cores)")
    if cpu_count:
        return ThreadChoice(cpu_count, "cores seen")
    return None


def choose_threads(override: str | None, cgroup_root: str | Path = CGROUP_ROOT, self_cgroup_text: str | None = None,
                   affinity: int | None = None, cpu_count: int | None = None) -> ThreadChoice:
    """The thread count from explicit inputs: OUROBOROS_THREADS, else the cgroup quota (never above the cores
    seen), else the CPU affinity set, else os.cpu_count(), else 1. Raises ConfigError for a bad override."""
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
    return choose_threads(environ.get(ENV_VAR), CGROUP_ROOT, read_text(Path(SELF_CGROUP)), affinity, os.cpu_count())


def set_torch_threads(environ: Mapping[str, str] = os.environ) -> ThreadChoice:
    """Size torch's CPU thread pools to the CPU this container may use; return the choice to log.

    Call it once at start-up, before the first torch op of the process: the inter-op pool can only be sized
    before it starts, and a thread that already ran a parallel op keeps the intra-op count it began with.
    It does not touch CUDA. Raises ConfigError for a bad OUROBOROS_THREADS."""
    import torch

    choice = choose_threads_here(environ)
    torch.set_num_threads(choice.count)
    try:
        torch.set_num_interop_threads(choice.count)
    except RuntimeError:
        pass  # the inter-op pool already started (or was sized); eager decoding barely uses it
    return choice
