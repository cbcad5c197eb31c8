"""The target's attention over a verification's tree on a CPU, without copying its key/value heads.

A model with grouped-query attention (SmolLM2: 9 query heads share 3 key/value heads) runs a forward
of several rows under a mask (the tree a verification checks) through transformers' SDPA function,
which first repeats every cached key and value head once per query head it serves, in every layer.
torch's SDPA takes the groups as they are (`enable_gqa=True`), and transformers uses that on a CPU
only when there is no mask. `tree_sdpa` is transformers' SDPA with that one change, for masked
forwards of several rows on a CPU; every other call (one row, no mask, an accelerator) goes to
transformers' own function. Same products, same order: the outputs are equal
(tests/test_attention.py), the copy is gone.
"""

from __future__ import annotations

import torch.nn.functional as F
from transformers import AttentionInterface
from transformers.integrations.sdpa_attention import sdpa_attention_forward
from transformers.masking_utils import AttentionMaskInterface, sdpa_mask

NAME = "ouroboros_tree_sdpa"
# Options only transformers' own function handles: a call that carries any of them goes there.
ITS_OWN = ("position_bias", "cache", "softcap", "output_attentions")


def tree_sdpa(
    module,
    query,
    key,
    value,
    attention_mask,
    dropout: float = 0.0,
    scaling=None,
    is_causal=None,
    **kwargs,
):
    """transformers' SDPA attention, with the key/value groups passed to torch as they are for a
    masked forward of several rows on a CPU. Returns (output (batch, rows, heads, dim), None)."""
    groups = getattr(module, "num_key_value_groups", 1)
    grouped = (
        query.device.type == "cpu"
        and attention_mask is not None
        and query.shape[2] > 1
        and groups > 1
        and not any(kwargs.get(name) for name in ITS_OWN)
    )
    if not grouped:
        return sdpa_attention_forward(
            module,
            query,
            key,
            value,
            attention_mask,
            dropout=dropout,
            scaling=scaling,
            is_causal=is_causal,
            **kwargs,
        )
    out = F.scaled_dot_product_attention(
        query,
        key,
        value,
        attn_mask=attention_mask,
        dropout_p=dropout,
        scale=scaling,
        enable_gqa=True,
    )
    return out.transpose(1, 2).contiguous(), None


def use_tree_attention(model) -> bool:
    """Route a CPU model's SDPA attention through tree_sdpa (its masks stay SDPA's); True if it now
    does. A model on an accelerator, or with another attention (eager, flash), is left as it is."""
    config = model.config
    if getattr(config, "_attn_implementation", None) != "sdpa" or model.device.type != "cpu":
        return False
    AttentionInterface.register(NAME, tree_sdpa)
    AttentionMaskInterface.register(NAME, sdpa_mask)
    model.set_attn_implementation(NAME)
    return True
