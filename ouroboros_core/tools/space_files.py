"""What goes up to the Space, and what the Hub would refuse of it: the checks that need no running app.

`upload_set` is the one list of files that the deploy, its dry run and the rehearsal all use: what the Space
runs and nothing else, from what git tracks (untracked files never go up), with a generated .gitattributes.
"""

from __future__ import annotations

import re
import subprocess
from dataclasses import dataclass
from fnmatch import fnmatchcase
from pathlib import Path, PurePosixPath

import yaml
from huggingface_hub import SpaceCard

ROOT = Path(__file__).resolve().parents[2]
SPACE_PARTS = ("app.py", "ui/", "ouroboros_core/", "assets/", "requirements.txt", "README.md")
LEFT_OUT = ("ouroboros_core/tools/",)  # the workbench: neither app.py nor ui/ imports it
REQUIRED = ("app.py", "requirements.txt", "README.md", ".gitattributes")
MAX_PLAIN_BYTES = 10 * 1024 * 1024  # the Hub refuses a file above this outside LFS/Xet
BINARY_SNIFF_BYTES = 8000  # git calls a file binary when a NUL byte lies in its first 8000 bytes
SPACE_COLOURS = ("red", "yellow", "green", "blue", "indigo", "purple", "pink", "gray")
MAX_SHORT_DESCRIPTION = 60

# The Space's .gitattributes: the list the Hub gives every new repository, and images, since the Hub also refuses
# binary files of any size outside LFS/Xet. This repository's own .gitattributes holds the same patterns (a test
# keeps them equal); the deploy writes them, so a Space gets them even from a checkout that changed its own.
LFS = "filter=lfs diff=lfs merge=lfs -text"
LFS_PATTERNS = ("*.7z", "*.arrow", "*.bin", "*.bz2", "*.ckpt", "*.ftz", "*.gz", "*.h5", "*.joblib", "*.lfs.*",
                "*.mlmodel", "*.model", "*.msgpack", "*.npy", "*.npz", "*.onnx", "*.ot", "*.parquet", "*.pb",
                "*.pickle", "*.pkl", "*.pt", "*.pth", "*.rar", "*.safetensors", "saved_model/**/*", "*.tar.*",
                "*.tar", "*.tflite", "*.tgz", "*.wasm", "*.xz", "*.zip", "*.zst", "*tfevents*",
                "*.png", "*.jpg", "*.jpeg", "*.gif", "*.webp")
SPACE_GITATTRIBUTES = "".join(f"{pattern} {LFS}\n" for pattern in LFS_PATTERNS)


class FrontMatterError(ValueError):
    """README.md's front matter is missing or does not parse; the message says which."""


@dataclass(frozen=True)
class SpaceFile:
    """One file of the Space."""
    path: str             # where it lands in the Space, a POSIX path such as "assets/models/draft/model.safetensors"
    source: Path | bytes  # the checkout's file, or the content itself (the generated .gitattributes)

    @property
    def size(self) -> int:
        return len(self.source) if isinstance(self.source, bytes) else self.source.stat().st_size

    def read(self, limit: int = -1) -> bytes:
        if isinstance(self.source, bytes):
            return self.source if limit < 0 else self.source[:limit]
        with self.source.open("rb") as handle:
            return handle.read(limit)


# --- the upload set -------------------------------------------------------------------------------------------

def in_space(name: str) -> bool:
    """Whether a repository path belongs on the Space (the .gitattributes is generated, never taken from here)."""
    if "__pycache__" in PurePosixPath(name).parts or name.endswith(".pyc") or name.startswith(LEFT_OUT):
        return False
    return any(name == part or (part.endswith("/") and name.startswith(part)) for part in SPACE_PARTS)


def upload_set(root: Path = ROOT) -> list[SpaceFile]:
    """Every file the Space gets, sorted by path: from `git ls-files` in a checkout (so untracked files never go
    up), else from a walk of the folder; filtered by SPACE_PARTS; plus the generated .gitattributes."""
    names = git_files(root) if (root / ".git").exists() else walked_files(root)
    files = [SpaceFile(name, root / name) for name in names if in_space(name) and (root / name).is_file()]
    files.append(SpaceFile(".gitattributes", SPACE_GITATTRIBUTES.encode()))
    return sorted(files, key=lambda f: f.path)


def git_files(root: Path, *options: str) -> list[str]:
    listed = subprocess.run(["git", "ls-files", "-z", *options], cwd=root, capture_output=True, check=True).stdout
    return [name for name in listed.decode().split("\0") if name]


def walked_files(root: Path) -> list[str]:
    found = []
    for part in SPACE_PARTS:
        path = root / part
        candidates = sorted(path.rglob("*")) if path.is_dir() else [path]
        found += [p.relative_to(root).as_posix() for p in candidates if p.is_file()]
    return found


def untracked_in_space(root: Path = ROOT) -> list[str]:
    """Files that would belong on the Space but git does not track, so the upload set leaves them out."""
    if not (root / ".git").exists():
        return []
    return [name for name in git_files(root, "--others", "--exclude-standard") if in_space(name)]


# --- what the Hub would refuse --------------------------------------------------------------------------------

