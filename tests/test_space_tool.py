"""The Space tool without the network: what goes up (README and requirements fitted to the Space), what the Hub
would refuse, and the deploy's calls against a stand-in HfApi. The rehearsal's slow part (a fresh venv, the app
started) runs in .ci/run, not here; its logs and notes are checked with stand-ins. The plan's fit, gating and cost
checks are in test_spaces.py."""

from __future__ import annotations

import re
import subprocess
import sys
from importlib import metadata
from pathlib import Path

import httpx2
import huggingface_hub.constants
import pytest
from huggingface_hub import CommitOperationAdd, CommitOperationDelete
from huggingface_hub.errors import HfHubHTTPError
from packaging.requirements import Requirement

from ouroboros_core.models import presets
from ouroboros_core.tools import space, space_rehearsal
from ouroboros_core.tools.space_files import (
    MAX_PLAIN_BYTES,
    SPACE_GITATTRIBUTES,
    SpaceFile,
    front_matter,
    front_matter_problems,
    git_files,
    lfs_rules,
    requirement_pins,
    storage_problems,
    stored_in_lfs,
    upload_set,
    upload_set_problems,
)
from ouroboros_core.tools.space_rehearsal import (
    Start,
    app_environment,
    ignored_note,
    lay_out,
    log_problems,
    log_tracebacks,
    race_problems,
)
from test_structure import ROOT, imports_of

README = """---
title: Test
sdk: gradio
sdk_version: 6.31.0
python_version: "3.11"
app_file: app.py
colorFrom: green
colorTo: indigo
---
# Test
"""


def lay(tmp_path, files: dict[str, bytes | str], **fitted):
    for name, content in files.items():
        path = tmp_path / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(content if isinstance(content, bytes) else content.encode())
    return upload_set(tmp_path, **fitted)


def text_of(files, path: str) -> str:
    return next(f for f in files if f.path == path).read().decode()


def minimal_space(**extra) -> dict:
    return {
        "app.py": "import gradio\n",
        "requirements.txt": "gradio==6.31.0\n",
        "README.md": README,
        **extra,
    }


# --- the upload set -------------------------------------------------------------------------------------------


def test_the_upload_set_is_what_the_space_runs_and_nothing_else():
    paths = [f.path for f in upload_set(ROOT)]
    assert {
        "app.py",
        "requirements.txt",
        "README.md",
        ".gitattributes",
        "ui/render.py",
        "ouroboros_core/engine.py",
        "assets/models/target/model.safetensors",
        "assets/models/draft/model.safetensors",
    } <= set(paths)
    modules = [
        name
        for name in git_files(ROOT)
        if name.endswith(".py")
        and name.startswith(("ui/", "ouroboros_core/"))
        and not name.startswith("ouroboros_core/tools/")
    ]
    assert "ui/guard.py" in modules and set(modules) <= set(
        paths
    )  # every tracked module of the app and engine
    for prefix in ("tests/", "docs/", "ouroboros_core/tools/", ".ci/", ".venv/", ".git/"):
        assert not [p for p in paths if p.startswith(prefix)], prefix
    assert not [p for p in paths if "__pycache__" in p or p.endswith(".pyc")]
    assert paths == sorted(paths) and len(paths) == len(set(paths))


def test_nothing_in_the_upload_set_imports_the_workbench_left_out_of_it():
    for file in upload_set(ROOT):
        if (
            file.path.endswith(".py") and file.path != "ouroboros_core/__main__.py"
        ):  # the CLI, never run there
            workbench = {m for m in imports_of(file.source) if m.startswith("ouroboros_core.tools")}
            assert not workbench, f"{file.path} imports {workbench}, which the Space does not get"


def test_outside_git_the_set_comes_from_a_walk_with_the_same_filter(tmp_path):
    files = lay(
        tmp_path,
        minimal_space(
            **{
                "ui/a.py": "",
                "ui/__pycache__/a.cpython-311.pyc": b"\0",
                "ouroboros_core/tools/bench.py": "",
                "tests/test_a.py": "",
                "docs/x.png": b"\0",
                ".gitattributes": "*.py -text\n",
            }
        ),
    )
    assert [f.path for f in files] == [
        ".gitattributes",
        "README.md",
        "app.py",
        "requirements.txt",
        "ui/a.py",
    ]
    assert files[0].read() == SPACE_GITATTRIBUTES.encode()  # generated, never the folder's own


