"""The deploy's plan checks: does the pair fit the hardware's memory (an estimate from parameter
counts), is a model gated, what does the hardware cost, and the hardware's documented figures.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from .space_files import ROOT, ZERO_GPU, ZERO_GPU_PYTHON, in_paths

GB = 1e9  # the Hub's GB, and the estimates'


@dataclass(frozen=True)
class Hardware:
    """A Space hardware as the Hub documents it (huggingface.co/docs/hub/spaces-gpus and
    spaces-zerogpu)."""

    name: str  # the Hub's words for it
    vcpus: int | None  # None: not documented
    ram_gb: float | None  # the machine's memory; None: not documented
    # the memory of one GPU (the app puts the whole pair on one device); None: no GPU
    gpu_gb: float | None = None
    gpus: int = 0


SPACE_HARDWARE = {
    "cpu-basic": Hardware("CPU basic", 2, 16),
    "cpu-upgrade": Hardware("CPU upgrade", 8, 32),
    ZERO_GPU: Hardware("ZeroGPU, an H200 slice lent per call", None, None, 70, 1),
    "t4-small": Hardware("Nvidia T4 small", 4, 15, 16, 1),
    "t4-medium": Hardware("Nvidia T4 medium", 8, 30, 16, 1),
    "l4x1": Hardware("1x Nvidia L4", 8, 30, 24, 1),
    "l4x4": Hardware("4x Nvidia L4", 48, 186, 24, 4),
    "a10g-small": Hardware("Nvidia A10G small", 4, 15, 24, 1),
    "a10g-large": Hardware("Nvidia A10G large", 12, 46, 24, 1),
    "a10g-largex2": Hardware("2x Nvidia A10G large", 24, 92, 24, 2),
    "a10g-largex4": Hardware("4x Nvidia A10G large", 48, 184, 24, 4),
    "l40sx1": Hardware("1x Nvidia L40S", 8, 62, 48, 1),
    "l40sx4": Hardware("4x Nvidia L40S", 48, 382, 48, 4),
    "l40sx8": Hardware("8x Nvidia L40S", 192, 1534, 48, 8),
    "a100-large": Hardware("Nvidia A100 large", 12, 142, 80, 1),
}
# Parameter counts of the presets' Hub models (from their configurations), so that a plan needs no
# download. A folder is counted from its safetensors headers; any other Hub id from its name
# ("-8B-"), if it says.
PARAMETERS = {
    "HuggingFaceTB/SmolLM2-135M-Instruct": 134_515_008,
    "Qwen/Qwen2.5-Coder-7B-Instruct": 7_615_616_512,
    "Qwen/Qwen2.5-Coder-0.5B-Instruct": 494_032_768,
    "meta-llama/Llama-3.1-8B-Instruct": 8_030_261_248,
    "meta-llama/Llama-3.2-1B-Instruct": 1_235_814_400,
    "deepseek-ai/deepseek-coder-6.7b-instruct": 6_740_512_768,
    "deepseek-ai/deepseek-coder-1.3b-instruct": 1_346_471_936,
}
# each of their models asks an account to accept its licence before downloading
GATED_OWNERS = ("meta-llama",)
DTYPE_BYTES = {"float32": 4, "bfloat16": 2, "float16": 2}
# Weights above this share of the memory leave too little for the KV cache, activations and the
# runtime (the app itself refuses a pair over 90% of the free memory): a warning, not a refusal.
TIGHT_SHARE = 0.75


@dataclass(frozen=True)
class Checks:
    """What the plan found about the pair on the hardware."""

    lines: list[str]  # the estimate, as the plan prints it
    warnings: list[str]  # worth reading before paying: printed, the deploy goes ahead
    refusals: list[str]  # the Space could not run it: the deploy stops unless --deploy-anyway


def pair_of(variables: dict[str, str]) -> tuple[dict[str, str], str | None, str]:
    """The target and draft the Space's app would load from these variables (as
    ui.loading.pair_from_env reads them), the dtype asked for (None: the device's default) and the
    preset's description."""
    from ..models import DEFAULT_PRESET, presets

    if variables.get("OUROBOROS_TARGET"):
        pair = {"target": variables["OUROBOROS_TARGET"], "draft": variables["OUROBOROS_DRAFT"]}
        return pair, variables.get("OUROBOROS_DTYPE"), ""
    preset = presets()[variables.get("OUROBOROS_PRESET", DEFAULT_PRESET)]
    return (
        {"target": preset.target, "draft": preset.draft},
        variables.get("OUROBOROS_DTYPE") or preset.dtype,
        (preset.description),
    )


def is_folder(spec: str) -> bool:
    """Whether the app reads spec as a folder (as models.resolve_folder does), not as a Hub id."""
    return spec.startswith(("assets/", "/", ".", "~")) or (ROOT / spec).is_dir()


def parameters(spec: str) -> tuple[int | None, str]:
    """A model's parameter count and how it was found; None when neither a table, a folder nor its
    name says."""
    from ..models import parameter_count

    if spec in PARAMETERS:
        return PARAMETERS[spec], "from its configuration"
    if is_folder(spec):
        folder = ROOT / spec
        return (
            (parameter_count(folder), "from its safetensors")
            if list(folder.glob("*.safetensors"))
            else (None, "")
        )
    match = re.search(r"(?:^|[-_])(\d+(?:\.\d+)?)([bBmM])(?=$|[-_.])", spec.rsplit("/", 1)[-1])
    if match:
        return round(
            float(match.group(1)) * (1e9 if match.group(2) in "bB" else 1e6)
        ), "guessed from its name"
    return None, ""


def count_text(count: int) -> str:
    return f"{count / 1e9:.1f}B" if count >= 1e9 else f"{count / 1e6:.0f}M"


def gb_text(size_gb: float) -> str:
    return f"{size_gb:.1f} GB" if size_gb >= 0.1 else f"{size_gb * 1000:.0f} MB"


def pair_line(pair: dict[str, str], counts: dict[str, tuple[int | None, str]]) -> str:
    """The plan's line on the pair: each model with its parameter count and how it was found."""
    parts = [
        f"{role} {pair[role]} ({count_text(count)} parameters, {how})"
        if count
        else f"{role} {pair[role]} (size unknown)"
        for role, (count, how) in counts.items()
    ]
    return f"Pair: {'; '.join(parts)}"


def unchecked_reason(name: str, memory: float | None, on_gpu: bool) -> str:
    """Why the fit goes unchecked: no documented memory figure for the hardware, or no size
    known."""
    if memory is None:
        return f"the Hub documents no {'GPU memory' if on_gpu else 'RAM'} figure for {name}"
    return "no size is known"


def fit_check(
    pair: dict[str, str], dtype: str | None, device: str | None, hardware: str | None
) -> Checks:
    """The pair's weights against the memory they would load into: refused when they alone exceed
    it, a warning when they leave less than a quarter of it. Without --hardware, against a new
    Space's cpu-basic, warning only."""
    name = hardware or "cpu-basic"
    board = SPACE_HARDWARE.get(name)
    if board is None:
        return Checks(
            [f"Fit: not checked (the Hub documents no memory figures for {name})"], [], []
        )
    on_gpu = board.gpu_gb is not None and not (device or "").startswith("cpu")
    # as models.pick_dtype chooses
    asked, dtype = dtype, dtype or ("bfloat16" if on_gpu else "float32")
    memory = board.gpu_gb if on_gpu else board.ram_gb
    counts = {role: parameters(spec) for role, spec in pair.items()}
    total = sum(count or 0 for count, _ in counts.values())
    unknown = [role for role, (count, _) in counts.items() if count is None]
    lines = [pair_line(pair, counts)]
    if memory is None or not total:
        why = unchecked_reason(name, memory, on_gpu)
        return Checks(lines + [f"Fit: not checked ({why})"], [], [])
    need = total * DTYPE_BYTES[dtype] / GB
    where = f"{name}'s {memory:g} GB of {'GPU memory' if on_gpu else 'RAM'}"
    lines.append(
        f"Fit (an estimate): about {gb_text(need)} of weights in {dtype} for {where}"
        + (f", without the {' and '.join(unknown)}" if unknown else "")
    )
    if need <= TIGHT_SHARE * memory:
        return Checks(lines[:-1] + [lines[-1] + ": fits"], [], [])
    if need <= memory:
        return Checks(
            lines,
            [
                f"the pair's weights take {need / memory:.0%} of {where}, "
                "leaving little for the KV cache, activations and the runtime: "
                "it may not load or may run out mid-race"
            ],
            [],
        )
    sentence = (
        f"the pair cannot fit: about {gb_text(need)} of weights in {dtype}, over {where}"
        + roomy_hardware(total, asked)
    )
    if hardware is None:
        return Checks(lines, [f"if the Space is new (cpu-basic), {sentence}; pass --hardware"], [])
    return Checks(lines, [], [sentence])


def roomy_hardware(parameter_count: float, dtype: str | None) -> str:
    """Where a pair of this many parameters would fit, as a clause for the refusal."""
    fits = {}  # the GPU memory -> the smallest flavour with it
    for name, board in sorted(
        SPACE_HARDWARE.items(), key=lambda item: (item[1].gpu_gb or 0, item[1].gpus)
    ):
        if (
            board.gpu_gb
            and name != ZERO_GPU
            and board.gpu_gb not in fits
            and (
                parameter_count * DTYPE_BYTES[dtype or "bfloat16"]
                <= TIGHT_SHARE * board.gpu_gb * GB
            )
        ):
            fits[board.gpu_gb] = name
    fits = list(fits.values())
    return (
        f"; it would fit {', '.join(fits[:2])} (in {dtype or 'bfloat16'}) or a smaller pair"
        if fits
        else ""
    )


def gated_models(pair: dict[str, str], description: str) -> list[str]:
    """The pair's Hub models that ask for a licence first: by owner, or every one where the preset
    says gated."""
    hub = [spec for spec in pair.values() if not is_folder(spec)]
    said = "gated" in description.lower()
    return [spec for spec in hub if said or spec.split("/")[0] in GATED_OWNERS]


def gated_warnings(pair: dict[str, str], description: str) -> list[str]:
    gated = gated_models(pair, description)
    if not gated:
        return []
    return [
        f"{' and '.join(gated)} {'is' if len(gated) == 1 else 'are'} gated on the Hub: "
        "the Space needs a secret HF_TOKEN (Settings, Variables and secrets) "
        "holding a read token of an account that accepted the licence; "
        "the deploy sets variables, never secrets"
    ]


def cost_warnings(hardware: str | None) -> list[str]:
    if hardware in (None, "cpu-basic"):
        return []
    if hardware == ZERO_GPU:
        return [
            f"{hardware} is ZeroGPU, with no hourly bill: "
            "hosting it needs a PRO subscription (a personal account) "
            "or Enterprise Hub (an organisation), the Gradio SDK, and Python "
            f"{ZERO_GPU_PYTHON}, which the Space's front matter gets; "
            "visitors' GPU time has a daily quota"
        ]
    return [
        f"{hardware} is paid hardware: "
        "billed by the minute while the Space runs, visitors or not, until it sleeps or is paused; "
        "the account needs a payment method "
        "(huggingface.co/settings/billing; prices at huggingface.co/pricing)"
    ]


def plan_checks(variables: dict[str, str], hardware: str | None, paths: set[str]) -> Checks:
    """Everything the plan checks about the pair on the hardware, before anything is sent."""
    pair, dtype, description = pair_of(variables)
    fit = fit_check(pair, dtype, variables.get("OUROBOROS_DEVICE"), hardware)
    missing = [
        f"{spec} is a folder the upload set lacks (not here, or not tracked by git): "
        "the Space could not load it"
        for spec in pair.values()
        if is_folder(spec) and not in_paths(spec.rstrip("/"), paths)
    ]
    warnings = fit.warnings + gated_warnings(pair, description) + cost_warnings(hardware)
    return Checks(fit.lines, warnings, missing + fit.refusals)


def hardware_text(hardware: str | None) -> str:
    """The hardware and its documented figures:
    "t4-small: Nvidia T4 small, 4 vCPU, 15 GB RAM, 1x 16 GB GPU"."""
    board = SPACE_HARDWARE.get(hardware or "cpu-basic")
    figures = (
        []
        if board is None
        else [board.name]
        + [
            part
            for part in (
                board.vcpus and f"{board.vcpus} vCPU",
                board.ram_gb and f"{board.ram_gb:g} GB RAM",
                board.gpu_gb and f"{board.gpus}x {board.gpu_gb:g} GB GPU",
            )
            if part
        ]
    )
    named = ": ".join(
        [hardware or "cpu-basic", ", ".join(figures)] if figures else [hardware or "cpu-basic"]
    )
    return named if hardware else f"left as it is; a new Space gets {named}"
