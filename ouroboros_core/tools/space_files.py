"""What goes up to the Space, and what the Hub would refuse of it: the checks that need no running app.

`upload_set` is the one list of files that the deploy, its dry run and the rehearsal all use: what the Space
runs and nothing else, from what git tracks (untracked files never go up), with a generated .gitattributes and the
project's README.md and requirements.txt fitted to the Space: links only to what it has, torch's CPU build on a CPU,
the Python that ZeroGPU runs.
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
# PyPI's Linux torch is the CUDA build, with NVIDIA's libraries as packages: gigabytes a CPU Space never uses.
CPU_HARDWARE = (
    None,
    "cpu-basic",
    "cpu-upgrade",
)  # None: the deploy leaves it, and a new Space gets cpu-basic
CPU_TORCH_INDEX = "https://download.pytorch.org/whl/cpu"
ZERO_GPU = "zero-a10g"
ZERO_GPU_PYTHON = "3.10.13"  # the one Python ZeroGPU's documentation names (huggingface.co/docs/hub/spaces-zerogpu)

# The Space's .gitattributes: the list the Hub gives every new repository, and images, since the Hub also refuses
# binary files of any size outside LFS/Xet. This repository's own .gitattributes holds the same patterns (a test
# keeps them equal); the deploy writes them, so a Space gets them even from a checkout that changed its own.
LFS = "filter=lfs diff=lfs merge=lfs -text"
LFS_PATTERNS = (
    "*.7z",
    "*.arrow",
    "*.bin",
    "*.bz2",
    "*.ckpt",
    "*.ftz",
    "*.gz",
    "*.h5",
    "*.joblib",
    "*.lfs.*",
    "*.mlmodel",
    "*.model",
    "*.msgpack",
    "*.npy",
    "*.npz",
    "*.onnx",
    "*.ot",
    "*.parquet",
    "*.pb",
    "*.pickle",
    "*.pkl",
    "*.pt",
    "*.pth",
    "*.rar",
    "*.safetensors",
    "saved_model/**/*",
    "*.tar.*",
    "*.tar",
    "*.tflite",
    "*.tgz",
    "*.wasm",
    "*.xz",
    "*.zip",
    "*.zst",
    "*tfevents*",
    "*.png",
    "*.jpg",
    "*.jpeg",
    "*.gif",
    "*.webp",
)
SPACE_GITATTRIBUTES = "".join(f"{pattern} {LFS}\n" for pattern in LFS_PATTERNS)


class FrontMatterError(ValueError):
    """README.md's front matter is missing or does not parse; the message says which."""


@dataclass(frozen=True)
class SpaceFile:
    """One file of the Space."""

    path: str  # where it lands in the Space, a POSIX path such as "assets/models/draft/model.safetensors"
    source: (
        Path | bytes
    )  # the checkout's file, or the content itself (the generated .gitattributes)

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
    if (
        "__pycache__" in PurePosixPath(name).parts
        or name.endswith(".pyc")
        or name.startswith(LEFT_OUT)
    ):
        return False
    return any(
        name == part or (part.endswith("/") and name.startswith(part)) for part in SPACE_PARTS
    )


def upload_set(
    root: Path = ROOT, hardware: str | None = None, project_url: str | None = None
) -> list[SpaceFile]:
    """Every file the Space gets, sorted by path: from `git ls-files` in a checkout (so untracked files never go
    up), else from a walk of the folder; filtered by SPACE_PARTS; plus the generated .gitattributes. README.md
    and requirements.txt are fitted to the Space (space_readme, space_requirements) for `hardware`."""
    names = git_files(root) if (root / ".git").exists() else walked_files(root)
    files = [
        SpaceFile(name, root / name) for name in names if in_space(name) and (root / name).is_file()
    ]
    files.append(SpaceFile(".gitattributes", SPACE_GITATTRIBUTES.encode()))
    paths = {f.path for f in files}
    fitted = {
        "README.md": lambda text: space_readme(text, paths, hardware, project_url),
        "requirements.txt": lambda text: space_requirements(text, hardware),
    }
    files = [
        SpaceFile(f.path, fitted[f.path](f.read().decode()).encode()) if f.path in fitted else f
        for f in files
    ]
    return sorted(files, key=lambda f: f.path)