# --- README.md and requirements.txt, fitted to the Space ---------------------------------------------------------


def test_the_space_readme_links_to_nothing_the_upload_leaves_out():
    files = upload_set(ROOT)
    paths = {f.path for f in files}
    readme = text_of(files, "README.md")
    targets = re.findall(r"\]\(([^)\s]+)", readme) + re.findall(
        r"(?:src|href)=\"([^\"]+)\"", readme
    )
    local = [t.split("#")[0] for t in targets if not re.match(r"[a-z]+:|#", t)]
    assert local and all(
        t in paths or any(p.startswith(t.rstrip("/") + "/") for p in paths) for t in local
    ), local
    assert "docs/race.gif" in (ROOT / "README.md").read_text() and "docs/race.gif" not in readme


def test_a_link_the_space_cannot_follow_becomes_absolute_or_keeps_its_text(tmp_path):
    body = (
        "![shot](docs/a.png)\nSee [the notes](docs/notes.md#why), [the app](app.py), [web](https://x.org/y) and "
        "[top](#test).\n"
    )
    space_files = minimal_space(
        **{"README.md": README + body, "docs/a.png": b"\0", "docs/notes.md": "n"}
    )
    dropped = text_of(lay(tmp_path / "a", space_files), "README.md")
    assert dropped.endswith(
        "\n\nSee the notes, [the app](app.py), [web](https://x.org/y) and [top](#test).\n"
    )
    linked = text_of(
        lay(tmp_path / "b", space_files, project_url="https://example.org/race/blob/main/"),
        "README.md",
    )
    assert (
        "![shot](https://example.org/race/blob/main/docs/a.png)\nSee [the notes]"
        "(https://example.org/race/blob/main/docs/notes.md#why), [the app](app.py)"
    ) in linked
    html = lay(tmp_path / "c", minimal_space(**{"README.md": README + '<img src="docs/a.png">\n'}))
    assert upload_set_problems(html) == ["README.md links to docs/a.png, which the Space lacks"]


def test_a_cpu_space_installs_torchs_cpu_build_and_a_gpu_space_the_projects_pins():
    project = (ROOT / "requirements.txt").read_text()
    pin = requirement_pins(project)["torch"]
    assert "+" not in pin
    for hardware in (None, "cpu-basic", "cpu-upgrade"):
        lines = text_of(upload_set(ROOT, hardware), "requirements.txt").splitlines()
        assert "--extra-index-url https://download.pytorch.org/whl/cpu" in lines
        (torch,) = [Requirement(line) for line in lines if line.startswith("torch")]
        assert torch.specifier.contains(f"{pin}+cpu") and not torch.specifier.contains(
            pin
        )  # never PyPI's CUDA build
        others = [line for line in lines if not line.startswith(("#", "--", "torch"))]
        assert others == [
            line for line in project.splitlines() if not line.startswith(("#", "torch"))
        ]
    for hardware in ("t4-small", "zero-a10g"):
        assert text_of(upload_set(ROOT, hardware), "requirements.txt") == project
    assert (
        ROOT / "requirements.txt"
    ).read_text() == project  # the project's own file is left as it is


def test_a_zero_gpu_space_runs_zero_gpus_python_and_pins_it_cannot_install_are_named(tmp_path):
    assert front_matter(upload_set(ROOT, "zero-a10g"))["python_version"] == "3.10.13"
    assert (
        front_matter(upload_set(ROOT, "t4-small"))["python_version"]
        == front_matter([SpaceFile("README.md", ROOT / "README.md")])["python_version"]
    )
    pandas, needs = metadata.version("pandas"), metadata.metadata("pandas")["Requires-Python"]
    assert needs == ">=3.11"  # pandas 3 left Python 3.10 behind
    files = lay(
        tmp_path,
        minimal_space(**{"requirements.txt": f"gradio==6.31.0\npandas=={pandas}\n"}),
        hardware="zero-a10g",
    )
    assert front_matter_problems(files) == [
        f"requirements.txt pins pandas=={pandas}, which needs Python >=3.11, but the Space runs Python 3.10.13"
    ]


