"""The launched demo for the end-to-end tests: `python app.py` on a free loopback port, one per
session.

Both the API and the browser tests use the same process (started on first use, stopped when the
session ends), so the model pair loads and warms up once.
"""

from __future__ import annotations

import functools
import json
import os
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from pace import scaled

ROOT = Path(__file__).resolve().parent.parent
# kept after the run: .ci/run prints their tails when a test fails
ARTIFACTS = ROOT / "tests" / "artifacts"
# to the page on an idle machine, importing torch and gradio; stretched by the load
START_TIMEOUT_S = 300


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class AppServer:
    _shared: AppServer | None = None

    def __init__(self, extra_env: dict | None = None, owner: str | None = None):
        """`python app.py` with the environment of the tests, plus extra_env (a Space's variables,
        say). Its log is tests/artifacts/app-OWNER-PORT.log, OWNER the test module that started it
        (or "shared"): .ci/run prints the shared app's log and those of the failing tests' modules,
        never a log from a test that broke its app on purpose and passed."""
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}/"
        ARTIFACTS.mkdir(exist_ok=True)
        owner = owner or Path(os.environ.get("PYTEST_CURRENT_TEST", "tests").split("::")[0]).stem
        self.log = open(ARTIFACTS / f"app-{owner}-{self.port}.log", "w+")
        env = {
            **os.environ,
            "PORT": str(self.port),
            "OUROBOROS_HOST": "127.0.0.1",
            "PYTHONUNBUFFERED": "1",
            "GRADIO_ANALYTICS_ENABLED": "False",
            "HF_HUB_OFFLINE": "1",
            "TRANSFORMERS_OFFLINE": "1",
            **(extra_env or {}),
        }
        self.process = subprocess.Popen(
            [sys.executable, "app.py"], cwd=ROOT, env=env, stdout=self.log, stderr=subprocess.STDOUT
        )

    @classmethod
    def shared(cls) -> AppServer:
        if cls._shared is None:
            cls._shared = cls(owner="shared")
            try:
                cls._shared.wait_ready()
            except BaseException:
                cls._shared.stop()
                raise
        elif cls._shared.process.poll() is not None:
            pytest.fail(
                f"the app died earlier (exit {cls._shared.process.returncode}):\n"
                f"{cls._shared.log_text()}"
            )
        return cls._shared

    def client(self):
        """A gradio_client Client with timeouts for a machine busy enough to stall the server for
        seconds."""
        from gradio_client import Client

        return Client(self.url, verbose=False, httpx_kwargs={"timeout": 60})

    def log_text(self) -> str:
        return Path(self.log.name).read_text(errors="replace")[-6000:]

    def wait_ready(self) -> None:
        """Until the page is served (the pair may still be loading behind it: a race waits for
        it)."""
        limit = scaled(START_TIMEOUT_S)
        deadline = time.monotonic() + limit
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                pytest.fail(
                    f"app.py exited with {self.process.returncode} before serving:\n"
                    f"{self.log_text()}"
                )
            try:
                with urllib.request.urlopen(self.url, timeout=5) as response:
                    if response.status == 200:
                        return
            except (urllib.error.URLError, ConnectionError, TimeoutError):
                pass
            time.sleep(0.5)
        pytest.fail(f"app.py did not answer on {self.url} within {limit:.0f} s:\n{self.log_text()}")

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self.log.close()  # the file stays in tests/artifacts/ for a failure to be read afterwards


class RunningApp:
    """An app someone else started: $OUROBOROS_APP_URL (handy against a deployed demo, or while
    iterating)."""

    client = AppServer.client

    def __init__(self, url: str):
        self.url = url.rstrip("/") + "/"


@functools.lru_cache
def step_index(url: str, name: str) -> int:
    """The number a queue request (its fn_index) gives the page's step whose function is `name`,
    from the app's config at `url` (a Run's chain has several steps; the race is one of them)."""
    with urllib.request.urlopen(url.split("gradio_api/")[0] + "config", timeout=30) as response:
        steps = json.load(response)["dependencies"]
    return next(step["id"] for step in steps if step["api_name"] == name)


@pytest.fixture(scope="session")
def app_server():
    """The running app; import this fixture into a test module to use it."""
    if os.environ.get("OUROBOROS_APP_URL"):
        yield RunningApp(os.environ["OUROBOROS_APP_URL"])
        return
    server = AppServer.shared()
    yield server
    # Session fixtures imported into several modules finalise once per module, all at session end.
    if AppServer._shared is not None:
        AppServer._shared.stop()
        AppServer._shared = None
