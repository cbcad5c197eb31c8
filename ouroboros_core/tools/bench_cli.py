"""The `bench` command: its arguments, the prompts and methods they pick, and the report it prints
and writes (`python3 -m ouroboros_core bench --help`)."""

from __future__ import annotations

import json
from pathlib import Path

from ..cli_args import add_method_args, add_model_args, engine_from_args, method_options
from ..config import SAMPLING_OPTIONS as sampling_keys
from ..config import ConfigError, SamplingConfig
from .bench import (
    ALL_METHODS,
    LONG_REQUESTS,
    WARM,
    broad_requests,
    heldout_chat_requests,
    humaneval_prompts,
    jsonl_prompts,
    run_bench,
)
from .bench_report import kind_table, markdown_table, provenance, save_chart
from .bench_sweep import sweep
from .corpus import heldout_prompts


def add_bench_parser(sub) -> None:
    bench = sub.add_parser(
        "bench", help="benchmark every method side by side on HumanEval or a JSONL file"
    )
    bench.add_argument("--limit", type=int, help="first N prompts only")
    add_prompt_sets(bench)
    bench.add_argument("--max-new-tokens", type=int, default=128)
    bench.add_argument("--methods", default=",".join(ALL_METHODS), help="comma-separated subset")
    bench.add_argument(
        "--lookup-tokens", type=int, default=10, help="transformers prompt_lookup_num_tokens"
    )
    bench.add_argument("--out", type=Path, help="write the report as JSON here")
    bench.add_argument("--chart", type=Path, help="write a PNG chart of the speedups here")
    bench.add_argument(
        "--sweep", action="store_true", help="search Ouroboros settings and report the best"
    )
    # --temperature and --top-p come with the knobs (add_method_args); --seed means more here
    bench.add_argument(
        "--seed", type=int, default=0, help="prompt i samples with seed S + i in every method"
    )
    bench.add_argument(
        "--warm-pool",
        action="store_true",
        help="add a row: Ouroboros with one phrase pool kept across the prompts",
    )
    bench.add_argument("--no-progress", action="store_true")
    add_model_args(bench)
    add_method_args(bench)
    bench.set_defaults(func=cmd_bench)


def add_prompt_sets(bench) -> None:
    """The bench's prompt sets, one at a time (HumanEval when none is named)."""
    prompts = bench.add_mutually_exclusive_group()
    prompts.add_argument(
        "--prompts", type=Path, help='a JSONL file of {"prompt": ...} objects instead of HumanEval'
    )
    prompts.add_argument(
        "--heldout",
        action="store_true",
        help="function stubs from the installed pip's source (Python the pair never saw) instead",
    )
    prompts.add_argument(
        "--requests",
        action="store_true",
        help="held-out chat requests about pip's code (write, explain, list, a class, JSON, tests; "
        "none in the default draft's training) instead, for a chat pair (a preset, or --chat)",
    )
    prompts.add_argument(
        "--broad",
        action="store_true",
        help="the broad held-out chat requests (thirteen kinds: writing, role-play, reasoning, "
        "maths, coding, extraction, science, humanities, translation, summarization, questions, "
        "word problems, answers from a passage; --limit 65 takes 5 of each) instead, reported per "
        "kind too",
    )
    prompts.add_argument(
        "--long",
        action="store_true",
        help="held-out summaries and answers over a long passage (2,000 to 3,000 tokens each) "
        "instead, for a chat pair (a preset, or --chat): where verification runs over a long "
        "context",
    )


def cmd_bench(args) -> int:
    methods = methods_from_args(args)
    if args.limit is not None and args.limit < 1:
        raise ConfigError(f"--limit must be at least 1, got {args.limit}")
    prompts, prompt_set = prompts_from_args(args)
    sampling = sampling_from_args(args)
    if args.warm_pool:
        methods.append(WARM)
    engine = engine_from_args(args, watch_threads=False)
    if args.sweep:
        report = sweep(
            engine, prompts, args.max_new_tokens, progress=not args.no_progress, sampling=sampling
        )
        print("best:", json.dumps(report["best"]))
    else:
        # The sampling settings are the bench's own, the same for every method.
        options = {
            method: {
                k: v for k, v in method_options(args, method).items() if k not in sampling_keys
            }
            for method in ("speculative", "ouroboros")
        }
        report = run_bench(
            engine,
            prompts,
            methods,
            args.max_new_tokens,
            options,
            args.lookup_tokens,
            progress=not args.no_progress,
            sampling=sampling,
        )
        report["prompt_set"] = prompt_set
        print(markdown_table(report))
        if report.get("by_kind"):
            print("\n" + kind_table(report))
        if args.chart:
            save_chart(report, args.chart)
    if args.out:
        args.out.write_text(json.dumps({"provenance": provenance(engine), **report}, indent=1))
    return 0


def methods_from_args(args) -> list[str]:
    """--methods as a list, every name one the bench runs."""
    methods = [m.strip() for m in args.methods.split(",") if m.strip()]
    unknown = [m for m in methods if m not in ALL_METHODS]
    if unknown or not methods:
        raise ConfigError(
            f"--methods takes a comma-separated subset of {', '.join(ALL_METHODS)}; got {unknown}"
        )
    return methods


def prompts_from_args(args) -> tuple[list[dict], str]:
    """The prompts the arguments pick, and the name of their set for the report."""
    if args.heldout:
        return heldout_prompts(args.limit), "Held-out (pip) function"
    if args.requests:
        return heldout_chat_requests(args.limit), "Held-out chat request"
    if args.broad:
        return broad_requests(args.limit), "Broad held-out request"
    if args.long:
        return jsonl_prompts(LONG_REQUESTS, args.limit), "Long held-out request"
    if args.prompts:
        return jsonl_prompts(args.prompts, args.limit), args.prompts.name
    return humaneval_prompts(args.limit), "HumanEval-style"


def sampling_from_args(args) -> dict | None:
    """{temperature, top_p, seed} to sample with (a bad setting fails before any model loads), or
    None for greedy."""
    if args.temperature:
        sampling = {
            "temperature": args.temperature,
            "top_p": 1.0 if args.top_p is None else args.top_p,
            "seed": args.seed,
        }
        SamplingConfig(**sampling)
        return sampling
    if args.top_p is not None:
        raise ConfigError("--top-p needs --temperature above 0 (greedy decoding keeps no nucleus)")
    return None
