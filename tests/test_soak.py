"""The load and soak script, at the issue's scale with short answers: it starts its own app on
loopback.

8 clients x 5 requests at once, 100 requests in a row, and a queue flooded past its size; the script
checks completion, outputs identical to each prompt run alone, queue order, memory and the busy
message itself, and this test checks that it says so and that its figures add up.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def soak(*args, timeout=1500):
    env = {**os.environ, "PYTHONPATH": str(ROOT), "HF_HUB_OFFLINE": "1"}
    return subprocess.run(
        [sys.executable, "-m", "ouroboros_core.tools.soak", *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=timeout,
        cwd=ROOT,
    )


def test_soak_script_checks_pass_and_figures_add_up(tmp_path):
    out = tmp_path / "soak.json"
    done = soak(
        "--clients",
        "8",
        "--requests",
        "5",
        "--soak",
        "100",
        "--prompts",
        "4",
        "--max-new-tokens",
        "8",
        "--queue-size",
        "8",
        "--max-seconds",
        "1200",
        "--out",
        str(out),
    )
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-4000:]
    figures = json.loads(out.read_text())
    assert figures["checks"] and all(figures["checks"].values()), figures["checks"]
    expected = {
        "alone: vanilla == ouroboros",
        "concurrent: all requests answered",
        "concurrent: no errors",
        "concurrent: outputs identical to alone",
        "concurrent: served in queue order",
        "soak: all requests answered",
        "soak: memory within 5% of after the first request",
        "busy: a full queue turns requests away with a busy message",
        "busy: no other errors",
    }
    assert expected <= set(figures["checks"])
    assert figures["failures"] == 0
    assert figures["requests_served"] == 4 + 8 * 5 + 100 + figures["busy_served"]
    assert figures["busy_turned_away"] >= 2 and "queue is full" in figures["busy_message"].lower()
    assert figures["order_pairs_judged"] > 0, (
        "no two requests were far enough apart to judge queue order"
    )
    assert figures["soak_requests"] == 100
    assert abs(figures["rss_growth_pct"]) <= 5
    assert 0 < figures["p50_latency_s"] <= figures["p95_latency_s"]
    for line in ("| requests_served |", "| p95_latency_s |", "| rss_after_last_mb |", "PASS  busy"):
        assert line in done.stdout


def test_soak_script_only_talks_to_loopback():
    done = soak("--url", "http://example.com:7860/", timeout=120)
    assert done.returncode == 2 and "loopback" in done.stderr
    done = soak("--clients", "9", "--queue-size", "8", timeout=120)
    assert done.returncode == 2 and "--queue-size" in done.stderr
