"""Settings tried against the default pair's preset on held-out requests 20..29 (not the bench's
20).

    PYTHONPATH=. python3 docs/bench-runs/smollm2-settings-sweep.py THREADS TEMPERATURE TRIALS.jsonl

One JSON object per line of TRIALS: the change to the preset (`{}`: the preset itself). Each trial
races vanilla and Ouroboros over the 10 requests, 96 tokens, in one process; one line printed each.
TEMPERATURE 0 is greedy; above 0, top-p 0.95 and seed 7."""

import json
import sys
import time

import torch

from ouroboros_core import load_engine
from ouroboros_core.tools.bench import heldout_chat_requests, run_bench

threads, temperature, trials_file = int(sys.argv[1]), float(sys.argv[2]), sys.argv[3]
torch.set_num_threads(threads)
engine = load_engine("smollm2")
prompts = heldout_chat_requests(30)[20:30]
sampling = {"temperature": temperature, "top_p": 0.95, "seed": 7} if temperature else None
base = dict(engine.defaults["ouroboros"])
trials = [json.loads(line) for line in open(trials_file) if line.strip()]
engine.generate(prompts[0]["prompt"], "ouroboros", 8)  # warm-up
for change in trials:
    started = time.time()
    report = run_bench(
        engine,
        prompts,
        ["vanilla", "ouroboros"],
        96,
        {"ouroboros": {**base, **change}},
        progress=False,
        sampling=sampling,
    )
    ours, plain = report["methods"]["ouroboros"], report["methods"]["vanilla"]
    print(
        json.dumps(
            {
                "change": change,
                "over_vanilla": round(ours["tokens_per_s"] / plain["tokens_per_s"], 3),
                "median_over_vanilla": ours.get("median_over_vanilla"),
                "tpf": ours["tokens_per_forward"],
                "mismatches": ours["mismatches"],
                "s": round(time.time() - started),
            }
        ),
        flush=True,
    )
