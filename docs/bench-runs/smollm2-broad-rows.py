"""Which rows of a verification stand: for each proposer (the draft's trunk, context lookup's copy,
the stored answers' walk, the draft's other choices), the rows it offers per target forward at each
depth and the share of them the target kept, over broad held-out requests raced against the
engine's vanilla (docs/BENCHMARKS.md, "The broad mix: what visitors ask"; output:
smollm2-broad-rows.txt).

    python3 docs/bench-runs/smollm2-broad-rows.py --requests 13
    python3 docs/bench-runs/smollm2-broad-rows.py --requests 26 --temperature 0.7
"""

import argparse
import collections
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from ouroboros_core import drafters  # noqa: E402
from ouroboros_core.models import load_engine  # noqa: E402
from ouroboros_core.tools.bench import broad_requests  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--requests", type=int, default=13)
    parser.add_argument("--temperature", type=float, default=0.0)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    engine = load_engine("smollm2", watch_threads=False)
    rows = collections.defaultdict(lambda: [0] * 16)
    kept = collections.defaultdict(lambda: [0] * 16)
    steps = [0]
    observe = drafters.Ouroboros.observe

    def counting(self, outcome):
        steps[0] += 1
        proposal, verdict = outcome.proposal, outcome.verdict
        for depth in range(len(proposal.trunk)):
            rows["trunk"][depth] += 1
            kept["trunk"][depth] += depth < verdict.trunk_accepted
        for b, (tokens, owner) in enumerate(zip(proposal.branches, proposal.branch_owners)):
            for depth in range(len(tokens)):
                rows[owner][depth] += 1
                kept[owner][depth] += verdict.branch == b and depth < verdict.branch_accepted
        observe(self, outcome)

    drafters.Ouroboros.observe = counting
    vanilla = ouroboros = 0.0
    for i, request in enumerate(broad_requests(args.requests)):
        sampling = {}
        if args.temperature:
            sampling = {"temperature": args.temperature, "top_p": 0.95, "seed": 1 + i}
        vanilla += engine.generate(request["prompt"], "vanilla", 128, **sampling).stats.seconds
        ouroboros += engine.generate(request["prompt"], "ouroboros", 128, **sampling).stats.seconds
    print(f"Ouroboros {vanilla / ouroboros:.3f}x vanilla, {steps[0]} target forwards")
    print("proposer: per depth, rows per forward : share kept")
    for owner in rows:
        depths = [d for d in range(16) if rows[owner][d]]
        cells = [
            f"{rows[owner][d] / steps[0]:.2f}:{kept[owner][d] / rows[owner][d]:.2f}" for d in depths
        ]
        print(f"{owner:8s}", " ".join(cells))


if __name__ == "__main__":
    main()
