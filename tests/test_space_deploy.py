"""The Space tool's deploy without the network: its calls against a stand-in HfApi, a dry run that
calls no Hub, and the options and errors it refuses with one line."""

from __future__ import annotations

import httpx2
import huggingface_hub.constants
import pytest
from huggingface_hub import CommitOperationAdd, CommitOperationDelete
from huggingface_hub.errors import HfHubHTTPError

from ouroboros_core.models import presets
from ouroboros_core.tools import space
from ouroboros_core.tools.space_files import upload_set
from test_structure import ROOT


# --- the deploy -----------------------------------------------------------------------------------


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
    # the README's race recording lives in docs/, which the Space lacks: said, with the way out
    assert "warning: the README's image docs/race.gif is not in the Space" in out
    assert "--project-url" in out
    url = "https://example.org/race/blob/main"
    assert space.main(["deploy", "me/race", "--dry-run", "--project-url", url]) == 0
    assert "image docs/race.gif" not in capsys.readouterr().out


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
    how = (
        "error: no Hugging Face token: set HF_TOKEN to a token with write access, "
        "or run `hf auth login`"
    )
    assert how in capsys.readouterr().err
    assert fake_hub.made == []


def test_a_hub_error_is_one_line_and_exit_code_1(fake_hub, capsys):
    fake_hub.fail_on = "create_repo"
    assert space.main(["deploy", "me/race", "--preset", "demo"]) == 1
    err = capsys.readouterr().err
    assert err.strip() == (
        "error: creating the Space me/race failed: 403 Forbidden: you cannot create a Space here."
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
