"""The target's linear layers on a CPU in float32, multiplied by oneDNN with their weights packed
once.

Speculative decoding buys its speed with forwards of a few rows: the token the target has not seen,
the draft's trunk and the branches, checked in one pass. On a CPU torch multiplies float32 rows by a
weight through MKL's sgemm, which repacks the weight for every call; for one row it takes a
matrix-vector path that skips that, so a forward of 2 rows has cost 1.6 times one of 1 row, and the
few rows a verification checks paid for most of what the draft saved. Packed once into oneDNN's
blocked layout (`mkldnn._reorder_linear_weight`) and multiplied by `mkldnn._linear_pointwise`, the
same weights serve 2 to 16 rows for little more than one (docs/BENCHMARKS.md, *Packed target
weights and the draft's vocabulary*).

The products are the same float32 products summed in another order: a layer of each shape is checked
against `F.linear` when packed, and the engine's lossless tests compare its tokens with
transformers' own `generate` on the unpacked model. A one-row forward keeps torch's own path where
it is faster (one thread); with more threads the packed weights serve it too. A packed copy costs
the weights' memory once more, so only a float32 target on a CPU whose weights take less than a
quarter of the machine's memory is packed, and only one of at least MIN_PARAMETERS (a small model's
weights stay in the caches, where torch does well).
"""

from __future__ import annotations

import copy
import os
from contextlib import contextmanager

import torch
import torch.nn.functional as F

from . import attention

# Smaller models are left as they are: their weights stay in the CPU's caches, where torch's own
# products for a few rows are already cheap and the packed ones cost more (docs/BENCHMARKS.md, *The
# constants behind the code*).
MIN_PARAMETERS = 32_000_000
PACKED_ROWS = 16  # the row count oneDNN lays the weights out for (a verification's usual size)
# of 1 + the largest output: float sums in another order, never a different product
CHECK_TOLERANCE = 1e-4


def machine_memory() -> int | None:
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return None


def packable(model, min_parameters: int = MIN_PARAMETERS) -> bool:
    """A float32 model on the CPU of at least `min_parameters`, a torch with oneDNN's packed linear,
    and memory for a second copy."""
    parameters = list(model.parameters())
    if not parameters or any(
        p.device.type != "cpu" or p.dtype != torch.float32 for p in parameters
    ):
        return False
    if sum(p.numel() for p in parameters) < min_parameters:
        return False
    if not (
        torch.backends.mkldnn.is_available() and hasattr(torch.ops.mkldnn, "_reorder_linear_weight")
    ):
        return False
    memory = machine_memory()
    weights = sum(p.numel() * p.element_size() for p in parameters)
    return memory is None or 4 * weights < memory


class PackedLinear(torch.nn.Module):
    """An nn.Linear's weight packed for oneDNN; called with any number of rows, as the layer it
    replaces."""

    def __init__(self, linear: torch.nn.Linear):
        super().__init__()
        # the same tensors: state_dict and ties unchanged
        self.weight, self.bias = linear.weight, linear.bias
        self.in_features, self.out_features = linear.in_features, linear.out_features
        # not a submodule: no second copy in the state dict
        object.__setattr__(self, "original", linear)
        with torch.no_grad():
            self.packed = torch.ops.mkldnn._reorder_linear_weight(
                linear.weight.detach(), PACKED_ROWS
            )
        # an in-place change to the weight after packing makes it stale
        self.version = linear.weight._version

    def __deepcopy__(self, memo):
        # oneDNN's packed tensor has no storage to copy: pack the copied layer again.
        return PackedLinear(copy.deepcopy(self.original, memo))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        rows = x.reshape(-1, x.shape[-1])
        if not self.current(x) or (rows.shape[0] == 1 and torch.get_num_threads() == 1):
            # torch's matrix-vector path: faster on one thread
            return F.linear(x, self.weight, self.bias)
        bias = None if self.bias is None else self.bias.detach()
        y = torch.ops.mkldnn._linear_pointwise(rows.contiguous(), self.packed, bias, "none", [], "")
        return y.view(*x.shape[:-1], self.out_features)

    def current(self, x: torch.Tensor) -> bool:
        """Whether the packed copy still is this layer's weight for this input: the model not moved
        to another dtype or device (`model.double()`, `.to("cuda")`), its weight not changed in
        place (training, `load_state_dict`); otherwise the layer multiplies by its weight as stock
        torch does."""
        weight = self.weight
        return (
            x.dtype == weight.dtype == torch.float32
            and x.device.type == weight.device.type == "cpu"
            and weight._version == self.version
        )

    def check(self) -> bool:
        """Whether the packed product matches F.linear on a few random rows (a broken kernel is far
        off)."""
        generator = torch.Generator().manual_seed(0)
        with torch.no_grad():
            for count in (1, 3, PACKED_ROWS + 1):
                rows = torch.randn(count, self.in_features, generator=generator)
                expected = F.linear(rows, self.weight, self.bias)
                got = torch.ops.mkldnn._linear_pointwise(
                    rows, self.packed, self.bias, "none", [], ""
                )
                scale = 1 + expected.abs().max().item()
                if not torch.allclose(got, expected, atol=CHECK_TOLERANCE * scale, rtol=0):
                    return False
        return True


def pack_linears(model, min_parameters: int = MIN_PARAMETERS) -> int:
    """Replace the model's nn.Linear layers by PackedLinear ones where `packable` allows and every
    layer's check passes; returns how many were replaced (0: the model is unchanged)."""
    if getattr(model, "packed_linears", 0) or not packable(model, min_parameters):
        return getattr(model, "packed_linears", 0)
    try:
        found = [
            (parent, name, PackedLinear(child))
            for parent in model.modules()
            for name, child in parent.named_children()
            if type(child) is torch.nn.Linear
        ]
    except RuntimeError:  # a torch whose oneDNN lacks the reorder for this shape or CPU
        return 0
    # one layer of each shape: the kernel oneDNN picks depends on the shape, not on the weights
    # (every layer checked took a busy 2-core machine 2.3 s at each start)
    shapes = {(p.in_features, p.out_features, p.bias is not None): p for _, _, p in found}
    if not found or not all(packed.check() for packed in shapes.values()):
        return 0
    for parent, name, packed in found:
        setattr(parent, name, packed)
    model.packed_linears = len(found)
    return len(found)


@contextmanager
def unpacked(model):
    """The model with its own nn.Linear layers and transformers' own attention back for the duration
    (stock transformers, as a user has it: the benchmark's transformers rows and the lossless tests'
    reference run so)."""
    swapped = [
        (parent, name, child)
        for parent in model.modules()
        for name, child in parent.named_children()
        if isinstance(child, PackedLinear)
    ]
    for parent, name, child in swapped:
        setattr(parent, name, child.original)
    tree = getattr(model.config, "_attn_implementation", None) == attention.NAME
    if tree:
        model.set_attn_implementation("sdpa")
    try:
        yield model
    finally:
        for parent, name, child in swapped:
            setattr(parent, name, child)
        if tree:
            model.set_attn_implementation(attention.NAME)
