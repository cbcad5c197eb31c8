"""Feasibility: would a step's later guesses gain from the target's states in the draft's context?

The shipped draft reads the target's state at a step's first guess only, beside its own final state
(the projection P before the head). Here it may also read, at every committed position p, the
target's state at p - 1 in its input (a projection Q, from zero, of the state scaled to the
embeddings' size), so its keys and values carry the target's states into every later guess.

Each answer runs twice in one forward: copy A, every position with its states (a step's first
guess), and copy B, where position p reads no state of its own and attends to copy A's positions
before p (a step's second guess: its token drafted, the text before it committed). Both copies are
trained; the held-out agreement (the 156 held-out broad answers, greedy, teacher-forced) is printed
for each. `--no-context` keeps Q at zero: the same training without the states in the input, the
control. Output: smollm2-context-states.txt (docs/BENCHMARKS.md, "The broad mix: what visitors
ask").

    python3 docs/bench-runs/smollm2-context-states.py --states /work/states/layout --steps 150
    python3 docs/bench-runs/smollm2-context-states.py --states /work/states/layout --steps 150 \\
        --no-context
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
from ouroboros_core.tools.draft_loss import Head, batches, load_rows, padded  # noqa: E402
from ouroboros_core.tools.target_states import attach_projection, with_states  # noqa: E402

DRAFT = ROOT / "assets" / "models" / "smollm2-draft"
BROAD = ROOT / "data" / "broad"


def doubled_mask(lengths: list[int], width: int) -> torch.Tensor:
    """(B, 1, 2T, 2T) additive: copy A causal; copy B's position p sees copy A before p and
    itself; a pad position sees itself."""
    blocked = torch.finfo(torch.float32).min
    n = 2 * width
    masks = []
    causal = torch.ones(width, width).tril().bool()
    before = torch.ones(width, width).tril(-1).bool()
    for length in lengths:
        seen = torch.zeros(n, n, dtype=torch.bool)
        real = torch.arange(width) < length
        keep = real[None, :] & real[:, None]
        seen[:width, :width] = causal & keep
        seen[width:, :width] = before & keep
        seen[width:, width:] = torch.eye(width, dtype=torch.bool)
        seen[:width, :width] |= torch.eye(width, dtype=torch.bool)
        mask = torch.zeros(n, n)
        mask[~seen] = blocked
        masks.append(mask)
    return torch.stack(masks)[:, None]


class ContextFed:
    def __init__(self, draft, head: Head, pad: int, context: bool):
        self.draft, self.head, self.pad = draft, head, pad
        self.embed = draft.get_input_embeddings()
        self.width = draft.config.hidden_size
        self.scale = self.embed.weight.pow(2).mean().sqrt().item()
        self.q = torch.nn.Linear(self.width, self.width, bias=False)
        torch.nn.init.zeros_(self.q.weight)
        self.q.weight.requires_grad_(context)
        self.p = draft.state_projection_layer  # the shipped projection before the head

    def forward(self, batch):
        ids, _, scored = padded(batch, self.pad)
        b, t = ids.shape
        states = torch.zeros(b, t, self.width)
        for i, row in enumerate(batch):
            start = row["prompt_tokens"] - 1
            states[i, start : len(row["ids"]) - 1] = row["states"].float()
        scaled = states * torch.rsqrt(states.pow(2).mean(-1, keepdim=True) + 1e-6) * self.scale
        scaled = scaled * (states.abs().sum(-1, keepdim=True) > 0)
        x = self.embed(ids)
        inputs = torch.cat([x + self.q(scaled), x], dim=1)
        positions = torch.arange(t).repeat(2)[None].expand(b, -1)
        mask = doubled_mask([len(row["ids"]) for row in batch], t)
        hidden = self.draft.model(
            inputs_embeds=inputs, attention_mask=mask, position_ids=positions
        ).last_hidden_state
        first = hidden[:, :t] + self.p(states)
        second = hidden[:, t:]
        keep = scored[:, :-1]
        labels = ids[:, 1:][keep]
        out = []
        for rows in (first, second):
            logits = rows[:, :-1][keep] @ self.head.weight.T
            out.append((logits, self.head.ids[logits.argmax(-1)] == labels))
        return out, labels

    def both_losses(self, batch):
        out, labels = self.forward(batch)
        places = self.head.index[labels]
        return sum(F.cross_entropy(logits, places, ignore_index=-1) for logits, _ in out) / 2

    def agreement(self, rows) -> dict:
        right = [0, 0]
        total = 0
        with torch.no_grad():
            for batch in batches(rows, 4096, random.Random(0)):
                out, labels = self.forward(batch)
                for k, (_, hits) in enumerate(out):
                    right[k] += int(hits.sum())
                total += labels.numel()
        return {
            "first_guess": round(right[0] / total, 4),
            "second_guess": round(right[1] / total, 4),
        }


def prepare(args):
    """(the draft with both projections, its trained parameters, training rows, held-out rows)."""
    _, tokenizer = load_target_of("smollm2")
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    draft = AutoModelForCausalLM.from_pretrained(
        DRAFT, dtype=torch.float32, attn_implementation="eager"
    )
    attach_projection(draft, draft.config.hidden_size, str(DRAFT))
    vocabulary = json.loads((DRAFT / "draft_vocabulary.json").read_text())
    vocabulary = vocabulary["ids"] if isinstance(vocabulary, dict) else vocabulary
    for p in draft.parameters():
        p.requires_grad_(False)
    trained = [*draft.model.layers.parameters(), draft.model.norm.weight]
    trained += list(draft.state_projection_layer.parameters())
    for p in trained:
        p.requires_grad_(True)
    model = ContextFed(draft, Head.of(draft, vocabulary), pad, not args.no_context)
    if not args.no_context:
        trained.append(model.q.weight)
    rows = with_states(load_rows([BROAD / "answers-train.jsonl"]), args.states / "answers-train")
    held = with_states(
        load_rows([BROAD / "answers-heldout.jsonl"]), args.states / "answers-heldout"
    )
    return model, trained, rows, held


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--states", type=Path, required=True, help="train_draft --states' folder")
    parser.add_argument("--steps", type=int, default=150)
    parser.add_argument("--lr", type=float, default=3e-4)
    parser.add_argument("--every", type=int, default=50)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--no-context", action="store_true")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    rng = random.Random(0)
    model, trained, rows, held = prepare(args)
    print(json.dumps({"step": 0, **model.agreement(held)}), flush=True)
    opt = torch.optim.AdamW(trained, lr=args.lr, weight_decay=0.0)
    step, started = 0, time.perf_counter()
    while step < args.steps:
        for batch in batches(rows, 4096, rng):
            warm = min(1.0, (step + 1) / 20)
            share = warm * (0.1 + 0.45 * (1 + math.cos(math.pi * step / args.steps)))
            for group in opt.param_groups:
                group["lr"] = args.lr * share
            loss = model.both_losses(batch)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(trained, 1.0)
            opt.step()
            opt.zero_grad(set_to_none=True)
            step += 1
            if step % 10 == 0:
                seconds = round(time.perf_counter() - started)
                print(json.dumps({"step": step, "loss": round(loss.item(), 3), "s": seconds}))
            if step % args.every == 0 or step == args.steps:
                print(json.dumps({"step": step, **model.agreement(held)}), flush=True)
            if step >= args.steps:
                break


if __name__ == "__main__":
    main()
