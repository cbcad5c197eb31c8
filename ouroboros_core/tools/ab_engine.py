"""The engine at another git revision against this one, in one process, on the same models and
prompts.

    python3 -m ouroboros_core.tools.ab_engine --rev 68a2132 --out docs/bench-runs/layout-ab.json
    # a draft against its successor:
    python3 -m ouroboros_core.tools.ab_engine --rev HEAD --old-draft RUN/draft
    # on what visitors ask (the broad held-out requests), old/new per kind too:
    python3 -m ouroboros_core.tools.ab_engine --rev HEAD --old-draft RUN/draft --broad --limit 26

Separate benchmark runs drift with the machine; here the two engines alternate prompt by prompt (the
order flips every prompt and round), share the loaded target and draft, and must write the same
tokens, or part only where the target's verdict finds a float tie (listed as parted_at_ties).
Printed: old time over new time, in total and as the median of per-prompt ratios (above 1: this
revision is faster).
"""

from __future__ import annotations

import argparse
import importlib
import json
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from io import BytesIO
from pathlib import Path

from ..models import load_engine, load_model
from ..verdict import CALM
from .bench import broad_requests, humaneval_prompts
from .corpus import heldout_prompts

ROOT = Path(__file__).resolve().parents[2]


def engine_class_at(rev: str, folder: Path):
    """Engine as it was at `rev`, imported as the package `ouroboros_rev` (the engine imports
    relatively)."""
    archive = subprocess.run(
        ["git", "archive", rev, "ouroboros_core"], cwd=ROOT, capture_output=True, check=True
    ).stdout
    with tarfile.open(fileobj=BytesIO(archive)) as tar:
        tar.extractall(folder, filter="data")
    (folder / "ouroboros_core").rename(folder / "ouroboros_rev")
    sys.path.insert(0, str(folder))
    return importlib.import_module("ouroboros_rev.engine").Engine


def alternate(
    engines: dict,
    prompts: list[str],
    method: str,
    max_new_tokens: int,
    rounds: int,
    sampling: dict | None = None,
    kinds: list[str] | None = None,
) -> dict:
    """sampling: temperature, top_p and a first seed; prompt i samples with seed + i in both
    revisions. kinds: each prompt's kind, for the ratio per kind."""
    seconds = {name: [] for name in engines}
    # target forwards, first round: equal where drafting did not change
    forwards = {name: 0 for name in engines}
    parted = []  # prompts where the two parted at a float tie: [index, token, verdict's words]
    for round_index in range(rounds):
        for index, prompt in enumerate(prompts):
            order = list(engines) if (index + round_index) % 2 == 0 else list(engines)[::-1]
            outputs = {}
            options = {**sampling, "seed": sampling["seed"] + index} if sampling else {}
            for name in order:
                started = time.perf_counter()
                result = engines[name].generate(prompt, method, max_new_tokens, **options)
                seconds[name].append(time.perf_counter() - started)
                outputs[name] = result.token_ids
                forwards[name] += result.stats.target_forwards if round_index == 0 else 0
            if outputs["old"] != outputs["new"]:
                parted.append(tie_or_fail(engines["new"], prompt, outputs, options, index))
    ratios = [old / new for old, new in zip(seconds["old"], seconds["new"])]
    result = {
        "old_over_new_total": round(sum(seconds["old"]) / sum(seconds["new"]), 4),
        "old_over_new_median": round(statistics.median(ratios), 4),
        "runs": len(ratios),
        "forwards": forwards,
        "parted_at_ties": parted,
        "seconds": {name: [round(s, 4) for s in values] for name, values in seconds.items()},
    }
    if kinds:
        result["old_over_new_by_kind"] = by_kind(seconds, kinds * rounds)
    return result


def tie_or_fail(engine, prompt: str, outputs: dict, options: dict, index: int) -> list:
    """Two outputs that differ: [index, first difference, the verdict's words] where they part at a
    float tie or a rounding boundary of the target (a different tree shape moves its scores in the
    last bits: docs/ARCHITECTURE.md, "Lossless, in detail"), else an AssertionError. options: the
    request's sampling (temperature, top_p, seed), empty when greedy."""
    verdict = engine.verdict(prompt, outputs["old"], outputs["new"], **options)
    assert verdict.kind in CALM, (
        f"the two revisions write different tokens on prompt {index}: {verdict.kind}"
    )
    return [index, verdict.first_difference, verdict.kind]


