"""A draft training that a stopped session picks up where it was (train_draft's checkpoint).

Every few steps the trained weights, the optimiser's state, the step, the records so far and where
the epoch's batch order stood are written to `checkpoint.pt` in the output folder (to a temporary
file first, then renamed: a kill mid-write leaves the previous one). The same command run again
goes on from it, provided the settings and the training rows are the ones it was written for;
otherwise it says so and starts nothing. A training with --teacher-k computes the target's chances
again before going on (they are not kept). The file is removed once the draft is saved.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict
from pathlib import Path

CHECKPOINT = "checkpoint.pt"


def fingerprint(cfg, rows: list[dict], held: list[dict]) -> str:
    """What a checkpoint was written for: the settings and every training and held-out row's
    tokens (the held-out ones score the curve the checkpoint carries)."""
    settings = {k: v for k, v in asdict(cfg).items() if k != "checkpoint_every"}
    digest = hashlib.sha256(json.dumps(settings, sort_keys=True).encode())
    for row in rows + held:
        digest.update(json.dumps([row["prompt_tokens"], row["ids"]]).encode())
    return digest.hexdigest()


class Checkpoint:
    def __init__(self, out: Path, every: int, stamp: str):
        self.path, self.every, self.stamp = out / CHECKPOINT, every, stamp

    def save(self, draft, opt, state: dict) -> None:
        """state: step, history, curve, the rng's state when the current epoch's batches were
        drawn and how many of them are left."""
        import torch

        trained = {n: p.detach().clone() for n, p in draft.named_parameters() if p.requires_grad}
        self.path.parent.mkdir(parents=True, exist_ok=True)
        part = self.path.with_suffix(".part")
        torch.save(
            {"stamp": self.stamp, "trained": trained, "optimizer": opt.state_dict(), **state}, part
        )
        part.replace(self.path)

    def due(self, step: int) -> bool:
        return self.every > 0 and step % self.every == 0

    def load(self, draft, opt) -> dict | None:
        """The saved state (weights and optimiser restored in place), or None where none is
        there. Raises SystemExit where the checkpoint is another training's."""
        if not self.path.is_file():
            return None
        import torch

        saved = torch.load(self.path, weights_only=False)
        if saved["stamp"] != self.stamp:
            raise SystemExit(
                f"{self.path} was written by a training with other settings or other rows; "
                "run that training's command again to go on, or remove the file to start afresh"
            )
        params = dict(draft.named_parameters())
        with torch.no_grad():
            for name, value in saved.pop("trained").items():
                params[name].copy_(value)
        opt.load_state_dict(saved.pop("optimizer"))
        return saved

    def remove(self) -> None:
        self.path.unlink(missing_ok=True)
