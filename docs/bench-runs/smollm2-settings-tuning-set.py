"""The default pair's Ouroboros settings around the preset's, greedy, 128 tokens, on broad training
requests the draft never saw answered (requests-train.jsonl rows with no answer in
answers-train.jsonl): a tuning set, so the bench's held-out requests stay untouched. One process,
2 threads; every setting on every prompt beside vanilla, in an order that rotates per prompt; each
output checked equal to vanilla's. Output: smollm2-settings-tuning-set.txt (docs/BENCHMARKS.md,
"The broad mix: what visitors ask").

    python3 docs/bench-runs/smollm2-settings-tuning-set.py 1          # one request of each kind
    python3 docs/bench-runs/smollm2-settings-tuning-set.py 2 lookup   # two of each, lookup lengths
"""

import json
import statistics
import sys
import time
from collections import defaultdict
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
from ouroboros_core import load_engine  # noqa: E402

AROUND = [
    {},
    {"max_trunk": 2},
    {"max_trunk": 4},
    {"max_trunk": 5},
    {"extend_above": 0.35},
    {"extend_above": 0.65},
    {"extend_chance": 0.45},
    {"extend_chance": 0.75},
    {"lookup": 4},
    {"lookup": 10},
    {"stored_answers": 4},
    {"stored_answers": 12},
    {"free_rows": 4},
    {"free_rows": 8},
    {"second_above": 0.3},
]
LOOKUP = [{}, {"lookup": 8}, {"lookup": 10}, {"lookup": 12}, {"lookup": 16}]


def tuning_requests(per_kind: int) -> list[dict]:
    broad = ROOT / "data" / "broad"
    answered = {json.loads(line)["id"] for line in open(broad / "answers-train.jsonl")}
    chosen = defaultdict(list)
    for line in open(broad / "requests-train.jsonl"):
        row = json.loads(line)
        if row["id"] not in answered and len(chosen[row["kind"]]) < per_kind:
            chosen[row["kind"]].append(row)
    return [row for rows in chosen.values() for row in rows]


def main() -> None:
    torch.set_num_threads(2)
    prompts = tuning_requests(int(sys.argv[1]))
    variants = LOOKUP if sys.argv[2:] == ["lookup"] else AROUND
    print(len(prompts), "prompts", flush=True)
    engine = load_engine("smollm2", watch_threads=False)
    engine.generate("Hello", "vanilla", 8)
    engine.generate("Hello", "ouroboros", 8)
    seconds, forwards, tokens = defaultdict(list), defaultdict(int), defaultdict(int)
    for i, prompt in enumerate(prompts):
        order = [None, *range(len(variants))]
        order = order[i % len(order) :] + order[: i % len(order)]
        outputs = {}
        for k in order:
            started = time.perf_counter()
            if k is None:
                result = engine.generate(prompt["prompt"], "vanilla", 128)
            else:
                result = engine.generate(prompt["prompt"], "ouroboros", 128, **variants[k])
            seconds[k].append(time.perf_counter() - started)
            forwards[k] += result.stats.target_forwards
            tokens[k] += len(result.token_ids)
            outputs[k] = result.token_ids
        assert all(out == outputs[None] for out in outputs.values()), f"prompt {i}: tokens differ"
    vanilla = seconds[None]
    for k, options in enumerate(variants):
        ratios = [a / b for a, b in zip(vanilla, seconds[k])]
        line = {
            "options": options,
            "speedup": round(sum(vanilla) / sum(seconds[k]), 3),
            "median": round(statistics.median(ratios), 3),
            "tokens_per_forward": round(tokens[k] / forwards[k], 3),
        }
        print(json.dumps(line), flush=True)


if __name__ == "__main__":
    main()