def lfs_rules(gitattributes: str) -> list[tuple[str, bool]]:
    """(pattern, stored in LFS?) for each line that sets or unsets `filter`, in order: a later match wins."""
    rules = []
    for line in gitattributes.splitlines():
        fields = line.split()
        if not fields or fields[0].startswith("#"):
            continue
        for attribute in fields[1:]:
            if attribute.startswith("filter="):
                rules.append((fields[0], attribute == "filter=lfs"))
            elif attribute in ("-filter", "!filter"):
                rules.append((fields[0], False))
    return rules


def pattern_matches(pattern: str, path: str) -> bool:
    """gitattributes matching, closely enough for LFS lists: a pattern without a slash matches the file's name
    at any depth; one with a slash matches the whole path from the root, `**/` standing for any folders."""
    if "/" not in pattern:
        return fnmatchcase(PurePosixPath(path).name, pattern)
    pattern = pattern.lstrip("/")
    return fnmatchcase(path, pattern) or fnmatchcase(path, pattern.replace("**/", ""))


def stored_in_lfs(path: str, rules: list[tuple[str, bool]]) -> bool:
    stored = False
    for pattern, lfs in rules:
        if pattern_matches(pattern, path):
            stored = lfs
    return stored


def storage_problems(files: list[SpaceFile]) -> list[str]:
    """Each file the Hub would refuse as a plain git file (over 10 MB, or binary: a NUL byte early on, git's own
    test) that no LFS pattern of the set's .gitattributes covers."""
    attributes = next((f.read().decode() for f in files if f.path == ".gitattributes"), "")
    rules = lfs_rules(attributes)
    problems = []
    for file in files:
        if stored_in_lfs(file.path, rules):
            continue
        if file.size > MAX_PLAIN_BYTES:
            problems.append(f"{file.path} is {file.size:,} bytes, over the Hub's 10 MB for a plain file, and no LFS "
                            "pattern in .gitattributes covers it")
        elif b"\0" in file.read(BINARY_SNIFF_BYTES):
            problems.append(f"{file.path} is binary (the Hub refuses binary files outside LFS/Xet) and no LFS "
                            "pattern in .gitattributes covers it")
    return problems


def requirement_pins(text: str) -> dict[str, str]:
    """name -> version for each `name==version` line of a requirements file (names lower-case, - for _)."""
    pins = {}
    for line in text.splitlines():
        match = re.fullmatch(r"\s*([A-Za-z0-9_.-]+)\s*==\s*([^\s;#]+).*", line)
        if match:
            pins[match.group(1).lower().replace("_", "-")] = match.group(2)
    return pins


def front_matter(files: list[SpaceFile]) -> dict:
    """README.md's front matter as huggingface_hub's own card parser reads it."""
    readme = next((f for f in files if f.path == "README.md"), None)
    if readme is None:
        raise FrontMatterError("README.md is not in the upload set: a Space reads its settings from its front matter")
    text = readme.read().decode("utf-8-sig")
    if not text.startswith("---"):
        raise FrontMatterError("README.md has no front matter (a --- block at its top) to tell the Space how to run")
    try:
        return SpaceCard(text).data.to_dict()
    except (ValueError, yaml.YAMLError) as err:
        raise FrontMatterError(f"README.md's front matter does not parse: {' '.join(str(err).split())}") from None


def front_matter_problems(files: list[SpaceFile]) -> list[str]:
    """What is wrong with README.md's front matter for this Space (the Hub's own validation needs the network)."""
    try:
        data = front_matter(files)
    except FrontMatterError as err:
        return [str(err)]
    paths = {f.path for f in files}
    requirements = next((f.read().decode() for f in files if f.path == "requirements.txt"), "")
    gradio = requirement_pins(requirements).get("gradio")
    problems = []
    if not data.get("title"):
        problems.append("front matter: title is missing")
    if data.get("sdk") != "gradio":
        problems.append(f"front matter: sdk is {data.get('sdk')!r}; the app needs 'gradio'")
    if gradio is None or str(data.get("sdk_version")) != gradio:
        problems.append(f"front matter: sdk_version {data.get('sdk_version')!r} is not the gradio version "
                        f"requirements.txt pins ({gradio})")
    if data.get("app_file") not in paths:
        problems.append(f"front matter: app_file {data.get('app_file')!r} is not in the upload set")
    python = data.get("python_version")
    if not isinstance(python, str) or not re.fullmatch(r"3\.\d+(\.\d+)?", python):
        problems.append(f"front matter: python_version must be a quoted version such as \"3.11\", got {python!r}")
    for key in ("colorFrom", "colorTo"):
        if key in data and data[key] not in SPACE_COLOURS:
            problems.append(f"front matter: {key} {data[key]!r} is not one of {', '.join(SPACE_COLOURS)}")
    if len(data.get("short_description") or "") > MAX_SHORT_DESCRIPTION:
        problems.append(f"front matter: short_description is over {MAX_SHORT_DESCRIPTION} characters")
    return problems


def upload_set_problems(files: list[SpaceFile]) -> list[str]:
    """Everything the checks that need no running app find: missing files, storage, front matter."""
    paths = {f.path for f in files}
    missing = [f"{name} is not in the upload set" for name in REQUIRED if name not in paths]
    return missing + storage_problems(files) + front_matter_problems(files)
