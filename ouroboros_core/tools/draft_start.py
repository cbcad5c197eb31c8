"""Where a draft's training starts (train_draft): the target cut to its first layers, or a saved
draft, grown by layers on top where the training asks for more than it has."""

from __future__ import annotations


def cut_target(target, layers: int):
    """A copy of the target with only its first `layers` decoder layers."""
    import copy

    from transformers import AutoModelForCausalLM

    config = copy.deepcopy(target.config)
    config.num_hidden_layers = layers
    if getattr(config, "layer_types", None):
        config.layer_types = config.layer_types[:layers]
    draft = AutoModelForCausalLM.from_config(config)
    state = {
        name: tensor
        for name, tensor in target.state_dict().items()
        if not name.startswith("model.layers.") or int(name.split(".")[2]) < layers
    }
    missing, unexpected = draft.load_state_dict(state, strict=False)
    assert not unexpected and all("lm_head" in name for name in missing), (missing, unexpected)
    draft.tie_weights()
    return draft


def first_draft(cfg, target):
    """The draft training starts from: a saved draft's folder (cfg.start), grown to cfg.layers
    where it has fewer, else the target cut to cfg.layers."""
    if not cfg.start:
        return cut_target(target, cfg.layers)
    import torch
    from transformers import AutoModelForCausalLM

    draft = AutoModelForCausalLM.from_pretrained(cfg.start, dtype=torch.float32)
    return (
        grown(draft, target, cfg.layers) if cfg.layers > draft.config.num_hidden_layers else draft
    )


def grown(draft, target, layers: int):
    """The draft with layers added on top up to `layers`, each the target's layer at that depth
    with its attention and MLP outputs zeroed: the grown draft computes what the draft did (its
    residual stream passes the new layers unchanged), and training fills them in."""
    import torch

    have = draft.config.num_hidden_layers
    bigger = cut_target(target, layers)  # the target's layers, layer types and output layer
    missing, unexpected = bigger.load_state_dict(draft.state_dict(), strict=False)
    assert not unexpected and all(
        name.startswith("model.layers.") and int(name.split(".")[2]) >= have for name in missing
    ), (missing, unexpected)
    with torch.no_grad():
        for layer in bigger.model.layers[have:]:
            for out in (layer.self_attn.o_proj, layer.mlp.down_proj):
                out.weight.zero_()
                if out.bias is not None:
                    out.bias.zero_()
    return bigger