# --- what the Hub would refuse --------------------------------------------------------------------------------


def test_every_large_or_binary_file_of_the_real_set_is_stored_in_lfs():
    assert storage_problems(upload_set(ROOT)) == []
    assert upload_set_problems(upload_set(ROOT)) == []


def test_a_large_or_binary_file_no_lfs_pattern_covers_is_named(tmp_path):
    files = lay(
        tmp_path,
        minimal_space(
            **{
                "assets/big.dat": b"x" * (11 * 1024 * 1024),
                "assets/icon.bmp": b"BM\0\0",
                "assets/ok.safetensors": b"\0" * 64,
                "assets/notes.txt": "plain text\n",
            }
        ),
    )
    problems = storage_problems(files)
    assert len(problems) == 2
    assert "assets/big.dat is 11,534,336 bytes, over the Hub's 10 MB" in problems[0]
    assert "assets/icon.bmp is binary" in problems[1]


def test_lfs_patterns_follow_git_rules():
    rules = lfs_rules(
        "# a comment\n*.bin filter=lfs -text\nweights/** filter=lfs\n*.png filter=lfs\n"
        "docs/*.png -filter\n"
    )
    assert stored_in_lfs("deep/down/model.bin", rules)  # no slash: the name, at any depth
    assert stored_in_lfs("weights/a/b.dat", rules) and not stored_in_lfs(
        "other/weights/b.dat", rules
    )
    assert stored_in_lfs("assets/a.png", rules) and not stored_in_lfs(
        "docs/a.png", rules
    )  # a later line wins
    assert not stored_in_lfs("model.BIN", rules)  # case-sensitive, as git is by default
    hub = lfs_rules(SPACE_GITATTRIBUTES)
    assert stored_in_lfs("saved_model/variables.data", hub) and stored_in_lfs(
        "saved_model/a/b", hub
    )


def test_a_broken_front_matter_is_named(tmp_path):
    broken = (
        README.replace("6.31.0", "5.0.0").replace('"3.11"', "3.10").replace("app.py", "main.py")
    )
    problems = front_matter_problems(
        lay(tmp_path, minimal_space(**{"README.md": broken.replace("green", "teal")}))
    )
    assert any(
        "sdk_version '5.0.0' is not the gradio version requirements.txt pins (6.31.0)" in p
        for p in problems
    )
    assert any("app_file 'main.py' is not in the upload set" in p for p in problems)
    assert any(
        "python_version must be a quoted version" in p and "3.1" in p for p in problems
    )  # YAML's float
    assert any("colorFrom 'teal'" in p for p in problems)


def test_a_front_matter_that_does_not_parse_or_is_missing_is_named(tmp_path):
    unparsable = lay(
        tmp_path / "a", minimal_space(**{"README.md": "---\nsdk: [gradio\n---\n# x\n"})
    )
    assert front_matter_problems(unparsable)[0].startswith(
        "README.md's front matter does not parse"
    )
    missing = lay(tmp_path / "b", minimal_space(**{"README.md": "# no front matter\n"}))
    assert front_matter_problems(missing) == [
        "README.md has no front matter (a --- block at its top) to tell the Space how to run"
    ]
    assert front_matter_problems(lay(tmp_path / "c", minimal_space())) == []


# --- the deploy -----------------------------------------------------------------------------------------------


class FakeHfApi:
    """Records every call; the Space already holds a stale file from an earlier deploy."""

    made: list[FakeHfApi] = []
    fail_on: str | None = None

    def __init__(self, token=None):
        assert token is None  # huggingface_hub finds HF_TOKEN or the login itself
        self.calls = []
        FakeHfApi.made.append(self)

    def __getattr__(self, name):
        def call(*args, **kwargs):
            self.calls.append((name, args, kwargs))
            if name == FakeHfApi.fail_on:
                request = httpx2.Request("POST", "https://huggingface.co/api/repos/create")
                raise HfHubHTTPError(
                    "403 Forbidden: you cannot create a Space here.\nRequest ID: x",
                    response=httpx2.Response(403, request=request),
                )
            if name == "list_repo_files":
                return [".gitattributes", "README.md", "app.py", "old_module.py"]

        return call


