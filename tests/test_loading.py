"""Loading the pair behind a served page: the stages it reports, the sentence each failure gives the
page and the log, and the app's handlers while it loads or after it failed (in this process;
tests/test_loading_page.py watches the same in Chromium)."""

from __future__ import annotations

import logging
import threading

import gradio as gr
import pytest

import app
import ouroboros_core.models as models
from ouroboros_core import LoadError
from ouroboros_core.hub import reporting_bars
from ouroboros_core.load_report import LoadStage
from ui import handlers
from ui.loading import PairLoader, failure_sentence, load_pair


def run_inline(fn):
    fn()


class Gate:
    """A load that reports stages and then waits for the test to let it finish."""

    def __init__(self, result="engine", error: Exception | None = None):
        self.result, self.error = result, error
        self.reported = threading.Event()
        self.release = threading.Event()

    def __call__(self, report):
        report(LoadStage("download", "Downloading someone/target: 1 of 4 files", 1, 4))
        report(LoadStage("download", "Downloading someone/target: 2 of 4 files", 2, 4))
        report(LoadStage("load", "Loading the target onto cpu in float32", 0, 2))
        self.reported.set()
        assert self.release.wait(10)
        if self.error is not None:
            raise self.error
        return self.result


def start_in_thread(fn):
    threading.Thread(target=fn, daemon=True).start()


def test_the_page_sees_each_stage_while_the_pair_loads_and_nothing_once_ready(caplog):
    gate = Gate()
    loader = PairLoader(gate, start_in_thread)
    caplog.set_level(logging.INFO, logger="ouroboros.app")
    loader.start()
    assert gate.reported.wait(10)
    assert loader.wait(timeout=0.05) is None and not loader.finished
    status = loader.status_html()
    assert "Getting the model pair ready" in status
    assert "Loading the target onto cpu in float32" in status
    assert '<progress max="100" value="0"' in status and "Run waits until it is ready" in status
    gate.release.set()
    assert loader.wait(timeout=10) == "engine"
    assert loader.status_html() == "" and loader.error is None
    lines = [record.getMessage() for record in caplog.records]
    # One log line per step: the download's second count does not add one.
    assert [line.split(" (")[0] for line in lines[:2]] == [
        "model pair: Downloading someone/target: 1 of 4 files",
        "model pair: Loading the target onto cpu in float32",
    ]
    assert len(lines) == 3 and lines[2].startswith("model pair: ready in ")


def test_a_second_start_or_wait_does_not_load_again():
    calls = []
    loader = PairLoader(lambda report: calls.append(1) or "engine", run_inline)
    loader.start()
    loader.start()
    assert loader.wait() == "engine" and loader.wait() == "engine"
    assert calls == [1]


def test_a_failed_load_gives_one_sentence_to_the_page_and_the_detail_to_the_log(caplog):
    caplog.set_level(logging.INFO, logger="ouroboros.app")
    loader = PairLoader(Gate(error=RuntimeError("CUDA driver exploded at 0xdead")), start_in_thread)
    loader._load.release.set()
    with pytest.raises(LoadError) as raised:
        loader.wait(timeout=10)
    sentence = str(raised.value)
    assert sentence == (
        "The model pair could not be loaded: loading failed with RuntimeError: "
        "check OUROBOROS_PRESET, or OUROBOROS_TARGET and OUROBOROS_DRAFT."
    )
    assert "0xdead" not in sentence  # the detail stays in the log
    assert any(
        "0xdead" in (record.exc_text or "")
        for record in caplog.records
        if record.levelno == logging.ERROR
    )
    status = loader.status_html()
    assert 'role="alert"' in status and "could not be loaded" in status and "server's log" in status


@pytest.mark.parametrize(
    "error,expected",
    [
        (
            LoadError(
                "meta-llama/Llama-3.1-8B is gated: accept its licence on the Hub and set HF_TOKEN"
            ),
            "The model pair could not be loaded: meta-llama/Llama-3.1-8B is gated: "
            "accept its licence on the Hub and set HF_TOKEN.",
        ),
        (
            MemoryError(),
            "out of memory while loading the pair: pick a smaller pair (OUROBOROS_PRESET)",
        ),
        (
            type("OutOfMemoryError", (RuntimeError,), {})("CUDA out of memory"),
            "OUROBOROS_DTYPE=bfloat16",
        ),
    ],
)
def test_failure_sentences_say_what_to_set(error, expected):
    assert expected in failure_sentence(error)


