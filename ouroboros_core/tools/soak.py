"""Load and soak the demo app on loopback: many visitors at once, a long run of requests, a full queue.

    python3 -m ouroboros_core.tools.soak                      # starts app.py on a free loopback port, full scale
    python3 -m ouroboros_core.tools.soak --clients 3 --requests 2 --soak 20 --queue-size 4   # a small run (CI)
    python3 -m ouroboros_core.tools.soak --url http://127.0.0.1:7860/ --pid 1234            # an app already running

Phases, each checked:
1. alone: every prompt once, one after another: the reference outputs;
2. concurrent: CLIENTS clients send REQUESTS requests each at once (a client's next request follows its
   previous answer); all complete, outputs token-identical to the same prompt run alone, vanilla and
   Ouroboros identical, and requests finish in the order they joined the queue;
3. soak: SOAK requests in a row; the server's memory after the last is within 5% of after the first;
4. busy: more requests at once than the queue holds; the extra ones get the queue's busy message.
Bounded: --max-seconds stops every phase; only loopback addresses are accepted. Exit status 1 if any check
fails. Prints a table of the figures; --out writes them as JSON.
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
import threading
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlparse

ROOT = Path(__file__).resolve().parents[2]
LOOPBACK = {"127.0.0.1", "localhost", "::1"}
ORDER_MARGIN_S = 0.3  # requests that joined closer together than this are not judged for order
BUSY_WORDS = "queue is full"


@dataclass
class Figures:
    requests: int = 0
    failures: list[str] = field(default_factory=list)
    latencies: list[float] = field(default_factory=list)
    checks: dict[str, bool] = field(default_factory=dict)
    notes: dict[str, object] = field(default_factory=dict)

    def check(self, name: str, ok: bool, detail: str = "") -> None:
        self.checks[name] = ok
        if not ok:
            self.failures.append(f"{name}: {detail}" if detail else name)


class Deadline:
    def __init__(self, seconds: float):
        self.end = time.monotonic() + seconds

    def left(self) -> float:
        return self.end - time.monotonic()

    def passed(self) -> bool:
        return self.left() <= 0


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


def client(url: str):
    from gradio_client import Client

    return Client(url, verbose=False, httpx_kwargs={"timeout": 120})


def rss_mb(pid: int | None) -> float | None:
    if pid is None:
        return None
    import psutil

    return psutil.Process(pid).memory_info().rss / 2**20


def prompts_for(limit: int) -> list[str]:
    from .bench import humaneval_prompts

    return [item["prompt"] for item in humaneval_prompts(limit)]


def race(c, prompt: str, max_new_tokens: int) -> dict:
    return c.predict(prompt, max_new_tokens, api_name="/race")


def phase_alone(url, prompts, max_new_tokens, figures, deadline) -> dict[str, list[int]]:
    c = client(url)
    reference = {}
    for number, prompt in enumerate(prompts):
        if deadline.passed():
            break
        started = time.perf_counter()
        out = race(c, prompt, max_new_tokens)
        figures.latencies.append(time.perf_counter() - started)
        figures.requests += 1
        reference[prompt] = out["vanilla"]["token_ids"]
        figures.check(
            "alone: vanilla == ouroboros",
            out["ouroboros"]["token_ids"] == reference[prompt],
            f"prompt {number}",
        )
    return reference


def phase_concurrent(
    url, prompts, reference, clients, requests, max_new_tokens, figures, deadline
) -> None:
    done: list[
        tuple[float, float, int, int, dict | str]
    ] = []  # (joined, finished, client, request, output)
    lock = threading.Lock()
    ready = threading.Barrier(clients)

    def visitor(index: int) -> None:
        c = client(url)
        ready.wait()
        for number in range(requests):
            if deadline.passed():
                return
            prompt = prompts[(index * requests + number) % len(prompts)]
            joined = time.perf_counter()
            try:
                out = race(c, prompt, max_new_tokens)
            except Exception as err:  # noqa: BLE001 - every failure is a figure
                out = f"{type(err).__name__}: {err}"
            with lock:
                done.append((joined, time.perf_counter(), index, number, out, prompt))

    threads = [threading.Thread(target=visitor, args=(i,), daemon=True) for i in range(clients)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(max(1.0, deadline.left()))
    figures.requests += len(done)
    figures.check(
        "concurrent: all requests answered",
        len(done) == clients * requests,
        f"{len(done)} of {clients * requests}",
    )
    errors = [out for *_, out, _ in done if isinstance(out, str)]
    figures.check("concurrent: no errors", not errors, "; ".join(errors[:3]))
    mismatches = 0
    for joined, finished, *_, out, prompt in done:
        figures.latencies.append(finished - joined)
        if isinstance(out, dict):
            same = out["vanilla"]["token_ids"] == out["ouroboros"]["token_ids"]
            if prompt in reference:
                same = same and out["vanilla"]["token_ids"] == reference[prompt]
            mismatches += not same
    figures.check("concurrent: outputs identical to alone", mismatches == 0, f"{mismatches} differ")
    # FIFO with one device: of two requests that joined ORDER_MARGIN_S apart, the earlier finishes first.
    ordered = sorted(done, key=lambda row: row[0])
    late = sum(
        1 for a, b in zip(ordered, ordered[1:]) if b[0] - a[0] > ORDER_MARGIN_S and b[1] < a[1]
    )
    judged = sum(1 for a, b in zip(ordered, ordered[1:]) if b[0] - a[0] > ORDER_MARGIN_S)
    figures.notes["order_pairs_judged"] = judged
    figures.check(
        "concurrent: served in queue order", late == 0, f"{late} of {judged} pairs out of order"
    )


def phase_soak(url, pid, prompt, count, max_new_tokens, figures, deadline) -> None:
    c = client(url)
    first = None
    served = 0
    for number in range(count):
        if deadline.passed():
            break
        started = time.perf_counter()
        try:
            race(c, prompt, max_new_tokens)
        except Exception as err:  # noqa: BLE001
            figures.failures.append(f"soak request {number}: {type(err).__name__}: {err}")
            continue
        figures.latencies.append(time.perf_counter() - started)
        served += 1
        if number == 0:
            first = rss_mb(pid)
    last = rss_mb(pid)
    figures.requests += served
    figures.check("soak: all requests answered", served == count, f"{served} of {count}")
    if first is not None and last is not None:
        growth = (last - first) / first
        figures.notes.update(
            rss_after_first_mb=round(first, 1),
            rss_after_last_mb=round(last, 1),
            rss_growth_pct=round(100 * growth, 2),
            soak_requests=served,
        )
        figures.check(
            "soak: memory within 5% of after the first request", growth <= 0.05, f"{growth:+.1%}"
        )


def phase_busy(url, queue_size, prompt, max_new_tokens, figures, deadline) -> None:
    """Queue size + 3 requests at once, each from its own client: the queue holds queue_size (one more
    runs), so at least two must be turned away, with a message that says why."""
    results: list[str] = []
    lock = threading.Lock()
    count = queue_size + 3
    ready = threading.Barrier(count)

    def visitor() -> None:
        c = client(url)
        ready.wait()
        try:
            race(c, prompt, max_new_tokens)
            outcome = "served"
        except Exception as err:  # noqa: BLE001
            outcome = f"{type(err).__name__}: {err}"
        with lock:
            results.append(outcome)

    threads = [threading.Thread(target=visitor, daemon=True) for _ in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(max(1.0, deadline.left()))
    busy = [r for r in results if BUSY_WORDS in r.lower()]
    other = [r for r in results if r != "served" and r not in busy]
    figures.requests += results.count("served")
    figures.notes.update(
        busy_sent=count,
        busy_served=results.count("served"),
        busy_turned_away=len(busy),
        busy_message=busy[0] if busy else None,
    )
    figures.check(
        "busy: a full queue turns requests away with a busy message",
        len(busy) >= 2,
        f"{len(busy)} of {count} turned away",
    )
    figures.check("busy: no other errors", not other, "; ".join(other[:3]))


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
