"""The demo on a Hugging Face Space in one command, and its start rehearsed here first.

    python3 -m ouroboros_core.tools.space deploy OWNER/NAME [--preset P] [--var KEY=VALUE]... [--hardware H]
                                                  [--private] [--project-url URL] [--dry-run] [--deploy-anyway]
    python3 -m ouroboros_core.tools.space rehearse [--venv PATH]

Deploy, dry run and rehearsal all use one set of files (space_files.upload_set). Before anything goes up, the
plan says whether the pair fits the hardware's memory (an estimate from parameter counts), whether a model is gated
and what the hardware costs; a pair that cannot fit, or whose folder the upload lacks, is refused unless
--deploy-anyway. The deploy goes through huggingface_hub's HfApi with the token it finds (HF_TOKEN or
`hf auth login`); the rehearsal (space_rehearsal.py) starts the set alone, as a Space does, and races once.
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import httpx2  # huggingface_hub's HTTP client: a connection failure is its error, not an HfHubHTTPError
from huggingface_hub import (
    CommitOperationAdd,
    CommitOperationDelete,
    HfApi,
    SpaceHardware,
    get_token,
)
from huggingface_hub.errors import HFValidationError
from huggingface_hub.utils import validate_repo_id

from .space_checks import lfs_rules, stored_in_lfs, upload_set_problems
from .space_files import (
    ROOT,
    SPACE_GITATTRIBUTES,
    ZERO_GPU,
    ZERO_GPU_PYTHON,
    SpaceFile,
    in_paths,
    untracked_in_space,
    upload_set,
)

APP_VARIABLES = (
    "OUROBOROS_PRESET",
    "OUROBOROS_TARGET",
    "OUROBOROS_DRAFT",
    "OUROBOROS_DEVICE",
    "OUROBOROS_DTYPE",
    "OUROBOROS_MAX_NEW_TOKENS",
    "OUROBOROS_MAX_PROMPT_CHARS",
    "OUROBOROS_QUEUE_SIZE",
    "OUROBOROS_SESSION_POOL_SIZE",
    "OUROBOROS_THREADS",
)
HARDWARE = tuple(flavor.value for flavor in SpaceHardware)
LOGIN_HINT = "set HF_TOKEN to a token with write access, or run `hf auth login`"
GB = 1e9  # the Hub's GB, and the estimates'


@dataclass(frozen=True)
class Hardware:
    """A Space hardware as the Hub documents it (huggingface.co/docs/hub/spaces-gpus and spaces-zerogpu)."""

    name: str  # the Hub's words for it
    vcpus: int | None  # None: not documented
    ram_gb: float | None  # the machine's memory; None: not documented
    gpu_gb: float | None = (
        None  # the memory of one GPU (the app puts the whole pair on one device); None: no GPU
    )
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
# Parameter counts of the presets' Hub models (from their configurations), so that a plan needs no download. A
# folder is counted from its safetensors headers; any other Hub id from its name ("-8B-"), if it says.
PARAMETERS = {
    "HuggingFaceTB/SmolLM2-135M-Instruct": 134_515_008,
    "Qwen/Qwen2.5-Coder-7B-Instruct": 7_615_616_512,
    "Qwen/Qwen2.5-Coder-0.5B-Instruct": 494_032_768,
    "meta-llama/Llama-3.1-8B-Instruct": 8_030_261_248,
    "meta-llama/Llama-3.2-1B-Instruct": 1_235_814_400,
    "deepseek-ai/deepseek-coder-6.7b-instruct": 6_740_512_768,
    "deepseek-ai/deepseek-coder-1.3b-instruct": 1_346_471_936,
}
GATED_OWNERS = (
    "meta-llama",
)  # each of their models asks an account to accept its licence before downloading
DTYPE_BYTES = {"float32": 4, "bfloat16": 2, "float16": 2}
# Weights above this share of the memory leave too little for the KV cache, activations and the runtime (the app
# itself refuses a pair over 90% of the free memory): a warning, not a refusal.
TIGHT_SHARE = 0.75


class DeployError(Exception):
    """A deploy that cannot go ahead, with the sentence that says why."""


def space_variables(preset: str | None, pairs: list[str]) -> dict[str, str]:
    """The Space's variables from --preset and each --var KEY=VALUE, keys limited to what the app reads."""
    from ..models import DEFAULT_PRESET, presets

    variables = {"OUROBOROS_PRESET": preset} if preset else {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or key not in APP_VARIABLES:
            raise DeployError(
                f"--var takes KEY=VALUE with KEY one of {', '.join(APP_VARIABLES)}; got {pair!r}"
            )
        if variables.get(key, value) != value:
            raise DeployError(f"{key} is given twice, as {variables[key]!r} and {value!r}")
        variables[key] = value
    known = presets()
    if variables.get("OUROBOROS_PRESET", DEFAULT_PRESET) not in known:
        raise DeployError(
            f"preset {variables['OUROBOROS_PRESET']!r} is not one of {', '.join(known)}"
        )
    if variables.get("OUROBOROS_DTYPE", "float32") not in DTYPE_BYTES:
        raise DeployError(
            f"OUROBOROS_DTYPE takes one of {', '.join(DTYPE_BYTES)}; "
            f"got {variables['OUROBOROS_DTYPE']!r}"
        )
    if bool(variables.get("OUROBOROS_TARGET")) != bool(variables.get("OUROBOROS_DRAFT")):
        raise DeployError(
            "OUROBOROS_TARGET and OUROBOROS_DRAFT go together: set both, to folders or Hub ids"
        )
    return variables


def check_hardware(name: str | None) -> str | None:
    if name is not None and name not in HARDWARE:
        raise DeployError(
            f"--hardware {name!r} is not a Space hardware; one of: {', '.join(HARDWARE)}"
        )
    return name


# --- the plan's checks: does the pair fit, is a model gated, what does the hardware cost ------------------------


@dataclass(frozen=True)
class Checks:
    """What the plan found about the pair on the hardware."""

    lines: list[str]  # the estimate, as the plan prints it
    warnings: list[str]  # worth reading before paying: printed, the deploy goes ahead
    refusals: list[str]  # the Space could not run it: the deploy stops unless --deploy-anyway


def pair_of(variables: dict[str, str]) -> tuple[dict[str, str], str | None, str]:
    """The target and draft the Space's app would load from these variables (as ui.loading.pair_from_env reads
    them), the dtype asked for (None: the device's default) and the preset's description."""
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
    """A model's parameter count and how it was found; None when neither a table, a folder nor its name says."""
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


def fit_check(
    pair: dict[str, str], dtype: str | None, device: str | None, hardware: str | None
) -> Checks:
    """The pair's weights against the memory they would load into: refused when they alone exceed it, a warning
    when they leave less than a quarter of it. Without --hardware, against a new Space's cpu-basic, warning only."""
    name = hardware or "cpu-basic"
    board = SPACE_HARDWARE.get(name)
    if board is None:
        return Checks(
            [f"Fit: not checked (the Hub documents no memory figures for {name})"], [], []
        )
    on_gpu = board.gpu_gb is not None and not (device or "").startswith("cpu")
    asked, dtype = (
        dtype,
        dtype or ("bfloat16" if on_gpu else "float32"),
    )  # as models.pick_dtype chooses
    memory = board.gpu_gb if on_gpu else board.ram_gb
    counts = {role: parameters(spec) for role, spec in pair.items()}
    total = sum(count or 0 for count, _ in counts.values())
    unknown = [role for role, (count, _) in counts.items() if count is None]
    parts = [
        f"{role} {pair[role]} ({count_text(count)} parameters, {how})"
        if count
        else f"{role} {pair[role]} (size unknown)"
        for role, (count, how) in counts.items()
    ]
    lines = [f"Pair: {'; '.join(parts)}"]
    if memory is None or not total:
        kind = "GPU memory" if on_gpu else "RAM"
        why = (
            f"the Hub documents no {kind} figure for {name}"
            if memory is None
            else "no size is known"
        )
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
                f"the pair's weights take {need / memory:.0%} of {where}, leaving little for the KV "
                "cache, activations and the runtime: it may not load or may run out mid-race"
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
    """The pair's Hub models that ask for a licence first: by owner, or every one where the preset says gated."""
    hub = [spec for spec in pair.values() if not is_folder(spec)]
    said = "gated" in description.lower()
    return [spec for spec in hub if said or spec.split("/")[0] in GATED_OWNERS]


def gated_warnings(pair: dict[str, str], description: str) -> list[str]:
    gated = gated_models(pair, description)
    if not gated:
        return []
    return [
        f"{' and '.join(gated)} {'is' if len(gated) == 1 else 'are'} gated on the Hub: the Space needs a secret "
        "HF_TOKEN (Settings, Variables and secrets) holding a read token of an account that accepted the "
        "licence; the deploy sets variables, never secrets"
    ]


def cost_warnings(hardware: str | None) -> list[str]:
    if hardware in (None, "cpu-basic"):
        return []
    if hardware == ZERO_GPU:
        return [
            f"{hardware} is ZeroGPU, with no hourly bill: hosting it needs a PRO subscription (a personal "
            "account) or Enterprise Hub (an organisation), the Gradio SDK, and Python "
            f"{ZERO_GPU_PYTHON}, which the Space's front matter gets; visitors' GPU time has a daily quota"
        ]
    return [
        f"{hardware} is paid hardware: billed by the minute while the Space runs, visitors or not, until it "
        "sleeps or is paused; the account needs a payment method (huggingface.co/settings/billing; prices at "
        "huggingface.co/pricing)"
    ]


def plan_checks(variables: dict[str, str], hardware: str | None, paths: set[str]) -> Checks:
    """Everything the plan checks about the pair on the hardware, before anything is sent."""
    pair, dtype, description = pair_of(variables)
    fit = fit_check(pair, dtype, variables.get("OUROBOROS_DEVICE"), hardware)
    missing = [
        f"{spec} is a folder the upload set lacks (not here, or not tracked by git): the Space could not "
        "load it"
        for spec in pair.values()
        if is_folder(spec) and not in_paths(spec.rstrip("/"), paths)
    ]
    warnings = fit.warnings + gated_warnings(pair, description) + cost_warnings(hardware)
    return Checks(fit.lines, warnings, missing + fit.refusals)


def hardware_text(hardware: str | None) -> str:
    """The hardware and its documented figures: "t4-small: Nvidia T4 small, 4 vCPU, 15 GB RAM, 1x 16 GB GPU"."""
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


def space_url(repo_id: str) -> str:
    return f"https://huggingface.co/spaces/{repo_id}"


def plan_lines(
    repo_id: str,
    files: list[SpaceFile],
    variables: dict[str, str],
    hardware: str | None,
    private: bool,
) -> list[str]:
    """The deploy's plan, as the dry run prints it: every file with its size, the variables, the hardware."""
    rules = lfs_rules(SPACE_GITATTRIBUTES)
    lines = [
        f"Space: {space_url(repo_id)} (if new, {'private' if private else 'public'}; if not, as it is)",
        "Files (one commit; files on the Space outside this list are deleted in it):",
    ]
    lines += [
        f"  {f.size:>12,}  {f.path}{'  (LFS)' if stored_in_lfs(f.path, rules) else ''}"
        for f in files
    ]
    total = sum(f.size for f in files)
    lines.append(f"  {total:>12,}  bytes in {len(files)} files ({total / 1e6:.1f} MB)")
    lines.append(
        "Variables: " + (", ".join(f"{k}={v}" for k, v in variables.items()) or "none set")
    )
    lines.append(f"Hardware: {hardware_text(hardware)}")
    return lines


def hub_call(step: str, call, *args, **kwargs):
    """One Hub request; its failure becomes a DeployError whose one line says which step failed and why."""
    try:
        return call(*args, **kwargs)
    except (httpx2.HTTPError, HFValidationError, OSError) as err:
        first_line = (str(err).strip().splitlines() or [type(err).__name__])[0]
        raise DeployError(f"{step} failed: {first_line}") from None


def deploy(
    api: HfApi,
    repo_id: str,
    files: list[SpaceFile],
    variables: dict[str, str],
    hardware: str | None,
    private: bool,
    message: str,
) -> str:
    """Create the Space (or keep it), set its variables, replace its files with the set in one commit, and
    request its hardware. Returns the Space's URL."""
    hub_call(
        f"creating the Space {repo_id}",
        api.create_repo,
        repo_id,
        repo_type="space",
        space_sdk="gradio",
        exist_ok=True,
        private=private or None,
    )
    for (
        key,
        value,
    ) in variables.items():  # before the files, so the build they start already sees them
        hub_call(f"setting {key}", api.add_space_variable, repo_id, key, value)
    present = hub_call("listing the Space's files", api.list_repo_files, repo_id, repo_type="space")
    paths = {f.path for f in files}
    operations = [CommitOperationDelete(path_in_repo=name) for name in sorted(set(present) - paths)]
    operations += [
        CommitOperationAdd(
            path_in_repo=f.path,
            path_or_fileobj=f.source if isinstance(f.source, bytes) else str(f.source),
        )
        for f in files
    ]
    hub_call(
        "uploading the files",
        api.create_commit,
        repo_id,
        operations,
        commit_message=message,
        repo_type="space",
    )
    if hardware:
        hub_call(f"requesting {hardware}", api.request_space_hardware, repo_id, hardware)
    return space_url(repo_id)


def source_revision(root: Path = ROOT) -> str:
    done = subprocess.run(
        ["git", "describe", "--always", "--dirty"], cwd=root, capture_output=True, text=True
    )
    return done.stdout.strip() if done.returncode == 0 else "a folder outside git"


def run_deploy(args: argparse.Namespace) -> None:
    try:
        validate_repo_id(args.repo_id)
    except HFValidationError as err:
        raise DeployError(f"{args.repo_id!r} is not a Space id (OWNER/NAME): {err}") from None
    variables = space_variables(args.preset, args.var)
    hardware = check_hardware(args.hardware)
    files = upload_set(ROOT, hardware, args.project_url)
    checks = plan_checks(variables, hardware, {f.path for f in files})
    print(
        "\n".join(plan_lines(args.repo_id, files, variables, hardware, args.private) + checks.lines)
    )
    overridden = checks.refusals if args.deploy_anyway else []
    for warning in checks.warnings + [f"{refusal} (deploying anyway)" for refusal in overridden]:
        print(f"warning: {warning}")
    for name in untracked_in_space(ROOT):
        print(f"warning: {name} is not tracked by git, so it is left out; git add it to deploy it")
    problems = upload_set_problems(files)
    if problems:
        raise DeployError(
            "the Hub would refuse this upload, or the Space fail to build or read it:\n  "
            + "\n  ".join(problems)
        )
    if checks.refusals and not args.deploy_anyway:
        raise DeployError(
            "the Space could not run this (--deploy-anyway deploys it all the same):\n  "
            + "\n  ".join(checks.refusals)
        )
    if args.dry_run:
        print("Dry run: nothing was sent to the Hub.")
        return
    if get_token() is None:
        raise DeployError(f"no Hugging Face token: {LOGIN_HINT}")
    url = deploy(
        HfApi(),
        args.repo_id,
        files,
        variables,
        hardware,
        args.private,
        f"Deploy Ouroboros race from {source_revision(ROOT)}",
    )
    print(f"Deployed: {url} (it builds and starts on the Hub now)")


def parser() -> argparse.ArgumentParser:
    top = argparse.ArgumentParser(
        prog="python3 -m ouroboros_core.tools.space", description=__doc__.split("\n")[0]
    )
    commands = top.add_subparsers(dest="command", required=True)
    push = commands.add_parser(
        "deploy", help="create or update the Space with the upload set, in one commit"
    )
    push.add_argument("repo_id", metavar="OWNER/NAME")
    push.add_argument(
        "--preset", help="sets the Space's OUROBOROS_PRESET (see ouroboros_core/presets.json)"
    )
    push.add_argument(
        "--var",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help=f"sets a Space variable the app reads ({', '.join(APP_VARIABLES)}); repeatable",
    )
    push.add_argument(
        "--hardware", help=f"requests this hardware ({', '.join(HARDWARE)}); default: left as is"
    )
    push.add_argument(
        "--private",
        action="store_true",
        help="makes a new Space private (an existing one keeps its visibility)",
    )
    push.add_argument(
        "--project-url",
        metavar="URL",
        help="where the project's files are on the web (such as "
        "https://github.com/OWNER/REPO/blob/main): README links to files the Space lacks point there; "
        "without it, those links keep only their text and such images go",
    )
    push.add_argument("--dry-run", action="store_true", help="prints the plan and touches nothing")
    push.add_argument(
        "--deploy-anyway",
        action="store_true",
        help="deploys a pair the plan says the Space could not "
        "run (too big for the hardware's memory, or a folder the upload lacks), as a warning",
    )
    rehearse = commands.add_parser(
        "rehearse", help="start the upload set as a Space does, here, and race once"
    )
    rehearse.add_argument(
        "--venv",
        type=Path,
        help="a virtual environment to make once and reuse (default: a fresh one each time)",
    )
    return top


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    try:
        if args.command == "deploy":
            run_deploy(args)
            return 0
        from .space_rehearsal import rehearse  # the slow half, loaded only for its command

        return rehearse(args.venv)
    except DeployError as err:
        print(f"error: {err}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