def loader_for_env(monkeypatch, **env) -> PairLoader:
    for name in ("OUROBOROS_PRESET", "OUROBOROS_TARGET", "OUROBOROS_DRAFT", "OUROBOROS_DTYPE"):
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("OUROBOROS_DEVICE", "cpu")
    return PairLoader(load_pair, run_inline)


def failure_of(loader: PairLoader) -> str:
    with pytest.raises(LoadError) as raised:
        loader.wait()
    return str(raised.value)


def test_a_name_that_is_not_a_preset_says_which_are(monkeypatch):
    sentence = failure_of(loader_for_env(monkeypatch, OUROBOROS_PRESET="qwen-coder-7"))
    assert sentence.startswith(
        "The model pair could not be loaded: OUROBOROS_PRESET='qwen-coder-7' is not a preset"
    )
    assert "demo, qwen-coder-7b" in sentence and "OUROBOROS_TARGET and OUROBOROS_DRAFT" in sentence


def test_a_target_without_a_draft_says_to_set_both(monkeypatch):
    sentence = failure_of(loader_for_env(monkeypatch, OUROBOROS_TARGET="someone/target"))
    assert "OUROBOROS_TARGET is set without OUROBOROS_DRAFT" in sentence


def test_a_gated_pair_without_a_token_says_to_set_hf_token(monkeypatch):
    import huggingface_hub
    from huggingface_hub.errors import GatedRepoError

    import httpx

    def gated(repo_id, **kwargs):  # what the Hub answers for a gated repository and no token
        url = f"https://huggingface.co/api/models/{repo_id}/revision/main"
        response = httpx.Response(
            401, request=httpx.Request("GET", url), headers={"X-Error-Code": "GatedRepo"}
        )
        raise GatedRepoError(
            f"Access to model {repo_id} is restricted. You must have access to it.",
            response=response,
        )

    monkeypatch.setattr(huggingface_hub, "snapshot_download", gated)
    sentence = failure_of(
        loader_for_env(
            monkeypatch,
            OUROBOROS_TARGET="meta-llama/Llama-3.1-8B-Instruct",
            OUROBOROS_DRAFT="meta-llama/Llama-3.2-1B-Instruct",
        )
    )
    assert sentence == (
        "The model pair could not be loaded: meta-llama/Llama-3.1-8B-Instruct is "
        "gated: accept its licence on the Hub and set HF_TOKEN."
    )


def test_a_pair_larger_than_free_memory_is_refused_with_the_sizes(monkeypatch):
    monkeypatch.setattr(models, "free_memory_bytes", lambda device: 8 * 2**20)
    sentence = failure_of(loader_for_env(monkeypatch, OUROBOROS_PRESET="demo"))
    assert "the pair needs about 34 MiB in float32 (target 26 MiB, draft 8 MiB)" in sentence
    assert "cpu has 8 MiB free" in sentence
    assert "OUROBOROS_DTYPE" in sentence


def test_a_draft_with_another_vocabulary_is_refused(monkeypatch, tmp_path):
    from transformers import AutoTokenizer

    from pairs import save_tiny_pair

    other = save_tiny_pair(tmp_path)  # its own 300-token tokenizer
    target = models.ASSETS / "models/target"
    assert len(AutoTokenizer.from_pretrained(other / "draft")) != len(
        AutoTokenizer.from_pretrained(target)
    )
    sentence = failure_of(
        loader_for_env(
            monkeypatch, OUROBOROS_TARGET=str(target), OUROBOROS_DRAFT=str(other / "draft")
        )
    )
    assert "have different vocabularies" in sentence and "shares the target's tokenizer" in sentence


