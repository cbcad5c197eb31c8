"""What the draft learns from and how it is scored (train_draft): the target's answers in batches,
the loss at every answer position, the target's own chances as soft targets, and the draft's
agreement with the target on held-out answers, over all and per kind of request.

The draft's output layer is the target's, frozen, and at run time it scores only the draft's
vocabulary (models.DRAFT_VOCABULARY): training and scoring read those rows alone too, so a guess is
one the draft could make at run time and the largest product of a step costs a fraction of the full
vocabulary's.
"""

from __future__ import annotations

import json
import random
import time
from dataclasses import dataclass
from pathlib import Path


def load_rows(paths: list[Path]) -> list[dict]:
    return [
        json.loads(line) for path in paths for line in path.read_text().splitlines() if line.strip()
    ]


def kind_of(row: dict) -> str:
    """A row's kind of request: its "kind", else the kind a broad id names ("train:writing:3"), else
    "code" (chat_requests' requests about Python, "train:12:json.dumps")."""
    from .broad_requests import KINDS

    if "kind" in row:
        return row["kind"]
    parts = str(row.get("id", "")).split(":")
    return parts[1] if len(parts) == 3 and parts[1] in KINDS else "code"


def batches(rows: list[dict], batch_tokens: int, rng: random.Random) -> list[list[dict]]:
    """Rows of similar length together, at most batch_tokens padded tokens each, in random order."""
    ordered = sorted(rows, key=lambda row: len(row["ids"]))
    out, current = [], []
    for row in ordered:
        if current and len(row["ids"]) * (len(current) + 1) > batch_tokens:
            out.append(current)
            current = []
        current.append(row)
    if current:
        out.append(current)
    rng.shuffle(out)
    return out


@dataclass(frozen=True)
class Head:
    """The output rows the draft scores: `ids` (K,) of the full vocabulary, `index` (V,) giving
    each full id's place among them (-1: not scored), and the output layer they are read from."""

    ids: object
    index: object
    source: object  # the draft's output weights (V, width)
    frozen: object  # their rows at ids, read once, where the output layer is not trained
    # their rows at ids as training began: the target's own (the draft starts from its embeddings),
    # which turn its states into its chances (learned_from_target)
    target: object = None

    @classmethod
    def of(cls, draft, vocabulary: list[int] | None = None):
        import torch

        source = draft.lm_head.weight
        full = source.shape[0]
        ids = torch.tensor(sorted(vocabulary) if vocabulary else range(full))
        index = torch.full((full,), -1, dtype=torch.long)
        index[ids] = torch.arange(len(ids))
        rows = source.detach()[ids]
        return cls(ids, index, source, None if source.requires_grad else rows, rows.clone())

    @property
    def weight(self):
        """(K, width): the scored rows, read afresh (with their gradient) where they train."""
        return self.source[self.ids] if self.frozen is None else self.frozen


def teacher_targets(
    target, rows: list[dict], pad: int, k: int, batch_tokens: int, log=print
) -> None:
    """Add to each row the target's own top-k next-token ids and chances at its answer positions,
    teacher-forced on the answer as written ("teacher_ids", "teacher_p": one list of k per
    position). A sampled answer's next token is one draw; the target's chances say what it would
    write at every rank, its greedy choice first."""
    import torch

    done = 0
    started = time.perf_counter()
    with torch.no_grad():
        for number, batch in enumerate(batches(rows, batch_tokens, random.Random(0)), 1):
            ids, mask, scored = padded(batch, pad)
            hidden = target.model(input_ids=ids, attention_mask=mask).last_hidden_state[:, :-1]
            for i, row in enumerate(batch):
                chances = torch.softmax(target.lm_head(hidden[i][scored[i, :-1]]).float(), dim=-1)
                top = chances.topk(k, dim=-1)
                row["teacher_ids"], row["teacher_p"] = top.indices.tolist(), top.values.tolist()
            done += len(batch)
            if number % 20 == 0 or done == len(rows):
                log(f"teacher: {done}/{len(rows)} answers, {time.perf_counter() - started:.0f} s")


