"""The command line: `python -m ouroboros_core generate ...` and
`python -m ouroboros_core bench ...`."""

from __future__ import annotations

import argparse
import json
import sys

from .cli_args import add_method_args, add_model_args, engine_from_args, method_options
from .config import METHODS, ConfigError
from .cpu import set_torch_threads
from .events import DoneEvent, Source, StepEvent
from .models import LoadError
from .tools.bench_cli import add_bench_parser

# ANSI colours per token source; the legend printed with the stats line names them.
COLOURS = {
    Source.DRAFT: "\033[32m",
    Source.POOL: "\033[35m",
    Source.PROMPT: "\033[36m",
    Source.TARGET: "",
}
RESET = "\033[0m"


def render_coloured(event: StepEvent, out) -> None:
    for token in event.committed:
        colour = COLOURS[token.source]
        out.write(f"{colour}{token.text}{RESET}" if colour else token.text)
    out.flush()


def stats_line(done: DoneEvent) -> str:
    s = done.stats
    return (
        f"{s.new_tokens} tokens in {s.seconds:.2f} s ({s.tokens_per_second:.1f} tok/s), "
        f"{s.target_forwards} target forwards ({s.tokens_per_forward:.2f} tokens each), "
        f"acceptance {s.acceptance_rate:.0%}, stopped by {done.stop_reason}"
    )


def cmd_generate(args) -> int:
    prompt = args.prompt if args.prompt != "-" else sys.stdin.read()
    engine = engine_from_args(args)
    if engine.chat and not args.raw and not (args.json or args.events):
        print(
            f"{engine.name}: the prompt is sent as a user's chat turn; the answer follows (--raw "
            f"sends the text as it is)\n",
            file=sys.stderr,
        )
    events = engine.stream(
        prompt, args.method, args.max_new_tokens, raw=args.raw, **method_options(args, args.method)
    )
    colour = sys.stdout.isatty() and not args.no_colour
    for event in events:
        if args.events:
            print(json.dumps(event.to_dict()), flush=True)
        elif isinstance(event, StepEvent) and not args.json:
            if colour:
                render_coloured(event, sys.stdout)
            else:
                sys.stdout.write("".join(t.text for t in event.committed))
                sys.stdout.flush()
        elif isinstance(event, DoneEvent):
            if args.json:
                print(
                    json.dumps(
                        {
                            "token_ids": list(event.token_ids),
                            "text": event.text,
                            "stop_reason": event.stop_reason,
                            "stats": event.stats.to_dict(),
                        }
                    )
                )
            elif not args.events:
                legend = (
                    "  [green: draft model, magenta: pool phrase, cyan: prompt lookup, "
                    "plain: target]"
                    if colour
                    else ""
                )
                print(f"\n\n{stats_line(event)}{legend}", file=sys.stderr)
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m ouroboros_core",
        description="Ouroboros speculative decoding on stock transformers models.",
    )
    sub = parser.add_subparsers(dest="command", required=True)
    gen = sub.add_parser("generate", help="decode one prompt and print the text, JSON or events")
    gen.add_argument("prompt", help="the prompt text, or - to read it from standard input")
    gen.add_argument("--method", default="ouroboros", choices=METHODS)
    gen.add_argument("--max-new-tokens", type=int, default=128)
    out = gen.add_mutually_exclusive_group()
    out.add_argument(
        "--json", action="store_true", help="print one JSON object: token_ids, text, stats"
    )
    out.add_argument("--events", action="store_true", help="print every event as a JSON line")
    gen.add_argument("--no-colour", action="store_true", help="plain text even on a terminal")
    gen.add_argument(
        "--raw",
        action="store_true",
        help="for a chat pair (the default): continue the prompt as it is instead of answering it "
        "as a user's chat turn",
    )
    add_model_args(gen)
    add_method_args(gen)
    gen.set_defaults(func=cmd_generate)
    add_bench_parser(sub)
    return parser


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    try:
        # A container's CPU quota, not the host's core count, before the first torch op.
        args.thread_choice = set_torch_threads()
        print(f"torch threads: {args.thread_choice}", file=sys.stderr)
        return args.func(args)
    except (ConfigError, LoadError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