def by_kind(seconds: dict, kinds: list[str]) -> dict:
    """Old time over new time per kind of prompt (kinds: each run's, in the runs' order)."""
    totals: dict[str, list[float]] = {}
    for kind, old, new in zip(kinds, seconds["old"], seconds["new"]):
        pair = totals.setdefault(kind, [0.0, 0.0])
        pair[0], pair[1] = pair[0] + old, pair[1] + new
    return {kind: round(old / new, 4) for kind, (old, new) in sorted(totals.items())}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--rev", required=True, help="the git revision to compare with the working tree"
    )
    parser.add_argument("--methods", default="ouroboros,vanilla")
    parser.add_argument(
        "--limit",
        type=int,
        default=20,
        help="how many prompts (HumanEval, or held-out with --heldout)",
    )
    chosen = parser.add_mutually_exclusive_group()
    chosen.add_argument(
        "--heldout",
        action="store_true",
        help="prompts from held-out Python (the bench's --heldout set) instead of HumanEval",
    )
    chosen.add_argument(
        "--broad",
        action="store_true",
        help="the broad held-out chat requests (the bench's --broad set, kinds taking turns), with "
        "old/new per kind",
    )
    parser.add_argument("--max-new-tokens", type=int, default=128)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument(
        "--temperature", type=float, help="sample at this temperature (default: greedy)"
    )
    parser.add_argument("--top-p", type=float, default=1.0)
    parser.add_argument(
        "--seed", type=int, default=1, help="prompt i samples with seed S + i in both revisions"
    )
    parser.add_argument(
        "--old-draft",
        type=Path,
        help="the old side drafts with this folder's model (the draft the working tree's replaced)",
    )
    parser.add_argument(
        "--target", default=None, help="a preset (default: the default pair; demo: the tiny one)"
    )
    parser.add_argument("--out", type=Path)
    return parser


def old_engine(args: argparse.Namespace, base, old_draft, folder: Path):
    """The engine at --rev around the loaded target, old_draft and the same preset settings."""
    engine_class = engine_class_at(args.rev, folder)
    return engine_class(
        base.target,
        old_draft,
        base.tokenizer,
        name=base.name,
        chat=base.chat,
        defaults=base.defaults,
    )


def prompt_items(args: argparse.Namespace) -> list[dict]:
    if args.broad:
        return broad_requests(args.limit)
    return (heldout_prompts if args.heldout else humaneval_prompts)(args.limit)


def compare(args: argparse.Namespace, engines: dict, sampling: dict | None) -> dict:
    """Every method of --methods alternated between the two engines; the report, printed as it
    goes."""
    items = prompt_items(args)
    prompts = [item["prompt"] for item in items]
    kinds = [item["kind"] for item in items] if args.broad else None
    for engine in engines.values():
        engine.generate(prompts[0], "ouroboros", 16)  # warm-up
    report = {
        "rev": args.rev,
        "head": subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True
        ).stdout.strip(),
        "prompts": len(prompts),
        "prompt_set": "broad" if args.broad else "heldout" if args.heldout else "humaneval",
        "max_new_tokens": args.max_new_tokens,
        "sampling": sampling,
        "old_draft": str(args.old_draft) if args.old_draft else None,
        "methods": {},
    }
    for method in args.methods.split(","):
        report["methods"][method] = alternate(
            engines, prompts, method, args.max_new_tokens, args.rounds, sampling, kinds
        )
        result = report["methods"][method]
        print(
            f"{method}: old/new {result['old_over_new_total']} in total, "
            f"{result['old_over_new_median']} median per prompt ({result['runs']} runs); "
            f"target forwards old {result['forwards']['old']}, new {result['forwards']['new']}",
            flush=True,
        )
    return report


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    sampling = (
        {"temperature": args.temperature, "top_p": args.top_p, "seed": args.seed}
        if args.temperature
        else None
    )
    base = load_engine(args.target, watch_threads=False)
    old_draft = base.draft
    if args.old_draft:
        old_draft = load_model(
            args.old_draft, base.target.device, base.target.dtype, trust_remote_code=False
        )
    with tempfile.TemporaryDirectory() as folder:
        old = old_engine(args, base, old_draft, Path(folder))
        report = compare(args, {"new": base, "old": old}, sampling)
    if args.out:
        args.out.write_text(json.dumps(report, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
