"""How far the default pair's tree goes with a perfect draft: the target itself as the draft (every
guess the target's own choice), against the shipped draft, the preset's settings, greedy, broad
held-out requests. Counts target forwards only (no clock: the target as a draft costs as much as
the target), so it runs as well on a busy machine (docs/BENCHMARKS.md, "The broad mix"; output:
smollm2-perfect-draft.txt).

    python3 docs/bench-runs/smollm2-perfect-draft.py --requests 26
"""

import argparse
import statistics
import sys
import tempfile
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from ouroboros_core.models import load_engine  # noqa: E402
from ouroboros_core.presets import presets  # noqa: E402
from ouroboros_core.tools.bench import broad_requests  # noqa: E402

DRAFT = Path(__file__).resolve().parents[2] / "assets" / "models" / "smollm2-draft"


def target_as_draft(target: Path, into: Path) -> Path:
    """A draft folder that is the target's own (linked), with the shipped draft's stored answers, so
    the tree's copies and stored walks stay as they are and only the draft's guesses change."""
    for item in target.iterdir():
        (into / item.name).symlink_to(item)
    (into / "answers.json").symlink_to(DRAFT / "answers.json")
    return into


def forwards(engine, requests, options) -> tuple[int, int, list[float], dict]:
    tokens = calls = 0
    per_request, by_kind = [], {}
    for request in requests:
        stats = engine.generate(request["prompt"], "ouroboros", 128, **options).stats
        tokens, calls = tokens + stats.new_tokens, calls + stats.target_forwards
        per_request.append(stats.new_tokens / stats.target_forwards)
        kind = by_kind.setdefault(request.get("kind", "?"), [0, 0])
        kind[0], kind[1] = kind[0] + stats.new_tokens, kind[1] + stats.target_forwards
    return tokens, calls, per_request, by_kind


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--requests", type=int, default=26)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    settings = dict(presets()["smollm2"].settings["cpu"]["ouroboros"])
    shipped = load_engine("smollm2", watch_threads=False)
    target = Path(shipped.target.name_or_path)
    requests = broad_requests(args.requests)
    with tempfile.TemporaryDirectory() as folder:
        perfect = load_engine(
            str(target),
            str(target_as_draft(target, Path(folder))),
            "cpu",
            chat=True,
            watch_threads=False,
        )
        arms = [
            ("shipped draft", shipped, {}),
            ("the target as draft", perfect, {}),
            ("the target as draft, trunk up to 6", perfect, {"max_trunk": 6}),
        ]
        print(f"{len(requests)} broad held-out requests, 128 tokens, greedy, preset settings")
        for label, engine, extra in arms:
            tokens, calls, per_request, by_kind = forwards(engine, requests, {**settings, **extra})
            print(
                f"{label:36} tokens/forward {tokens / calls:.2f} (median request "
                f"{statistics.median(per_request):.2f}), {tokens} tokens in {calls} forwards"
            )
            print("    " + ", ".join(f"{k} {t / c:.2f}" for k, (t, c) in by_kind.items()))


if __name__ == "__main__":
    main()
