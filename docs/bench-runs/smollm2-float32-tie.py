"""A float32 tie on the default pair: a greedy Ouroboros race whose tree differs from the preset's
(`extend_above` 0.3) parts from vanilla on one broad held-out request; the check's forward scores
the two tokens a few float32 steps apart, and a one-token forward at that position moves the
scores by far more (docs/ARCHITECTURE.md; output: smollm2-float32-tie.txt).

    python3 docs/bench-runs/smollm2-float32-tie.py
"""

import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from ouroboros_core.models import load_engine  # noqa: E402
from ouroboros_core.tools.bench import broad_requests  # noqa: E402
from ouroboros_core.verdict import TargetChoices, explain  # noqa: E402

REQUEST = "heldout:humanities:1"


def main() -> None:
    torch.set_num_threads(2)
    engine = load_engine("smollm2", watch_threads=False)
    prompt = next(r["prompt"] for r in broad_requests(26) if r["id"] == REQUEST)
    vanilla = engine.generate(prompt, "vanilla", 128).token_ids
    wider = engine.generate(prompt, "ouroboros", 128, extend_above=0.3).token_ids
    preset = engine.generate(prompt, "ouroboros", 128).token_ids
    print(f"{REQUEST}, greedy, 128 tokens, float32, 2 threads")
    print(f"the preset's Ouroboros equals vanilla: {preset == vanilla}")
    at = next((i for i, (a, b) in enumerate(zip(vanilla, wider)) if a != b), None)
    print(f"extend_above 0.3 parts from vanilla at token {at}")
    if at is None:
        return
    with torch.no_grad():
        choices = TargetChoices.measure(
            engine.target, engine.encode(prompt), wider, at, 0.0, 1.0, None
        )
    row = choices.rows[0]
    a, b = float(row[vanilla[at]]), float(row[wider[at]])
    print(f"check's scores: vanilla's token {a:.8f}, the other {b:.8f}, gap {abs(a - b):.2g}")
    print(f"a one-token forward there moves the scores by up to {choices.spread:.2g}")
    print(explain(engine.verdict(prompt, vanilla, wider)))


if __name__ == "__main__":
    main()
