"""The embedded pair's training settings and step (tools/train_pair.py runs them): both models on
the same batches, the draft also learning the target's next-token distribution, under a warm-up and
cosine learning-rate schedule, with held-out checks as training goes.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from .pair_figures import heldout_figures


@dataclass(frozen=True)
class ModelShape:
    layers: int  # depth drives latency on this CPU
    width: int  # hidden size
    heads: int
    ffn: int  # MLP inner size


@dataclass(frozen=True)
class TrainConfig:
    seed: int = 0
    vocab_size: int = 4096
    seq_len: int = 384  # covers most HumanEval stubs plus a 128-token answer
    batch_size: int = 8  # small batches, many steps: more learning per token early in training
    steps: int = 4400
    lr: float = 2e-3
    warmup: int = 80
    distill_weight: float = 0.8  # draft loss = (1-w) * data CE + w * KL(target || draft)
    target: ModelShape = ModelShape(layers=18, width=160, heads=4, ffn=512)
    # two layers let the draft copy from context (an induction head needs one layer to find the
    # earlier occurrence, one to read what followed it); narrow, so it costs no more per token than
    # one wide layer
    draft: ModelShape = ModelShape(layers=2, width=192, heads=4, ffn=768)
    max_corpus_chars: int | None = None  # the smoke mode trains on a slice
    # continue a finished run: its folder (tokenizer, target/, draft/, training.json)
    init: str | None = None
    # which models train; the others are saved as they were
    models: tuple[str, ...] = ("target", "draft")
    # steps between held-out checks (a learning curve in training.json; 0 turns them off)
    eval_every: int = 200
    eval_chars: int = 60_000  # of pip's source, the start of the card's held-out text
    # bfloat16 autocast for the forward passes (weights, optimiser state and losses stay float32):
    # 1.3x more steps per hour on this CPU (AVX-512 BF16), measured side by side at the full shapes
    # (1.72 vs 2.25 s/step)
    bf16: bool = True
    # target_samples' JSON lines: the target's own continuations of corpus stubs, greedy and
    # sampled. Batches then mix them in, so the draft also learns what the target writes, not only
    # what people wrote.
    samples: str | None = None
    samples_share: float = 0.5  # of each batch's rows, the share cut from `samples`


def lr_at(step: int, cfg: TrainConfig) -> float:
    if step < cfg.warmup:
        return cfg.lr * (step + 1) / cfg.warmup
    progress = (step - cfg.warmup) / max(1, cfg.steps - cfg.warmup)
    return cfg.lr * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * progress)))


class PairTrainer:
    """Both models on the same batches: the target on the data, the draft on the data and on the
    target's (detached) next-token distribution. Models not in cfg.models stay frozen."""

    def __init__(self, cfg: TrainConfig, target, draft, data, samples=None):
        import torch

        self.cfg, self.target, self.draft = cfg, target, draft
        self.data, self.samples = data, samples
        self.trains = {"target": "target" in cfg.models, "draft": "draft" in cfg.models}
        self.train_mode()
        self.opts = {
            name: torch.optim.AdamW(
                model.parameters(), lr=cfg.lr, betas=(0.9, 0.95), weight_decay=0.1
            )
            for name, model in (("target", target), ("draft", draft))
            if self.trains[name]
        }
        self.gen = torch.Generator().manual_seed(cfg.seed)

    def train_mode(self) -> None:
        self.target.train(self.trains["target"])
        self.draft.train(self.trains["draft"])

    def batch(self):
        import torch

        cfg = self.cfg
        from_samples = round(cfg.batch_size * cfg.samples_share) if self.samples is not None else 0
        rows = []
        for stream, count in (
            (self.samples, from_samples),
            (self.data, cfg.batch_size - from_samples),
        ):
            if count:
                starts = torch.randint(
                    0, len(stream) - cfg.seq_len - 1, (count,), generator=self.gen
                )
                rows += [stream[s : s + cfg.seq_len + 1] for s in starts.tolist()]
        batch = torch.stack(rows)
        return batch[:, :-1], batch[:, 1:]  # inputs, labels: (B, T) each

    def step(self, step: int) -> dict:
        import torch
        import torch.nn.functional as F

        cfg = self.cfg
        inputs, labels = self.batch()
        lr = lr_at(step, cfg)
        for opt in self.opts.values():
            for group in opt.param_groups:
                group["lr"] = lr
        autocast = lambda: torch.autocast("cpu", dtype=torch.bfloat16, enabled=cfg.bf16)  # noqa: E731
        with torch.set_grad_enabled(self.trains["target"]), autocast():
            target_logits = self.target(input_ids=inputs).logits  # (B, T, V)
        target_logits = target_logits.float()
        target_loss = F.cross_entropy(target_logits.flatten(0, 1), labels.flatten())
        if self.trains["target"]:
            target_loss.backward()
        row = {"step": step, "target_ce": target_loss.item()}
        if self.trains["draft"]:
            with autocast():
                draft_logits = self.draft(input_ids=inputs).logits.float()
            draft_ce = F.cross_entropy(draft_logits.flatten(0, 1), labels.flatten())
            teacher = F.log_softmax(target_logits.detach().flatten(0, 1), dim=-1)
            student = F.log_softmax(draft_logits.flatten(0, 1), dim=-1)
            distill = F.kl_div(student, teacher, log_target=True, reduction="batchmean")
            draft_loss = (1 - cfg.distill_weight) * draft_ce + cfg.distill_weight * distill
            draft_loss.backward()
            row["draft_ce"] = draft_ce.item()
        for name, opt in self.opts.items():
            model = self.target if name == "target" else self.draft
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
            opt.zero_grad(set_to_none=True)
        row["lr"] = lr
        return row

    def heldout(self, tokenizer) -> dict:
        self.target.eval()
        self.draft.eval()
        figures = heldout_figures(self.target, self.draft, tokenizer, self.cfg.eval_chars)
        self.train_mode()
        return figures