def test_download_progress_reaches_the_report_as_files_and_bytes():
    """The bars snapshot_download makes (huggingface_hub's own helpers, as it calls them), fed as a
    download feeds them: the report gets the files done and the bytes written, each of its total."""
    from huggingface_hub.utils.tqdm import _create_progress_bar, hf_thread_map

    seen = []
    bar_class = reporting_bars("someone/target", seen.append)
    written = _create_progress_bar(
        cls=bar_class,
        log_level=logging.WARNING,
        name="x",
        desc="Reconstructing",
        total=0,
        initial=0,
        unit="B",
        unit_scale=True,
    )
    received = _create_progress_bar(
        cls=bar_class,
        log_level=logging.WARNING,
        name="y",
        desc="Downloading bytes",
        total=0,
        initial=0,
        unit="B",
        unit_scale=True,
    )
    written.total = 3 * 2**20

    def fetch(size):
        received.update(size)  # received bytes are not shown: the written ones are
        written.update(size)

    hf_thread_map(
        fetch, [2**20, 2**20, 2**20], desc="Fetching 3 files", max_workers=1, tqdm_class=bar_class
    )
    last = seen[-1]
    assert last.stage == "download"
    assert last.text == "Downloading someone/target: 3 of 3 files, 3 MiB of 3 MiB"
    assert (last.done, last.total) == (3 * 2**20, 3 * 2**20)
    assert any(stage.text == "Downloading someone/target: 1 MiB of 3 MiB" for stage in seen)


@pytest.fixture
def failed_app(monkeypatch):
    def load(report):
        raise LoadError("OUROBOROS_PRESET='nope' is not a preset")

    loader = PairLoader(load, run_inline)
    monkeypatch.setattr(app.RACING, "loader", loader)
    loader.start()
    return loader


def test_after_a_failed_load_run_and_the_api_answer_with_the_sentence(failed_app):
    sentence = "The model pair could not be loaded: OUROBOROS_PRESET='nope' is not a preset."
    with pytest.raises(gr.Error) as raised:
        list(app.RACES.await_pair())
    assert raised.value.message == sentence
    with pytest.raises(gr.Error) as raised:
        list(app.race_api("def f():\n", 8))
    assert raised.value.message == sentence
    view = app.LOADING.refresh("def f():\n", 8)
    assert sentence.replace("'", "&#x27;") in view[app.LOADING.status]
    assert view[app.LOADING.timer].active is False  # nothing more to wait for
    # The sliders and the legend are left as they are.
    assert not set(view) & {*app.LOADING.knobs.values(), app.LOADING.legend}
    assert "once the model pair has loaded" in view[app.LOADING.room]


def test_while_loading_the_page_waits_with_the_stage_and_then_races(monkeypatch):
    gate = Gate(result=app.get_engine())  # the real pair (loaded once for this process)
    loader = PairLoader(gate, start_in_thread)
    monkeypatch.setattr(app.RACING, "loader", loader)
    monkeypatch.setattr(handlers, "LOAD_EVERY_S", 0.05)
    loader.start()
    assert gate.reported.wait(10)
    waiting = app.RACES.await_pair()
    first = next(waiting)
    assert "Loading the target onto cpu in float32" in first
    loading = app.LOADING
    view = loading.refresh("def f():\n", 128)
    assert "Getting the model pair ready" in view[loading.status]
    assert view[loading.timer].active is True
    assert "once the model pair has loaded" in view[loading.room]
    gate.release.set()
    assert list(waiting)[-1] == ""  # the badge cleared for the race
    view = loading.refresh("def f():\n", 128)
    assert view[loading.status] == "" and view[loading.timer].active is False
    knobs = {name: view[slider] for name, slider in loading.knobs.items()}
    assert knobs == loading.knob_values()
    # The tiny pair reads its pool (one branch).
    assert "accepted from a pool phrase" in view[loading.legend]
    context = loader.engine.max_context
    tokens = len(loader.engine.encode("def f():\n"))
    assert view[loading.room] == (
        f"{tokens} of the {context - 128:,} tokens the model can read with 128 new tokens."
    )
    assert "Running on **cpu** in **float32**" in view[loading.pair]
