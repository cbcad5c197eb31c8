"""Experiment: does the draft guess better when the target's states also enter at its input
(EAGLE-style), at every position the target has verified, and not only at the head for a step's
first guess?

Each answer is cut into blocks of BLOCK positions, a step's guesses: a block's first position is the
token the target just wrote, whose state (the one that chose it) is known; its later positions are
the draft's own guesses, with no state. Two streams run in one forward under a 4D mask: stream A
reads every known state at the input (what the draft's cache would hold once the target has
verified those tokens); stream B is the block being guessed: a query attends to A before its block
and to B within it. Loss and agreement on B, per offset in the block.

arm "head": today's design (state only at the head, offset 0; no input projection).
arm "input": adds a projection of the state at the input (A everywhere, B at offset 0).
Both arms train the same steps on the same rows from the same draft (stage 5's folder, START), with
the target's states as target_states wrote them (STATES). Output: smollm2-input-states.json
(docs/BENCHMARKS.md, "The broad mix: what visitors ask"); each arm took 16 min on one thread:

    python3 docs/bench-runs/smollm2-input-states.py head 1500 head.json 1 &
    python3 docs/bench-runs/smollm2-input-states.py input 1500 input.json 1
"""

import json
import math
import random
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from ouroboros_core.models import read_projection  # noqa: E402
from ouroboros_core.tools.draft_loss import (  # noqa: E402
    Head,
    batches,
    kind_of,
    learned_from_target,
    load_rows,
)
from ouroboros_core.tools.target_states import read_states  # noqa: E402
from transformers import AutoModelForCausalLM  # noqa: E402

BLOCK = 4
START = Path("/work/draft5")
STATES = Path("/work/states/layout")
DATA = Path(__file__).resolve().parents[2] / "data" / "broad"
PAD = 2  # the target's <|im_end|>, its pad


def rows_with_states(name: str) -> list[dict]:
    rows = load_rows([DATA / f"{name}.jsonl"])
    read_states(STATES / name, rows)
    return [row for row in rows if "states" in row]


def build(batch, pad, shift_of):
    """ids, valid, scored (b, W); states at answer positions (b, W, tw); offset in block (b, W)
    (-1 where not scored); start of block (b, W)."""
    b = len(batch)
    width = max(len(r["ids"]) for r in batch)
    tw = batch[0]["states"].shape[1]
    ids = torch.full((b, width), pad)
    valid = torch.zeros((b, width), dtype=torch.bool)
    scored = torch.zeros((b, width), dtype=torch.bool)
    states = torch.zeros((b, width, tw))
    offset = torch.full((b, width), -1)
    start = torch.arange(width).repeat(b, 1)
    for i, row in enumerate(batch):
        prompt, total = row["prompt_tokens"], len(row["ids"])
        ids[i, :total] = torch.tensor(row["ids"])
        valid[i, :total] = True
        scored[i, prompt - 1 : total - 1] = True
        states[i, prompt - 1 : total - 1] = row["states"].float()
        shift = shift_of(i)
        j = torch.arange(total - prompt)
        off = torch.minimum((j + shift) % BLOCK, j)  # a block never starts before the answer
        offset[i, prompt - 1 : total - 1] = off
        start[i, prompt - 1 : total - 1] = torch.arange(prompt - 1, total - 1) - off
    return ids, valid, scored, states, offset, start


def mask_of(valid, start):
    b, width = valid.shape
    q = torch.arange(width).view(1, width, 1)
    k = torch.arange(width).view(1, 1, width)
    vk = valid.view(b, 1, width)
    a_a = (k <= q) & vk
    b_a = (k < start.view(b, width, 1)) & vk
    b_b = (k >= start.view(b, width, 1)) & (k <= q)
    top = torch.cat([a_a, torch.zeros_like(a_a)], 2)
    bottom = torch.cat([b_a, b_b], 2)
    allowed = torch.cat([top, bottom], 1).unsqueeze(1)
    out = torch.zeros(allowed.shape)
    return out.masked_fill(~allowed, torch.finfo(torch.float32).min)


def loss_of(draft, arm, batch, pad, head, proj_in, proj_head, shift_of):
    ids, valid, scored, states, offset, start = build(batch, pad, shift_of)
    emb = draft.model.embed_tokens(ids)
    first = (offset == 0).unsqueeze(-1)
    if arm == "input":
        fed = proj_in(states)
        emb_a, emb_b = emb + fed * scored.unsqueeze(-1), emb + fed * first
    else:
        emb_a, emb_b = emb, emb
    width = ids.shape[1]
    pos = torch.arange(width).repeat(2).unsqueeze(0).expand(len(batch), -1)
    hidden = draft.model(
        inputs_embeds=torch.cat([emb_a, emb_b], 1),
        attention_mask=mask_of(valid, start),
        position_ids=pos,
        use_cache=False,
    ).last_hidden_state[:, width:]
    h = hidden[scored] + proj_head(states[scored]) * first[scored]
    logits = h @ head.weight.T
    written = ids[:, 1:]
    labels = torch.cat([written, torch.full((len(batch), 1), pad)], 1)[scored]
    labels, soft = learned_from_target(batch, head, logits, labels, "chances")
    places = head.index[labels]
    loss = F.cross_entropy(logits, places, ignore_index=-1)
    loss = 0.5 * loss + soft if soft is not None else loss
    hits = head.ids[logits.argmax(-1)] == labels
    return loss, hits, offset[scored]


