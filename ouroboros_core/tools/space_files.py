"""What goes up to the Space: the upload set, and README.md and requirements.txt fitted to it
(space_checks.py holds what the Hub would refuse of it).

`upload_set` is the one list of files that the deploy, its dry run and the rehearsal all use: what
the Space runs and nothing else, from what git tracks (untracked files never go up), with a
generated .gitattributes and the project's README.md and requirements.txt fitted to the Space: links
only to what it has, torch's CPU build on a CPU, the Python that ZeroGPU runs.
"""

from __future__ import annotations

import re
import subprocess
from dataclasses import dataclass
from pathlib import Path, PurePosixPath


ROOT = Path(__file__).resolve().parents[2]
SPACE_PARTS = ("app.py", "ui/", "ouroboros_core/", "assets/", "requirements.txt", "README.md")
LEFT_OUT = ("ouroboros_core/tools/",)  # the workbench: neither app.py nor ui/ imports it
# PyPI's Linux torch is the CUDA build, with NVIDIA's libraries as packages: gigabytes a CPU Space
# never uses. None: the deploy leaves it, and a new Space gets cpu-basic.
CPU_HARDWARE = (None, "cpu-basic", "cpu-upgrade")
CPU_TORCH_INDEX = "https://download.pytorch.org/whl/cpu"
ZERO_GPU = "zero-a10g"
# the one Python ZeroGPU's documentation names (huggingface.co/docs/hub/spaces-zerogpu)
ZERO_GPU_PYTHON = "3.10.13"

# The Space's .gitattributes: the list the Hub gives every new repository, and images, since the Hub
# also refuses binary files of any size outside LFS/Xet. This repository's own .gitattributes holds
# the same patterns (a test keeps them equal); the deploy writes them, so a Space gets them even
# from a checkout that changed its own.
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


@dataclass(frozen=True)
class SpaceFile:
    """One file of the Space."""

    # where it lands in the Space, a POSIX path such as "assets/models/draft/model.safetensors"
    path: str
    # the checkout's file, or the content itself (the generated .gitattributes)
    source: Path | bytes

    @property
    def size(self) -> int:
        return len(self.source) if isinstance(self.source, bytes) else self.source.stat().st_size

    def read(self, limit: int = -1) -> bytes:
        if isinstance(self.source, bytes):
            return self.source if limit < 0 else self.source[:limit]
        with self.source.open("rb") as handle:
            return handle.read(limit)


# --- the upload set -------------------------------------------------------------------------------


def in_space(name: str) -> bool:
    """Whether a repository path belongs on the Space (the .gitattributes is generated, never taken
    from here)."""
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
    """Every file the Space gets, sorted by path: from `git ls-files` in a checkout (so untracked
    files never go up), else from a walk of the folder; filtered by SPACE_PARTS; plus the generated
    .gitattributes. README.md and requirements.txt are fitted to the Space (space_readme,
    space_requirements) for `hardware`."""
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
    """Files that would belong on the Space but git does not track, so the upload set leaves them
    out."""
    if not (root / ".git").exists():
        return []
    return [name for name in git_files(root, "--others", "--exclude-standard") if in_space(name)]


# --- README.md and requirements.txt, fitted to the Space ------------------------------------------

# An inline link or image, [text](target "title") or ![alt](target): the README uses no other kind.
MARKDOWN_LINK = re.compile(r'(!?)\[((?:[^\[\]]|\[[^\]]*\])*)\]\(\s*([^)\s]+)(\s+"[^"]*")?\s*\)')


def local_target(target: str) -> str | None:
    """The repository path a link points to, or None for a web address, an anchor or another
    scheme."""
    if target.startswith(("#", "/")) or re.match(r"[A-Za-z][A-Za-z0-9+.-]*:", target):
        return None
    path = target.split("#")[0].split("?")[0]
    return path[2:] if path.startswith("./") else path


def in_paths(path: str, paths: set[str]) -> bool:
    """Whether path is a file of the set, or a folder holding one."""
    folder = path.rstrip("/") + "/"
    return path in paths or any(p.startswith(folder) for p in paths)


def missing_images(text: str, paths: set[str]) -> list[str]:
    """The README's local images (in order, once each) that the Space's files lack."""
    found = [
        local_target(match.group(3))
        for match in MARKDOWN_LINK.finditer(text)
        if match.group(1) and local_target(match.group(3))
    ]
    return list(dict.fromkeys(path for path in found if not in_paths(path, paths)))


def space_links(text: str, paths: set[str], project_url: str | None) -> str:
    """Links and images to files the Space lacks: absolute, under project_url; without one, a link
    keeps only its text and an image goes."""

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
    """The project's README as the Space's: no link to a file left out, and ZeroGPU's Python on
    ZeroGPU."""
    text = space_links(text, paths, project_url)
    return with_python_version(text, ZERO_GPU_PYTHON) if hardware == ZERO_GPU else text


def space_requirements(text: str, hardware: str | None) -> str:
    """The project's requirements.txt as the Space's: on a CPU, torch's CPU build from PyTorch's own
    index, pinned with its +cpu label so that PyPI's CUDA build of the same version cannot satisfy
    it."""
    if hardware not in CPU_HARDWARE:
        return text
    lines = []
    for line in text.splitlines():
        match = re.fullmatch(r"\s*torch\s*==\s*([^\s;#+]+)\s*", line)
        if match:
            lines += [
                "# A CPU Space: torch's CPU build "
                "(PyPI's is the CUDA build, gigabytes a CPU never uses)",
                f"--extra-index-url {CPU_TORCH_INDEX}",
                f"torch=={match.group(1)}+cpu",
            ]
        else:
            lines.append(line)
    return "\n".join(lines) + "\n"
