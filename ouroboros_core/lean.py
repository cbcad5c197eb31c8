"""A lean forward for Llama-family drafts: the same arithmetic as transformers, without its per-call
overhead.

The draft runs a dozen small forwards per answer where the target runs a few. For a small draft most
of a transformers forward is Python around the arithmetic (mask building, cache bookkeeping, output
classes): on the embedded 2-layer draft, about half of it. And a forward of a few rows (the draft's
usual step: its token, the alternatives it extends, or catching up on the target's tokens) on a
CPU is bound by reading the weights from memory, which the target's forward has just flushed from
the caches: there the lean forward reads int8 copies of float32 weights (a quarter of the bytes, one
scale per output row) through torch's weight-only int8 kernel with bfloat16 activations, which moves
its logits by that rounding. A draft proposes and the target decides, so the output cannot change;
wider forwards (the prompt's prefill) keep float32.
`lean_draft` wraps a Llama, Mistral or Qwen2 model in `LeanDecoder`, which reads the model's own
weights and rotary embedding and keeps its keys and values in one preallocated buffer, and checks on
a short input that it gives the model's own logits before it is used; any other model (or one split
over devices) keeps the transformers forward. Only the draft runs here: the target, whose tokens are
the output, always runs through transformers.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F

from .int8 import INT8_TOLERANCE, Int8Linear, int8_kernel_fits, int8_layers

LEAN_TYPES = ("llama", "mistral", "qwen2")
# Up to this many rows the int8 weights beat float32 on a CPU whose caches the target has just
# flushed; past it float32 wins again (docs/BENCHMARKS.md, *The constants behind the code*).
NARROW_ROWS = 8
# rotary kinds whose cos and sin depend on the position alone
STATIC_ROPE = ("default", "linear", "llama3", "yarn")


class LeanCache:
    """Keys and values of every layer in one buffer (layers, 2, 1, kv_heads, capacity, head_dim),
    grown by doubling; the same calls as transformers' DynamicCache that tree.py makes."""

    def __init__(
        self, layers: int, kv_heads: int, head_dim: int, dtype, device, capacity: int = 256
    ):
        self.buffer = torch.zeros(
            layers, 2, 1, kv_heads, capacity, head_dim, dtype=dtype, device=device
        )
        self.length = 0

    def get_seq_length(self) -> int:
        return self.length

    def crop(self, count: int) -> None:
        assert count < 0, "crop takes a negative count of tokens to drop"
        self.length = max(0, self.length + count)

    def reserve(self, length: int) -> None:
        capacity = self.buffer.shape[-2]
        if length > capacity:
            grown = self.buffer.new_zeros(
                *self.buffer.shape[:-2], max(length, 2 * capacity), self.buffer.shape[-1]
            )
            grown[..., : self.length, :] = self.buffer[..., : self.length, :]
            self.buffer = grown


@dataclass
class LeanOutput:
    logits: torch.Tensor


