"""What the GPU tests read of a real run rather than of what they asked for: the device and dtype
each model computed in, where device_map put the target's layers, whether the draft really drafted,
and how far a greedy reference sits from a tie; and whether the sampling noise computed on a device
is the CPU's, value for value."""

from __future__ import annotations

from collections import defaultdict
from contextlib import contextmanager

import torch

from conftest import check_margin, token_margins
from ouroboros_core.verdict import SIXTEEN_BIT, TIE_STEPS, rounding_step
from ouroboros_core.sampling import noise_bits, position_noise, tensor_noise_bits

Place = tuple[torch.device, torch.dtype]


class Computed:
    """Per role ("target", "draft"): the (device, dtype) of every output each part of the model
    computed while recorded, with the parts' names (a module's name in the model, or the draft
    forward the drafters call)."""

    def __init__(self):
        self.places: dict[str, dict[Place, set[str]]] = {
            "target": defaultdict(set),
            "draft": defaultdict(set),
        }

    def add(self, role: str, name: str, output) -> None:
        tensor = output_tensor(output)
        if tensor is not None:
            self.places[role][(tensor.device, tensor.dtype)].add(name)

    def ran(self, role: str) -> bool:
        return bool(self.places[role])

    def devices_by_part(self, role: str) -> dict[str, set[torch.device]]:
        parts = defaultdict(set)
        for (device, _), names in self.places[role].items():
            for name in names:
                parts[name].add(device)
        return parts


def output_tensor(output) -> torch.Tensor | None:
    """The tensor a forward computed: itself, a model output's logits, or the first item of a
    tuple."""
    if isinstance(output, torch.Tensor):
        return output
    if getattr(output, "logits", None) is not None:
        return output.logits
    if isinstance(output, (tuple, list)) and output and isinstance(output[0], torch.Tensor):
        return output[0]
    return None


def hook_computing_modules(model, role: str, computed: Computed) -> list:
    """Forward hooks on the model itself and on every module that holds weights of its own
    (embeddings, projections, norms, the head): the modules whose outputs are the model's
    arithmetic."""
    handles = [
        model.register_forward_hook(lambda module, args, output: computed.add(role, "", output))
    ]
    for name, module in model.named_modules():
        if name and next(module.parameters(recurse=False), None) is not None:
            handles.append(
                module.register_forward_hook(
                    lambda module, args, output, name=name: computed.add(role, name, output)
                )
            )
    return handles


def watch_draft_forward(forward, computed: Computed):
    """Record the logits of every call of the draft as the drafters call it. A module is covered by
    its hooks; the lean draft is plain Python, so its class is swapped for a recording subclass
    (undone by the returned function). Returns that function."""
    if isinstance(forward, torch.nn.Module):
        return lambda: None
    original = type(forward)

    class Recording(original):
        def __call__(self, *args, **kwargs):
            output = super().__call__(*args, **kwargs)
            computed.add("draft", f"<{original.__name__}>", output)
            return output

    forward.__class__ = Recording
    return lambda: setattr(forward, "__class__", original)


@contextmanager
def recording(engine):
    """Yields a Computed that records what the engine's target and draft compute until the block
    ends.

    The draft forward is fetched first (its one-off check against the model's own logits runs now,
    outside the recording), so the draft is recorded only if a drafter runs it."""
    computed = Computed()
    handles = hook_computing_modules(engine.target, "target", computed)
    undo = None
    if engine.draft is not None and engine.draft is not engine.target:
        forward = engine.draft_forward()
        handles += hook_computing_modules(engine.draft, "draft", computed)
        undo = watch_draft_forward(forward, computed)
    try:
        yield computed
    finally:
        if undo is not None:
            undo()
        for handle in handles:
            handle.remove()


def same_device(actual: torch.device, expected) -> bool:
    """`cuda` asked for matches any GPU; `cuda:1` only that one."""
    expected = torch.device(expected)
    return actual.type == expected.type and (
        expected.index is None or actual.index == expected.index
    )


