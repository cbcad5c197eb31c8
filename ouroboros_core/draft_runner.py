"""The draft model and its KV cache, as the drafters run it."""

from __future__ import annotations

import torch

from .cache import new_cache, truncate
from .verify import forward_tree


def shared_prefix(a: list, b: list, limit: int) -> int:
    """How many leading items a and b share, at most `limit`: lists compared a slice at a time (a
    draft forward extends what the last one fed, so the whole span usually matches at once), halving
    the span on a mismatch."""
    if a[:limit] == b[:limit]:
        return limit
    low, high = 0, limit  # a[:low] == b[:low], a[:high] != b[:high]
    while high - low > 1:
        middle = (low + high) // 2
        if a[low:middle] == b[low:middle]:
            low = middle
        else:
            high = middle
    return low


class DraftRunner:
    """The draft model and its KV cache, kept a prefix of whatever sequence it is asked to
    extend."""

    def __init__(self, model):
        self.model = model  # a transformers model, or the LeanDecoder that wraps it
        self.cache = new_cache(model)
        self.fed: list[int] = []  # tokens whose keys and values are in the cache
        self.vocab = model.get_input_embeddings().num_embeddings

    def readable(self, tokens) -> bool:
        """Whether the draft has an embedding for every token (a target may pad its vocabulary past
        it)."""
        return all(token < self.vocab for token in tokens)

    def forward(
        self, sequence: list[int], branches: list[list[int]] = (), offsets=None, attach=None
    ) -> torch.Tensor:
        """Logits after `sequence` and at every branch position; the cache keeps `sequence` alone. A
        branch with attach -1 stands in for the sequence's last token (it sees the tokens before
        it); by default a branch continues the whole sequence."""
        # Feed one token at least.
        common = shared_prefix(self.fed, sequence, min(len(self.fed), len(sequence) - 1))
        truncate(self.cache, common)
        logits = forward_tree(
            self.model, self.cache, sequence[common:], [], list(branches), offsets, attach
        )
        truncate(self.cache, len(sequence))
        self.fed = list(sequence)
        return logits
