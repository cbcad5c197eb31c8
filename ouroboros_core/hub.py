"""Fetching a model folder from the Hugging Face Hub (or its cache), its progress reported as
LoadStages, and the errors that say what to do when it cannot be had."""

from __future__ import annotations

import os
from pathlib import Path

from .load_report import LoadError, LoadStage, Report, ignore, size_text

# jinja: chat templates
HUB_FILES = ["*.json", "*.jinja", "*.safetensors", "*.model", "*.txt", "*.tiktoken", "*.py"]


def download(repo_id: str, report: Report = ignore) -> Path:
    # huggingface_hub honours HF_HUB_OFFLINE, HF_TOKEN and HF_HOME itself, and shows a progress bar.
    from huggingface_hub import snapshot_download
    from huggingface_hub.errors import HFValidationError

    report(LoadStage("download", f"Fetching {repo_id} from the Hub (or its cache)"))
    try:
        return Path(
            snapshot_download(
                repo_id, allow_patterns=HUB_FILES, tqdm_class=reporting_bars(repo_id, report)
            )
        )
    except OSError as err:  # every huggingface_hub error below is one, as is a full disk
        raise hub_error(repo_id, err) from err
    except HFValidationError as err:
        raise LoadError(f"{repo_id!r} is not a valid Hub id or local folder") from err


def hub_error(repo_id: str, err: OSError) -> LoadError:
    """What to do about a snapshot that could not be had, by what stopped it: the most specific of
    huggingface_hub's errors first (a gated repository's error is also a missing one's)."""
    from huggingface_hub.errors import (
        GatedRepoError,
        HfHubHTTPError,
        IncompleteSnapshotError,
        LocalEntryNotFoundError,
        RepositoryNotFoundError,
    )

    offline = f"HF_HUB_OFFLINE={os.environ.get('HF_HUB_OFFLINE', 'unset')}"
    fetch = (
        f"Connect to the network once, or run `huggingface-cli download {repo_id}` where there is "
        f"one and copy the cache ({os.environ.get('HF_HOME', '~/.cache/huggingface')}), or pass "
        f"a local folder"
    )
    if isinstance(err, GatedRepoError):
        return LoadError(f"{repo_id} is gated: accept its licence on the Hub and set HF_TOKEN")
    if isinstance(err, RepositoryNotFoundError):
        return LoadError(f"{repo_id} was not found on the Hub (private? set HF_TOKEN)")
    if isinstance(err, IncompleteSnapshotError):
        return LoadError(
            f"cannot load {repo_id}: its copy in the Hugging Face cache lacks files and the Hub "
            f"cannot be reached ({offline}). {fetch}"
        )
    if isinstance(err, (LocalEntryNotFoundError, ConnectionError)):
        return LoadError(
            f"cannot load {repo_id}: it is not in the Hugging Face cache and the Hub cannot be "
            f"reached ({offline}). {fetch}"
        )
    if isinstance(err, HfHubHTTPError):
        return LoadError(f"the Hub refused {repo_id}: {err}")
    return LoadError(f"cannot write {repo_id} to the Hugging Face cache: {err} (see HF_HOME)")


def reporting_bars(repo_id: str, report: Report):
    """A tqdm class for snapshot_download that also reports its files and bytes as LoadStages. It
    makes a bar for the files fetched ("Fetching N files") and one for the bytes written (whose
    total grows as each file starts); each keeps its own count, since a bar that huggingface_hub
    disables (no terminal) counts nothing."""
    from huggingface_hub.utils import tqdm as hub_tqdm

    counts = {"files": [0, None], "bytes": [0, None]}  # done, total

    class ReportingBar(hub_tqdm):
        def __init__(self, *args, **kwargs):
            self.kind = "bytes" if kwargs.get("unit") == "B" else "files"
            self.counted = kwargs.get("initial", 0) or 0
            # Two bars count bytes (received and written): the one that writes them to disk is the
            # one shown.
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
