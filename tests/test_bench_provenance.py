"""Every bench JSON says where its figures came from: the commit and whether the tree had changes,
the date, the CPU and its speed flags, the library versions and threads, the device and dtype, and
the command that ran."""

import json
import os
import platform
import re
import subprocess
import sys
from datetime import datetime, timedelta, timezone
from pathlib import Path
from types import SimpleNamespace

import torch
import transformers

from ouroboros_core.tools import bench_report
from pairs import save_tiny_pair

ROOT = Path(__file__).resolve().parent.parent


def git(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True)


def bench_provenance(tmp_path: Path, out: Path) -> dict:
    """A one-prompt bench of a tiny pair on the CPU, its JSON written to `out`: its provenance."""
    pair = save_tiny_pair(tmp_path / "pair")
    prompts = tmp_path / "prompts.jsonl"
    prompts.write_text('{"prompt": "def a():\\n"}\n')
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "ouroboros_core",
            "bench",
            "--prompts",
            str(prompts),
            "--methods",
            "vanilla",
            "--max-new-tokens",
            "2",
            "--device",
            "cpu",
            "--no-progress",
            "--out",
            str(out),
            "--target",
            str(pair / "target"),
            "--draft",
            str(pair / "draft"),
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
        cwd=ROOT,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(out.read_text())["provenance"]


def check_commit_and_date(made: dict) -> None:
    head = git("rev-parse", "HEAD")
    if head.returncode == 0:  # this checkout: the commit it ran, and whether it differed from it
        assert (
            re.fullmatch(r"[0-9a-f]{40}", made["commit"]) and made["commit"] == head.stdout.strip()
        )
        assert made["dirty"] is bool(git("status", "--porcelain").stdout.strip())
    else:  # a copy without git history says so rather than guessing
        assert made["commit"] is None and made["dirty"] is None
    ran_at = datetime.fromisoformat(made["date_utc"])
    assert ran_at.utcoffset() == timedelta(0)
    assert timedelta(0) <= datetime.now(timezone.utc) - ran_at < timedelta(minutes=10)


def check_cpu(made: dict) -> None:
    """The CPU's name and speed flags, as /proc/cpuinfo reads where there is one."""
    assert isinstance(made["cpu"], str) and made["cpu"].strip()
    assert set(made["cpu_flags"]) <= set(bench_report.SPEED_FLAGS)
    cpuinfo = Path("/proc/cpuinfo")
    if cpuinfo.is_file():
        lines = cpuinfo.read_text().splitlines()
        model = next(
            (line.split(":", 1)[1].strip() for line in lines if line.startswith("model name")), None
        )
        assert model is None or made["cpu"] == model
        flags = next(
            (
                line.split(":", 1)[1].split()
                for line in lines
                if line.startswith(("flags", "Features"))
            ),
            [],
        )
        assert made["cpu_flags"] == [flag for flag in bench_report.SPEED_FLAGS if flag in flags]


def test_the_bench_json_records_its_provenance(tmp_path):
    out = tmp_path / "bench.json"
    made = bench_provenance(tmp_path, out)
    check_commit_and_date(made)
    check_cpu(made)
    assert made["python"] == platform.python_version()
    assert made["torch"] == torch.__version__ and made["transformers"] == transformers.__version__
    assert isinstance(made["torch_threads"], int) and made["torch_threads"] >= 1
    assert made["device"] == "cpu" and made["dtype"] == "float32"
    assert (
        made["command"].startswith("python3 -m ouroboros_core bench ")
        and f"--out {out}" in made["command"]
    )


def test_provenance_outside_a_git_checkout(monkeypatch):
    """No git, or no repository: the commit is None, not a guess, and the rest is still recorded."""

    def no_git(*args, **kwargs):
        raise FileNotFoundError("git")

    monkeypatch.setattr(bench_report.subprocess, "run", no_git)
    engine = SimpleNamespace(
        target=SimpleNamespace(device=torch.device("cpu"), dtype=torch.float32)
    )
    made = bench_report.provenance(engine)
    assert made["commit"] is None and made["dirty"] is None
    assert (
        made["device"] == "cpu"
        and made["dtype"] == "float32"
        and made["torch"] == torch.__version__
    )
