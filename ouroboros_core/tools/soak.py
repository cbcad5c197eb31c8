"""Load and soak the demo app on loopback: many visitors at once, a long run of requests, a full
queue.

    # starts app.py on a free loopback port, full scale:
    python3 -m ouroboros_core.tools.soak
    # a small run (CI):
    python3 -m ouroboros_core.tools.soak --clients 3 --requests 2 --soak 20 --queue-size 4
    # an app already running:
    python3 -m ouroboros_core.tools.soak --url http://127.0.0.1:7860/ --pid 1234

Phases (soak_phases.py), each checked:
1. alone: every prompt once, one after another: the reference outputs;
2. concurrent: CLIENTS clients send REQUESTS requests each at once (a client's next request follows
   its previous answer); all complete, outputs token-identical to the same prompt run alone, vanilla
   and Ouroboros identical, and requests finish in the order they joined the queue;
3. soak: SOAK requests in a row; the server's memory after the last is within 5% of after the first;
4. busy: more requests at once than the queue holds; the extra ones get the queue's busy message.
Bounded: --max-seconds stops every phase; only loopback addresses are accepted. Exit status 1 if any
check fails. Prints a table of the figures; --out writes them as JSON.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path
from urllib.parse import urlparse

from .soak_phases import (
    Deadline,
    Figures,
    phase_alone,
    phase_busy,
    phase_concurrent,
    phase_soak,
)

ROOT = Path(__file__).resolve().parents[2]
LOOPBACK = {"127.0.0.1", "localhost", "::1"}


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def start_app(queue_size: int, max_new_tokens: int, timeout_s: float):
    """app.py on a free loopback port; returns (process, url, log path)."""
    port = free_port()
    log = tempfile.NamedTemporaryFile("w", prefix="soak-app-", suffix=".log", delete=False)
    env = {
        **os.environ,
        "PORT": str(port),
        "OUROBOROS_HOST": "127.0.0.1",
        "PYTHONUNBUFFERED": "1",
        "OUROBOROS_QUEUE_SIZE": str(queue_size),
        "OUROBOROS_MAX_NEW_TOKENS": str(max_new_tokens),
        "GRADIO_ANALYTICS_ENABLED": "False",
        "HF_HUB_OFFLINE": "1",
    }
    process = subprocess.Popen(
        [sys.executable, str(ROOT / "app.py")],
        cwd=ROOT,
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    url = f"http://127.0.0.1:{port}/"
    deadline = Deadline(timeout_s)
    while not deadline.passed():
        if process.poll() is not None:
            raise SystemExit(
                f"app.py exited with {process.returncode}:\n{Path(log.name).read_text()[-3000:]}"
            )
        try:
            with urllib.request.urlopen(url, timeout=5):
                return process, url, log.name
        except (urllib.error.URLError, ConnectionError, TimeoutError):
            time.sleep(0.5)
    process.kill()
    raise SystemExit(
        f"app.py did not answer within {timeout_s:.0f} s:\n{Path(log.name).read_text()[-3000:]}"
    )


def prompts_for(limit: int) -> list[str]:
    from .bench import humaneval_prompts

    return [item["prompt"] for item in humaneval_prompts(limit)]


def percentile(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def report(figures: Figures, seconds: float) -> dict:
    return {
        "requests_served": figures.requests,
        "failures": len(figures.failures),
        "p50_latency_s": round(statistics.median(figures.latencies), 3)
        if figures.latencies
        else None,
        "p95_latency_s": round(percentile(figures.latencies, 0.95), 3)
        if figures.latencies
        else None,
        "wall_s": round(seconds, 1),
        **figures.notes,
        "checks": figures.checks,
        "failure_details": figures.failures,
    }


def parse_args(argv):
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--url", help="an app already running on loopback (default: start app.py)")
    parser.add_argument(
        "--pid", type=int, help="the running app's process id, for its memory (with --url)"
    )
    parser.add_argument("--clients", type=int, default=8)
    parser.add_argument(
        "--requests", type=int, default=5, help="requests per client in the concurrent phase"
    )
    parser.add_argument("--soak", type=int, default=100, help="requests in a row in the soak phase")
    parser.add_argument("--prompts", type=int, default=8, help="HumanEval prompts used")
    parser.add_argument("--max-new-tokens", type=int, default=32)
    parser.add_argument("--queue-size", type=int, default=16, help="the app's OUROBOROS_QUEUE_SIZE")
    parser.add_argument(
        "--max-seconds", type=float, default=1800, help="stop every phase after this"
    )
    parser.add_argument("--out", type=Path, help="write the figures as JSON")
    args = parser.parse_args(argv)
    for name in ("clients", "requests", "soak", "prompts", "max_new_tokens", "queue_size"):
        if getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')} must be at least 1")
    if args.clients > args.queue_size:
        parser.error(
            "--clients must not exceed --queue-size (the concurrent phase must fit in the queue)"
        )
    if args.url and (urlparse(args.url).hostname or "") not in LOOPBACK:
        parser.error(
            f"--url must be a loopback address ({', '.join(sorted(LOOPBACK))}); got {args.url}"
        )
    return args


def run_phases(args, url: str, pid: int | None, figures: Figures, deadline: Deadline) -> None:
    def phase(name, run):
        if deadline.passed():
            figures.check(f"{name}: ran before --max-seconds", False, "time is up")
            return None
        print(f"phase {name}...", flush=True)
        phase_started = time.perf_counter()
        result = run()
        print(f"phase {name}: {time.perf_counter() - phase_started:.1f} s", flush=True)
        return result

    prompts = prompts_for(args.prompts)
    reference = (
        phase("alone", lambda: phase_alone(url, prompts, args.max_new_tokens, figures, deadline))
        or {}
    )
    phase(
        "concurrent",
        lambda: phase_concurrent(
            url,
            prompts,
            reference,
            args.clients,
            args.requests,
            args.max_new_tokens,
            figures,
            deadline,
        ),
    )
    phase(
        "soak",
        lambda: phase_soak(url, pid, prompts[0], args.soak, args.max_new_tokens, figures, deadline),
    )
    phase("busy", lambda: phase_busy(url, args.queue_size, prompts[0], 64, figures, deadline))


def print_report(out: dict, figures: Figures) -> None:
    print("\n| figure | value |\n|---|---|")
    for key, value in out.items():
        if key not in ("checks", "failure_details", "settings"):
            print(f"| {key} | {value} |")
    for name, ok in figures.checks.items():
        print(f"{'PASS' if ok else 'FAIL'}  {name}")
    for failure in figures.failures:
        print(f"failure: {failure}")


def main(argv=None) -> int:
    args = parse_args(argv)
    deadline = Deadline(args.max_seconds)
    started = time.perf_counter()
    process = None
    url, pid = args.url, args.pid
    if url is None:
        print("starting app.py on loopback...", flush=True)
        process, url, app_log = start_app(
            args.queue_size, max(args.max_new_tokens, 64), min(600, deadline.left())
        )
        pid = process.pid
    figures = Figures()
    try:
        run_phases(args, url, pid, figures, deadline)
    finally:
        if process is not None:
            process.terminate()
            try:
                process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                process.kill()
            Path(app_log).unlink(missing_ok=True)
    out = report(figures, time.perf_counter() - started)
    out["settings"] = {
        name: getattr(args, name)
        for name in ("clients", "requests", "soak", "prompts", "max_new_tokens", "queue_size")
    }
    print_report(out, figures)
    if args.out:
        args.out.write_text(json.dumps(out, indent=1))
    return 0 if not figures.failures else 1


if __name__ == "__main__":
    sys.exit(main())
