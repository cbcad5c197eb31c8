"""Tree verification: inputs, positions and mask for trunk + branches, the target's tokens, and
acceptance."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from .cache import cache_length


# Pending tokens past which the run goes through the plain forward before the tree: on the 2-core
# CPU the split cost 45-60 ms more below 300 tokens and broke even near 600 (docs/BENCHMARKS.md,
# *Long requests*).
PLAIN_RUN = 512


@dataclass(frozen=True)
class Verdict:
    trunk_accepted: int  # leading trunk tokens that equal the target's tokens
    branch: int | None  # index of the branch walked after a fully accepted trunk, if any matched
    branch_accepted: int  # leading tokens of that branch that the target kept
    next_token: int  # the target's own token after the accepted ones (its argmax or its sample)


def tree_layout(
    pending: int,
    trunk: int,
    branch_lengths: list[int],
    past: int,
    dtype,
    device,
    offsets: list[int] | None = None,
    attach: list[int] | None = None,
):
    """Positions and additive mask for [pending | trunk | branch_0 | branch_1 ...] after `past`
    cached tokens.

    Pending and trunk tokens form one causal run; branch b continues it after the first attach[b]
    trunk tokens (default: the whole trunk), at the positions that follow them (shifted by its
    offset: the draft's lookahead columns start one position further each), and sees the cache, the
    pending tokens, those trunk tokens and its own earlier tokens, never another branch.
    Returns position_ids (1, n) and mask (1, 1, n, past + n), 0.0 where attending, the dtype's min
    elsewhere.
    """
    run = pending + trunk
    n = run + sum(branch_lengths)
    positions = list(range(past, past + run))
    # Additive float, not boolean: eager attention silently mishandles a boolean 4D mask. The causal
    # run in one op, each branch row from Python and laid in at once, after the cache's columns (all
    # attended): fewer tensor edits than one per branch (docs/BENCHMARKS.md, *The constants behind
    # the code*); a long prompt's run stays one op.
    blocked = torch.finfo(dtype).min
    block = torch.full((n, n), blocked, dtype=dtype, device=device).triu_(1)
    rows = []
    start = run
    for b, length in enumerate(branch_lengths):
        seen = pending + (attach[b] if attach else trunk)
        first = past + seen + (offsets[b] if offsets else 0)
        positions += range(first, first + length)
        rows += [
            [0.0] * seen
            + [blocked] * (start - seen)
            + [0.0] * (j + 1)
            + [blocked] * (n - start - j - 1)
            for j in range(length)
        ]
        start += length
    if rows:
        block[run:] = torch.tensor(rows, dtype=dtype, device=device)
    mask = torch.cat([torch.zeros(n, past, dtype=dtype, device=device), block], dim=1)
    return torch.tensor([positions], device=device), mask[None, None]


def row_positions(
    next_position: int, trunk: int, branches: list[list[int]], attach: list[int] | None
) -> list[int]:
    """The sequence position of the token each row of forward_tree's logits is for: rows 0..trunk
    follow the trunk from next_position; branch b's row j follows its token j, which sits after
    trunk[:attach[b]]."""
    positions = list(range(next_position, next_position + trunk + 1))
    for b, branch in enumerate(branches):
        first = next_position + (attach[b] if attach else trunk) + 1
        positions += range(first, first + len(branch))
    return positions


def walk_tree(
    trunk: list[int],
    branches: list[list[int]],
    trunk_tokens: list[int],
    branch_tokens: list[list[int]],
    attach: list[int] | None = None,
) -> Verdict:
    """Greedy acceptance, and sample-and-match acceptance when the target tokens are samples.

    trunk_tokens[i] is the target's token after trunk[:i] (len(trunk) + 1 of them);
    branch_tokens[b][j] the target's token after branch b's first j + 1 tokens; branch b continues
    after trunk[:attach[b]] (default: the whole trunk). A drafted token stands only if it equals the
    target's token at its position. Branches sharing a prefix share one node of the tree, so each
    node's token is read once (from the first live branch): with samples, reading several would bias
    the draw.
    """
    accepted = 0
    while accepted < len(trunk) and trunk[accepted] == trunk_tokens[accepted]:
        accepted += 1
    token = trunk_tokens[accepted]
    # Only the branches that continue where the trunk's accepted run ends can go on from there.
    live = [b for b in range(len(branches)) if (attach[b] if attach else len(trunk)) == accepted]
    best, depth = None, 0
    while True:
        live = [b for b in live if depth < len(branches[b]) and branches[b][depth] == token]
        if not live:
            break
        best = live[0]
        token = branch_tokens[best][depth]
        depth += 1
    return Verdict(accepted, best, depth, token)


def input_device(model) -> torch.device:
    return model.get_input_embeddings().weight.device


@torch.no_grad()
def forward_tree(
    model,
    cache,
    pending: list[int],
    trunk: list[int],
    branches: list[list[int]],
    offsets: list[int] | None = None,
    attach: list[int] | None = None,
) -> torch.Tensor:
    """Run `model` on pending + trunk + branches in one forward, growing `cache` by all of them.

    Returns the logits from the last pending token on: (1 + len(trunk) + total branch length,
    vocab).
    """
    assert pending, "at least one token must be fed to get a next-token distribution"
    if branches and len(pending) > PLAIN_RUN:
        # A long prompt goes through the plain causal forward first, the tree after its last token:
        # under a mask every score of the run is computed and the masked kernels run, which cost a
        # long prompt's prefill a quarter more; a short one pays less than the second call costs.
        forward_tree(model, cache, pending[:-1], [], [])
        pending = pending[-1:]
    past = cache_length(cache)
    device = input_device(model)
    tokens = pending + trunk + [t for branch in branches for t in branch]
    input_ids = torch.tensor([tokens], dtype=torch.long, device=device)
    keep = len(tokens) - len(pending) + 1
    if branches:
        positions, mask = tree_layout(
            len(pending),
            len(trunk),
            [len(b) for b in branches],
            past,
            model.dtype,
            device,
            offsets,
            attach,
        )
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
    )
    return out.logits[0, -keep:]
