"""Imported at start-up by a Python whose PYTHONPATH holds this folder: the loading tests' app. With
OUROBOROS_TEST_LOAD_DELAY_S set, every Hub fetch moves its progress bars through the files one by
one and every model load sleeps that long first, so a browser can watch each stage of the loading go
by. The rest of the loading is the app's own: huggingface_hub's real cache lookup, transformers'
real load."""

import os
import time

DELAY_S = float(os.environ.get("OUROBOROS_TEST_LOAD_DELAY_S", "0"))

if DELAY_S:
    import huggingface_hub

    import ouroboros_core.models as models

    real_snapshot_download, real_load_model = huggingface_hub.snapshot_download, models.load_model

    def slow_snapshot_download(repo_id, *, tqdm_class=None, **kwargs):
        files = 3
        if tqdm_class is not None:
            with tqdm_class(total=files, desc=f"Fetching {files} files") as bar:
                for _ in range(files):
                    time.sleep(DELAY_S / files)
                    bar.update(1)
        return real_snapshot_download(repo_id, tqdm_class=tqdm_class, **kwargs)

    def slow_load_model(*args, **kwargs):
        time.sleep(DELAY_S)
        return real_load_model(*args, **kwargs)

    huggingface_hub.snapshot_download = slow_snapshot_download
    models.load_model = slow_load_model
