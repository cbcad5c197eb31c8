"""Loading pairs: local folders, Hub ids from a cache laid out here (no network), presets, and
errors."""

import json
import os
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest
import torch
from transformers import DistilBertConfig, DistilBertModel, PreTrainedTokenizerFast

from ouroboros_core import LoadError, load_engine
from ouroboros_core.models import check_vocabularies, pick_dtype, presets, resolve_folder
from ouroboros_core.packed import unpacked
from ouroboros_core.tools.corpus import load_corpus, stdlib_files, train_tokenizer
from pairs import lay_out_hub_cache, save_tiny_pair

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def saved_pair(tmp_path_factory):
    return save_tiny_pair(tmp_path_factory.mktemp("pair"))


def run_python(code: str, env_extra: dict) -> subprocess.CompletedProcess:
    env = {**os.environ, **env_extra, "PYTHONPATH": str(ROOT)}
    return subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=300
    )


def test_local_folders_load_and_decode_losslessly(saved_pair):
    engine = load_engine(str(saved_pair / "target"), str(saved_pair / "draft"), "cpu")
    assert engine.target.dtype == torch.float32
    prompt = "def add(a, b):\n    return"
    ids = engine.tokenizer(prompt, return_tensors="pt").input_ids
    with unpacked(engine.target):  # stock transformers, as a user has it
        expected = engine.target.generate(ids, do_sample=False, max_new_tokens=24)[
            0, ids.shape[1] :
        ].tolist()
    for method in ("vanilla", "speculative", "ouroboros"):
        assert engine.generate(prompt, method, 24).token_ids == expected


def test_hub_id_loads_from_cache_offline(saved_pair, tmp_path):
    lay_out_hub_cache(tmp_path, "someone/tiny-target", saved_pair / "target")
    lay_out_hub_cache(tmp_path, "someone/tiny-draft", saved_pair / "draft")
    code = (
        "from ouroboros_core import load_engine\n"
        "e = load_engine('someone/tiny-target', 'someone/tiny-draft', 'cpu')\n"
        "r = e.generate('def f(x):', 'ouroboros', 8)\n"
        "print('OK', r.token_ids)\n"
    )
    done = run_python(code, {"HF_HUB_OFFLINE": "1", "HF_HUB_CACHE": str(tmp_path)})
    assert done.returncode == 0, done.stderr[-2000:]
    local = load_engine(str(saved_pair / "target"), str(saved_pair / "draft"), "cpu")
    expected = local.generate("def f(x):", "vanilla", 8).token_ids
    assert expected and f"OK {expected}" in done.stdout


def test_hub_id_missing_offline_says_how_to_fix(tmp_path):
    code = (
        "from ouroboros_core import LoadError, load_engine\n"
        "try:\n    load_engine('nobody/not-cached', 'nobody/not-cached-draft', 'cpu')\n"
        "except LoadError as err:\n    print('ERR', err)\n"
    )
    done = run_python(code, {"HF_HUB_OFFLINE": "1", "HF_HUB_CACHE": str(tmp_path)})
    assert done.returncode == 0, done.stderr[-2000:]
    assert "ERR cannot load nobody/not-cached" in done.stdout
    assert "HF_HUB_OFFLINE=1" in done.stdout and "local folder" in done.stdout


def test_missing_folder_is_a_clear_error(tmp_path):
    with pytest.raises(LoadError, match="does not exist"):
        resolve_folder(str(tmp_path / "nowhere"))
    (tmp_path / "empty").mkdir()
    with pytest.raises(LoadError, match="no config.json"):
        resolve_folder(str(tmp_path / "empty"))


def test_different_vocabularies_are_refused(saved_pair, tmp_path):
    other = train_tokenizer(load_corpus(max_chars=30_000), 280)
    target_tok = PreTrainedTokenizerFast.from_pretrained(saved_pair / "target")
    with pytest.raises(LoadError, match="different vocabularies"):
        check_vocabularies(target_tok, other, "t", "d")
    draft = tmp_path / "draft"
    (tmp_path / "draft").mkdir()
    for file in (saved_pair / "draft").iterdir():
        (draft / file.name).write_bytes(file.read_bytes())
    other.save_pretrained(draft)
    with pytest.raises(LoadError, match="different vocabularies"):
        load_engine(str(saved_pair / "target"), str(draft), "cpu")


def test_a_model_that_is_not_a_causal_lm_is_refused(saved_pair, tmp_path):
    folder = tmp_path / "distilbert"
    DistilBertModel(
        DistilBertConfig(vocab_size=300, dim=32, n_layers=1, n_heads=2, hidden_dim=64)
    ).save_pretrained(folder)
    PreTrainedTokenizerFast.from_pretrained(saved_pair / "target").save_pretrained(folder)
    with pytest.raises(LoadError, match="not a causal language model"):
        load_engine(str(saved_pair / "target"), str(folder), "cpu")


