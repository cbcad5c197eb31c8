"""The soak's four phases against a running app, and the figures and checks they record.

Each phase sends its requests through gradio_client's /race and records every check in Figures:
alone (the reference outputs), concurrent (many clients at once, in queue order), soak (memory over
a long run) and busy (a full queue turns requests away). soak.py starts the app and runs them.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field

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


def client(url: str):
    from gradio_client import Client

    return Client(url, verbose=False, httpx_kwargs={"timeout": 120})


def rss_mb(pid: int | None) -> float | None:
    if pid is None:
        return None
    import psutil

    return psutil.Process(pid).memory_info().rss / 2**20


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


# One answered request of the concurrent phase: (joined, finished, client, request, output, prompt),
# the output being /race's answer or the error's text.
Visit = tuple[float, float, int, int, dict | str, str]


def concurrent_visits(url, prompts, clients, requests, max_new_tokens, deadline) -> list[Visit]:
    """CLIENTS clients at once, each sending REQUESTS requests in a row: every answer, as it
    came."""
    done: list[Visit] = []
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
    return done


def phase_concurrent(
    url, prompts, reference, clients, requests, max_new_tokens, figures, deadline
) -> None:
    done = concurrent_visits(url, prompts, clients, requests, max_new_tokens, deadline)
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
    check_queue_order(done, figures)


def check_queue_order(done: list[Visit], figures: Figures) -> None:
    """FIFO with one device: of two requests that joined ORDER_MARGIN_S apart, the earlier finishes
    first."""
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
    """Queue size + 3 requests at once, each from its own client: the queue holds queue_size (one
    more runs), so at least two must be turned away, with a message that says why."""
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