def padded(batch: list[dict], pad: int):
    """Token ids padded to the batch's longest, the attention mask, and the positions whose next
    token is an answer token."""
    import torch

    width = max(len(row["ids"]) for row in batch)
    ids = torch.full((len(batch), width), pad)
    mask = torch.zeros((len(batch), width), dtype=torch.long)
    # positions whose next token is an answer token
    scored = torch.zeros((len(batch), width), dtype=torch.bool)
    for i, row in enumerate(batch):
        ids[i, : len(row["ids"])] = torch.tensor(row["ids"])
        mask[i, : len(row["ids"])] = 1
        scored[i, row["prompt_tokens"] - 1 : len(row["ids"]) - 1] = True
    return ids, mask, scored


# the draft's projection of the target's state while it trains (target_states.attach_projection;
# saved apart from its weights)
STATE_LAYER = "state_projection_layer"


def fed_states(batch: list[dict], width: int, drop: float):
    """The states a batch's answer positions read, in draft_loss.answer_loss's order (a row
    without states reads zeros), each position's zeroed with chance `drop`: the engine's draft
    reads a state only at the first token it guesses in a step."""
    import torch

    parts = [
        row["states"].float()
        if "states" in row
        else torch.zeros(len(row["ids"]) - row["prompt_tokens"], width)
        for row in batch
    ]
    states = torch.cat(parts)
    if drop > 0:
        states = states * (torch.rand(states.shape[0], 1) >= drop)
    return states


# what the draft learns at each answer position (DraftTraining.learn): the token written there;
# where the target's state for that position is known, the target's own first choice ("choice")
# or that and all its chances ("chances"): a sampled answer's token is one draw of many
LEARNED = ("written", "choice", "chances")


def following_states(batch: list[dict], width: int):
    """(states, known): at each answer position, in answer_loss's order, the target's state there
    (the one its output layer reads for the position's next token: the row's states one position
    on), and whether it is known (a row with states, all but its last position)."""
    import torch

    parts, known = [], []
    for row in batch:
        length = len(row["ids"]) - row["prompt_tokens"]
        if "states" in row:
            parts.append(torch.cat([row["states"][1:].float(), torch.zeros(1, width)]))
            known.append(torch.arange(length) < length - 1)
        else:
            parts.append(torch.zeros(length, width))
            known.append(torch.zeros(length, dtype=torch.bool))
    return torch.cat(parts), torch.cat(known)


def learned_from_target(batch: list[dict], head: Head, logits, labels, learn: str):
    """(labels, soft loss): the labels with the target's own first choice among the head's rows
    wherever its state is known; with learn "chances" also the cross-entropy of the draft's
    guesses against the target's chances over those rows there (else None)."""
    import torch
    import torch.nn.functional as F

    if learn == "written":
        return labels, None
    following, known = following_states(batch, head.target.shape[1])
    if not known.any():
        return labels, None
    with torch.no_grad():
        teacher = following[known] @ head.target.T  # (known positions, K)
    labels = labels.clone()
    labels[known] = head.ids[teacher.argmax(-1)]
    if learn != "chances":
        return labels, None
    chances = torch.softmax(teacher, dim=-1)
    return labels, -(chances * F.log_softmax(logits[known], dim=-1)).sum(-1).mean()


