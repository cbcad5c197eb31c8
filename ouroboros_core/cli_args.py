"""Command-line arguments shared by the CLI's commands (generate, bench): the pair to load and the
method's knobs, mapped onto load_engine and the engine's options."""

from __future__ import annotations

import argparse
import os


def add_model_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--target", help="preset name, local folder or Hub id (default: $OUROBOROS_PRESET, else "
                                          "smollm2; demo: the tiny pair)")
    parser.add_argument("--draft", help="local folder or Hub id of the draft (when --target is not a preset)")
    parser.add_argument("--device", help="cpu, cuda, cuda:N (default: cuda when available)")
    parser.add_argument("--dtype", choices=["float32", "bfloat16", "float16"])
    parser.add_argument("--device-map", choices=["auto"], help="spread the target over GPUs with accelerate")
    parser.add_argument("--trust-remote-code", action="store_true")


def add_method_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--gamma", type=int, help="minimum draft length per target forward")
    parser.add_argument("--window", type=int, help="Ouroboros lookahead window columns W")
    parser.add_argument("--ngram", type=int, help="Ouroboros n-gram size N (phrases of N-1 tokens)")
    parser.add_argument("--guess-set", type=int, help="Ouroboros phrases kept per key token G")
    parser.add_argument("--branches", type=int, help="Ouroboros pool phrases appended as branches k")
    parser.add_argument("--lookup", type=int, help="Ouroboros context-lookup branch length L (0: none)")
    parser.add_argument("--draft-candidates", type=int,
                        help="Ouroboros pool phrases the draft checks inside its own forward (0: none)")
    parser.add_argument("--max-trunk", type=int, help="Ouroboros: the most draft tokens a sure draft goes on to")
    parser.add_argument("--extend-above", type=float,
                        help="Ouroboros: past gamma, draft on while the latest token's probability is above this")
    parser.add_argument("--extend-chance", type=float,
                        help="Ouroboros, sampled: draft on while the whole trunk's estimated chance is above this "
                             "times the tokens a step committed lately")
    parser.add_argument("--second-above", type=float,
                        help="Ouroboros: verify the draft's next choices whose chance of standing is above this "
                             "(1: never)")
    parser.add_argument("--lookup-above", type=float,
                        help="Ouroboros, sampled: end the lookup branch and pool phrases where a token's estimated "
                             "chance of standing is at most this (0: always L tokens)")


def method_options(args, method: str) -> dict:
    options = {}
    for name in ("temperature", "top_p", "seed"):
        if getattr(args, name, None) is not None:
            options[name] = getattr(args, name)
    knobs = {"speculative": ["gamma"], "ouroboros": ["gamma", "window", "ngram", "guess_set", "branches", "lookup",
                                                    "draft_candidates", "max_trunk", "extend_above", "extend_chance",
                                                    "second_above", "lookup_above"]}
    for name in knobs.get(method, []):
        value = getattr(args, name, None)
        if value is not None:
            options[name] = value
    return options


def engine_from_args(args):
    from .models import load_engine

    # As the app: OUROBOROS_PRESET chooses the pair where --target does not.
    target = args.target or os.environ.get("OUROBOROS_PRESET") or None
    return load_engine(target, args.draft, args.device, dtype=args.dtype, device_map=args.device_map,
                       trust_remote_code=args.trust_remote_code)
