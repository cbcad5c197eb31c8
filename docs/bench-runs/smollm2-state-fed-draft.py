"""Feasibility: the shipped 3-layer draft fed the target's state. At every position its input
is its token's embedding plus a projection of the target's final (normed) hidden state at the
position before, scaled to the embeddings' size (`--where top`: the projection is added to the
draft's own final state instead); the projection starts at zero, so training starts
from the shipped draft exactly. A verification computes that state for every committed token but
the newest; a draft token past them reads none (a share `--drop` of positions is
trained without it). Prints the held-out agreement (the 156 held-out broad answers, greedy,
teacher-forced) with the states and without them, per kind; its output is
smollm2-state-fed-draft.txt (docs/BENCHMARKS.md, "The broad mix: what visitors ask").

    python3 docs/bench-runs/smollm2-state-fed-draft.py --answers 1500 --steps 400 --lr 3e-4
    python3 docs/bench-runs/smollm2-state-fed-draft.py --steps 200 --where top --every 50
"""

import argparse
import json
import math
import random
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F
from transformers import AutoModelForCausalLM

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
from ouroboros_core.models import load_target_of  # noqa: E402
from ouroboros_core.tools.draft_loss import Head, batches, kind_of, load_rows, padded  # noqa: E402

DRAFT = ROOT / "assets" / "models" / "smollm2-draft"
BROAD = ROOT / "data" / "broad"


def add_states(target, rows, pad, cache: Path) -> None:
    """Each row's target states ("f": (tokens, width), bfloat16), computed once and kept in
    `cache`."""
    if cache.exists():
        for row, states in zip(rows, torch.load(cache)):
            row["f"] = states
        return
    started = time.perf_counter()
    with torch.no_grad():
        for batch in batches(rows, 4096, random.Random(0)):
            ids, mask, _ = padded(batch, pad)
            hidden = target.model(input_ids=ids, attention_mask=mask).last_hidden_state
            for i, row in enumerate(batch):
                row["f"] = hidden[i, : len(row["ids"])].to(torch.bfloat16).clone()
    torch.save([row["f"] for row in rows], cache)
    print(f"states of {len(rows)} rows: {time.perf_counter() - started:.0f} s", flush=True)


class StateFed:
    """The draft, its head and the projection of the target's states."""

    def __init__(self, draft, head: Head, pad: int, top: bool):
        self.draft, self.head, self.pad, self.top = draft, head, pad, top
        self.embed = draft.get_input_embeddings()
        self.width = draft.config.hidden_size
        self.scale = self.embed.weight.pow(2).mean().sqrt().item()  # the embeddings' RMS
        self.proj = torch.nn.Linear(self.width, self.width, bias=False)
        torch.nn.init.zeros_(self.proj.weight)

    def loss(self, batch, drop: float, fed: bool = True):
        ids, mask, scored = padded(batch, self.pad)
        states = torch.zeros(ids.shape[0], ids.shape[1], self.width)
        if fed:
            for i, row in enumerate(batch):
                states[i, 1 : len(row["ids"])] = row["f"][:-1].float()  # position p reads p - 1
            if drop > 0:
                states = states * (torch.rand(ids.shape[0], ids.shape[1], 1) >= drop)
        if self.top:  # beside the draft's final (normed) state: the same space as the target's
            x = self.embed(ids)
            hidden = self.draft.model(inputs_embeds=x, attention_mask=mask).last_hidden_state
            hidden = hidden + self.proj(states)
        else:
            states = states * torch.rsqrt(states.pow(2).mean(-1, keepdim=True) + 1e-6) * self.scale
            x = self.embed(ids) + self.proj(states)
            hidden = self.draft.model(inputs_embeds=x, attention_mask=mask).last_hidden_state
        logits = hidden[:, :-1][scored[:, :-1]] @ self.head.weight.T
        labels = ids[:, 1:][scored[:, :-1]]
        hits = self.head.ids[logits.argmax(-1)] == labels
        return F.cross_entropy(logits, self.head.index[labels], ignore_index=-1), hits

    def agreement(self, rows, fed: bool):
        right = total = 0
        kinds = {}
        with torch.no_grad():
            for batch in batches(rows, 4096, random.Random(0)):
                hits = self.loss(batch, 0.0, fed)[1]
                right, total, start = right + int(hits.sum()), total + hits.numel(), 0
                for row in batch:
                    n = len(row["ids"]) - row["prompt_tokens"]
                    tally = kinds.setdefault(kind_of(row), [0, 0])
                    tally[0] += int(hits[start : start + n].sum())
                    tally[1] += n
                    start += n
        by_kind = {kind: round(a / b, 3) for kind, (a, b) in sorted(kinds.items())}
        return round(right / total, 4), by_kind