def test_presets_and_their_rules():
    known = presets()
    assert "demo" in known and known["demo"].target == "assets/models/target"
    assert all(p.chat for name, p in known.items() if name != "demo")
    with pytest.raises(LoadError, match="is a preset"):
        load_engine("demo", "some/draft")
    with pytest.raises(LoadError, match="not a preset"):
        load_engine("someone/target-only")


def test_dtype_and_device_choices():
    assert pick_dtype(None, torch.device("cpu")) == torch.float32
    assert pick_dtype(None, torch.device("cuda")) == torch.bfloat16
    assert pick_dtype("float16", torch.device("cpu")) == torch.float16
    with pytest.raises(LoadError, match="dtype must be one of"):
        pick_dtype("int8", torch.device("cpu"))
    if not torch.cuda.is_available():
        with pytest.raises(LoadError, match="no CUDA GPU"):
            load_engine(device="cuda")


def test_embedded_pair_loads_offline_with_plain_transformers():
    from transformers import AutoModelForCausalLM, AutoTokenizer

    for name in ("target", "draft"):
        folder = ROOT / "assets" / "models" / name
        for file in (
            "config.json",
            "model.safetensors",
            "tokenizer.json",
            "tokenizer_config.json",
            "generation_config.json",
        ):
            assert (folder / file).is_file(), f"{folder / file} is missing"
        assert (
            json.loads((folder / "generation_config.json").read_text())["eos_token_id"] is not None
        )
        AutoModelForCausalLM.from_pretrained(folder)
        AutoTokenizer.from_pretrained(folder)
    engine = load_engine("demo")
    assert engine.name == "demo"
    assert engine.generate("def f():\n", "ouroboros", 4).stats.new_tokens >= 1


def test_corpus_is_library_code_without_test_suites():
    files = stdlib_files()
    assert len(files) > 200
    names = {path.name for path in files}
    assert {"functools.py", "textwrap.py", "shutil.py"} <= names  # library modules stay in
    root = Path(sysconfig.get_paths()["stdlib"])
    for path in files:
        parts = set(path.relative_to(root).parts[:-1])
        assert not parts & {"test", "tests", "idle_test", "encodings", "site-packages"}, path


def test_trained_tokenizer_keeps_newlines_apart_from_indentation():
    # A prompt ending in a bare newline (every HumanEval stub) must tokenise the way the corpus did:
    # if the tokenizer fused "\n" with the next line's spaces, a bare "\n" would only ever precede
    # column-0 code.
    tokenizer = train_tokenizer(load_corpus(max_chars=300_000), 512)
    text = 'def f(x):\n    """Doc."""\n    if x:\n        return x\n\n    return 0\n'
    ids = tokenizer(text)["input_ids"]
    pieces = [tokenizer.decode([i]) for i in ids]
    assert tokenizer.decode(ids) == text
    assert pieces.count("\n") == text.count("\n"), pieces
    assert all(piece == "\n" or "\n" not in piece for piece in pieces), pieces
    stub = 'def f(x):\n    """Doc."""\n'
    assert (
        tokenizer(stub + "    return x\n")["input_ids"][: len(tokenizer(stub)["input_ids"])]
        == tokenizer(stub)["input_ids"]
    )


def test_a_preset_names_its_dtype_and_a_bad_dtype_is_a_clear_error(monkeypatch):
    import ouroboros_core.models as models_module

    assert presets()["demo"].dtype == "float32"
    asked = []
    real = models_module.pick_dtype
    monkeypatch.setattr(
        models_module,
        "pick_dtype",
        lambda dtype, device: asked.append(dtype) or real(dtype, device),
    )
    assert load_engine("demo").target.dtype == torch.float32
    # an explicit choice overrides the preset
    assert load_engine("demo", dtype="bfloat16").target.dtype == torch.bfloat16
    assert asked == ["float32", "bfloat16"], (
        "the embedded pair is float32 on every device, CUDA included"
    )
    with pytest.raises(
        LoadError, match="dtype must be one of float32, bfloat16, float16, got 'float64'"
    ):
        load_engine("demo", dtype="float64")


def test_the_hub_download_takes_every_file_a_chat_pair_loads_from_and_no_other_weights():
    # huggingface_hub's own filter, as snapshot_download applies HUB_FILES: a pair whose chat
    # template lives only in chat_template.jinja must still load as a chat pair.
    from huggingface_hub.utils import filter_repo_objects

    from ouroboros_core.hub import HUB_FILES

    needed = [
        "chat_template.jinja",
        "config.json",
        "generation_config.json",
        "tokenizer.json",
        "tokenizer_config.json",
        "tokenizer.model",
        "special_tokens_map.json",
        "vocab.json",
        "merges.txt",
        "model.safetensors",
        "model-00001-of-00004.safetensors",
        "model.safetensors.index.json",
    ]
    others = ["pytorch_model.bin", "model.gguf", "onnx/model.onnx", "flax_model.msgpack"]
    kept = set(filter_repo_objects(needed + others, allow_patterns=HUB_FILES))
    assert kept == set(needed)
