"""Settings of the default pair compared by tokens per forward, rows per step and an estimated speed
over the engine's vanilla, on held-out chat requests past the bench's 20 (N of them, 16 by default),
128 tokens.

    PYTHONPATH=. python3 docs/bench-runs/smollm2-settings-estimate.py TEMPERATURE TRIALS.jsonl

One JSON object per line of TRIALS: the change to the preset (`{}`: the preset itself). Tokens per
forward and rows do not depend on the machine's load; the estimate prices each step (the first,
which reads the prompt, left out) by a verification cost that depends on its rows, measured in the
engine on the 2-core AVX-512 machine (38.3 ms up to 6 rows, then 1.55 ms a row; a vanilla token 38.6
ms), plus the draft's own measured milliseconds in that step; `est_avx2` prices the same steps as
the 2-core AVX2 machine's `forward_costs` did (46.5 ms for one row, about 2.4 ms a row past it, the
draft 1.3x slower). A comparison between settings, not a benchmark: the sampled estimates run above
the bench's measured ratios (vanilla's own sampling is not priced). TEMPERATURE 0 is greedy; above
it, top-p 0.95 and seed 7 + request index.
"""

import json
import os
import sys

import torch

from ouroboros_core import load_engine
from ouroboros_core.tools.bench import heldout_chat_requests

torch.set_num_threads(2)
temperature = float(sys.argv[1])
trials = [json.loads(line) for line in open(sys.argv[2]) if line.strip()]
count = int(os.environ.get("N", "16"))
prompts = heldout_chat_requests(20 + count)[20:]
engine = load_engine()
engine.generate(prompts[0]["prompt"], "ouroboros", 8)  # warm-up


def avx512(rows: int) -> float:
    return 38.3 + 1.55 * max(0, rows - 6)


def avx2(rows: int) -> float:
    return 46.5 + 2.4 * (rows - 1)


for change in trials:
    tokens = steps = rows = 0
    cost = cost2 = draft = 0.0
    for i, prompt in enumerate(prompts):
        sampling = dict(temperature=temperature, top_p=0.95, seed=7 + i) if temperature else {}
        result = engine.generate(prompt["prompt"], "ouroboros", 128, **change, **sampling)
        for event in result.events[1:]:
            n = 1 + len(event.trunk) + sum(map(len, event.branches))
            cost += avx512(n) + event.draft_ms
            cost2 += avx2(n) + 1.3 * event.draft_ms
            draft += event.draft_ms
            rows += n
            steps += 1
            tokens += len(event.committed)
    tpf = tokens / steps
    line = {
        "change": change,
        "tpf": round(tpf, 3),
        "rows": round(rows / steps, 2),
        "draft_ms": round(draft / steps, 2),
        "est_over_vanilla": round(tpf * 38.6 / (cost / steps), 3),
        "est_avx2": round(tpf * 46.5 / (cost2 / steps), 3),
    }
    print(json.dumps(line), flush=True)
