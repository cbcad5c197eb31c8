"""The lean draft's int8 weights: a linear layer multiplied by torch's weight-only int8 kernel, the
int8 copies of a decoder layer, and whether the kernel fits this machine and model.

A forward of a few rows on a CPU is bound by reading the weights from memory; int8 copies of
float32 weights are a quarter of the bytes (see lean.py, which decides when they are read).
"""

from __future__ import annotations

import platform
import sys

import torch

# The int8 forward's logits on lean_draft's 8-token check, as a share of 1 + the largest logit:
# rounding stays well under it (docs/BENCHMARKS.md, *The constants behind the code*), while a wrong
# kernel or layout gives errors of the logits' own size.
INT8_TOLERANCE = 0.1


class Int8Linear:
    """A linear layer's weight as int8 with one scale per output row (symmetric, rounded to
    nearest), multiplied by torch's weight-only int8 kernel (`_weight_int8pack_mm`) with bfloat16
    inputs; its bfloat16 outputs are returned as float32. The kernel's vector paths step through
    the input width 16 (AVX-512) or 8 (AVX2) at a time with no tail: see int8_kernel_fits."""

    def __init__(self, weight: torch.Tensor, bias: torch.Tensor | None = None):
        # The kernel multiplies by bfloat16 scales: round them first, and the weights to them.
        largest = weight.float().abs().amax(dim=1)
        self.scale = (largest / 127).clamp_min(torch.finfo(torch.bfloat16).tiny).to(torch.bfloat16)
        steps = (weight.float() / self.scale.float()[:, None]).round_().clamp_(-127, 127)
        self.weight = steps.to(torch.int8).contiguous()
        self.bias = None if bias is None else bias.float()

    def dequantized(self) -> torch.Tensor:
        """The float32 weight this layer multiplies by (what its rounding left of the original)."""
        return self.weight.float() * self.scale.float()[:, None]

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        rows = x.reshape(-1, x.shape[-1]).to(torch.bfloat16)
        y = (
            torch.ops.aten._weight_int8pack_mm(rows, self.weight, self.scale)
            .view(*x.shape[:-1], -1)
            .float()
        )
        return y if self.bias is None else y + self.bias


def int8_layers(weights: tuple) -> tuple:
    """A decoder layer's int8 layers for narrow forwards, from the weights LeanDecoder holds for it:
    q, k and v as one (a missing bias of Qwen2's three adds zeros), the output projection, gate and
    up as one, down."""
    _, q, k, v, o, _, _, gate, up, down = weights
    qkv_bias = None
    if any(p.bias is not None for p in (q, k, v)):
        qkv_bias = torch.cat(
            [p.weight.new_zeros(p.out_features) if p.bias is None else p.bias for p in (q, k, v)]
        )
    return (
        Int8Linear(torch.cat([q.weight, k.weight, v.weight]), qkv_bias),
        Int8Linear(o.weight, o.bias),
        Int8Linear(torch.cat([gate, up])),
        Int8Linear(down),
    )


def int8_kernel_fits(decoder) -> bool:
    """Whether a LeanDecoder's narrow forwards may take torch's int8 kernel: on a CPU, with the
    input widths of the matrices it would hold (hidden size, attention width, MLP width) multiples
    of 16, where the kernel's AVX-512 and AVX2 paths run (it reads past a row's end otherwise), on a
    torch that has it; elsewhere (Windows builds, CPUs without AVX2) it falls back to a scalar loop
    far slower than float32."""
    down = decoder.layers[0][-1]
    widths = (decoder.embed.shape[1], decoder.heads * decoder.head_dim, down.shape[1])
    vectorised = torch.backends.cpu.get_cpu_capability() in (
        "AVX2",
        "AVX512",
    ) or platform.machine() in ("arm64", "aarch64")
    return (
        decoder.embed.device.type == "cpu"
        and hasattr(torch.ops.aten, "_weight_int8pack_mm")
        and sys.platform != "win32"
        and vectorised
        and all(width % 16 == 0 for width in widths)
    )
