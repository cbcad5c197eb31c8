"""What the Hub would refuse of the upload set, or the Space fail to build or read: the checks that
need no running app (storage outside LFS, README.md's front matter and links, pins the Space's
Python cannot install).
"""

from __future__ import annotations

import re
from fnmatch import fnmatchcase
from pathlib import PurePosixPath

import yaml
from huggingface_hub import SpaceCard

from .space_files import MARKDOWN_LINK, SpaceFile, in_paths, local_target

REQUIRED = ("app.py", "requirements.txt", "README.md", ".gitattributes")
MAX_PLAIN_BYTES = 10 * 1024 * 1024  # the Hub refuses a file above this outside LFS/Xet
BINARY_SNIFF_BYTES = 8000  # git calls a file binary when a NUL byte lies in its first 8000 bytes
SPACE_COLOURS = ("red", "yellow", "green", "blue", "indigo", "purple", "pink", "gray")
MAX_SHORT_DESCRIPTION = 60
# Other ways to point at a file, which space_readme does not rewrite; readme_link_problems names
# them.
OTHER_LINKS = re.compile(
    r'(?:\b(?:src|href)\s*=\s*"([^"]+)"|^\s*\[[^\]]+\]:\s*(\S+))', re.MULTILINE
)


class FrontMatterError(ValueError):
    """README.md's front matter is missing or does not parse; the message says which."""


def lfs_rules(gitattributes: str) -> list[tuple[str, bool]]:
    """(pattern, stored in LFS?) for each line that sets or unsets `filter`, in order: a later match
    wins."""
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
    """gitattributes matching, closely enough for LFS lists: a pattern without a slash matches the
    file's name at any depth; one with a slash matches the whole path from the root, `**/` standing
    for any folders."""
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
    """Each file the Hub would refuse as a plain git file (over 10 MB, or binary: a NUL byte early
    on, git's own test) that no LFS pattern of the set's .gitattributes covers."""
    attributes = next((f.read().decode() for f in files if f.path == ".gitattributes"), "")
    rules = lfs_rules(attributes)
    problems = []
    for file in files:
        if stored_in_lfs(file.path, rules):
            continue
        if file.size > MAX_PLAIN_BYTES:
            problems.append(
                f"{file.path} is {file.size:,} bytes, over the Hub's 10 MB for a plain file, "
                "and no LFS pattern in .gitattributes covers it"
            )
        elif b"\0" in file.read(BINARY_SNIFF_BYTES):
            problems.append(
                f"{file.path} is binary (the Hub refuses binary files outside LFS/Xet) and no LFS "
                "pattern in .gitattributes covers it"
            )
    return problems


def requirement_pins(text: str) -> dict[str, str]:
    """name -> version for each `name==version` line of a requirements file (names lower-case, - for
    _)."""
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
    """What is wrong with README.md's front matter for this Space (the Hub's own validation needs
    the network)."""
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
    """Each pin that cannot install on the Space's Python, as far as this environment knows: a
    pinned package installed here at that version whose metadata asks for another Python (one not
    installed is not checked)."""
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
                f"requirements.txt pins {name}=={pin}, which needs Python {needs}, "
                f"but the Space runs Python {python}"
            )
    return problems


def upload_set_problems(files: list[SpaceFile]) -> list[str]:
    """Everything the checks that need no running app find: missing files, storage, front matter,
    README links."""
    paths = {f.path for f in files}
    missing = [f"{name} is not in the upload set" for name in REQUIRED if name not in paths]
    return (
        missing
        + storage_problems(files)
        + front_matter_problems(files)
        + readme_link_problems(files)
    )


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
