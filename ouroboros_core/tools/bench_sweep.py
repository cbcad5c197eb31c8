"""The bench's --sweep: a coordinate search over the Ouroboros settings, each setting measured
against vanilla on the same prompts in the same run."""

from __future__ import annotations

import json
import sys
from dataclasses import asdict

from ..config import OuroborosConfig
from .bench import run_bench

SWEEP_GRID = {
    "gamma": [1, 2, 4, 6, 8],
    "window": [0, 4, 8, 12],
    "ngram": [3, 4, 5, 6],
    "branches": [0, 1, 2, 4],
    "lookup": [0, 8, 12, 16, 24],
    "max_trunk": [1, 4, 6, 8],
    "extend_above": [0.3, 0.4, 0.5, 1.0],
    "extend_chance": [0.1, 0.13, 0.16, 0.2],
    "second_above": [0.05, 0.1, 0.2, 1.0],
    "lookup_above": [0.0, 0.02, 0.05, 0.1],
    "draft_candidates": [0, 1, 2],
}


def sweep(engine, prompts, max_new_tokens, progress=True, sampling: dict | None = None) -> dict:
    """Coordinate search over Ouroboros settings: vary one knob at a time around the best so far,
    each setting measured against vanilla on the same prompts in the same run. Returns every trial
    and the best."""
    # the pair's own settings
    start = {**asdict(OuroborosConfig()), **engine.defaults.get("ouroboros", {})}
    best = {name: start[name] for name in SWEEP_GRID}
    trials: dict[tuple, dict] = {}

    def measure(options: dict) -> dict:
        key = tuple(sorted(options.items()))
        if key not in trials:
            report = run_bench(
                engine,
                prompts,
                ["vanilla", "ouroboros"],
                max_new_tokens,
                {"ouroboros": options},
                progress=False,
                sampling=sampling,
            )
            rows = report["methods"]
            trials[key] = {
                **options,
                "speedup_over_vanilla": round(
                    rows["ouroboros"]["tokens_per_s"] / rows["vanilla"]["tokens_per_s"], 3
                ),
                "tokens_per_forward": rows["ouroboros"]["tokens_per_forward"],
                "mismatches": rows["ouroboros"]["mismatches"],
            }
            if progress:
                print(json.dumps(trials[key]), file=sys.stderr, flush=True)
        return trials[key]

    for name, values in SWEEP_GRID.items():
        for value in values:
            trial = measure({**best, name: value})
            if trial["speedup_over_vanilla"] > measure(best)["speedup_over_vanilla"]:
                best = {**best, name: value}
    return {"results": list(trials.values()), "best": measure(best)}