def report(model: StateFed, held, step: int) -> None:
    fed, by_kind = model.agreement(held, True)
    without = model.agreement(held, False)[0]
    line = {"step": step, "with_states": fed, "without": without, "by_kind": by_kind}
    print(json.dumps(line), flush=True)


def prepare(args):
    """(the state-fed draft, its trained parameters, training rows, held-out rows)."""
    target, tokenizer = load_target_of("smollm2")
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    draft = AutoModelForCausalLM.from_pretrained(DRAFT, dtype=torch.float32)
    vocabulary = json.loads((DRAFT / "draft_vocabulary.json").read_text())
    rows = load_rows([BROAD / "answers-train.jsonl"])
    args.rng.shuffle(rows)
    rows, held = rows[: args.answers], load_rows([BROAD / "answers-heldout.jsonl"])
    add_states(target, held + rows, pad, args.states / f"states-{args.answers}.pt")
    for p in draft.parameters():
        p.requires_grad_(False)
    trained = [*draft.model.layers.parameters(), draft.model.norm.weight]
    for p in trained:
        p.requires_grad_(True)
    vocabulary = vocabulary["ids"] if isinstance(vocabulary, dict) else vocabulary
    model = StateFed(draft, Head.of(draft, vocabulary), pad, args.where == "top")
    return model, trained + list(model.proj.parameters()), rows, held


def train(args, model: StateFed, trained, rows, held) -> None:
    opt = torch.optim.AdamW(trained, lr=args.lr, weight_decay=0.0)
    report(model, held, 0)
    step, started = 0, time.perf_counter()
    while step < args.steps:
        for batch in batches(rows, 4096, args.rng):
            warm = min(1.0, (step + 1) / 20)
            share = warm * (0.1 + 0.45 * (1 + math.cos(math.pi * step / args.steps)))
            for group in opt.param_groups:
                group["lr"] = args.lr * share
            loss, _ = model.loss(batch, args.drop)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(trained, 1.0)
            opt.step()
            opt.zero_grad(set_to_none=True)
            step += 1
            if step % 10 == 0:
                seconds = round(time.perf_counter() - started)
                print(json.dumps({"step": step, "loss": round(loss.item(), 3), "s": seconds}))
            if step % args.every == 0 or step == args.steps:
                report(model, held, step)
            if step >= args.steps:
                break


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--answers", type=int, default=1500)
    parser.add_argument("--steps", type=int, default=400)
    parser.add_argument("--lr", type=float, default=3e-4)
    parser.add_argument("--drop", type=float, default=0.2)
    parser.add_argument("--where", choices=("input", "top"), default="input")
    parser.add_argument("--every", type=int, default=60, help="steps between held-out checks")
    parser.add_argument("--states", type=Path, default=Path("/tmp/state-fed"))
    args = parser.parse_args()
    torch.set_num_threads(2)
    torch.manual_seed(0)
    args.rng = random.Random(0)
    args.states.mkdir(parents=True, exist_ok=True)
    train(args, *prepare(args))


if __name__ == "__main__":
    main()
