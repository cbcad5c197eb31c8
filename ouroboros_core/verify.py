"""Tree verification: inputs, positions and mask for trunk + branches, the target's tokens, and acceptance."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from .cache import cache_length


@dataclass(frozen=True)
class Verdict:
    trunk_accepted: int  # leading trunk tokens that equal the target's tokens
    branch: int | None  # index of the branch walked after a fully accepted trunk, if any matched
    branch_accepted: int  # leading tokens of that branch that the target kept
    next_token: int  # the target's own token after the accepted ones (its argmax or its sample)


def tree_layout(pending: int, trunk: int, branch_lengths: list[int], past: int, dtype, device,
                offsets: list[int] | None = None, attach: list[int] | None = None):
    """Positions and additive mask for [pending | trunk | branch_0 | branch_1 ...] after `past` cached tokens.

    Pending and trunk tokens form one causal run; branch b continues it after the first attach[b] trunk
    tokens (default: the whole trunk), at the positions that follow them (shifted by its offset: the
    draft's lookahead columns start one position further each), and sees the cache, the pending tokens,
    those trunk tokens and its own earlier tokens, never another branch.
    Returns position_ids (1, n) and mask (1, 1, n, past + n), 0.0 where attending, the dtype's min elsewhere.
    """
    run = pending + trunk
    n = run + sum(branch_lengths)
    positions = torch.empty(n, dtype=torch.long)
    positions[:run] = torch.arange(past, past + run)
    allowed = torch.zeros(n, past + n, dtype=torch.bool)
    allowed[:, :past] = True
    allowed[:run, past : past + run] = torch.ones(run, run, dtype=torch.bool).tril()
    start = run
    for b, length in enumerate(branch_lengths):
        seen = pending + (attach[b] if attach else trunk)
        first = past + seen + (offsets[b] if offsets else 0)
        positions[start : start + length] = torch.arange(first, first + length)
        allowed[start : start + length, past : past + seen] = True
        allowed[start : start + length, past + start : past + start + length] = torch.ones(
            length, length, dtype=torch.bool).tril()
        start += length
    # Additive float, not boolean: eager attention silently mishandles a boolean 4D mask.
    mask = torch.zeros(n, past + n, dtype=dtype)
    mask.masked_fill_(~allowed, torch.finfo(dtype).min)
    return positions.unsqueeze(0).to(device), mask[None, None].to(device)


def row_positions(next_position: int, trunk: int, branches: list[list[int]], attach: list[int] | None) -> list[int]:
    """The sequence position of the token each row of forward_tree's logits is for: rows 0..trunk follow
    the trunk from next_position; branch b's row j follows its token j, which sits after trunk[:attach[b]]."""
    positions = list(range(next_position, next_position + trunk + 1))
    for b, branch in enumerate(branches):
        first = next_position + (attach[b] if attach else trunk) + 1
        positions += range(first, first + len(branch))
    return positions


MASK64 = (1 << 64) - 1


def position_uniform(seed: int, position: int) -> float:
    """A uniform draw in [0, 1) fixed by the seed and the sequence position alone (SplitMix64 of both).

    Every method that reaches a position after the same text draws the same token there, so vanilla and
    Ouroboros write the same sampled text; draws at different positions are independent."""
    z = (seed * 0x9E3779B97F4A7C15 + (position + 1) * 0xBF58476D1CE4E5B9) & MASK64
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK64
    return ((z ^ (z >> 31)) >> 11) / float(1 << 53)


def nucleus(probs: torch.Tensor, top_p: float) -> torch.Tensor:
    """probs (..., V) with every token outside the top-p nucleus at 0: the smallest prefix of the sorted
    tokens whose mass reaches top_p is kept (the first token always stays). Not renormalised."""
    if top_p >= 1.0:
        return probs
    sorted_probs, order = probs.sort(dim=-1, descending=True)
    sorted_probs = sorted_probs.masked_fill(sorted_probs.cumsum(dim=-1) - sorted_probs >= top_p, 0.0)
    return torch.zeros_like(probs).scatter_(-1, order, sorted_probs)


def target_tokens(logits: torch.Tensor, temperature: float, top_p: float, seed: int | None,
                  positions: list[int]) -> list[int]:
    """The target's token at each row of logits (n, V): argmax when greedy, else a sample by inverting the
    distribution's cumulative sum at position_uniform(seed, position of that row's token)."""
    if temperature == 0.0:
        return logits.argmax(dim=-1).tolist()
    probs = nucleus(torch.softmax(logits.double() / temperature, dim=-1).cpu(), top_p)
    cumulative = probs.cumsum(dim=-1)
    draws = torch.tensor([position_uniform(seed, p) for p in positions], dtype=torch.float64)
    # The first token whose cumulative mass passes the draw; a zero-probability token never does.
    tokens = torch.searchsorted(cumulative, (draws * cumulative[:, -1])[:, None], right=True)[:, 0]
    return tokens.clamp_(max=probs.shape[-1] - 1).tolist()


def walk_tree(trunk: list[int], branches: list[list[int]], trunk_tokens: list[int],
              branch_tokens: list[list[int]], attach: list[int] | None = None) -> Verdict:
    """Greedy acceptance, and sample-and-match acceptance when the target tokens are samples.

    trunk_tokens[i] is the target's token after trunk[:i] (len(trunk) + 1 of them); branch_tokens[b][j]
    the target's token after branch b's first j + 1 tokens; branch b continues after trunk[:attach[b]]
    (default: the whole trunk). A drafted token stands only if it equals the target's token at its
    position. Branches sharing a prefix share one node of the tree, so each node's token is read once
    (from the first live branch): with samples, reading several would bias the draw.
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
def forward_tree(model, cache, pending: list[int], trunk: list[int], branches: list[list[int]],
                 offsets: list[int] | None = None, attach: list[int] | None = None) -> torch.Tensor:
    """Run `model` on pending + trunk + branches in one forward, growing `cache` by all of them.

    Returns the logits from the last pending token on: (1 + len(trunk) + total branch length, vocab).
    """
    assert pending, "at least one token must be fed to get a next-token distribution"
    past = cache_length(cache)
    device = input_device(model)
    tokens = pending + trunk + [t for branch in branches for t in branch]
    input_ids = torch.tensor([tokens], dtype=torch.long, device=device)
    keep = len(tokens) - len(pending) + 1
    if branches:
        positions, mask = tree_layout(len(pending), len(trunk), [len(b) for b in branches], past,
                                      model.dtype, device, offsets, attach)
    else:
        # A plain causal run: let the model build its own mask, as its own generate() does.
        positions, mask = torch.arange(past, past + len(tokens), device=device)[None], None
    out = model(input_ids=input_ids, position_ids=positions, attention_mask=mask, past_key_values=cache,
                use_cache=True, logits_to_keep=keep)
    return out.logits[0, -keep:]
