"""The Space tool without the network: what goes up (README and requirements fitted to the
Space) and what the Hub would refuse. The deploy's calls against a stand-in HfApi are in
test_space_deploy.py, the rehearsal's in test_space_rehearsal.py; the plan's fit, gating and cost
checks are in test_spaces.py."""

from __future__ import annotations

import re
import subprocess
from importlib import metadata
from pathlib import Path

from packaging.requirements import Requirement

from ouroboros_core.tools.space_checks import (
    MAX_PLAIN_BYTES,
    front_matter,
    front_matter_problems,
    lfs_rules,
    requirement_pins,
    storage_problems,
    stored_in_lfs,
    upload_set_problems,
)
from ouroboros_core.tools.space_files import SPACE_GITATTRIBUTES, SpaceFile, git_files, upload_set
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


# --- the upload set -------------------------------------------------------------------------------


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
    # every tracked module of the app and engine
    assert "ui/guard.py" in modules and set(modules) <= set(paths)
    for prefix in ("tests/", "docs/", "ouroboros_core/tools/", ".ci/", ".venv/", ".git/"):
        assert not [p for p in paths if p.startswith(prefix)], prefix
    assert not [p for p in paths if "__pycache__" in p or p.endswith(".pyc")]
    assert paths == sorted(paths) and len(paths) == len(set(paths))


def test_nothing_in_the_upload_set_imports_the_workbench_left_out_of_it():
    for file in upload_set(ROOT):
        # __main__.py: the CLI, never run there
        if file.path.endswith(".py") and file.path != "ouroboros_core/__main__.py":
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


# --- README.md and requirements.txt, fitted to the Space ------------------------------------------


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
        "![shot](docs/a.png)\nSee [the notes](docs/notes.md#why), [the app](app.py), "
        "[web](https://x.org/y) and [top](#test).\n"
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
        # never PyPI's CUDA build
        assert torch.specifier.contains(f"{pin}+cpu") and not torch.specifier.contains(pin)
        others = [line for line in lines if not line.startswith(("#", "--", "torch"))]
        assert others == [
            line for line in project.splitlines() if not line.startswith(("#", "torch"))
        ]
    for hardware in ("t4-small", "zero-a10g"):
        assert text_of(upload_set(ROOT, hardware), "requirements.txt") == project
    # the project's own file is left as it is
    assert (ROOT / "requirements.txt").read_text() == project


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
        f"requirements.txt pins pandas=={pandas}, which needs Python >=3.11, "
        "but the Space runs Python 3.10.13"
    ]


# --- what the Hub would refuse --------------------------------------------------------------------


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
    # a later line wins
    assert stored_in_lfs("assets/a.png", rules) and not stored_in_lfs("docs/a.png", rules)
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
    # YAML's float
    assert any("python_version must be a quoted version" in p and "3.1" in p for p in problems)
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


def test_this_repositorys_gitattributes_stores_every_large_or_binary_file_through_lfs():
    """A plain push to a Space is refused for a file over 10 MB (or a binary) outside LFS: the
    repository's own .gitattributes holds the Hub's patterns, the same the deploy writes."""
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
