"""Where a default-pair Ouroboros step's rows go, by proposer (the draft's trunk; context copies and
stored walks by how many of the text's last tokens keyed them): rows per forward, tokens they got
kept, kept per row. Held-out chat requests past the bench's 20 (12 of them), 128 tokens.

    PYTHONPATH=. python3 docs/bench-runs/smollm2-rows-by-proposer.py TEMPERATURE THREADS [JSON]

Variants measured with it (BENCHMARKS.md, "The default pair on a 2-core AVX-512 CPU"), each an
environment variable: ORDERS=4,3,2,1 (the store keyed on these), STORE_EXTRA=FILE.jsonl
(target_samples answers added to the store), STORE_TRIMS=0 (greedy stored walks kept whole),
GREEDY_TRUST=0.05 (greedy copies and walks ended by the request's own trust alone), CUT=2,4,8,8 (a
copy's most tokens by its matched length 1-4), TRIM_LOOKUP=0.05 (greedy copies trimmed as sampled
ones are).
"""

import collections
import json
import os
import sys

import torch
from ouroboros_core import load_engine
from ouroboros_core import answers as A
from ouroboros_core import drafters
from ouroboros_core import lookup as L
from ouroboros_core.tools.bench import heldout_chat_requests
from ouroboros_core.tools.chat_requests import heldout_requests

torch.set_num_threads(int(sys.argv[2]) if len(sys.argv) > 2 else 2)
temperature = float(sys.argv[1]) if len(sys.argv) > 1 else 0.0
options = json.loads(sys.argv[3]) if len(sys.argv) > 3 else {}
bench = {r["id"] for r in heldout_chat_requests(20)}
requests = [r for r in heldout_requests() if r["chat"] and r["id"] not in bench][:12]
rows = collections.Counter()
kept = collections.Counter()
offered = collections.Counter()
orig = drafters.Ouroboros.observe


def observe(self, committed, old_length, proposal, verdict, trunk_tokens):
    rows["trunk"] += len(proposal.trunk)
    kept["trunk"] += verdict.trunk_accepted
    for b, (owner, toks, at) in enumerate(
        zip(proposal.branch_owners, proposal.branches, proposal.attached())
    ):
        note = proposal.notes.get(owner)
        key = owner + (
            f"/m{note.matched}"
            if hasattr(note, "matched") and owner in ("lookup", "answers")
            else ""
        )
        rows[key] += len(toks)
        offered[key] += 1
        if verdict.branch == b:
            kept[key] += verdict.branch_accepted
    return orig(self, committed, old_length, proposal, verdict, trunk_tokens)


drafters.Ouroboros.observe = observe

PREFIX = A.ORDERS[0]  # the request's last tokens before each stored answer (train_draft's)
if os.environ.get("ORDERS"):
    A.ORDERS = tuple(int(x) for x in os.environ["ORDERS"].split(","))


def after_init(change) -> None:
    """Run `change(drafter)` on every Ouroboros drafter once it is built."""
    built = drafters.Ouroboros.__init__

    def init(self, *args, **kwargs):
        built(self, *args, **kwargs)
        change(self)

    drafters.Ouroboros.__init__ = init


def trim_copies(drafter, above: float) -> None:
    drafter.lookup.trims, drafter.lookup.above = True, above


def keep_walks_whole(drafter) -> None:
    if drafter.stored is not None:
        drafter.stored.trims = False


if os.environ.get("STORE_TRIMS") == "0":
    after_init(keep_walks_whole)
if os.environ.get("TRIM_LOOKUP"):
    after_init(lambda drafter: trim_copies(drafter, float(os.environ["TRIM_LOOKUP"])))
if os.environ.get("GREEDY_TRUST"):
    # greedy: copies (and, inheriting it, stored walks) ended by the request's own trust alone, as
    # if the target reached them for sure
    def _trusted(self, found, matched, common, trunk):
        return self.trust.length(matched, 1.0, len(found) - common, self.above)

    L.ContextLookup._trusted = _trusted
    after_init(lambda drafter: trim_copies(drafter, float(os.environ["GREEDY_TRUST"])))
if os.environ.get("CUT"):
    cut = [int(x) for x in os.environ["CUT"].split(",")]  # max length for matched 1,2,3,4
    find0 = L.ContextLookup.find

    def find(self, committed, length):
        found, matched = find0(self, committed, length)
        return found[: cut[max(matched, 1) - 1]], matched

    L.ContextLookup.find = find
engine = load_engine()
if os.environ.get("STORE_EXTRA"):
    old = json.load(open("assets/models/smollm2-draft/answers.json"))["answers"]
    new = [
        r["ids"][r["prompt_tokens"] - PREFIX :]
        for r in map(json.loads, open(os.environ["STORE_EXTRA"]))
    ]
    engine.draft.answer_store = A.AnswerStore(old + new)
    print("store", engine.draft.answer_store.answers, "answers")
sampling = dict(temperature=temperature, top_p=0.95) if temperature else {}
tokens = forwards = 0
for i, r in enumerate(requests):
    seed = dict(seed=1 + i) if temperature else {}
    res = engine.generate(r["prompt"], "ouroboros", 128, **sampling, **seed, **options)
    tokens += len(res.token_ids)
    forwards += res.stats.target_forwards
rows_per_forward = 1 + sum(rows.values()) / forwards
print(
    f"T={temperature} {options}: {tokens / forwards:.3f} tokens/forward, "
    f"rows/forward {rows_per_forward:.2f}"
)
for k in sorted(rows):
    print(
        f"  {k:14s} rows/fwd {rows[k] / forwards:5.2f}  kept/fwd {kept[k] / forwards:5.3f}  "
        f"kept/row {kept[k] / max(rows[k], 1):.3f}  offered/fwd {offered[k] / forwards:.2f}"
    )
