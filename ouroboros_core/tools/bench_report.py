"""The bench's report: where its figures came from, the machine, the table and the chart."""

from __future__ import annotations

import platform
import shlex
import subprocess
import sys
from datetime import datetime, timezone
from pathlib import Path

# The speed reference; greedy outputs are checked against it, sampled ones against vanilla.
REFERENCE = "hf_greedy"
HF_METHODS = {
    "hf_greedy": "transformers generate (greedy)",
    "hf_assisted": "transformers assisted generation",
    "hf_prompt_lookup": "transformers prompt lookup",
}
# The CPU features that decide how fast a CPU runs the models: the vector units and the matrix
# tiles.
SPEED_FLAGS = (
    "avx",
    "avx2",
    "fma",
    "f16c",
    "avx512f",
    "avx512_vnni",
    "avx512_bf16",
    "avx512_fp16",
    "amx_tile",
    "amx_bf16",
    "amx_int8",
)


def machine_description(engine) -> str:
    """The device the target ran on, with what decides CPU speed: its vector unit (AVX-512 or AVX2)
    and threads."""
    import torch

    device = engine.target.device
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    capability = torch.backends.cpu.get_cpu_capability()  # e.g. "AVX512", "AVX2", "DEFAULT"
    return (
        f"{platform.processor() or platform.machine()} CPU ({capability}), "
        f"{torch.get_num_threads()} threads"
    )


def provenance(engine) -> dict:
    """Where a figure came from: the code (commit, and whether the tree had changes), when, on what
    CPU and libraries, and the command that made it. Local facts only; nothing here touches the
    network."""
    import torch
    import transformers

    def git(*args: str) -> str | None:
        try:
            done = subprocess.run(
                ["git", *args],
                cwd=Path(__file__).resolve().parent,
                capture_output=True,
                text=True,
                timeout=10,
            )
        except (OSError, subprocess.TimeoutExpired):
            return None
        return done.stdout.strip() if done.returncode == 0 else None

    cpuinfo = Path("/proc/cpuinfo")
    fields: dict[str, str] = {}
    for line in cpuinfo.read_text().splitlines() if cpuinfo.is_file() else []:
        key, _, value = line.partition(":")
        fields.setdefault(key.strip(), value.strip())  # the first processor speaks for all
    flags = set((fields.get("flags") or fields.get("Features") or "").split())
    commit = git("rev-parse", "HEAD")
    # `python -m ouroboros_core` leaves the package's __main__.py in argv[0]: record the command as
    # typed.
    argv = (
        ["python3", "-m", "ouroboros_core", *sys.argv[1:]]
        if sys.argv[0].endswith("__main__.py")
        else sys.argv
    )
    return {
        "commit": commit,
        "dirty": bool(git("status", "--porcelain")) if commit else None,  # changes not in it
        "date_utc": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "cpu": fields.get("model name") or platform.processor() or platform.machine(),
        "cpu_flags": [flag for flag in SPEED_FLAGS if flag in flags],
        "python": platform.python_version(),
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "torch_threads": torch.get_num_threads(),
        "device": str(engine.target.device),
        "dtype": str(engine.target.dtype).replace("torch.", ""),
        "command": shlex.join(argv),
    }


def lossless_cell(method: str, row: dict, report: dict) -> str:
    """The verdicts of this method's outputs against the reference's: yes, yes (N float ties or
    rounding boundaries), or NO (N mismatches); transformers' sampled rows differ by design (its own
    sampler)."""
    sampling = report.get("sampling")
    if method == report.get("checked_against", REFERENCE):
        return "reference"
    if sampling and method in HF_METHODS:
        return "sampled by transformers: differs by design"
    if row.get("mismatches") is None:
        return "n/a"
    ties = row.get("float_ties") or 0
    one, many = (
        ("rounding boundary", "rounding boundaries") if sampling else ("float tie", "float ties")
    )
    tie_text = f"{ties} {one if ties == 1 else many}"
    if row["mismatches"]:
        return f"NO ({row['mismatches']} mismatches" + (f", {tie_text})" if ties else ")")
    return f"yes ({tie_text})" if ties else "yes"


