"""The target's last hidden states (after its final norm) over the broad answers and the stored
ones, in shards under $HIDDEN_FEATURES (default /tmp/hidden-draft-features), for
smollm2-hidden-draft-train.py (docs/BENCHMARKS.md, "The broad mix: what visitors ask"). A rerun
skips the shards written. About 30 minutes on 2 AVX2 cores."""

import os
import sys
import time
import random
from pathlib import Path
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from ouroboros_core.models import load_target_of
from ouroboros_core.tools.draft_loss import load_rows, batches, padded
from ouroboros_core.tools.train_draft import store_rows

torch.set_num_threads(2)
ROOT = Path(__file__).resolve().parents[2]
out = Path(os.environ.get("HIDDEN_FEATURES", "/tmp/hidden-draft-features"))
out.mkdir(parents=True, exist_ok=True)
target, tok = load_target_of("smollm2")
pad = tok.pad_token_id if tok.pad_token_id is not None else tok.eos_token_id
sets = {
    "heldout": load_rows([ROOT / "data/broad/answers-heldout.jsonl"]),
    # the recorded run read the first 2,396 answers (all there were then)
    "train": load_rows([ROOT / "data/broad/answers-train.jsonl"]),
    "store": store_rows(ROOT / "assets/models/smollm2-draft"),
}
started = time.perf_counter()
for name, rows in sets.items():
    bs = batches(rows, 4096, random.Random(0))
    for start in range(0, len(bs), 25):
        path = out / f"{name}-{start // 25:04d}.pt"
        if path.exists():
            continue
        shard = []
        with torch.no_grad():
            for batch in bs[start : start + 25]:
                ids, mask, _ = padded(batch, pad)
                hidden = target.model(input_ids=ids, attention_mask=mask).last_hidden_state
                for i, row in enumerate(batch):
                    n = len(row["ids"])
                    shard.append(
                        {
                            "id": row["id"],
                            "temperature": row.get("temperature"),
                            "prompt_tokens": row["prompt_tokens"],
                            "ids": row["ids"],
                            "feat": hidden[i, :n].to(torch.float16).clone(),
                        }
                    )
        torch.save(shard, path)
        print(name, start, len(bs), f"{time.perf_counter() - started:.0f} s", flush=True)
print("done", flush=True)
