"""Feasibility: a one-layer draft over the target's hidden states (EAGLE-style), trained with a
second pass on its own states (a depth-2 training-time test); prints the held-out agreement of its
first and second token, per kind (docs/BENCHMARKS.md, "The broad mix: what visitors ask"). Reads
the shards smollm2-hidden-draft-capture.py writes; its output is smollm2-hidden-draft-train.txt.

    python3 docs/bench-runs/smollm2-hidden-draft-capture.py
    python3 docs/bench-runs/smollm2-hidden-draft-train.py --epochs 2
"""

import argparse
import glob
import json
import math
import os
import random
import sys
import time
from collections import defaultdict
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn
from transformers.models.llama.modeling_llama import LlamaRotaryEmbedding, apply_rotary_pos_emb

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
FEATURES = os.environ.get("HIDDEN_FEATURES", "/tmp/hidden-draft-features")
from ouroboros_core.tools.draft_loss import batches, kind_of  # noqa: E402
from ouroboros_core.tools.train_draft import vocabulary  # noqa: E402


def rms(x, w, eps):
    return w * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps))


class Head(nn.Module):
    def __init__(self, target, init_layer=29):
        super().__init__()
        cfg = target.config
        H = cfg.hidden_size
        self.cfg = cfg
        self.nh, self.nkv, self.hd = cfg.num_attention_heads, cfg.num_key_value_heads, cfg.head_dim
        self.fc = nn.Linear(2 * H, H, bias=False)
        src = target.model.layers[init_layer]
        self.q = nn.Linear(H, self.nh * self.hd, bias=False)
        self.k = nn.Linear(H, self.nkv * self.hd, bias=False)
        self.v = nn.Linear(H, self.nkv * self.hd, bias=False)
        self.o = nn.Linear(self.nh * self.hd, H, bias=False)
        self.gate = nn.Linear(H, cfg.intermediate_size, bias=False)
        self.up = nn.Linear(H, cfg.intermediate_size, bias=False)
        self.down = nn.Linear(cfg.intermediate_size, H, bias=False)
        self.n1 = nn.Parameter(src.input_layernorm.weight.detach().clone())
        self.n2 = nn.Parameter(src.post_attention_layernorm.weight.detach().clone())
        # the target's features are after its final norm: the head's output is too
        self.n3 = nn.Parameter(target.model.norm.weight.detach().clone())
        at, mlp = src.self_attn, src.mlp
        for mine, theirs in [
            (self.q, at.q_proj),
            (self.k, at.k_proj),
            (self.v, at.v_proj),
            (self.o, at.o_proj),
            (self.gate, mlp.gate_proj),
            (self.up, mlp.up_proj),
            (self.down, mlp.down_proj),
        ]:
            mine.weight.data.copy_(theirs.weight.detach())
        with torch.no_grad():
            self.fc.weight.normal_(0, 0.02)
            self.fc.weight[:, H:] += torch.eye(H)  # start by passing the feature through
        self.rope = LlamaRotaryEmbedding(cfg)
        self.eps = cfg.rms_norm_eps

    def qkv(self, x, pos):
        B, T, _ = x.shape
        h = rms(x, self.n1, self.eps)
        q = self.q(h).view(B, T, self.nh, self.hd).transpose(1, 2)
        k = self.k(h).view(B, T, self.nkv, self.hd).transpose(1, 2)
        v = self.v(h).view(B, T, self.nkv, self.hd).transpose(1, 2)
        cos, sin = self.rope(x, pos)
        q, k = apply_rotary_pos_emb(q, k, cos, sin)
        return q, k, v

    def finish(self, x, q, k, v, mask):
        B, T, _ = x.shape
        a = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, enable_gqa=True)
        x = x + self.o(a.transpose(1, 2).reshape(B, T, -1))
        h = rms(x, self.n2, self.eps)
        return rms(x + self.down(F.silu(self.gate(h)) * self.up(h)), self.n3, self.eps)

    def forward(self, emb, feat_prev, pos, mask, emb2=None):
        """Pass 1 over (emb_i, feat_{i-1}); if emb2 given, pass 2 where each query i uses pass 1's
        output at i-1 as its feature, attending pass 1's keys before it and itself."""
        x = self.fc(torch.cat([emb, feat_prev], -1))
        q, k, v = self.qkv(x, pos)
        out1 = self.finish(x, q, k, v, mask)
        if emb2 is None:
            return out1, None
        prev = torch.cat([torch.zeros_like(out1[:, :1]), out1[:, :-1]], 1)
        x2 = self.fc(torch.cat([emb2, prev], -1))
        q2, k2, v2 = self.qkv(x2, pos)
        T = x.shape[1]
        strict = torch.ones(T, T, dtype=torch.bool).tril(-1)
        eye = torch.eye(T, dtype=torch.bool)
        m2 = torch.cat([strict[None, None] & mask, eye[None, None].expand_as(mask)], -1)
        out2 = self.finish(x2, q2, torch.cat([k, k2], 2), torch.cat([v, v2], 2), m2)
        return out1, out2


