"""ouroboros_core/hub.py at its boundary: download() resolves a model folder through
huggingface_hub's real snapshot_download from a Hub cache laid out here, keeps the files HUB_FILES
names, reports its progress as LoadStages, and turns each huggingface_hub error into a LoadError
that says what to do. The network is never used: where a test needs the Hub, its one answer (the
repository's commit, or a refusal) is stood in for."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import httpx
import huggingface_hub
import pytest
from huggingface_hub import constants
from huggingface_hub.errors import (
    GatedRepoError,
    HfHubHTTPError,
    IncompleteSnapshotError,
    LocalEntryNotFoundError,
    RepositoryNotFoundError,
)

from ouroboros_core.hub import download, download_stage, reporting_bars
from ouroboros_core.load_report import LoadError, LoadStage

REPO = "someone/tiny-chat"
COMMIT = "0123456789abcdef0123456789abcdef01234567"
FETCHING = LoadStage("download", f"Fetching {REPO} from the Hub (or its cache)")
# What a chat model's repository holds: the files a pair loads from, then weights in other formats
# and a model card, which the download leaves on the Hub.
WANTED = [
    "config.json",
    "generation_config.json",
    "tokenizer.json",
    "tokenizer_config.json",
    "chat_template.jinja",
    "model.safetensors",
]
UNWANTED = ["pytorch_model.bin", "model.gguf", "README.md"]


@pytest.fixture
def hub_cache(tmp_path, monkeypatch) -> Path:
    """An empty Hub cache under tmp_path, offline: huggingface_hub read its variables when it was
    imported, so its constants are pointed here as well as the environment."""
    home = tmp_path / "hf"
    cache = home / "hub"
    cache.mkdir(parents=True)
    monkeypatch.setenv("HF_HOME", str(home))
    monkeypatch.setenv("HF_HUB_CACHE", str(cache))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr(constants, "HF_HOME", str(home))
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(cache))
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    # Should anything still try the network, it fails at once instead of waiting on a DNS lookup.
    monkeypatch.setattr(constants, "ENDPOINT", "http://127.0.0.1:9")
    return cache


def lay_out(cache: Path, snapshot_files: list[str], listed: list[str] | None = None) -> Path:
    """REPO as huggingface_hub caches it: refs/main names COMMIT, whose snapshot holds
    `snapshot_files`; `listed`, when given, is the repository's file list as the cache keeps it
    (trees/COMMIT.json), by which huggingface_hub knows whether a snapshot is complete."""
    repo = cache / ("models--" + REPO.replace("/", "--"))
    snapshot = repo / "snapshots" / COMMIT
    snapshot.mkdir(parents=True)
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(COMMIT)
    for name in snapshot_files:
        (snapshot / name).write_text(f"contents of {name}")
    if listed is not None:
        (repo / "trees").mkdir()
        files = {name: {"size": 1, "blob_id": f"{i:040x}"} for i, name in enumerate(listed)}
        (repo / "trees" / f"{COMMIT}.json").write_text(
            json.dumps({"format_version": 1, "files": files})
        )
    return snapshot


def failure(repo_id: str = REPO) -> LoadError:
    with pytest.raises(LoadError) as caught:
        download(repo_id)
    return caught.value


def test_a_cached_repository_is_found_offline_and_reported_as_one_fetching_stage(hub_cache):
    snapshot = lay_out(hub_cache, WANTED)
    stages = []
    assert download(REPO, stages.append) == snapshot
    assert stages == [FETCHING]


def test_a_cached_snapshot_is_complete_without_weights_in_formats_the_pair_does_not_load(hub_cache):
    snapshot = lay_out(hub_cache, WANTED, listed=WANTED + UNWANTED)
    assert download(REPO) == snapshot


def test_a_cached_snapshot_missing_its_chat_template_is_not_taken_for_a_whole_one(hub_cache):
    # A pair whose template lives only in chat_template.jinja would load without it as a plain,
    # non-chat model: the cache must not pass for complete.
    lay_out(hub_cache, [name for name in WANTED if name != "chat_template.jinja"], listed=WANTED)
    error = failure()
    assert isinstance(error.__cause__, IncompleteSnapshotError)
    assert "chat_template.jinja" in str(error.__cause__)
    assert str(error).startswith(
        f"cannot load {REPO}: its copy in the Hugging Face cache lacks files"
    )


@pytest.fixture
def hub_answers(hub_cache, monkeypatch) -> list:
    """Online, with the Hub's answer about a repository stood in for: its commit, or the error
    put in the list this returns. Everything else snapshot_download does is its own."""
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    monkeypatch.delenv("HF_HUB_OFFLINE")
    refusals = []

    def repo_info(self, repo_id, **kwargs):
        assert repo_id == REPO
        if refusals:
            raise refusals[0]
        return SimpleNamespace(sha=COMMIT)

    monkeypatch.setattr(huggingface_hub.HfApi, "repo_info", repo_info)
    return refusals


def test_online_only_the_hub_files_are_fetched_and_each_file_is_reported(hub_cache, hub_answers):
    # The repository's file list is the cached one and every wanted file is in the snapshot
    # already: a file outside HUB_FILES would be fetched from the network, and fail.
    snapshot = lay_out(hub_cache, WANTED, listed=WANTED + UNWANTED)
    stages = []
    assert download(REPO, stages.append) == snapshot
    assert stages[0] == FETCHING
    wanted = len(WANTED)
    assert stages[-1] == LoadStage(
        "download", f"Downloading {REPO}: {wanted} of {wanted} files", wanted, wanted
    )
    assert [stage.done for stage in stages[1:]] == list(range(1, wanted + 1))


def test_offline_without_the_repository_cached_says_how_to_get_it(hub_cache):
    error = failure()
    assert isinstance(error.__cause__, LocalEntryNotFoundError)
    assert str(error) == (
        f"cannot load {REPO}: it is not in the Hugging Face cache and the Hub cannot be reached "
        f"(HF_HUB_OFFLINE=1). Connect to the network once, or run "
        f"`huggingface-cli download {REPO}` where there is one and copy the cache "
        f"({hub_cache.parent}), or pass a local folder"
    )


@pytest.mark.parametrize("repo_id", ["a/b/c", "not an id", "owner/name!"])
def test_an_invalid_id_is_refused_as_neither_a_hub_id_nor_a_folder(hub_cache, repo_id):
    assert str(failure(repo_id)) == f"{repo_id!r} is not a valid Hub id or local folder"


def http_error(kind, code: str, status: int):
    """What huggingface_hub raises for a Hub answer with this X-Error-Code."""
    url = f"https://huggingface.co/api/models/{REPO}/revision/main"
    response = httpx.Response(
        status, request=httpx.Request("GET", url), headers={"X-Error-Code": code}
    )
    return kind(f"{status} Client Error for {url}", response=response)


@pytest.mark.parametrize(
    "error, sentence",
    [
        (
            lambda: http_error(GatedRepoError, "GatedRepo", 401),
            f"{REPO} is gated: accept its licence on the Hub and set HF_TOKEN",
        ),
        (
            lambda: http_error(RepositoryNotFoundError, "RepoNotFound", 404),
            f"{REPO} was not found on the Hub (private? set HF_TOKEN)",
        ),
    ],
    ids=["gated", "not found"],
)
def test_a_hub_refusal_says_what_to_do_and_keeps_the_hub_error(hub_answers, error, sentence):
    hub_answers.append(error())
    caught = failure()
    assert str(caught) == sentence and caught.__cause__ is hub_answers[0]


@pytest.mark.parametrize(
    "raised",
    [LocalEntryNotFoundError("no cached snapshot"), ConnectionResetError("reset by peer")],
    ids=["not cached", "connection"],
)
def test_without_hf_variables_the_message_names_their_defaults(monkeypatch, raised):
    def unreachable(repo_id, **kwargs):
        raise raised

    monkeypatch.setattr(huggingface_hub, "snapshot_download", unreachable)
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.delenv("HF_HOME", raising=False)
    caught = failure()
    assert caught.__cause__ is raised
    assert "the Hub cannot be reached (HF_HUB_OFFLINE=unset)" in str(caught)
    assert "copy the cache (~/.cache/huggingface)" in str(caught)


def test_a_resumed_download_counts_the_bytes_it_already_had():
    stages = []
    bar = reporting_bars(REPO, stages.append)(
        total=4 * 2**20, initial=3 * 2**20, unit="B", desc="Reconstructing", disable=True
    )
    bar.update(2**20)
    assert stages == [
        LoadStage("download", f"Downloading {REPO}: 4 MiB of 4 MiB", 4 * 2**20, 4 * 2**20)
    ]


@pytest.mark.parametrize(
    "files, size, text, done, total",
    [
        ((0, None), (0, None), "", 0, None),
        ((2, 5), (0, None), ": 2 of 5 files", 2, 5),
        ((0, None), (3 * 2**29, 3 * 2**30), ": 1.5 GiB of 3.0 GiB", 3 * 2**29, 3 * 2**30),
        ((1, 2), (2**19, 2**20), ": 1 of 2 files, 512 KiB of 1 MiB", 2**19, 2**20),
    ],
    ids=["nothing known yet", "files", "bytes", "both"],
)
def test_a_download_stage_says_what_is_known_of_files_and_bytes(files, size, text, done, total):
    stage = download_stage(REPO, {"files": list(files), "bytes": list(size)})
    assert stage == LoadStage("download", f"Downloading {REPO}{text}", done, total)


@pytest.mark.parametrize(
    "raised, sentence",
    [
        (
            http_error(HfHubHTTPError, "", 500),
            f"the Hub refused {REPO}: 500 Client Error for https://huggingface.co/api/models/{REPO}",
        ),
        (
            OSError(28, "No space left on device"),
            f"cannot write {REPO} to the Hugging Face cache: [Errno 28] No space left on device",
        ),
    ],
    ids=["hub error", "disk full"],
)
def test_a_hub_error_or_a_full_disk_is_not_called_a_missing_network(monkeypatch, raised, sentence):
    def failing(repo_id, **kwargs):
        raise raised

    monkeypatch.setattr(huggingface_hub, "snapshot_download", failing)
    caught = failure()
    assert str(caught).startswith(sentence) and caught.__cause__ is raised
    assert "cannot be reached" not in str(caught)
