"""The draft model and its KV cache, as the drafters run it."""

from __future__ import annotations

import torch

from .cache import new_cache, truncate
from .tree import DraftTree
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


# The most tokens of a prompt the draft reads: the last ones. A draft guesses the next words from
# the last few sentences; reading a long prompt whole cost its prefill a second of a 2,800-token
# request's race on the CPU, and more attention in every later forward (docs/BENCHMARKS.md, *Long
# requests*). Lookup still copies from the whole text.
DRAFT_CONTEXT = 512


class DraftRunner:
    """The draft model and its KV cache, kept a prefix of whatever sequence it is asked to
    extend, from the last `context` tokens of the first sequence on."""

    def __init__(self, model, context: int = DRAFT_CONTEXT):
        self.model = model  # a transformers model, or the LeanDecoder that wraps it
        self.cache = new_cache(model)
        self.fed: list[int] = []  # tokens whose keys and values are in the cache
        self.vocab = model.get_input_embeddings().num_embeddings
        self.context = context
        self.start: int | None = None  # where the draft's reading begins, set by the first call
        # A draft that reads the target's state (a LeanDecoder with a projection): the length of
        # the text the state follows, and the state (see follow).
        self.reads_state = getattr(model, "projection", None) is not None
        self.state: tuple[int, torch.Tensor] | None = None

    def follow(self, committed: list[int], state: torch.Tensor | None) -> None:
        """The target's final state one position before the newest committed token (the input
        its output layer read to choose that token): the next forward after exactly `committed`
        adds its projection to that token's row, which guesses the token after."""
        self.state = (len(committed), state) if self.reads_state and state is not None else None

    def readable(self, tokens) -> bool:
        """Whether the draft has an embedding for every token (a target may pad its vocabulary past
        it)."""
        return all(token < self.vocab for token in tokens)

    def forward(self, sequence: list[int], riders: DraftTree | None = None) -> torch.Tensor:
        """Logits after `sequence` and at every row of `riders` (DraftTree.riders: rows past the
        sequence, or in place of its last token); the cache keeps `sequence` alone."""
        state = None
        if self.state is not None and self.state[0] == len(sequence):
            state = self.state[1]
        if self.start is None:
            self.start = max(0, len(sequence) - self.context)
        if self.start:
            sequence = sequence[self.start :]  # only a long prompt's runner copies the list
        # Feed one token at least.
        common = shared_prefix(self.fed, sequence, min(len(self.fed), len(sequence) - 1))
        truncate(self.cache, common)
        logits = forward_tree(self.model, self.cache, sequence[common:], riders, state)
        truncate(self.cache, len(sequence))
        self.fed = list(sequence)
        return logits