def git_files(root: Path, *options: str) -> list[str]:
    listed = subprocess.run(
        ["git", "ls-files", "-z", *options], cwd=root, capture_output=True, check=True
    ).stdout
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


# --- README.md and requirements.txt, fitted to the Space ---------------------------------------------------------

# An inline link or image, [text](target "title") or ![alt](target): the README uses no other kind.
MARKDOWN_LINK = re.compile(r'(!?)\[((?:[^\[\]]|\[[^\]]*\])*)\]\(\s*([^)\s]+)(\s+"[^"]*")?\s*\)')
# Other ways to point at a file, which space_readme does not rewrite; readme_link_problems names them.
OTHER_LINKS = re.compile(
    r'(?:\b(?:src|href)\s*=\s*"([^"]+)"|^\s*\[[^\]]+\]:\s*(\S+))', re.MULTILINE
)


def local_target(target: str) -> str | None:
    """The repository path a link points to, or None for a web address, an anchor or another scheme."""
    if target.startswith(("#", "/")) or re.match(r"[A-Za-z][A-Za-z0-9+.-]*:", target):
        return None
    path = target.split("#")[0].split("?")[0]
    return path[2:] if path.startswith("./") else path


def in_paths(path: str, paths: set[str]) -> bool:
    """Whether path is a file of the set, or a folder holding one."""
    folder = path.rstrip("/") + "/"
    return path in paths or any(p.startswith(folder) for p in paths)


def space_links(text: str, paths: set[str], project_url: str | None) -> str:
    """Links and images to files the Space lacks: absolute, under project_url; without one, a link keeps only
    its text and an image goes."""

    def fitted(match: re.Match) -> str:
        image, label, target, title = (
            match.group(1),
            match.group(2),
            match.group(3),
            match.group(4) or "",
        )
        path = local_target(target)
        if path is None or in_paths(path, paths):
            return match.group(0)
        if project_url:
            return f"{image}[{label}]({project_url.rstrip('/')}/{target}{title})"
        return "" if image else label

    return MARKDOWN_LINK.sub(fitted, text)


def with_python_version(text: str, version: str) -> str:
    """README.md with its front matter's python_version set to version (added if missing)."""
    lines = text.split("\n")
    if not lines or lines[0].strip() != "---" or "---" not in [line.strip() for line in lines[1:]]:
        return text
    end = 1 + [line.strip() for line in lines[1:]].index("---")
    setting = f'python_version: "{version}"'
    found = [i for i in range(1, end) if lines[i].startswith("python_version:")]
    if found:
        lines[found[0]] = setting
    else:
        lines.insert(end, setting)
    return "\n".join(lines)


def space_readme(
    text: str, paths: set[str], hardware: str | None, project_url: str | None = None
) -> str:
    """The project's README as the Space's: no link to a file left out, and ZeroGPU's Python on ZeroGPU."""
    text = space_links(text, paths, project_url)
    return with_python_version(text, ZERO_GPU_PYTHON) if hardware == ZERO_GPU else text


def space_requirements(text: str, hardware: str | None) -> str:
    """The project's requirements.txt as the Space's: on a CPU, torch's CPU build from PyTorch's own index, pinned
    with its +cpu label so that PyPI's CUDA build of the same version cannot satisfy it."""
    if hardware not in CPU_HARDWARE:
        return text
    lines = []
    for line in text.splitlines():
        match = re.fullmatch(r"\s*torch\s*==\s*([^\s;#+]+)\s*", line)
        if match:
            lines += [
                "# A CPU Space: torch's CPU build (PyPI's is the CUDA build, gigabytes a CPU never uses)",
                f"--extra-index-url {CPU_TORCH_INDEX}",
                f"torch=={match.group(1)}+cpu",
            ]
        else:
            lines.append(line)
    return "\n".join(lines) + "\n"


