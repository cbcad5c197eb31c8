"""The Space rehearsal without the network: its slow part (a fresh venv, the app started) runs in
.ci/run, not here; its layout, checks, logs and notes are checked with stand-ins."""

from __future__ import annotations

import sys
from pathlib import Path

from ouroboros_core.tools import space_rehearsal
from ouroboros_core.tools.space_files import upload_set
from ouroboros_core.tools.space_rehearsal import app_environment, lay_out
from ouroboros_core.tools.space_report import (
    Start,
    ignored_note,
    log_problems,
    log_tracebacks,
    race_problems,
)
from test_structure import ROOT


# --- the rehearsal's parts that need no app -------------------------------------------------------


def test_the_rehearsal_lays_out_the_set_and_gives_the_app_nothing_of_this_checkout(tmp_path):
    files = upload_set(ROOT)
    lay_out(files, tmp_path / "space")
    assert sorted(
        p.relative_to(tmp_path / "space").as_posix()
        for p in (tmp_path / "space").rglob("*")
        if p.is_file()
    ) == [f.path for f in files]
    env = app_environment(tmp_path / "venv" / "bin" / "python", 7861, tmp_path / "home")
    assert (
        env["SYSTEM"] == "spaces"
        and env["GRADIO_SERVER_PORT"] == "7861"
        and "PYTHONPATH" not in env
    )
    assert env["PATH"].startswith(str(tmp_path / "venv" / "bin"))
    assert not [value for value in env.values() if str(ROOT) in value]


def test_the_race_check_wants_identical_lanes_and_the_log_no_traceback():
    lane = {"token_ids": [1, 2, 3]}
    assert (
        race_problems({"vanilla": lane, "ouroboros": {**lane, "verdict": {"kind": "identical"}}})
        == []
    )
    problems = race_problems(
        {"vanilla": lane, "ouroboros": {"token_ids": [1, 2, 4], "verdict": {"kind": "mismatch"}}}
    )
    assert problems == [
        "the lanes differ: vanilla [1, 2, 3], ouroboros [1, 2, 4]",
        "the Ouroboros lane's verdict is 'mismatch', not 'identical'",
    ]
    assert race_problems("busy")[0].startswith("/race answered")
    assert log_problems("Running on local URL\n") == []
    log = (
        "Exception in thread Thread-2:\nTraceback (most recent call last):\n"
        '  File "x.py", line 1\n    raise\n'
        "RuntimeError: `spaces` package is required\n* Running on local URL\n"
        "Exception ignored in: <function BaseEventLoop.__del__>\n"
        'Traceback (most recent call last):\n  File "y"\n'
        "ValueError: Invalid file descriptor: -1\n"
    )
    assert log_problems(log) == [
        "the app's log holds a traceback: RuntimeError: `spaces` package is required"
    ]
    # ignored by Python: a note only
    assert log_tracebacks(log)[1] == [
        (
            "Exception ignored in: <function BaseEventLoop.__del__>",
            "ValueError: Invalid file descriptor: -1",
        )
    ]


def test_the_log_check_reads_a_traceback_that_progress_bars_cut_as_one():
    # A weights-loading bar another thread redraws inside the traceback: the same one traceback.
    bar = "\rLoading weights:   0%|          | 0/29 [00:00<?, ?it/s]"
    barred = (
        "Exception ignored in: <function BaseEventLoop.__del__>\n"
        'Traceback (most recent call last):\n  File "y"\n'
        f"{bar}    self._remove_reader(fd)\n"
        f'  File "z"\n{bar}\rLoading weights: 100%|##########| 29/29 [00:00<00:00, 9.1it/s]\n'
        "ValueError: Invalid file descriptor: -1\n"
    )
    assert log_tracebacks(barred) == (
        [],
        [
            (
                "Exception ignored in: <function BaseEventLoop.__del__>",
                "ValueError: Invalid file descriptor: -1",
            )
        ],
    )
    # ...and inside the line that names where, and between a line's indent and its text (the log
    # as read from its file: each bar's carriage return a line break).
    bar = bar.replace("\r", "\n")
    cut = (
        f"* Running on local URL\n{bar}Exception ignored in: "
        f"{bar}<function BaseEventLoop.__del__>\n"
        'Traceback (most recent call last):\n  File "selectors.py", line 190, in get_key\n'
        f"    return mapping[fileobj]\n           {bar}^^^^^^^^^^^^^^^\n"
        f"ValueError: Invalid file descriptor: -1\n{bar}\n2026-12-04 ouroboros.app INFO ready\n"
    )
    assert log_tracebacks(cut) == (
        [],
        [
            (
                "Exception ignored in: <function BaseEventLoop.__del__>",
                "ValueError: Invalid file descriptor: -1",
            )
        ],
    )
    assert ignored_note(cut) == (
        "\n  note     the log holds 1 exception(s) Python ignored: "
        "ValueError: Invalid file descriptor: -1"
    )
    assert ignored_note(cut.split("Exception ignored")[0]) == ""