def answer_loss(
    draft, batch: list[dict], pad: int, head: Head, drop: float = 0.0, learn: str = "written"
):
    """Cross-entropy of the draft's guesses at every answer position, over the head's rows; (loss,
    right guesses, guesses, per-position hits). Rows with teacher targets add the cross-entropy
    against the target's top-k chances (renormalised over those the head scores), and count a
    guess right when it is the target's own first choice; `learn` (LEARNED) does so from the
    target's states. A next token the head does not score is a guess the draft cannot get right
    (it counts), and no loss. A draft that reads the target's state
    (target_states.attach_projection) adds its projection at each answer position, zeroed at a
    share `drop` of them."""
    import torch
    import torch.nn.functional as F

    ids, mask, scored = padded(batch, pad)
    hidden = draft.model(input_ids=ids, attention_mask=mask).last_hidden_state  # (B, T, width)
    hidden = hidden[:, :-1][scored[:, :-1]]  # the answer positions
    projection = getattr(draft, STATE_LAYER, None)
    if projection is not None:
        hidden = hidden + projection(fed_states(batch, projection.in_features, drop))
    logits = hidden @ head.weight.T  # (answer positions, K): only the head's rows
    guesses = head.ids[logits.argmax(-1)]
    labels, soft = learned_from_target(batch, head, logits, ids[:, 1:][scored[:, :-1]], learn)
    places = head.index[labels]
    loss = F.cross_entropy(logits, places, ignore_index=-1) if (places >= 0).any() else None
    if soft is not None:
        loss = soft if loss is None else 0.5 * loss + soft
    if "teacher_ids" in batch[0]:
        top_ids = torch.tensor([p for row in batch for p in row["teacher_ids"]])
        top_p = torch.tensor([p for row in batch for p in row["teacher_p"]])
        top_places = head.index[top_ids]
        top_p = top_p * (top_places >= 0)
        top_p = top_p / top_p.sum(-1, keepdim=True).clamp(min=1e-9)
        log_p = F.log_softmax(logits, dim=-1).gather(1, top_places.clamp(min=0))
        soft = -(top_p * log_p).sum(-1).mean()
        loss = soft if loss is None else 0.5 * loss + soft
        labels = top_ids[:, 0]
    hits = guesses == labels
    return loss, int(hits.sum()), labels.numel(), hits


def evaluate(
    draft, rows: list[dict], pad: int, batch_tokens: int, head: Head, drop: float = 0.0
) -> dict:
    """The draft's agreement with the rows' next tokens (the target's greedy answers) and its loss,
    over all and per kind of request (drop 1: a state-fed draft without the target's states)."""
    import torch

    draft.eval()
    right, total, loss_sum = 0, 0, 0.0
    kinds: dict[str, list[int]] = {}
    with torch.no_grad():
        for batch in batches(rows, batch_tokens, random.Random(0)):
            loss, hits, count, each = answer_loss(draft, batch, pad, head, drop)
            right, total = right + hits, total + count
            loss_sum += (loss.item() if loss is not None else 0.0) * count
            start = 0
            for row in batch:
                length = len(row["ids"]) - row["prompt_tokens"]
                tally = kinds.setdefault(kind_of(row), [0, 0])
                tally[0] += int(each[start : start + length].sum())
                tally[1] += length
                start += length
    draft.train()
    return {
        "agreement": round(right / max(1, total), 4),
        "loss": round(loss_sum / max(1, total), 4),
        "positions": total,
        "by_kind": {kind: round(hit / max(1, n), 4) for kind, (hit, n) in sorted(kinds.items())},
    }


def train_step(
    draft, batch, pad: int, head: Head, opt, lr: float, drop: float = 0.0, learn: str = "written"
) -> tuple[float, int, int]:
    """One optimiser step on one batch at learning rate lr: (loss, hits, positions); drop: the
    share of answer positions a state-fed draft learns without the target's state; learn: what
    it learns where the target's state is known (LEARNED)."""
    import torch

    for group in opt.param_groups:
        group["lr"] = lr
    loss, hits, count, _ = answer_loss(draft, batch, pad, head, drop, learn)
    loss.backward()
    torch.nn.utils.clip_grad_norm_([p for p in draft.parameters() if p.requires_grad], 1.0)
    opt.step()
    opt.zero_grad(set_to_none=True)
    return loss.item(), hits, count