def assert_computed_in(computed: Computed, role: str, device, dtype: torch.dtype) -> None:
    """Every output the role's model computed while recorded was on `device` in `dtype`, and there
    was one."""
    places = computed.places[role]
    assert places, f"the {role} computed nothing while recorded"
    wrong = {
        f"{d} {t}": sorted(names)[:4]
        for (d, t), names in places.items()
        if not (same_device(d, device) and t == dtype)
    }
    assert not wrong, (
        f"the {role} was asked to compute on {device} in {dtype}, but computed {wrong}"
    )


def assert_parameters_on(model, device, dtype: torch.dtype | None = None) -> None:
    """Where the loaded weights really are (and in what dtype), read from every parameter."""
    wrong = sorted(
        {
            f"{name.rsplit('.', 1)[0]}: {p.device} {p.dtype}"
            for name, p in model.named_parameters()
            if not same_device(p.device, device) or (dtype is not None and p.dtype != dtype)
        }
    )
    assert not wrong, f"parameters not on {device} {dtype or ''}: {wrong[:6]}"


def mapped_device(device_map: dict, name: str) -> torch.device:
    """The device accelerate's map gives a module or parameter: its longest entry that is the name
    or a prefix of it ("" is the whole model). Integers are GPU indices; "disk" and "meta" are
    offloaded weights."""
    keys = [key for key in device_map if key == "" or name == key or name.startswith(key + ".")]
    assert keys, f"{name} is in no entry of the device map {device_map}"
    where = device_map[max(keys, key=len)]
    assert where not in ("disk", "meta"), (
        f"{name} is offloaded to {where}: a tiny model fits on the device"
    )
    return torch.device("cuda", where) if isinstance(where, int) else torch.device(where)


def assert_placed_as_mapped(model, computed: Computed, device) -> None:
    """The target's layers are where device_map put them and computed there.

    transformers keeps `hf_device_map` only when accelerate spread the model over more than one
    device; on one GPU (or a CPU dry run) the whole model must then be on that one device, and every
    module computed there."""
    parts = computed.devices_by_part("target")
    assert parts, "the target computed nothing while recorded"
    device_map = getattr(model, "hf_device_map", None)
    if device_map:
        for name, parameter in model.named_parameters():
            assert parameter.device == mapped_device(device_map, name), (
                name,
                parameter.device,
                device_map,
            )
        where = {mapped_device(device_map, name) for name in device_map}
        assert all(same_device(d, device) for d in where), (
            f"device_map {device_map} leaves {device}"
        )
        for name, devices in parts.items():
            # the model's own output comes back to its first device (accelerate's io_same_device)
            if name:
                assert devices == {mapped_device(device_map, name)}, (name, devices, device_map)
        return
    devices = {parameter.device for parameter in model.parameters()}
    assert len(devices) == 1 and same_device(next(iter(devices)), device), (
        f"target parameters on {devices}"
    )
    spread = {name: d for name, d in parts.items() if d != devices}
    assert not spread, f"modules computed off the target's device {devices}: {spread}"


