"""How many tokens a target forward gives as the draft agrees more often with the target: the target
itself as the draft, its scores blurred by Gumbel noise of scale tau (its first choice is then the
target's own sample at temperature tau, so it misses where the target hesitates, as a trained draft
mostly does), in the preset's tree, greedy, broad held-out requests. Beside it the shipped draft,
measured the same way: how often a step's first guess is the token the target then commits, and
tokens per target forward. Counts forwards, not the clock (docs/BENCHMARKS.md, "The broad mix";
output: smollm2-agreement-curve.txt).

    python3 docs/bench-runs/smollm2-agreement-curve.py --requests 26 --taus 0.5,1,2 --shipped
"""

import argparse
import importlib.util
import statistics
import sys
import tempfile
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from ouroboros_core import trunk  # noqa: E402
from ouroboros_core.models import load_engine  # noqa: E402
from ouroboros_core.presets import presets  # noqa: E402
from ouroboros_core.tools.bench import broad_requests  # noqa: E402


def perfect_draft_script():
    """smollm2-perfect-draft.py beside this file, for its target_as_draft and forwards."""
    path = Path(__file__).with_name("smollm2-perfect-draft.py")
    spec = importlib.util.spec_from_file_location("perfect_draft", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


class FirstGuesses:
    """Blurs the draft's scores by tau (0: as they are) and counts how often a step's first guess,
    the one after exactly the committed tokens, is the token the target commits there."""

    def __init__(self):
        self.tau, self.noise = 0.0, torch.Generator().manual_seed(0)
        self.pending: dict[int, tuple[int, int]] = {}  # runner -> (position, guess)
        self.stood = self.steps = 0
        forward, follow = trunk.DraftRunner.forward, trunk.DraftRunner.follow

        def blurred(runner, sequence, extra_rows=None):
            logits = forward(runner, sequence, extra_rows)
            if self.tau:
                uniform = torch.rand(logits.shape, generator=self.noise).clamp_(1e-12, 1 - 1e-7)
                logits = logits - self.tau * torch.log(-torch.log(uniform)).to(logits.dtype)
            # a step's first forward reads exactly the committed tokens (the trunk starts there)
            self.pending.setdefault(id(runner), (len(sequence), int(logits[0].argmax())))
            return logits

        def followed(runner, committed, state):
            position, guess = self.pending.pop(id(runner), (None, None))
            if position is not None and position < len(committed):
                self.steps += 1
                self.stood += committed[position] == guess
            follow(runner, committed, state)

        trunk.DraftRunner.forward, trunk.DraftRunner.follow = blurred, followed

    def arm(self, tau: float) -> None:
        self.tau, self.stood, self.steps = tau, 0, 0
        self.noise.manual_seed(0)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--requests", type=int, default=26)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--taus", default="0,0.5,1,2", help="noise scales for the target as draft")
    parser.add_argument("--shipped", action="store_true", help="the shipped draft too")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    guesses, perfect = FirstGuesses(), perfect_draft_script()
    settings = dict(presets()["smollm2"].settings["cpu"]["ouroboros"])
    shipped = load_engine("smollm2", watch_threads=False)
    target = Path(shipped.target.name_or_path)
    requests = broad_requests(args.requests)
    with tempfile.TemporaryDirectory() as folder:
        arms = [("shipped draft", shipped, 0.0)] if args.shipped else []
        if args.taus:
            oracle = load_engine(
                str(target),
                str(perfect.target_as_draft(target, Path(folder))),
                "cpu",
                chat=True,
                watch_threads=False,
            )
            arms += [(f"target as draft, tau {t}", oracle, float(t)) for t in args.taus.split(",")]
        print(f"{len(requests)} broad held-out requests, 128 tokens, greedy, preset settings")
        for label, engine, tau in arms:
            guesses.arm(tau)
            tokens, calls, per_request, _ = perfect.forwards(engine, requests, settings)
            print(
                f"{label:28} first guess stood {guesses.stood / guesses.steps:6.1%} "
                f"({guesses.steps} steps)  tokens/forward {tokens / calls:.2f} "
                f"(median request {statistics.median(per_request):.2f})",
                flush=True,
            )


if __name__ == "__main__":
    main()
