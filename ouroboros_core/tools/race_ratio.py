"""Ouroboros over vanilla as the app's `/race` measures it, through gradio_client, on HumanEval
prompts.

    python3 -m ouroboros_core.tools.race_ratio --max-new-tokens 32,128 --rounds 3 --out race.json
    # an app already running:
    python3 -m ouroboros_core.tools.race_ratio --url http://127.0.0.1:7860/
    # quiet, then busy:
    python3 -m ouroboros_core.tools.race_ratio --neighbour --rounds 3 --max-new-tokens 128

Each race's lanes report their own compute seconds (the race interleaves them on one device);
printed per length and round: the total ratio, the median of per-prompt ratios, and how many races
wrote identical tokens. Compare with the benchmark's Ouroboros over its vanilla. With --neighbour
every round runs twice: on the quiet machine, then beside another torch job with its default threads
(a loop of matrix products), as a laptop's browser or a Space's neighbours load the machine while a
visitor watches.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
from pathlib import Path

from .bench import heldout_chat_requests, humaneval_prompts
from .soak import start_app
from .soak_phases import client


def measure(url: str, prompts: list[str], max_new_tokens: int) -> dict:
    api = client(url)
    vanilla, ouroboros, ratios, identical = 0.0, 0.0, [], 0
    for prompt in prompts:
        final = api.predict(prompt, max_new_tokens, api_name="/race")
        v, o = final["vanilla"]["stats"]["seconds"], final["ouroboros"]["stats"]["seconds"]
        vanilla, ouroboros = vanilla + v, ouroboros + o
        ratios.append(v / o)
        identical += final["vanilla"]["token_ids"] == final["ouroboros"]["token_ids"]
    return {
        "total": round(vanilla / ouroboros, 3),
        "median": round(statistics.median(ratios), 3),
        "identical": identical,
        "races": len(prompts),
    }


NEIGHBOUR = "import torch\na = torch.randn(1024, 1024)\nwhile True:\n    a @ a\n"


def rounds(url: str, prompts: list[str], lengths: list[int], count: int, neighbour: bool) -> dict:
    """Each round, each length: quiet, then (with `neighbour`) with the neighbour running."""
    report = {}
    for round_index in range(count):
        for n in lengths:
            for busy in (False, True) if neighbour else (False,):
                job = subprocess.Popen([sys.executable, "-c", NEIGHBOUR]) if busy else None
                try:
                    figures = measure(url, prompts, n)
                finally:
                    if job is not None:
                        job.kill()
                        job.wait()
                key = f"{n} busy" if busy else str(n)
                report.setdefault(key, []).append(figures)
                print(
                    f"{key} tokens, round {round_index + 1}: "
                    f"Ouroboros/vanilla {figures['total']}x in total, "
                    f"{figures['median']}x median per prompt, "
                    f"{figures['identical']}/{figures['races']} identical",
                    flush=True,
                )
    return report


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--url", help="an app already running (default: start app.py on a free loopback port)"
    )
    parser.add_argument("--max-new-tokens", default="32,128", help="comma-separated lengths")
    parser.add_argument("--limit", type=int, default=20, help="HumanEval prompts")
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--out", type=Path)
    parser.add_argument(
        "--neighbour", action="store_true", help="also race beside another torch job"
    )
    parser.add_argument(
        "--chat",
        action="store_true",
        help="the held-out chat requests (bench --requests) instead of HumanEval, for a chat pair",
    )
    args = parser.parse_args(argv)
    lengths = [int(n) for n in args.max_new_tokens.split(",")]
    items = heldout_chat_requests(args.limit) if args.chat else humaneval_prompts(args.limit)
    prompts = [item["prompt"] for item in items]
    process = None
    url = args.url
    if url is None:
        process, url, _ = start_app(queue_size=16, max_new_tokens=max(lengths), timeout_s=300)
    try:
        report = rounds(url, prompts, lengths, args.rounds, args.neighbour)
    finally:
        if process is not None:
            process.terminate()
            process.wait(timeout=30)
    if args.out:
        args.out.write_text(json.dumps(report, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
