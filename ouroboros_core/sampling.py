"""Sampling by keyed noise: SplitMix64 noise fixed by (seed, position, token), the top-p nucleus,
the keyed scores whose argmax is the target's sample, the draft's guesses of that sample, and the
Sampler a request uses.

Pure functions of logits and positions, kept apart from the tree (tree.py) and the loop
(engine.py) that call them; none keeps state between steps."""

from __future__ import annotations

from collections.abc import Sequence
from itertools import accumulate

import numpy as np
import torch


MASK64 = (1 << 64) - 1
# SplitMix64's constants
GOLDEN, MIX1, MIX2 = 0x9E3779B97F4A7C15, 0xBF58476D1CE4E5B9, 0x94D049BB133111EB


def position_key(seed: int, position: int) -> int:
    """A 64-bit key fixed by the seed and the sequence position alone (SplitMix64 of both)."""
    z = (seed * GOLDEN + (position + 1) * MIX1) & MASK64
    z = ((z ^ (z >> 30)) * MIX1) & MASK64
    z = ((z ^ (z >> 27)) * MIX2) & MASK64
    return z ^ (z >> 31)


def _int64(value: int) -> int:
    """An unsigned 64-bit value as the int64 with the same bits (torch's int64 arithmetic wraps
    around)."""
    return value - (1 << 64) if value >= 1 << 63 else value


def _shift_right(z: torch.Tensor, bits: int) -> torch.Tensor:
    """Logical right shift of int64 bits (torch's >> keeps the sign)."""
    return (z >> bits) & ((1 << (64 - bits)) - 1)


_U64 = tuple(np.uint64(value) for value in (GOLDEN, MIX1, MIX2, 30, 27, 31, 11))


def noise_bits(seed: int, positions, ids: torch.Tensor) -> torch.Tensor:
    """SplitMix64's ids-th output after each position's key, >> 11: 53 random bits per (position,
    id), int64."""
    if ids.device.type == "cpu":
        # numpy's uint64 arithmetic wraps and shifts logically: a third of the ops (and of the time)
        # of the int64 emulation in tensor_noise_bits on a CPU, the same bits. On an accelerator
        # that one stays where the ids are.
        golden, mix1, mix2, s30, s27, s31, s11 = _U64
        z = np.array([position_key(seed, p) for p in positions], dtype=np.uint64)[:, None]
        # the ids-th output of SplitMix64 started at the key
        z = z + ids.numpy().astype(np.uint64) * golden
        z ^= z >> s30
        z *= mix1
        z ^= z >> s27
        z *= mix2
        z ^= z >> s31
        return torch.from_numpy((z >> s11).view(np.int64))
    return tensor_noise_bits(seed, positions, ids)


def tensor_noise_bits(seed: int, positions, ids: torch.Tensor) -> torch.Tensor:
    """noise_bits in torch's int64 arithmetic, on the ids' device: an accelerator's path. It runs on
    a CPU too, with the numpy path's bits."""
    keys = torch.tensor(
        [_int64(position_key(seed, p)) for p in positions], dtype=torch.long, device=ids.device
    )
    z = keys[:, None] + ids.long() * _int64(GOLDEN)
    z = (z ^ _shift_right(z, 30)) * _int64(MIX1)
    z = (z ^ _shift_right(z, 27)) * _int64(MIX2)
    z = z ^ _shift_right(z, 31)
    return _shift_right(z, 11)


def position_noise(seed: int, positions, ids: torch.Tensor) -> torch.Tensor:
    """Gumbel(0, 1) noise for token ids (len(positions), m) at those positions, float64: one
    independent value per (seed, position, token id), computed alike on any device (SplitMix64 in
    integer arithmetic, no state).

    The target's sample at a position is the token whose tempered score plus its noise is highest
    (the Gumbel-max trick: exactly a draw from the softmax). Every method that reaches a position
    after the same text picks the same token there, so vanilla and Ouroboros write the same sampled
    text; and a draft that adds the same noise to its own scores picks the target's token as often
    as two close distributions can agree, which is what makes its guesses worth verifying. ids: (m,)
    for every row, or (len(positions), m)."""
    # 53 random bits, then half a step, so the uniform lies strictly inside (0, 1).
    uniform = noise_bits(seed, positions, ids).double().add_(0.5).mul_(2.0**-53)
    return uniform.log_().neg_().log_().neg_()


def nucleus(probs: torch.Tensor, top_p: float) -> torch.Tensor:
    """probs (..., V) with every token outside the top-p nucleus at 0: the smallest prefix of the
    sorted tokens whose mass reaches top_p is kept (the first token always stays). Not
    renormalised."""
    if top_p >= 1.0:
        return probs
    sorted_probs, order = probs.sort(dim=-1, descending=True)
    sorted_probs = sorted_probs.masked_fill(
        sorted_probs.cumsum(dim=-1) - sorted_probs >= top_p, 0.0
    )
    return torch.zeros_like(probs).scatter_(-1, order, sorted_probs)


