"""The default pair's Ouroboros with and without its stored answers (knob stored_answers 8 / 0),
request by request in one process, on held-out requests 20-29 (past the bench's 20), 96 tokens.

    PYTHONPATH=. python3 docs/bench-runs/smollm2-stored-answers-ab.py        # greedy
    PYTHONPATH=. python3 docs/bench-runs/smollm2-stored-answers-ab.py 0.7    # sampled, top-p 0.95
"""

import sys
import time

import torch

from ouroboros_core import load_engine
from ouroboros_core.tools.chat_requests import heldout_requests

torch.set_num_threads(2)
engine = load_engine()
temperature = float(sys.argv[1]) if len(sys.argv) > 1 else 0.0
sampling = dict(temperature=temperature, top_p=0.95) if temperature else {}
settings = [dict(stored_answers=0), dict(stored_answers=8)]
totals = [[0, 0, 0.0, 0] for _ in settings]  # tokens, forwards, seconds, rows past the first
for i, request in enumerate(heldout_requests()[20:30]):
    outputs = []
    for total, options in zip(totals, settings):
        seed = dict(seed=1 + i) if temperature else {}
        started = time.perf_counter()
        result = engine.generate(request["prompt"], "ouroboros", 96, **options, **sampling, **seed)
        total[2] += time.perf_counter() - started
        total[0] += len(result.token_ids)
        total[1] += result.stats.target_forwards
        total[3] += sum(len(e.trunk) + sum(map(len, e.branches)) for e in result.events)
        outputs.append(result.token_ids)
    assert outputs[0] == outputs[1], f"request {i}: the lanes differ"
for options, (tokens, forwards, seconds, rows) in zip(settings, totals):
    print(
        f"{options}: {tokens / forwards:.3f} tokens per forward, {1 + rows / forwards:.2f} rows "
        f"per forward, {seconds:.1f} s"
    )