def reference_ties(target, prompt_ids: list[int], reference: list[int]) -> set[int]:
    """Check a greedy reference as every CPU test checks its own; return the positions where it sits
    at a tie.

    float32: conftest.check_margin, unchanged: every token must lead the runner-up by more than
    TIE_MARGIN in a float64 forward, else the reference cannot judge a lossless run and the test
    fails (pick another prompt). 16 bits: a float64 lead says nothing there (the embedded pair's and
    the tiny models' bfloat16 references leave the float64 argmax by up to 0.36 logits), so the lead
    is measured in the target's own dtype, as the engine's verdict measures it: no token may trail
    the best by more than TIE_STEPS rounding steps (then it would not be this model's greedy
    output), and the positions where the runner-up is within one step more than that are the ties,
    the only places a "float tie" verdict may point at."""
    if target.dtype not in SIXTEEN_BIT:
        check_margin(target, prompt_ids, reference)
        return set()
    device = target.get_input_embeddings().weight.device
    ids = torch.tensor([list(prompt_ids) + list(reference)[:-1]], device=device)
    with torch.no_grad():
        rows = (
            target(input_ids=ids, attention_mask=torch.ones_like(ids))
            .logits[0, len(prompt_ids) - 1 :]
            .cpu()
        )
    leads = token_margins(rows, reference)
    steps = [rounding_step(target.dtype, row.abs().max().item()) for row in rows.double()]
    behind = [
        (i, lead)
        for i, (lead, step) in enumerate(zip(leads.tolist(), steps))
        if lead < -TIE_STEPS * step
    ]
    assert not behind, (
        f"the {target.dtype} reference is not the target's greedy output at (position, lead) "
        f"{behind}"
    )
    return {
        i
        for i, (lead, step) in enumerate(zip(leads.tolist(), steps))
        if lead <= (TIE_STEPS + 1) * step
    }


def assert_speculates(method: str, drafted: int, accepted: int, tokens_per_forward: float) -> None:
    """Vanilla drafts nothing and commits one token per target forward; the speculative methods must
    draft, have drafts accepted and so commit more than one token per forward."""
    counts = (
        f"{method}: drafted {drafted}, accepted {accepted}, "
        f"{tokens_per_forward:.2f} tokens per forward"
    )
    if method == "vanilla":
        assert drafted == accepted == 0 and tokens_per_forward == 1, counts
    else:
        assert drafted > 0 and accepted > 0 and tokens_per_forward > 1, counts


# Where 64-bit integer arithmetic emulated in int64 goes wrong if it does (a sign kept by a shift, a
# product or a sum that wraps): seeds at and past 2^63, positions past 2^16 and 2^32, every id of a
# Qwen-sized vocabulary.
NOISE_SEEDS = (0, 1, 11, 2**31 - 1, 2**63 - 2, 2**63 - 1, 2**63, 2**64 - 1)
NOISE_POSITIONS = (0, 1, 2, 255, 2**16 - 1, 2**16, 2**16 + 1, 2**20 + 3, 2**31, 2**40)
NOISE_VOCAB = 152_064


def assert_noise_as_on_the_cpu(device) -> None:
    """The noise's tensor path (what an accelerator computes) gives the CPU's numpy path's bits on
    `device`, every one over the grid, and position_noise there the CPU's values (float64 logs may
    differ in the last place)."""
    every = torch.arange(NOISE_VOCAB)  # (V,): the same ids at every position
    per_row = torch.randperm(NOISE_VOCAB, generator=torch.Generator().manual_seed(0))[
        : 1000 * len(NOISE_POSITIONS)
    ]
    for ids in (
        every,
        per_row.view(len(NOISE_POSITIONS), 1000),  # and (positions, m): each row its own ids
    ):
        on_device = ids.to(device)
        for seed in NOISE_SEEDS:
            expected = noise_bits(seed, NOISE_POSITIONS, ids)
            got = tensor_noise_bits(seed, NOISE_POSITIONS, on_device)
            assert same_device(got.device, device) and got.dtype == torch.int64, (
                got.device,
                got.dtype,
            )
            differ = (got.cpu() != expected).nonzero()
            assert not len(differ), (
                f"seed {seed}: {len(differ)} of {expected.numel()} values differ, the first "
                f"at position {NOISE_POSITIONS[differ[0, 0]]}, column {int(differ[0, 1])}"
            )
            noise = position_noise(seed, NOISE_POSITIONS, on_device)
            assert same_device(noise.device, device)
            torch.testing.assert_close(
                noise.cpu(), position_noise(seed, NOISE_POSITIONS, ids), rtol=1e-13, atol=1e-13
            )