def load(pattern):
    rows = []
    for path in sorted(glob.glob(pattern)):
        rows += torch.load(path)
    return rows


def tensors(batch, pad, H):
    T = max(len(r["ids"]) for r in batch)
    B = len(batch)
    ids = torch.full((B, T), pad)
    feat = torch.zeros(B, T, H)
    valid = torch.zeros(B, T, dtype=torch.bool)
    scored = torch.zeros(B, T, dtype=torch.bool)  # position i scored: predicts ids[i+1]
    for b, r in enumerate(batch):
        n = len(r["ids"])
        ids[b, :n] = torch.tensor(r["ids"])
        feat[b, :n] = r["feat"].float()
        valid[b, :n] = True
        scored[b, max(1, r["prompt_tokens"] - 1) : n - 1] = True
    return ids, feat, valid, scored


def step_loss(head, embed, W, vocab, batch, pad, noise=0.0):
    H = W.shape[1]
    ids, feat, valid, scored = tensors(batch, pad, H)
    B, T = ids.shape
    emb = embed(ids)
    prev = torch.cat([torch.zeros(B, 1, H), feat[:, :-1]], 1)
    if noise:
        prev = prev + noise * torch.randn_like(prev)
    pos = torch.arange(T)[None].expand(B, T)
    mask = (torch.ones(T, T, dtype=torch.bool).tril()[None] & valid[:, None, :])[:, None]
    mask = mask | torch.eye(T, dtype=torch.bool)[None, None]
    # pass 2's query i reads token i and pass 1's output at i-1: it stands for the second token
    out1, out2 = head(emb, prev, pos, mask, emb2=emb)
    with torch.no_grad():
        target_logits = feat[scored] @ W.T
        p = torch.softmax(target_logits, -1)
        nxt = torch.cat([ids[:, 1:], torch.full((B, 1), pad)], 1)
        labels = nxt[scored]  # the answer's next token (the target's greedy one in greedy rows)
    res = {}
    loss = 0
    for name, out, w in [("d1", out1, 1.0), ("d2", out2, 0.5)]:
        sel = scored.clone()
        if name == "d2":
            sel[:, 0] = False
        lg = out[scored] @ W.T
        logp = F.log_softmax(lg, -1)
        ce = -(p * logp).sum(-1)
        reg = F.smooth_l1_loss(out[scored], feat[scored], reduction="none").mean(-1)
        keep = sel[scored]
        loss = loss + w * (ce[keep].mean() + 0.1 * reg[keep].mean())
        res[name] = (vocab[lg.argmax(-1)] == labels) & keep
        res[name + "_n"] = keep
    return loss, res, scored