@pytest.fixture
def fake_hub(monkeypatch):
    FakeHfApi.made = []
    FakeHfApi.fail_on = None
    monkeypatch.setattr(space, "HfApi", FakeHfApi)
    monkeypatch.setenv("HF_TOKEN", "hf_test_token_never_printed")
    return FakeHfApi


def test_dry_run_lists_every_file_with_its_size_and_calls_no_hub(monkeypatch, capsys):
    def explode(*args, **kwargs):
        raise AssertionError("a dry run touched the Hub")

    monkeypatch.setattr(space, "HfApi", explode)
    monkeypatch.setattr(space, "get_token", explode)
    assert (
        space.main(["deploy", "me/race", "--dry-run", "--preset", "demo", "--hardware", "t4-small"])
        == 0
    )
    out = capsys.readouterr().out
    lines = out.splitlines()
    for file in upload_set(ROOT, "t4-small"):
        assert any(
            line.split()
            == [f"{file.size:,}", file.path]
            + (["(LFS)"] if file.path.endswith((".safetensors", ".png")) else [])
            for line in lines
        ), file.path
    assert "https://huggingface.co/spaces/me/race" in out
    assert "Variables: OUROBOROS_PRESET=demo" in out and "Hardware: t4-small" in out
    assert "Dry run: nothing was sent to the Hub." in out


def test_deploy_creates_the_space_sets_variables_uploads_the_set_and_requests_hardware(
    fake_hub, capsys
):
    assert (
        space.main(
            [
                "deploy",
                "me/race",
                "--preset",
                "demo",
                "--var",
                "OUROBOROS_THREADS=2",
                "--hardware",
                "cpu-upgrade",
                "--private",
            ]
        )
        == 0
    )
    (api,) = fake_hub.made
    names = [name for name, _, _ in api.calls]
    assert names == [
        "create_repo",
        "add_space_variable",
        "add_space_variable",
        "list_repo_files",
        "create_commit",
        "request_space_hardware",
    ]
    _, args, kwargs = api.calls[0]
    assert args == ("me/race",) and kwargs == {
        "repo_type": "space",
        "space_sdk": "gradio",
        "exist_ok": True,
        "private": True,
    }
    assert [call[1] for call in api.calls[1:3]] == [
        ("me/race", "OUROBOROS_PRESET", "demo"),
        ("me/race", "OUROBOROS_THREADS", "2"),
    ]
    _, (repo_id, operations), kwargs = api.calls[4]
    assert (
        repo_id == "me/race"
        and kwargs["repo_type"] == "space"
        and kwargs["commit_message"].startswith("Deploy")
    )
    added = [op.path_in_repo for op in operations if isinstance(op, CommitOperationAdd)]
    assert added == [f.path for f in upload_set(ROOT)]
    assert [op.path_in_repo for op in operations if isinstance(op, CommitOperationDelete)] == [
        "old_module.py"
    ]
    assert api.calls[5][1] == ("me/race", "cpu-upgrade")
    out = capsys.readouterr()
    assert "Deployed: https://huggingface.co/spaces/me/race" in out.out
    assert "hf_test_token_never_printed" not in out.out + out.err


def test_without_a_token_deploy_says_how_to_get_one(fake_hub, monkeypatch, tmp_path, capsys):
    monkeypatch.delenv("HF_TOKEN")
    monkeypatch.setattr(huggingface_hub.constants, "HF_TOKEN_PATH", str(tmp_path / "no-token"))
    assert space.main(["deploy", "me/race", "--preset", "demo"]) == 1
    assert (
        "error: no Hugging Face token: set HF_TOKEN to a token with write access, or run `hf auth login`"
        in (capsys.readouterr().err)
    )
    assert fake_hub.made == []


def test_a_hub_error_is_one_line_and_exit_code_1(fake_hub, capsys):
    fake_hub.fail_on = "create_repo"
    assert space.main(["deploy", "me/race", "--preset", "demo"]) == 1
    err = capsys.readouterr().err
    assert (
        err.strip()
        == "error: creating the Space me/race failed: 403 Forbidden: you cannot create a Space here."
    )


