"""The one place that touches the KV cache API (transformers 5 DynamicCache, or the lean draft's
LeanCache)."""

from __future__ import annotations

from transformers import DynamicCache

from .lean import LeanCache, LeanDecoder


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