def test_the_rehearsal_keeps_its_logs_and_notes_the_exceptions_python_ignored(
    tmp_path, monkeypatch, capsys
):
    loop_error = (
        "Exception ignored in: <function BaseEventLoop.__del__ at 0x7f>\n"
        "Traceback (most recent call last):\n"
        '  File "selectors.py", line 42\nValueError: Invalid file descriptor: -1\n'
    )
    log = "* Running on local URL\n" + loop_error * 3
    lane = {"token_ids": [1, 2]}

    def prepare_venv(venv, folder, build, pip_log):
        pip_log.write_text("Successfully installed torch-2.13.0+cpu\n")
        return Path(sys.executable), 1.0

    def start_and_race(python, folder, work, app_log, hub_cache=None):
        assert (folder / "app.py").is_file() and not app_log.is_relative_to(work)
        app_log.write_text(log)
        return Start(
            1.0,
            2.0,
            {"vanilla": lane, "ouroboros": {**lane, "verdict": {"kind": "identical"}}},
            log,
        )

    monkeypatch.setattr(space_rehearsal, "prepare_venv", prepare_venv)
    monkeypatch.setattr(space_rehearsal, "start_and_race", start_and_race)
    assert space_rehearsal.rehearse(log_dir=tmp_path / "logs") == 0
    out = capsys.readouterr().out
    assert (tmp_path / "logs" / "app.log").read_text() == log
    assert (tmp_path / "logs" / "pip.log").read_text().startswith("Successfully installed")
    assert f"Logs kept: {tmp_path / 'logs' / 'pip.log'}, {tmp_path / 'logs' / 'app.log'}" in out
    assert (
        "the log holds 3 exception(s) Python ignored: ValueError: Invalid file descriptor: -1"
    ) in out
    other = (
        "Exception ignored in: <function Foo.__del__>\n"
        "Traceback (most recent call last):\nKeyError: 'x'\n"
    )
    # every kind counted, the first named; none of them a raised traceback
    assert ignored_note(other + log).endswith(
        "the log holds 4 exception(s) Python ignored: KeyError: 'x'"
    )
    assert log_problems(other + log) == []
    # git ignores it
    assert space_rehearsal.LOG_DIR.relative_to(ROOT).as_posix() == "tests/artifacts/space-rehearsal"


def test_the_rehearsal_installs_the_same_pins_when_an_index_is_out_of_reach(
    tmp_path, monkeypatch, capsys
):
    lay_out(upload_set(ROOT, "cpu-basic"), tmp_path / "space")
    monkeypatch.setattr(space_rehearsal, "reachable", lambda url: True)
    assert (
        space_rehearsal.requirements_here(tmp_path / "space")
        == tmp_path / "space" / "requirements.txt"
    )
    monkeypatch.setattr(space_rehearsal, "reachable", lambda url: False)
    copy = space_rehearsal.requirements_here(tmp_path / "space")
    space_lines = (tmp_path / "space" / "requirements.txt").read_text().splitlines()
    assert copy.read_text().splitlines() == [
        line for line in space_lines if not line.startswith("--extra-index-url")
    ]
    assert (
        "Not reachable from here: https://download.pytorch.org/whl/cpu" in capsys.readouterr().out
    )
