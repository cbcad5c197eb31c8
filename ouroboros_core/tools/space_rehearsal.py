"""The Space's start, rehearsed here:
`python3 -m ouroboros_core.tools.space rehearse [--venv PATH]`.

The upload set alone in a temporary folder; a fresh virtual environment holding that folder's
requirements.txt and what a Space's build adds to it, nothing of this checkout's environment;
`python app.py` started there with a Space's environment and nothing that points back to this
checkout; then one race through /race, whose lanes must agree. Running from the folder proves the
Space needs nothing outside the set; the times to the page and to the first race's answer are what
the first visitor of a fresh Space waits. The folder goes afterwards; pip's log and the app's stay
in LOG_DIR.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path

from .space_checks import front_matter, upload_set_problems
from .space_files import ROOT, SpaceFile, untracked_in_space, upload_set
from .space_report import Start, log_problems, print_tail, race_problems, summary

SPACE_ID = "rehearsal/ouroboros-race"
# What a Gradio Space's build installs after requirements.txt (its build log shows
# `pip install gradio[oauth]==<sdk_version> "uvicorn>=0.14.0" spaces`). `spaces` matters: with
# SYSTEM=spaces, Gradio's launch needs it, and `import spaces` succeeds on every Gradio Space,
# ZeroGPU or not.
SPACE_BUILD = ("gradio[oauth]=={sdk_version}", "uvicorn>=0.14.0", "spaces")
PROMPT = "def fib(n):\n"
RACE_TOKENS = 24
# imports, then (before or after the page, as the app chooses) loading and warming the pair
START_TIMEOUT_S = 600
RACE_TIMEOUT_S = 600
LOG_DIR = ROOT / "tests" / "artifacts" / "space-rehearsal"  # git ignores tests/artifacts/


class RehearsalFailed(Exception):
    """The rehearsal stopped: the reason, and the log that shows it."""

    def __init__(self, reason: str, log: Path | None = None):
        super().__init__(reason)
        self.log = log


def lay_out(files: list[SpaceFile], folder: Path) -> None:
    for file in files:
        target = folder / file.path
        target.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(file.source, bytes):
            target.write_bytes(file.source)
        else:
            shutil.copyfile(file.source, target)


def outside_checkout(path: str) -> bool:
    return not Path(path).resolve().is_relative_to(ROOT)


def reachable(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=10):
            return True
    except (urllib.error.URLError, OSError):
        return False


def requirements_here(folder: Path) -> Path:
    """folder's requirements.txt, or, when an index it names cannot be reached from here, a copy
    beside folder without that line (pip would retry the index for every package, minutes in all);
    the pins stay as they are."""
    lines = (folder / "requirements.txt").read_text().splitlines()
    indexes = [line.split()[1] for line in lines if line.startswith("--extra-index-url ")]
    unreachable = [url for url in indexes if not reachable(url)]
    if not unreachable:
        return folder / "requirements.txt"
    print(
        f"Not reachable from here: {', '.join(unreachable)}; "
        "installing the same pins from pip's other sources (the Space reaches it)",
        flush=True,
    )
    copy = folder.parent / "requirements-here.txt"
    copy.write_text(
        "".join(
            f"{line}\n"
            for line in lines
            if not (line.startswith("--extra-index-url ") and line.split()[1] in unreachable)
        )
    )
    return copy


def prepare_venv(venv: Path, folder: Path, build: list[str], log: Path) -> tuple[Path, float]:
    """Into venv (made first if missing): folder's requirements.txt (requirements_here), then what
    the Space's build adds. Returns the venv's python and the seconds it took."""
    python = venv / "bin" / "python"
    start = time.perf_counter()
    if not python.exists():
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    env = {
        k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV")
    }
    requirements = requirements_here(folder)
    with log.open("w") as out:
        for packages in (["-r", str(requirements)], build):
            done = subprocess.run(
                [str(python), "-m", "pip", "install", *packages],
                cwd=folder,
                env=env,
                stdout=out,
                stderr=subprocess.STDOUT,
            )
            if done.returncode != 0:
                raise RehearsalFailed(
                    f"pip install {' '.join(packages)} failed (exit {done.returncode})", log
                )
    return python, time.perf_counter() - start


def app_environment(
    python: Path, port: int, home: Path, hub_cache: Path | None = None
) -> dict[str, str]:
    """A Space's environment for app.py: its variables, a bare HOME, and a PATH without this
    checkout; hub_cache: the Hub's files laid out where a Space would download them
    (hub_stand_in)."""
    path = [str(python.parent)] + [
        p for p in os.environ.get("PATH", "").split(os.pathsep) if p and outside_checkout(p)
    ]
    return {
        "PATH": os.pathsep.join(path),
        "HOME": str(home),
        "SPACE_ID": SPACE_ID,
        "SYSTEM": "spaces",
        "GRADIO_SERVER_NAME": "0.0.0.0",
        "GRADIO_SERVER_PORT": str(port),
        "PYTHONUNBUFFERED": "1",
        "HF_HUB_OFFLINE": "1",
        "GRADIO_ANALYTICS_ENABLED": "False",
        **({"HF_HUB_CACHE": str(hub_cache)} if hub_cache else {}),
    }


def hub_stand_in(work: Path) -> Path | None:
    """A Space downloads the default pair's target from the Hub, which the rehearsal cannot reach: a
    Hub cache laid out in `work` from its offline copy (the converted GGUF, a slightly different
    model from the Hub's original) stands in for that download, so the app runs its real Hub loading
    code. None without an offline copy."""
    from ..models import DEFAULT_PRESET, presets
    from ..sources import CONVERTED, converted_folder

    preset = presets()[DEFAULT_PRESET]
    source = preset.offline_source()
    if source is None or source.path() is None:
        return None
    folder = converted_folder(source, lambda text, done, total: print(text, flush=True))
    cache = work / "hub"
    repo = cache / ("models--" + preset.target.replace("/", "--"))
    commit = "0" * 40
    (repo / "refs").mkdir(parents=True)
    (repo / "refs" / "main").write_text(commit)
    snapshot = repo / "snapshots" / commit
    snapshot.mkdir(parents=True)
    for file in folder.iterdir():
        if file.name != CONVERTED:
            (snapshot / file.name).symlink_to(file)
    print(
        f"No Hub from here: {preset.target} stands in as a Hub cache "
        f"laid out from {source.describe()}",
        flush=True,
    )
    return cache


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def wait_for_page(process: subprocess.Popen, url: str) -> None:
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RehearsalFailed(
                f"app.py exited with {process.returncode} before serving the page"
            )
        try:
            with urllib.request.urlopen(url, timeout=5) as response:
                if response.status == 200:
                    return
        except (urllib.error.URLError, ConnectionError, TimeoutError):
            pass
        time.sleep(0.25)
    raise RehearsalFailed(f"no page on {url} within {START_TIMEOUT_S} s")


def race(url: str) -> dict:
    from gradio_client import Client

    try:
        client = Client(url, verbose=False, httpx_kwargs={"timeout": 120})
        return client.submit(PROMPT, RACE_TOKENS, api_name="/race").result(timeout=RACE_TIMEOUT_S)
    # gradio_client raises many kinds; each is this rehearsal's failure, told as such
    except Exception as err:
        raise RehearsalFailed(f"/race failed: {type(err).__name__}: {err}") from None


def start_and_race(
    python: Path, folder: Path, work: Path, log: Path, hub_cache: Path | None = None
) -> Start:
    """Start `python app.py` in folder as a Space does, its output into log, wait for the page, race
    once; always stop the app."""
    port = free_port()
    url = f"http://127.0.0.1:{port}/"
    home = work / "home"
    home.mkdir(exist_ok=True)
    print(f"Starting python app.py in {folder} on port {port}...", flush=True)
    with log.open("w") as out:
        start = time.perf_counter()
        process = subprocess.Popen(
            [str(python), "app.py"],
            cwd=folder,
            env=app_environment(python, port, home, hub_cache),
            stdout=out,
            stderr=subprocess.STDOUT,
        )
        try:
            wait_for_page(process, url)
            page_s = time.perf_counter() - start
            print(f"Page served after {page_s:.1f} s; racing once through /race...", flush=True)
            result = race(url)
            answer_s = time.perf_counter() - start
        except RehearsalFailed as err:
            err.log = log
            raise
        finally:
            stop(process)
    return Start(page_s, answer_s, result, log.read_text(errors="replace"))


def stop(process: subprocess.Popen) -> None:
    if process.poll() is None:
        process.terminate()
        try:
            process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def rehearse(venv: Path | None = None, log_dir: Path = LOG_DIR) -> int:
    """The whole rehearsal; prints what it measured and found, and keeps pip's log and the app's in
    log_dir. 0 when every check passed, else 1."""
    files = upload_set(ROOT)
    for name in untracked_in_space(ROOT):
        print(f"warning: {name} is not tracked by git, so the Space would not get it", flush=True)
    print(f"Upload set: {len(files)} files, {sum(f.size for f in files) / 1e6:.1f} MB", flush=True)
    problems = upload_set_problems(files)
    if problems:
        print("Rehearsal failed before starting anything:\n  " + "\n  ".join(problems))
        return 1
    build = [package.format(**front_matter(files)) for package in SPACE_BUILD]
    log_dir.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="space-rehearsal-", ignore_cleanup_errors=True) as tmp:
        work = Path(tmp)
        folder = work / "space"
        lay_out(files, folder)
        target = venv or work / "venv"
        print(f"Installing requirements.txt, then {' '.join(build)}, into {target}...", flush=True)
        try:
            python, install_s = prepare_venv(target, folder, build, log_dir / "pip.log")
            print(f"Installed in {install_s:.1f} s", flush=True)
            start = start_and_race(python, folder, work, log_dir / "app.log", hub_stand_in(work))
        except RehearsalFailed as err:
            print(f"Rehearsal failed: {err}")
            if err.log is not None:
                print_tail(err.log.name, err.log.read_text(errors="replace"))
            print(f"Logs kept: {log_dir / 'pip.log'}, {log_dir / 'app.log'}", flush=True)
            return 1
        print(f"Removing {work}...", flush=True)
    problems = race_problems(start.result) + log_problems(start.log)
    print(summary(files, build, install_s, start, problems))
    if problems:
        print("Rehearsal failed:\n  " + "\n  ".join(problems))
        print_tail("app log", start.log)
    else:
        print("Rehearsal passed.")
    print(f"Logs kept: {log_dir / 'pip.log'}, {log_dir / 'app.log'}", flush=True)
    return 1 if problems else 0