class RotaryTable:
    """The model's rotary cos and sin at given positions. Rotary kinds that do not depend on the
    sequence's length are read from a table of positions (the same values: each is one product and
    a cos or sin), which spares a few ops per forward and never reads the positions back from the
    device."""

    def __init__(self, rotary, config):
        self.rotary = rotary
        rope = getattr(config, "rope_parameters", None) or {}
        self.static = rope.get("rope_type", "default") in STATIC_ROPE
        self.table: tuple[torch.Tensor, torch.Tensor] | None = None  # cos, sin: (1, positions, dim)

    def cos_sin(
        self, x: torch.Tensor, position_ids: torch.Tensor, bound: int
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Cos and sin at these positions (all below `bound`), in x's dtype."""
        if not self.static:
            return self.rotary(x, position_ids)
        if self.table is None or self.table[0].shape[1] < bound:
            span = max(bound, 2 * (0 if self.table is None else self.table[0].shape[1]), 256)
            self.table = self.rotary(x, torch.arange(span, device=x.device)[None])
        cos, sin = self.table
        index = position_ids[0]
        return cos[:, index].to(x.dtype), sin[:, index].to(x.dtype)


def _rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    return x * cos + torch.cat((-x[..., half:], x[..., :half]), dim=-1) * sin


def _layer_weights(layer) -> tuple:
    """What the lean forward reads of one decoder layer, in the order its loop unpacks."""
    attention, mlp = layer.self_attn, layer.mlp
    return (
        layer.input_layernorm.weight,
        attention.q_proj,
        attention.k_proj,
        attention.v_proj,
        attention.o_proj,
        attention.scaling,
        layer.post_attention_layernorm.weight,
        mlp.gate_proj.weight,
        mlp.up_proj.weight,
        mlp.down_proj.weight,
    )


class LeanDecoder:
    """Called like the model it wraps (input_ids, position_ids, a 4D mask or None, a LeanCache)."""

    def __init__(self, model):
        self.model = model
        config = model.config
        self.heads = config.num_attention_heads
        self.kv_heads = getattr(config, "num_key_value_heads", None) or self.heads
        self.head_dim = getattr(config, "head_dim", None) or config.hidden_size // self.heads
        self.eps = config.rms_norm_eps
        inner = model.model
        self.embed = inner.embed_tokens.weight
        self.rotary = RotaryTable(inner.rotary_emb, config)
        self.norm = inner.norm.weight
        # The tokens the draft may propose: its folder's draft_vocabulary.json where it has one (the
        # loader's `draft_vocabulary`), else all. Its output layer then reads those rows alone, a
        # fraction of the bytes; every other token scores -inf, a token the draft never writes
        # (context lookup still copies any).
        self.vocab_size = model.lm_head.weight.shape[0]
        self.head = model.lm_head.weight
        self.vocabulary = getattr(model, "draft_vocabulary", None)
        if self.vocabulary is not None:  # on the head's device once, not on every forward
            self.vocabulary = self.vocabulary.to(self.head.device)
            self.head = self.head[self.vocabulary].contiguous()
        self.layers = [_layer_weights(layer) for layer in inner.layers]
        # reads the target's state: (width, target width), added before the head (STATE_PROJECTION)
        self.projection = getattr(model, "state_projection", None)
        # forwards of up to NARROW_ROWS rows multiply by int8 copies of the weights
        self.narrow_rows = False
        self.narrow: dict[int, tuple] = {}  # layer index -> its int8 layers (see _narrow_layers)
        self.narrow_head: Int8Linear | None = None

    @property
    def dtype(self):
        return self.model.dtype

    def get_input_embeddings(self):
        return self.model.get_input_embeddings()

    def new_cache(self) -> LeanCache:
        return LeanCache(
            len(self.layers), self.kv_heads, self.head_dim, self.embed.dtype, self.embed.device
        )

    def _rms(self, x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
        # one fused op where the decomposed norm takes seven
        if x.dtype == torch.float32 and weight.dtype == torch.float32:
            return F.rms_norm(x, (x.shape[-1],), weight, self.eps)
        # As transformers' LlamaRMSNorm: in float32, then back to the input's dtype before the
        # weight.
        x32 = x.float()
        return weight * (x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + self.eps)).to(
            x.dtype
        )

    def _narrow_layers(self, i: int) -> tuple:
        """Layer i's int8 layers for narrow forwards (see int8_layers), made on first use."""
        layers = self.narrow.get(i)
        if layers is None:
            layers = self.narrow[i] = int8_layers(self.layers[i])
        return layers

    @torch.no_grad()
    def __call__(
        self,
        *,
        input_ids,
        position_ids,
        attention_mask,
        past_key_values: LeanCache,
        logits_to_keep: int = 0,
        use_cache: bool = True,
        state: torch.Tensor | None = None,  # the target's, for the first kept row (DraftRunner)
    ) -> LeanOutput:
        cache = past_key_values
        n, past = input_ids.shape[1], cache.length
        cache.reserve(past + n)
        x = F.embedding(input_ids, self.embed)  # (1, n, hidden)
        # a branch sits at most n positions further on
        cos, sin = self.rotary.cos_sin(x, position_ids, past + 2 * n)
        mask = attention_mask
        if mask is None and n > 1:
            # a causal run after the cache (sdpa's is_causal aligns top-left)
            mask = torch.ones(n, past + n, dtype=torch.bool, device=x.device).tril(past)
        x = self._layers_forward(x, cos[:, None], sin[:, None], mask, cache)
        cache.length = past + n
        kept = self._rms(x[:, -logits_to_keep:] if logits_to_keep else x, self.norm)
        if state is not None:
            kept[:, 0] += F.linear(state.to(kept.device, kept.dtype), self.projection)
        return LeanOutput(self._logits(kept))

    def _layers_forward(self, x, cos, sin, mask, cache: LeanCache) -> torch.Tensor:
        """The hidden states after every layer, each layer's keys and values written to the cache
        after its first `cache.length` positions; cos and sin are (1, 1, n, head_dim)."""
        n, past = x.shape[1], cache.length
        gqa = self.kv_heads != self.heads
        narrow = self.narrow_rows and n <= NARROW_ROWS
        q_size, kv_size = self.heads * self.head_dim, self.kv_heads * self.head_dim
        for i, (norm1, q_proj, k_proj, v_proj, o_proj, scaling, norm2, gate, up, down) in enumerate(
            self.layers
        ):
            h = self._rms(x, norm1)
            if narrow:
                qkv8, o8, gate_up8, down8 = self._narrow_layers(i)
                q, k, v = qkv8(h).split([q_size, kv_size, kv_size], dim=-1)
            else:
                q, k, v = (F.linear(h, p.weight, p.bias) for p in (q_proj, k_proj, v_proj))
            q = q.view(1, n, self.heads, self.head_dim).transpose(1, 2)
            k = k.view(1, n, self.kv_heads, self.head_dim).transpose(1, 2)
            v = v.view(1, n, self.kv_heads, self.head_dim).transpose(1, 2)
            # (1, kv_heads, capacity, head_dim)
            keys, values = cache.buffer[i, 0], cache.buffer[i, 1]
            keys[:, :, past : past + n] = _rotate(k, cos, sin)
            values[:, :, past : past + n] = v
            attended = (
                F.scaled_dot_product_attention(
                    _rotate(q, cos, sin),
                    keys[:, :, : past + n],
                    values[:, :, : past + n],
                    attn_mask=mask,
                    scale=scaling,
                    enable_gqa=gqa,
                )
                .transpose(1, 2)
                .reshape(1, n, -1)
            )
            if narrow:
                x = x + o8(attended)
                h = self._rms(x, norm2)
                gated, upped = gate_up8(h).chunk(2, dim=-1)
                x = x + down8(F.silu(gated) * upped)
            else:
                x = x + F.linear(attended, o_proj.weight, o_proj.bias)
                h = self._rms(x, norm2)
                x = x + F.linear(F.silu(F.linear(h, gate)) * F.linear(h, up), down)
        return x

    def _logits(self, h: torch.Tensor) -> torch.Tensor:
        """The output layer on the final-normed rows h: the int8 head for up to NARROW_ROWS rows,
        logits over the draft's vocabulary placed in a row over all tokens, -inf for the rest."""
        if self.narrow_rows and h.shape[-2] <= NARROW_ROWS:
            if self.narrow_head is None:
                self.narrow_head = Int8Linear(self.head)
            logits = self.narrow_head(h)
        else:
            logits = F.linear(h, self.head)
        if self.vocabulary is None:
            return logits
        full = logits.new_full((*logits.shape[:-1], self.vocab_size), float("-inf"))
        return full.index_copy_(-1, self.vocabulary, logits)


def _shaped_like_llama(model) -> bool:
    config = model.config
    if config.model_type not in LEAN_TYPES or getattr(config, "hidden_act", None) != "silu":
        return False
    if getattr(config, "mlp_bias", False) or getattr(config, "pretraining_tp", 1) != 1:
        return False
    if getattr(config, "use_sliding_window", False) or getattr(config, "sliding_window", None):
        return False  # a sliding window masks keys the lean forward would attend to
    if len({p.device for p in model.parameters()}) != 1 or getattr(model, "hf_device_map", None):
        return False
    inner = getattr(model, "model", None)
    return all(hasattr(inner, name) for name in ("embed_tokens", "rotary_emb", "norm", "layers"))


def _check_logits(decoder: LeanDecoder, ids: torch.Tensor, positions: torch.Tensor):
    """The decoder's logits on the check's input, on a fresh cache, over the tokens the draft may
    propose."""
    logits = decoder(
        input_ids=ids,
        position_ids=positions,
        attention_mask=None,
        past_key_values=decoder.new_cache(),
    ).logits
    return logits if decoder.vocabulary is None else logits[..., decoder.vocabulary]


def _take_int8_rows(decoder: LeanDecoder, ids, positions, expected: torch.Tensor) -> None:
    """Turns the decoder's int8 rows on if its int8 forward of the check's 8 rows gives the model's
    logits up to that rounding: the same model (a broken kernel is far off)."""
    decoder.narrow_rows = True
    try:
        narrow = _check_logits(decoder, ids, positions)
        scale = 1 + expected.abs().max().item()
        decoder.narrow_rows = bool(
            torch.allclose(narrow, expected, atol=INT8_TOLERANCE * scale, rtol=0)
        )
    except RuntimeError:
        decoder.narrow_rows = False
    if not decoder.narrow_rows:
        # failed: drop the int8 layers the check built (passed, the drafts use them)
        decoder.narrow.clear()
        decoder.narrow_head = None


def lean_draft(model, exact: bool = False):
    """A LeanDecoder for `model` if it is a plain Llama-family model and matches the model's own
    logits on a short input; else None (the caller keeps transformers' forward). exact: never read
    int8 weights (a model drafting for itself must propose exactly its own tokens)."""
    if not _shaped_like_llama(model):
        return None
    from transformers import DynamicCache

    decoder = LeanDecoder(model)  # checked in the model's own precision, then given its int8 rows
    device = decoder.embed.device
    vocab = decoder.embed.shape[0]
    ids = torch.arange(3, 11, device=device)[None] % vocab
    positions = torch.arange(8, device=device)[None]
    with torch.no_grad():
        expected = model(
            input_ids=ids,
            position_ids=positions,
            past_key_values=DynamicCache(config=model.config),
            use_cache=True,
        ).logits
    got = _check_logits(decoder, ids, positions)
    if decoder.vocabulary is not None:
        # the tokens the draft may propose: the model's own logits there
        expected = expected[..., decoder.vocabulary]
    # Same arithmetic, so the same logits up to the order of float sums; anything more is a
    # different model.
    tolerance = 1e-4 if model.dtype == torch.float32 else 5e-2
    if not torch.allclose(
        got.float(), expected.float(), atol=tolerance * (1 + expected.abs().max().item()), rtol=0
    ):
        return None
    if not exact and model.dtype == torch.float32 and int8_kernel_fits(decoder):
        _take_int8_rows(decoder, ids, positions, expected)
    return decoder
