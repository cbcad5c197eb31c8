"""What a failed CI run prints (.ci/failure-report): the failing tests by name, last, and the logs
of the apps that bear on them; never the log of a test that broke its app on purpose and passed
(a reader once chased a bad-preset message that a passing test had caused)."""

from __future__ import annotations

import subprocess

from test_structure import ROOT

FAILED = "FAILED tests/test_showcase.py::test_a_bad_input[laptop] - AssertionError: count 0"


def report(artifacts) -> str:
    done = subprocess.run(
        ["bash", str(ROOT / ".ci" / "failure-report"), str(artifacts)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def lay_out(artifacts, summary: str) -> None:
    artifacts.mkdir()
    (artifacts / "pytest.log").write_text(f"...F...\n{summary}\n1 failed, 9 passed\n")
    logs = {
        "app-shared-41000.log": "race abc: vanilla 16 tokens",
        "app-test_showcase-41001.log": "the showcase's own app",
        "app-test_loading_page-41002.log": "OUROBOROS_PRESET='qwen-coder-7' is not a preset",
    }
    for name, text in logs.items():
        (artifacts / name).write_text(text + "\n")


def test_a_failed_run_names_the_failing_test_last_and_prints_only_the_logs_that_bear_on_it(
    tmp_path,
):
    lay_out(tmp_path / "artifacts", FAILED)
    out = report(tmp_path / "artifacts")
    assert "race abc" in out and "the showcase's own app" in out
    assert "is not a preset" not in out
    assert out.rstrip().splitlines()[-1] == FAILED
    assert "the Space rehearsal did not run" in out


def test_when_the_module_that_broke_its_app_fails_its_log_is_printed(tmp_path):
    failed = "ERROR tests/test_loading_page.py::test_a_pair_that_cannot_load - Failed: timeout"
    lay_out(tmp_path / "artifacts", failed)
    out = report(tmp_path / "artifacts")
    assert "is not a preset" in out and "the showcase's own app" not in out
    assert out.rstrip().splitlines()[-1] == failed
