"""The draft tree one forward reads, laid out once: a trunk and the branches that continue it.

A forward feeds the pending tokens (committed, not yet in the cache), then the trunk, then each
branch in turn, and keeps the logits from the last pending token on. Everything that follows from
that order lives here: each row's position, the attention mask, which logits rows belong to which
part (row groups), the acceptance walk, and the cache span an accepted branch occupies. So does the
forward itself (forward_tree) and the one code that touches the KV cache API (transformers 5's
DynamicCache, or the lean draft's LeanCache): new_cache, truncate, keep_span.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass

import torch
from transformers import DynamicCache

from .lean import LeanCache, LeanDecoder

# A branch's attach for a token in place of the last pending one (the draft's other choice there):
# it sees the tokens before that one and sits at its position.
STANDS_IN = -1


@dataclass(frozen=True)
class Acceptance:
    """What the target accepted of a draft tree: the accepted length on the trunk, the branch walked
    after it and its accepted length, and the target's own next token."""

    trunk_accepted: int  # leading trunk tokens that equal the target's tokens
    branch: int | None  # index of the branch walked after a fully accepted trunk, if any matched
    branch_accepted: int  # leading tokens of that branch that the target kept
    next_token: int  # the target's own token after the accepted ones (its argmax or its sample)


@dataclass(frozen=True)
class DraftTree:
    """trunk, then branches; branch b continues after the first attach[b] trunk tokens (STANDS_IN:
    in place of the last pending token), offsets[b] positions further on (the draft's lookahead
    columns start one position further each)."""

    trunk: tuple[int, ...] = ()
    branches: tuple[tuple[int, ...], ...] = ()
    attach: tuple[int, ...] = ()
    offsets: tuple[int, ...] = ()

    @classmethod
    def of(cls, trunk=(), branches=(), attach=None, offsets=None) -> DraftTree:
        """attach None: every branch continues the whole trunk; offsets None: none shifted."""
        branches = tuple(tuple(branch) for branch in branches)
        attach = tuple(attach) if attach is not None else (len(trunk),) * len(branches)
        offsets = tuple(offsets) if offsets is not None else (0,) * len(branches)
        assert len(attach) == len(offsets) == len(branches), (attach, offsets, len(branches))
        return cls(tuple(trunk), branches, attach, offsets)

    @classmethod
    def extra_rows(cls, columns=(), phrases=(), stand_ins=()) -> DraftTree:
        """A draft forward's rows past its sequence: the lookahead window's columns (column i sits i
        positions further on), phrases after the sequence, and tokens in place of its last token."""
        return cls.of(
            (),
            [*columns, *phrases, *([token] for token in stand_ins)],
            [0] * (len(columns) + len(phrases)) + [STANDS_IN] * len(stand_ins),
            list(range(len(columns))) + [0] * (len(phrases) + len(stand_ins)),
        )

    def tokens(self) -> list[int]:
        """The tree's tokens in the order the forward feeds them."""
        return [*self.trunk, *(token for branch in self.branches for token in branch)]

    def groups(self) -> list[int]:
        """The logits rows of each part: the trunk's (after the last pending token and after each
        trunk token), then each branch's (after each of its tokens)."""
        return [len(self.trunk) + 1] + [len(branch) for branch in self.branches]

    def branch_row(self, b: int) -> int:
        """The logits row after branch b's first token."""
        return len(self.trunk) + 1 + sum(len(branch) for branch in self.branches[:b])

    def row_positions(self, next_position: int) -> list[int]:
        """The sequence position of the token each logits row is for: the trunk's rows follow the
        trunk from next_position; branch b's row j follows its token j."""
        positions = list(range(next_position, next_position + len(self.trunk) + 1))
        for branch, attach, offset in zip(self.branches, self.attach, self.offsets):
            first = next_position + attach + offset + 1
            positions += range(first, first + len(branch))
        return positions

    def layout(self, pending: int, past: int, dtype, device):
        """Positions and additive mask for [pending | trunk | branch_0 | ...] after `past` cached
        tokens. Pending and trunk tokens form one causal run; each branch sees the cache, the run
        up to where it attaches and its own earlier tokens, never another branch. Returns
        position_ids (1, n) and mask (1, 1, n, past + n): 0.0 where attending, the dtype's min
        elsewhere."""
        run = pending + len(self.trunk)
        n = run + sum(len(branch) for branch in self.branches)
        positions = list(range(past, past + run))
        # Additive float, not boolean: eager attention silently mishandles a boolean 4D mask. The
        # causal run in one op, each branch row from Python and laid in at once, after the cache's
        # columns (all attended): fewer tensor edits than one per branch (docs/BENCHMARKS.md, *The
        # constants behind the code*); a long prompt's run stays one op.
        blocked = torch.finfo(dtype).min
        block = torch.full((n, n), blocked, dtype=dtype, device=device).triu_(1)
        rows = []
        start = run
        for branch, attach, offset in zip(self.branches, self.attach, self.offsets):
            seen = pending + attach
            first = past + seen + offset
            positions += range(first, first + len(branch))
            rows += [
                [0.0] * seen
                + [blocked] * (start - seen)
                + [0.0] * (j + 1)
                + [blocked] * (n - start - j - 1)
                for j in range(len(branch))
            ]
            start += len(branch)
        if rows:
            block[run:] = torch.tensor(rows, dtype=dtype, device=device)
        mask = torch.cat([torch.zeros(n, past, dtype=dtype, device=device), block], dim=1)
        return torch.tensor([positions], device=device), mask[None, None]

    def kept_rows(self, verdict: Acceptance) -> tuple[int, int, int]:
        """What a forward's new cache rows keep after the walk, counted from the first trunk token:
        (trunk tokens kept, where the walked branch's rows start, how many of them are kept)."""
        if verdict.branch is None:
            return verdict.trunk_accepted, verdict.trunk_accepted, 0
        start = self.branch_row(verdict.branch) - 1
        return verdict.trunk_accepted, start, verdict.branch_accepted