def markdown_table(report: dict) -> str:
    sampling = report.get("sampling")
    how = (
        f"sampled at temperature {sampling['temperature']:g}, top-p {sampling['top_p']:g}, seeds "
        f"{sampling['seed']}+prompt index (engine rows checked against engine vanilla)"
        if sampling
        else "greedy"
    )
    lines = [
        f"{report.get('prompt_set', 'HumanEval-style')} prompts: {report['prompts']}, "
        f"max_new_tokens {report['max_new_tokens']}, {how}, "
        f"pair `{report['pair']}` in {report.get('dtype', 'float32')}, on {report['machine']}",
        "",
        "| method | tok/s | median tok/s | speedup | median speedup | x engine vanilla (median) | "
        "tokens/forward | acceptance | draft share | lossless |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    fmt = lambda v, f="{:.2f}": "" if v is None else f.format(v)  # noqa: E731
    for method, row in report["methods"].items():
        expected = (
            f" (expected {row['expected_speedup']:.2f}x)" if "expected_speedup" in row else ""
        )
        over = (
            f"{row['over_vanilla']:.2f}x ({row['median_over_vanilla']:.2f}x)"
            if row.get("over_vanilla") is not None
            else ""
        )
        lines.append(
            f"| {row['label']} | {row['tokens_per_s']:.1f} | {row['median_tokens_per_s']:.1f} | "
            f"{fmt(row['speedup'], '{:.2f}x')}{expected} | "
            f"{fmt(row['median_speedup'], '{:.2f}x')} | {over} | "
            f"{fmt(row.get('tokens_per_forward'))} | {fmt(row.get('acceptance_rate'), '{:.0%}')} | "
            f"{fmt(row.get('draft_share'), '{:.0%}')} | {lossless_cell(method, row, report)} |"
        )
    return "\n".join(lines)


def ratios(run, base) -> tuple[float | None, float | None]:
    """run's speed over base's (bench.MethodRun): total tokens over total time, and the median of
    the per-prompt ratios."""
    import statistics

    if base is None:
        return None, None
    rate = (sum(run.tokens) / sum(run.seconds)) / (sum(base.tokens) / sum(base.seconds))
    per_prompt = [
        (t / s) / (bt / bs)
        for t, s, bt, bs in zip(run.tokens, run.seconds, base.tokens, base.seconds)
    ]
    return round(rate, 3), round(statistics.median(per_prompt), 3)


def by_kind(runs: dict, kinds: list[str]) -> dict:
    """Each kind of request's figures, per method (bench.MethodRun cut to that kind's prompts):
    speed over the engine's vanilla as the whole run's (ratios) and, for engine methods, tokens
    per target forward."""
    from dataclasses import replace

    out = {}
    for kind in dict.fromkeys(kinds):
        picked = [i for i, k in enumerate(kinds) if k == kind]
        part = {
            method: replace(
                run,
                tokens=[run.tokens[i] for i in picked],
                seconds=[run.seconds[i] for i in picked],
                stats=[run.stats[i] for i in picked] if run.stats else [],
            )
            for method, run in runs.items()
        }
        rows = {}
        for method, run in part.items():
            row = {
                "prompts": len(picked),
                "tokens_per_s": round(sum(run.tokens) / sum(run.seconds), 2),
            }
            over, median = ratios(run, part.get("vanilla"))
            if over is not None:
                row.update(over_vanilla=over, median_over_vanilla=median)
            if run.stats:
                row["tokens_per_forward"] = (
                    round(sum(run.tokens) / run.forwards, 3) if run.forwards else None
                )
            rows[method] = row
        out[kind] = rows
    return out


def kind_table(report: dict) -> str:
    """The figures per kind of request, one row a kind: each method's speed over the engine's
    vanilla and Ouroboros's tokens per forward."""
    kinds = report.get("by_kind")
    if not kinds:
        return ""
    methods = [m for m in report["methods"] if m != "vanilla"]
    labels = [report["methods"][m]["label"] for m in methods]
    lines = [
        "| kind | prompts | "
        + " | ".join(f"{label}, x engine vanilla" for label in labels)
        + " | Ouroboros tokens/forward |",
        "|---|---|" + "---|" * len(methods) + "---|",
    ]
    for kind, rows in kinds.items():
        cells = [
            f"{rows[m]['over_vanilla']:.2f}x" if rows[m].get("over_vanilla") else ""
            for m in methods
        ]
        tpf = rows.get("ouroboros", {}).get("tokens_per_forward")
        lines.append(
            f"| {kind} | {next(iter(rows.values()))['prompts']} | "
            + " | ".join(cells)
            + f" | {'' if tpf is None else f'{tpf:.2f}'} |"
        )
    return "\n".join(lines)


def save_chart(report: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = report["methods"]
    labels = [
        row["label"].replace("transformers ", "HF ").replace("engine ", "") for row in rows.values()
    ]
    speedups = [row["speedup"] or 0 for row in rows.values()]
    colours = ["#9aa0a6" if m in HF_METHODS else "#1a73e8" for m in rows]
    fig, ax = plt.subplots(figsize=(8, 3.6), dpi=120)
    bars = ax.barh(labels[::-1], speedups[::-1], color=colours[::-1])
    ax.axvline(1.0, color="black", linewidth=0.8)
    ax.bar_label(bars, labels=[f"{s:.2f}x" for s in speedups[::-1]], padding=3)
    how = "sampled" if report.get("sampling") else "greedy"
    ax.set_xlabel(f"speedup over transformers generate ({how}; total tokens / total time)")
    ax.set_title(
        f"{report['prompts']} prompts, {report['max_new_tokens']} new tokens, "
        f"{report.get('dtype', 'float32')}, {report['machine']}",
        fontsize=9,
    )
    ax.set_xlim(0, max(speedups) * 1.2 + 0.1)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