NUCLEUS_TIERS = (64, 1024)  # tokens ranked by topk, in turn, before the whole vocabulary is sorted


def keyed_scores(
    logits: torch.Tensor, temperature: float, top_p: float, seed: int, positions
) -> torch.Tensor:
    """Each token's tempered score plus its noise at that row's position (n, V), float64; -inf
    outside the top-p nucleus. A row's nucleus is found among its 64 most likely tokens where it
    ends there (most rows: docs/BENCHMARKS.md, *The constants behind the code*), else among 1,024,
    else in the whole vocabulary; only its tokens get noise (a full sort and a full row of noise
    cost a sampled CPU step milliseconds)."""
    scores = logits.double() / temperature
    vocab = scores.shape[-1]
    if top_p >= 1.0:
        return scores + position_noise(
            seed, positions, torch.arange(vocab, device=scores.device)[None]
        )
    keyed = torch.full_like(scores, float("-inf"))
    probs = torch.softmax(scores, dim=-1)
    todo = list(range(len(scores)))
    for top in NUCLEUS_TIERS + (vocab,):
        # sorted
        values, ids = (probs if len(todo) == len(probs) else probs[todo]).topk(
            min(top, vocab), dim=-1
        )
        before = values.cumsum(dim=-1) - values
        # the nucleus ends among these
        ends = ((before[:, -1] + values[:, -1]) >= top_p) | (top >= vocab)
        done = [i for i, end in enumerate(ends.tolist()) if end]
        if len(done) == len(probs):  # every row at once: no copies
            found = scores.gather(-1, ids) + position_noise(seed, positions, ids)
            return keyed.scatter_(-1, ids, found.masked_fill_(before >= top_p, float("-inf")))
        if done:
            rows = [todo[i] for i in done]
            found = scores[rows].gather(-1, ids[done]) + position_noise(
                seed, [positions[r] for r in rows], ids[done]
            )
            found.masked_fill_(before[done] >= top_p, float("-inf"))
            keyed[rows] = keyed[rows].scatter_(-1, ids[done], found)
        finished = set(done)
        todo = [row for i, row in enumerate(todo) if i not in finished]
        if not todo:
            break
    return keyed


# The draft guesses at a slightly lower temperature than the target samples at: a small draft is
# less sure than its target, and sharpening it agrees with the target's sample more often
# (docs/BENCHMARKS.md, *The constants behind the code*).
DRAFT_SHARPEN = 0.85


def draft_guesses(logits: torch.Tensor, temperature: float, seed: int, positions, top: int = 64):
    """A draft's guess of the target's keyed sample at each row, cheaply: its own top tokens'
    tempered scores plus the same noise, no nucleus (a token outside the top rarely wins). Returns
    (keyed scores, ids), (n, top) each, best first. Only a guess: the target's own rule decides what
    stands."""
    values, ids = logits.topk(min(top, logits.shape[-1]), dim=-1)
    keyed = values.double() / (temperature * DRAFT_SHARPEN) + position_noise(seed, positions, ids)
    keyed, order = keyed.sort(dim=-1, descending=True)
    return keyed, ids.gather(-1, order)


class Sampler:
    """A request's sampling rule: the argmax when greedy, else the keyed sample (see
    position_noise)."""

    def __init__(self, temperature: float = 0.0, top_p: float = 1.0, seed: int | None = None):
        self.temperature, self.top_p, self.seed = temperature, top_p, seed

    @property
    def greedy(self) -> bool:
        return self.temperature == 0.0

    def tokens(self, logits: torch.Tensor, positions: list[int]) -> list[int]:
        """The token at each row of logits (n, V), row i being for sequence position positions[i]:
        the argmax of the logits when greedy, else of the keyed scores."""
        if not self.greedy:
            logits = keyed_scores(logits, self.temperature, self.top_p, self.seed, positions)
        return logits.argmax(dim=-1).tolist()

    def row_groups(
        self, logits: torch.Tensor, positions: list[int], lengths: list[int]
    ) -> list[Sequence[int]]:
        """The tokens of logits' rows in consecutive groups of these lengths. Greedy, all at once
        (an argmax is cheap); sampled, each group on its first read: a sampled row costs a nucleus
        search, and the verifier reads the trunk and only the branches it walks."""
        starts = list(accumulate(lengths, initial=0))[:-1]
        if self.greedy:
            tokens = self.tokens(logits, positions)
            return [tokens[a : a + n] for a, n in zip(starts, lengths)]
        return [
            RowTokens(lambda a=a, b=a + n: self.tokens(logits[a:b], positions[a:b]), n)
            for a, n in zip(starts, lengths)
        ]


class RowTokens(Sequence):
    """A group of rows' tokens, computed on first read."""

    def __init__(self, compute, length: int):
        self.compute, self.length, self.tokens = compute, length, None

    def __len__(self) -> int:
        return self.length

    def __getitem__(self, index):
        if self.tokens is None:
            self.tokens = self.compute()
        return self.tokens[index]