def evaluate(draft, arm, rows, pad, head, proj_in, proj_head):
    draft.eval()
    hits_by = torch.zeros(BLOCK)
    count_by = torch.zeros(BLOCK)
    kinds = {}
    with torch.no_grad():
        for batch in batches(rows, 4096, random.Random(0)):
            for shift in range(BLOCK):  # every position at every offset
                _, hits, off = loss_of(
                    draft, arm, batch, pad, head, proj_in, proj_head, lambda i: shift
                )
                for o in range(BLOCK):
                    hits_by[o] += hits[off == o].sum()
                    count_by[o] += (off == o).sum()
                start = 0
                for row in batch:
                    n = len(row["ids"]) - row["prompt_tokens"]
                    tally = kinds.setdefault(kind_of(row), torch.zeros(BLOCK, 2))
                    for o in range(BLOCK):
                        sel = off[start : start + n] == o
                        tally[o, 0] += hits[start : start + n][sel].sum()
                        tally[o, 1] += sel.sum()
                    start += n
    draft.train()
    rate = (hits_by / count_by).tolist()
    # chained: the expected guesses accepted in a step of BLOCK guesses (independence assumed)
    chain, run = 0.0, 1.0
    for r in rate:
        run *= r
        chain += run
    return {
        "by_offset": [round(r, 4) for r in rate],
        "chained": round(chain, 3),
        "by_kind_offset0": {
            k: round(float(v[0, 0] / v[0, 1]), 4) for k, v in sorted(kinds.items())
        },
        "by_kind_offset1": {
            k: round(float(v[1, 0] / v[1, 1]), 4) for k, v in sorted(kinds.items())
        },
    }


def models():
    """Stage 5's draft (embeddings frozen), its head rows, its state projection before the head, and
    a projection at the input from zero."""
    draft = AutoModelForCausalLM.from_pretrained(START, dtype=torch.float32)
    draft.get_input_embeddings().weight.requires_grad_(False)
    head = Head.of(draft, json.loads((START / "draft_vocabulary.json").read_text()))
    width = draft.config.hidden_size
    proj_head = torch.nn.Linear(576, width, bias=False)
    with torch.no_grad():
        proj_head.weight.copy_(read_projection(START / "state_projection.safetensors", draft))
    proj_in = torch.nn.Linear(576, width, bias=False)
    torch.nn.init.zeros_(proj_in.weight)
    return draft, head, proj_head, proj_in


def train(arm, rows, parts, rng) -> int:
    """One epoch over rows; returns the steps taken."""
    draft, head, proj_head, proj_in = parts
    params = [p for p in draft.parameters() if p.requires_grad] + list(proj_head.parameters())
    params += list(proj_in.parameters()) if arm == "input" else []
    opt = torch.optim.AdamW(params, lr=3e-4, weight_decay=0.0)
    steps = batches(rows, 4096, random.Random(1))
    started = time.time()
    for step, batch in enumerate(steps):
        warm = min(1.0, (step + 1) / 20)
        for group in opt.param_groups:
            group["lr"] = 3e-4 * warm * (0.1 + 0.45 * (1 + math.cos(math.pi * step / len(steps))))
        loss, hits, _ = loss_of(
            draft, arm, batch, PAD, head, proj_in, proj_head, lambda i: rng.randrange(BLOCK)
        )
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        if step % 10 == 0:
            print(
                f"step {step}/{len(steps)} loss {loss.item():.3f} hit {hits.float().mean():.3f} "
                f"{time.time() - started:.0f} s",
                flush=True,
            )
    return len(steps)


def main():
    arm, answers, out = sys.argv[1], int(sys.argv[2]), Path(sys.argv[3])
    threads = int(sys.argv[4]) if len(sys.argv) > 4 else 2
    torch.manual_seed(0)
    torch.set_num_threads(threads)
    parts = models()
    held = rows_with_states("answers-heldout")
    rows = rows_with_states("answers-train")
    rng = random.Random(0)
    rng.shuffle(rows)
    log = {"arm": arm, "answers": answers, "block": BLOCK, "threads": threads}
    draft, head, proj_head, proj_in = parts
    log["before"] = evaluate(draft, arm, held, PAD, head, proj_in, proj_head)
    print(json.dumps(log["before"]), flush=True)
    started = time.time()
    log["steps"] = train(arm, rows[:answers], parts, rng)
    log["wall_s"] = round(time.time() - started)
    log["after"] = evaluate(draft, arm, held, PAD, head, proj_in, proj_head)
    print(json.dumps(log["after"]), flush=True)
    out.write_text(json.dumps(log, indent=1))


if __name__ == "__main__":
    main()
