"""One forward over the pending tokens and a draft tree (tree.DraftTree lays it out)."""

from __future__ import annotations

import threading

import torch

from .cache import cache_length
from .tree import DraftTree


# Pending tokens past which the run goes through the plain forward before the tree: on the 2-core
# CPU the split cost 45-60 ms more below 300 tokens and broke even near 600 (docs/BENCHMARKS.md,
# *Long requests*).
PLAIN_RUN = 512


def input_device(model) -> torch.device:
    return model.get_input_embeddings().weight.device


class StateTap:
    """The final (normed) hidden states the model's output layer read in its last forward in
    this thread: the target's state that a draft may read (draft_runner.DraftRunner.follow).
    Per thread, so races decoding side by side on one target each read their own."""

    def __init__(self, model):
        self.local = threading.local()
        model.get_output_embeddings().register_forward_pre_hook(self._keep)

    def _keep(self, module, args) -> None:
        self.local.rows = args[0]

    def row(self, index: int) -> torch.Tensor:
        """The state at logits row `index` of this thread's last forward."""
        return self.local.rows[0, index]


@torch.no_grad()
def forward_tree(
    model, cache, pending: list[int], tree: DraftTree | None = None, state=None
) -> torch.Tensor:
    """Run `model` on the pending tokens and the tree's in one forward, growing `cache` by all of
    them (no tree: a plain causal run). state: the target's state for a draft that reads it (a
    lean.LeanDecoder's).

    Returns the logits from the last pending token on: (1 + the tree's tokens, vocab).
    """
    assert pending, "at least one token must be fed to get a next-token distribution"
    if tree is not None and tree.branches and len(pending) > PLAIN_RUN:
        # A long prompt goes through the plain causal forward first, the tree after its last token:
        # under a mask every score of the run is computed and the masked kernels run, which cost a
        # long prompt's prefill a quarter more; a short one pays less than the second call costs.
        forward_tree(model, cache, pending[:-1])
        pending = pending[-1:]
    past = cache_length(cache)
    device = input_device(model)
    tokens = pending + (tree.tokens() if tree is not None else [])
    input_ids = torch.tensor([tokens], dtype=torch.long, device=device)
    keep = len(tokens) - len(pending) + 1
    if tree is not None and tree.branches:
        positions, mask = tree.layout(len(pending), past, model.dtype, device)
    else:
        # A plain causal run: let the model build its own mask, as its own generate() does.
        positions, mask = torch.arange(past, past + len(tokens), device=device)[None], None
    out = model(
        input_ids=input_ids,
        position_ids=positions,
        attention_mask=mask,
        past_key_values=cache,
        use_cache=True,
        logits_to_keep=keep,
        **({} if state is None else {"state": state}),
    )
    return out.logits[0, -keep:]