def evaluate(head, embed, W, vocab, rows, pad):
    head.eval()
    tally = defaultdict(lambda: [0, 0, 0, 0])
    with torch.no_grad():
        for batch in batches(rows, 4096, random.Random(0)):
            _, res, scored = step_loss(head, embed, W, vocab, batch, pad)
            counts1 = scored.sum(1).tolist()
            start = 0
            for r, c in zip(batch, counts1):
                t = tally[kind_of(r)]
                t[0] += int(res["d1"][start : start + c].sum())
                t[1] += int(res["d1_n"][start : start + c].sum())
                t[2] += int(res["d2"][start : start + c].sum())
                t[3] += int(res["d2_n"][start : start + c].sum())
                start += c
    head.train()
    tot = [sum(t[i] for t in tally.values()) for i in range(4)]
    return {
        "first": round(tot[0] / tot[1], 4),
        "second": round(tot[2] / tot[3], 4),
        "by_kind": {k: round(t[0] / t[1], 3) for k, t in sorted(tally.items())},
    }


def arguments():
    ap = argparse.ArgumentParser()
    ap.add_argument("--epochs", type=float, default=2)
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--limit", type=int, default=0)
    ap.add_argument("--noise", type=float, default=0.0)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--out", default="/tmp/hidden-draft-head.pt")
    ap.add_argument("--train", default=f"{FEATURES}/train-*.pt,{FEATURES}/store-*.pt")
    return ap.parse_args()


def setup(a):
    """(head, the target's embeddings, its output rows for the draft's vocabulary, that vocabulary,
    pad id, training rows, held-out greedy rows)."""
    from ouroboros_core.models import load_target_of

    target, tok = load_target_of("smollm2")
    pad = tok.pad_token_id if tok.pad_token_id is not None else tok.eos_token_id
    train = [r for g in a.train.split(",") for r in load(g)]
    held = [r for r in load(f"{FEATURES}/heldout-*.pt") if r["temperature"] == 0]
    if a.limit:
        train = train[: a.limit]
    # the rows the draft may propose (the recorded run read stage 1's vocabulary, 17,140 ids, made
    # the same way from its rows)
    start = str(ROOT / "assets/models/smollm2-draft")
    vocab = torch.tensor(vocabulary(train, target.config.vocab_size, start))
    W = target.lm_head.weight.detach()[vocab].clone()
    embed = target.get_input_embeddings()
    embed.weight.requires_grad_(False)
    return Head(target), embed, W, vocab, pad, train, held


def main():
    a = arguments()
    torch.set_num_threads(a.threads)
    torch.manual_seed(0)
    head, embed, W, vocab, pad, train, held = setup(a)
    rng = random.Random(0)
    steps = max(1, round(a.epochs * len(batches(train, 4096, rng))))
    trained = [p for p in head.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(trained, lr=a.lr, betas=(0.9, 0.95), weight_decay=0.0)
    print("train rows", len(train), "held", len(held), "steps", steps, flush=True)
    print(json.dumps({"step": 0, **evaluate(head, embed, W, vocab, held, pad)}), flush=True)
    queue, started = [], time.perf_counter()
    for step in range(steps):
        if not queue:
            queue = batches(train, 4096, rng)
        lr = a.lr * min(1, (step + 1) / 30) * (0.1 + 0.45 * (1 + math.cos(math.pi * step / steps)))
        for g in opt.param_groups:
            g["lr"] = lr
        loss, res, _ = step_loss(head, embed, W, vocab, queue.pop(), pad, a.noise)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(head.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        if (step + 1) % 20 == 0:
            acc = res["d1"].sum().item() / max(1, res["d1_n"].sum().item())
            line = {"step": step + 1, "loss": round(loss.item(), 3), "train_first": round(acc, 3)}
            print(json.dumps({**line, "s": round(time.perf_counter() - started)}), flush=True)
        if (step + 1) % 150 == 0 or step + 1 == steps:
            print(json.dumps({"step": step + 1, **evaluate(head, embed, W, vocab, held, pad)}))
            torch.save(head.state_dict(), a.out)


if __name__ == "__main__":
    main()