def next_token_row(tree: DraftTree, verdict: Acceptance) -> int:
    """The logits row the target's own next token came from: after the last accepted token."""
    if verdict.branch is None:
        return verdict.trunk_accepted
    return tree.branch_row(verdict.branch) + verdict.branch_accepted - 1


def walk(tree: DraftTree, trunk_tokens: list[int], branch_tokens: list[list[int]]) -> Acceptance:
    """Greedy acceptance, and sample-and-match acceptance when the target tokens are samples.

    trunk_tokens[i] is the target's token after trunk[:i] (len(trunk) + 1 of them);
    branch_tokens[b][j] the target's token after branch b's first j + 1 tokens. A drafted token
    stands only if it equals the target's token at its position. Branches sharing a prefix
    share one node of the tree, so each node's token is read once (from the first live
    branch): with samples, reading several would bias the draw.
    """
    trunk, branches = tree.trunk, tree.branches
    accepted = 0
    while accepted < len(trunk) and trunk[accepted] == trunk_tokens[accepted]:
        accepted += 1
    token = trunk_tokens[accepted]
    # Only the branches that continue where the trunk's accepted run ends can go on from there.
    live = [b for b in range(len(branches)) if tree.attach[b] == accepted]
    best, depth = None, 0
    while True:
        live = [b for b in live if depth < len(branches[b]) and branches[b][depth] == token]
        if not live:
            break
        best = live[0]
        token = branch_tokens[best][depth]
        depth += 1
    return Acceptance(accepted, best, depth, token)


# --- the target's forward over a tree ---

# Pending tokens past which the run goes through the plain forward before the tree: the split is a
# second forward, which a short run's masked scores cost less than (where it breaks even:
# docs/BENCHMARKS.md, *Long requests*).
PLAIN_RUN = 512


def input_device(model) -> torch.device:
    return model.get_input_embeddings().weight.device


class StateTap:
    """The final (normed) hidden states the model's output layer read in its last forward in
    this thread: the target's state that a draft may read (trunk.DraftRunner.follow).
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


# --- the KV cache ---


def new_cache(model) -> DynamicCache | LeanCache:
    if isinstance(model, LeanDecoder):
        return model.new_cache()
    return DynamicCache(config=model.config)


def cache_length(cache: DynamicCache) -> int:
    return cache.get_seq_length()


def truncate(cache: DynamicCache, length: int) -> None:
    """Keep the first `length` cached tokens (transformers 5's crop takes a negative count to
    drop)."""
    extra = cache_length(cache) - length
    assert extra >= 0, f"cache holds {cache_length(cache)} tokens, cannot grow it to {length}"
    if extra:
        cache.crop(-extra)


def keep_span(cache: DynamicCache, length: int, span_start: int, span_length: int) -> None:
    """Keep the first `length` tokens followed by the `span_length` rows that start at `span_start`.

    Used when the target accepts a branch: the branch's rows sit after the trunk and the other
    branches, and must move right behind the trunk before everything else is dropped.
    """
    assert span_start >= length
    if span_length and span_start != length:
        for layer in cache.layers:
            # (B, heads, T, head_dim): clone the source, the two ranges may overlap.
            layer.keys[..., length : length + span_length, :] = layer.keys[
                ..., span_start : span_start + span_length, :
            ].clone()
            layer.values[..., length : length + span_length, :] = layer.values[
                ..., span_start : span_start + span_length, :
            ].clone()
    truncate(cache, length + span_length)
