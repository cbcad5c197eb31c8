"""The CLI's wall time, start to end, quiet and beside a torch job with one or two threads.

    python3 docs/bench-runs/cli-beside-a-neighbour.py --rounds 5 --out cli-beside-a-neighbour.json

Each round runs `python3 -m ouroboros_core generate --max-new-tokens 64 PROMPT` quiet, then beside
a neighbour (torch products of 1024 x 1024 matrices in a loop, 1 or 2 threads), with the threads
the CLI chooses and with OUROBOROS_THREADS=1; medians over the rounds, and each busy median over
the quiet one. Run it on an otherwise quiet machine.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PROMPT = "Write a Python function that reverses a string."
NEIGHBOUR = """
import sys, torch
torch.set_num_threads(int(sys.argv[1]))
a = torch.randn(1024, 1024)
while True:
    a = (a @ a).clamp_(-1, 1)
"""
SETTINGS = {  # name: (neighbour threads, OUROBOROS_THREADS)
    "quiet": (0, ""),
    "quiet, 1 thread": (0, "1"),
    "beside 1 thread": (1, ""),
    "beside 2 threads": (2, ""),
    "beside 2 threads, 1 thread": (2, "1"),
}


def cli_seconds(threads: str) -> float:
    env = {**os.environ, "OUROBOROS_THREADS": threads, "PYTHONPATH": str(ROOT)}
    command = [sys.executable, "-m", "ouroboros_core", "generate", "--max-new-tokens", "64"]
    started = time.perf_counter()
    subprocess.run(command + [PROMPT], cwd=ROOT, env=env, check=True, capture_output=True)
    return time.perf_counter() - started


def timed(neighbour_threads: int, threads: str) -> float:
    if not neighbour_threads:
        return cli_seconds(threads)
    neighbour = subprocess.Popen([sys.executable, "-c", NEIGHBOUR, str(neighbour_threads)])
    try:
        time.sleep(2)  # its threads started
        return cli_seconds(threads)
    finally:
        neighbour.kill()
        neighbour.wait()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    seconds: dict[str, list[float]] = {name: [] for name in SETTINGS}
    for round_ in range(args.rounds):
        for name, (neighbour_threads, threads) in SETTINGS.items():
            seconds[name].append(round(timed(neighbour_threads, threads), 2))
            print(round_, name, seconds[name][-1], flush=True)
    medians = {name: statistics.median(times) for name, times in seconds.items()}
    result = {
        "cpu": platform.processor() or platform.machine(),
        "cores": len(os.sched_getaffinity(0)),
        "seconds": seconds,
        "medians": medians,
        "over_quiet": {name: round(m / medians["quiet"], 2) for name, m in medians.items()},
    }
    print(json.dumps(result["over_quiet"]))
    if args.out:
        args.out.write_text(json.dumps(result, indent=1) + "\n")


if __name__ == "__main__":
    main()
