"""transformers' SDPA against the tree attention (ouroboros_core/attention.py) on the default pair:
one engine, the target's attention switched per request, the order flipped every request and round.

    PYTHONPATH=. python3 docs/bench-runs/smollm2-tree-attention-ab.py THREADS

Greedy Ouroboros on held-out requests 20-27, 96 tokens, two rounds; both must write the same
tokens."""

import json
import statistics
import sys
import time

import torch

from ouroboros_core import load_engine
from ouroboros_core.attention import NAME
from ouroboros_core.tools.bench import heldout_chat_requests

threads = int(sys.argv[1])
torch.set_num_threads(threads)
engine = load_engine("smollm2")
prompts = [request["prompt"] for request in heldout_chat_requests(30)[20:28]]
engine.generate(prompts[0], "ouroboros", 8)  # warm-up
seconds = {"sdpa": [], NAME: []}
for round_index in range(2):
    for index, prompt in enumerate(prompts):
        order = ["sdpa", NAME] if (index + round_index) % 2 == 0 else [NAME, "sdpa"]
        tokens = {}
        for attention in order:
            engine.target.set_attn_implementation(attention)
            started = time.perf_counter()
            tokens[attention] = engine.generate(prompt, "ouroboros", 96).token_ids
            seconds[attention].append(time.perf_counter() - started)
        assert tokens["sdpa"] == tokens[NAME], (
            f"request {index}: the two attentions wrote different tokens"
        )
ratios = [a / b for a, b in zip(seconds["sdpa"], seconds[NAME])]
print(
    json.dumps(
        {
            "threads": threads,
            "sdpa_over_tree_total": round(sum(seconds["sdpa"]) / sum(seconds[NAME]), 3),
            "median_per_request": round(statistics.median(ratios), 3),
            "runs": len(ratios),
            "identical": True,
        }
    )
)