@pytest.mark.parametrize(
    "argv, message",
    [
        (
            ["--hardware", "gpu-huge"],
            "--hardware 'gpu-huge' is not a Space hardware; one of: cpu-basic, cpu-upgrade",
        ),
        (
            ["--var", "PATH=/x"],
            "--var takes KEY=VALUE with KEY one of OUROBOROS_PRESET, OUROBOROS_TARGET",
        ),
        (["--var", "OUROBOROS_DTYPE"], "--var takes KEY=VALUE"),
        (
            ["--preset", "demo", "--var", "OUROBOROS_PRESET=llama-3.1-8b"],
            "OUROBOROS_PRESET is given twice",
        ),
        (["--preset", "gpt-5"], f"preset 'gpt-5' is not one of {', '.join(presets())}"),
        (
            ["--var", "OUROBOROS_DTYPE=float8"],
            "OUROBOROS_DTYPE takes one of float32, bfloat16, float16; got 'float8'",
        ),
        (["--var", "OUROBOROS_TARGET=a/b"], "OUROBOROS_TARGET and OUROBOROS_DRAFT go together"),
    ],
)
def test_bad_options_are_refused_before_the_hub_is_touched(fake_hub, capsys, argv, message):
    assert space.main(["deploy", "me/race", *argv]) == 1
    assert message in capsys.readouterr().err
    assert fake_hub.made == []


def test_a_bad_space_id_is_refused(fake_hub, capsys):
    assert space.main(["deploy", "not a space id", "--dry-run"]) == 1
    assert "'not a space id' is not a Space id (OWNER/NAME)" in capsys.readouterr().err


# --- the rehearsal's parts that need no app -------------------------------------------------------------------


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
        'Exception in thread Thread-2:\nTraceback (most recent call last):\n  File "x.py", line 1\n    raise\n'
        "RuntimeError: `spaces` package is required\n* Running on local URL\n"
        'Exception ignored in: <function BaseEventLoop.__del__>\nTraceback (most recent call last):\n  File "y"\n'
        "ValueError: Invalid file descriptor: -1\n"
    )
    assert log_problems(log) == [
        "the app's log holds a traceback: RuntimeError: `spaces` package is required"
    ]
    assert log_tracebacks(log)[1] == [
        (
            "Exception ignored in: <function BaseEventLoop.__del__>",
            "ValueError: Invalid file descriptor: -1",
        )
    ]  # ignored by Python: a note only


def test_this_repositorys_gitattributes_stores_every_large_or_binary_file_through_lfs():
    """A plain push to a Space is refused for a file over 10 MB (or a binary) outside LFS: the repository's own
    .gitattributes holds the Hub's patterns, the same the deploy writes."""
    root = Path(__file__).resolve().parent.parent
    text = (root / ".gitattributes").read_text()
    assert [
        line for line in text.splitlines() if not line.startswith("#")
    ] == SPACE_GITATTRIBUTES.splitlines()
    rules = lfs_rules(text)
    tracked = subprocess.run(
        ["git", "ls-files", "-z"], cwd=root, capture_output=True, check=True
    ).stdout
    large = [
        name
        for name in tracked.decode().split("\0")
        if name and (root / name).is_file() and (root / name).stat().st_size > MAX_PLAIN_BYTES
    ]
    assert "assets/models/target/model.safetensors" in large
    assert [name for name in large if not stored_in_lfs(name, rules)] == []


def test_the_rehearsal_keeps_its_logs_and_explains_gradios_discarded_event_loops(
    tmp_path, monkeypatch, capsys
):
    loop_error = (
        "Exception ignored in: <function BaseEventLoop.__del__ at 0x7f>\nTraceback (most recent call "
        'last):\n  File "selectors.py", line 42\nValueError: Invalid file descriptor: -1\n'
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
        '3 "ValueError: Invalid file descriptor: -1" in BaseEventLoop.__del__, which Python ignored: event loops '
        "Gradio made and never closed"
    ) in out
    other = "Exception ignored in: <function Foo.__del__>\nTraceback (most recent call last):\nKeyError: 'x'\n"
    assert ignored_note(log + other).endswith(
        "the log holds 1 other exception(s) Python ignored: KeyError: 'x'"
    )
    assert (
        space_rehearsal.LOG_DIR.relative_to(ROOT).as_posix() == "tests/artifacts/space-rehearsal"
    )  # git ignores it


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