def readme_link_problems(files: list[SpaceFile]) -> list[str]:
    """Each link of the Space's README.md to a file the Space lacks."""
    readme = next((f.read().decode("utf-8-sig") for f in files if f.path == "README.md"), "")
    paths = {f.path for f in files}
    targets = [m.group(3) for m in MARKDOWN_LINK.finditer(readme)]
    targets += [m.group(1) or m.group(2) for m in OTHER_LINKS.finditer(readme)]
    return [
        f"README.md links to {target}, which the Space lacks"
        for target in targets
        if (path := local_target(target)) is not None and not in_paths(path, paths)
    ]


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
            problems.append(
                f"{file.path} is {file.size:,} bytes, over the Hub's 10 MB for a plain file, and no LFS "
                "pattern in .gitattributes covers it"
            )
        elif b"\0" in file.read(BINARY_SNIFF_BYTES):
            problems.append(
                f"{file.path} is binary (the Hub refuses binary files outside LFS/Xet) and no LFS "
                "pattern in .gitattributes covers it"
            )
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
        raise FrontMatterError(
            "README.md is not in the upload set: a Space reads its settings from its front matter"
        )
    text = readme.read().decode("utf-8-sig")
    if not text.startswith("---"):
        raise FrontMatterError(
            "README.md has no front matter (a --- block at its top) to tell the Space how to run"
        )
    try:
        return SpaceCard(text).data.to_dict()
    except (ValueError, yaml.YAMLError) as err:
        raise FrontMatterError(
            f"README.md's front matter does not parse: {' '.join(str(err).split())}"
        ) from None


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
        problems.append(
            f"front matter: sdk_version {data.get('sdk_version')!r} is not the gradio version "
            f"requirements.txt pins ({gradio})"
        )
    if data.get("app_file") not in paths:
        problems.append(f"front matter: app_file {data.get('app_file')!r} is not in the upload set")
    python = data.get("python_version")
    if not isinstance(python, str) or not re.fullmatch(r"3\.\d+(\.\d+)?", python):
        problems.append(
            f'front matter: python_version must be a quoted version such as "3.11", got {python!r}'
        )
    else:
        problems += python_pin_problems(requirement_pins(requirements), python)
    for key in ("colorFrom", "colorTo"):
        if key in data and data[key] not in SPACE_COLOURS:
            problems.append(
                f"front matter: {key} {data[key]!r} is not one of {', '.join(SPACE_COLOURS)}"
            )
    if len(data.get("short_description") or "") > MAX_SHORT_DESCRIPTION:
        problems.append(
            f"front matter: short_description is over {MAX_SHORT_DESCRIPTION} characters"
        )
    return problems


def python_pin_problems(pins: dict[str, str], python: str) -> list[str]:
    """Each pin that cannot install on the Space's Python, as far as this environment knows: a pinned package
    installed here at that version whose metadata asks for another Python (one not installed is not checked)."""
    from importlib import metadata

    from packaging.specifiers import InvalidSpecifier, SpecifierSet
    from packaging.version import InvalidVersion, Version

    problems = []
    for name, pin in pins.items():
        try:
            dist = metadata.distribution(name)
            same = Version(dist.version).public == Version(pin).public
            needs = SpecifierSet(dist.metadata.get("Requires-Python") or "")
        except (metadata.PackageNotFoundError, InvalidVersion, InvalidSpecifier):
            continue
        if same and not needs.contains(python):
            problems.append(
                f"requirements.txt pins {name}=={pin}, which needs Python {needs}, but the Space runs "
                f"Python {python}"
            )
    return problems


def upload_set_problems(files: list[SpaceFile]) -> list[str]:
    """Everything the checks that need no running app find: missing files, storage, front matter, README links."""
    paths = {f.path for f in files}
    missing = [f"{name} is not in the upload set" for name in REQUIRED if name not in paths]
    return (
        missing
        + storage_problems(files)
        + front_matter_problems(files)
        + readme_link_problems(files)
    )
