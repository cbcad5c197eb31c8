"""Copies that grow while whole copies stand (`lookup_grow`) against copies of L tokens, on the
default pair: each broad held-out request raced both ways in one process, the order alternating,
the tokens asserted equal (docs/BENCHMARKS.md, "The preset's settings"; output:
smollm2-lookup-grow-ab.txt).

    python3 docs/bench-runs/smollm2-lookup-grow-ab.py --grow 48 --requests 65
    python3 docs/bench-runs/smollm2-lookup-grow-ab.py --grow 48 --requests 26 --new-tokens 256
    python3 docs/bench-runs/smollm2-lookup-grow-ab.py --grow 48 --requests 26 --temperature 0.7
"""

import argparse
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from ouroboros_core.models import load_engine  # noqa: E402
from ouroboros_core.tools.bench import broad_requests  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--grow", type=int, default=48)
    parser.add_argument("--requests", type=int, default=65)
    parser.add_argument("--new-tokens", type=int, default=128)
    parser.add_argument("--temperature", type=float, default=0.0)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    engine = load_engine("smollm2", watch_threads=False)
    requests = broad_requests(args.requests)
    engine.generate(requests[0]["prompt"], "ouroboros", 16)  # warm
    arms = {"L": {"lookup_grow": 0}, "grown": {"lookup_grow": args.grow}}
    seconds, forwards, ratios, by_kind = dict.fromkeys(arms, 0.0), dict.fromkeys(arms, 0), [], {}
    for i, request in enumerate(requests):
        sampling = {}
        if args.temperature:
            sampling = {"temperature": args.temperature, "top_p": 0.95, "seed": 1 + i}
        took, tokens = {}, {}
        for arm in list(arms)[:: 1 if i % 2 == 0 else -1]:
            started = time.perf_counter()
            result = engine.generate(
                request["prompt"], "ouroboros", args.new_tokens, **sampling, **arms[arm]
            )
            took[arm], tokens[arm] = time.perf_counter() - started, result.token_ids
            seconds[arm] += took[arm]
            forwards[arm] += result.stats.target_forwards
        assert tokens["L"] == tokens["grown"], request["id"]
        ratios.append(took["L"] / took["grown"])
        by_kind.setdefault(request["kind"], []).append(ratios[-1])
    print(
        f"lookup_grow {args.grow}, {args.requests} requests, {args.new_tokens} tokens, "
        f"temperature {args.temperature}: L/grown time {seconds['L'] / seconds['grown']:.3f} "
        f"(median request {statistics.median(ratios):.3f}), "
        f"forwards {forwards['L']} -> {forwards['grown']}"
    )
    for kind, values in by_kind.items():
        print(f"  {kind:14s} {statistics.median(values):.3f} ", *(f"{v:.2f}" for v in values))


if __name__ == "__main__":
    main()
