"""Command-line arguments shared by the CLI's commands (generate, bench): the pair to load, the
sampling options and the method's knobs, mapped onto load_engine and the engine's options."""

from __future__ import annotations

import argparse
import os

from .config import METHOD_CONFIGS, Knob, SamplingConfig, knobs


def add_model_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--target",
        help="preset name, local folder or Hub id (default: "
        "$OUROBOROS_PRESET, else smollm2; demo: the tiny pair)",
    )
    parser.add_argument(
        "--draft", help="local folder or Hub id of the draft (when --target is not a preset)"
    )
    parser.add_argument("--device", help="cpu, cuda, cuda:N (default: cuda when available)")
    parser.add_argument("--dtype", choices=["float32", "bfloat16", "float16"])
    parser.add_argument(
        "--device-map", choices=["auto"], help="spread the target over GPUs with accelerate"
    )
    parser.add_argument("--trust-remote-code", action="store_true")
    parser.add_argument(
        "--chat",
        action="store_true",
        help="send each prompt as a user's turn through the target tokenizer's chat template (a "
        "preset sets this itself; give it for your own instruct pair)",
    )


def flagged_knobs() -> dict[str, Knob]:
    """The knobs the CLI has a flag for: every method's knob that has its help (config.py), one per
    name (Speculative's gamma is set by Ouroboros' --gamma)."""
    return {
        name: setting
        for config_type in METHOD_CONFIGS.values()
        if config_type
        for name, setting in knobs(config_type).items()
        if setting.cli
    }


def add_method_args(parser: argparse.ArgumentParser) -> None:
    """A flag for each sampling option (but one the command gives a meaning of its own, declared
    before: bench's --seed S seeds prompt i with S + i) and each flagged knob (flagged_knobs)."""
    for setting in knobs(SamplingConfig).values():
        try:
            parser.add_argument(setting.flag, type=setting.kind, help=setting.cli)
        except argparse.ArgumentError:  # the command's own flag of that name stands
            pass
    for setting in flagged_knobs().values():
        parser.add_argument(setting.flag, type=setting.kind, help=setting.cli)


def method_options(args, method: str) -> dict:
    """The sampling options and the method's knobs given on the command line (the rest keep their
    defaults)."""
    config_type = METHOD_CONFIGS.get(method)
    names = list(knobs(SamplingConfig)) + (list(knobs(config_type)) if config_type else [])
    return {name: getattr(args, name) for name in names if getattr(args, name, None) is not None}


def engine_from_args(args, watch_threads: bool = True):
    """The pair the arguments name; watch_threads as load_engine's (a benchmark keeps its threads
    fixed)."""
    from .models import LoadError, load_engine

    # As the app: OUROBOROS_PRESET chooses the pair where --target does not.
    target = args.target or os.environ.get("OUROBOROS_PRESET") or None
    engine = load_engine(
        target,
        args.draft,
        args.device,
        dtype=args.dtype,
        device_map=args.device_map,
        trust_remote_code=args.trust_remote_code,
        chat=True if args.chat else None,
        watch_threads=watch_threads,
    )
    if args.chat and not engine.chat:
        raise LoadError(
            f"--chat: {engine.name}'s tokenizer has no chat template; leave --chat out to continue "
            "the prompts as they are"
        )
    return engine
