"""The demo on a Hugging Face Space in one command, and its start rehearsed here first.

    python3 -m ouroboros_core.tools.space deploy OWNER/NAME [--preset P] [--var KEY=VALUE]...
        [--hardware H] [--private] [--project-url URL] [--dry-run] [--deploy-anyway]
    python3 -m ouroboros_core.tools.space rehearse [--venv PATH]

Deploy, dry run and rehearsal all use one set of files (space_files.upload_set). Before anything
goes up, the plan (space_plan.py) says whether the pair fits the hardware's memory (an estimate from
parameter counts), whether a model is gated and what the hardware costs; a pair that cannot fit, or
whose folder the upload lacks, is refused unless --deploy-anyway. The deploy goes through
huggingface_hub's HfApi with the token it finds (HF_TOKEN or `hf auth login`); the rehearsal
(space_rehearsal.py) starts the set alone, as a Space does, and races once.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

# huggingface_hub's HTTP client: a connection failure is its error, not an HfHubHTTPError
import httpx2
from huggingface_hub import (
    CommitOperationAdd,
    CommitOperationDelete,
    HfApi,
    SpaceHardware,
    get_token,
)
from huggingface_hub.errors import HFValidationError
from huggingface_hub.utils import validate_repo_id

from .space_checks import lfs_rules, stored_in_lfs, upload_set_problems
from .space_files import (
    ROOT,
    SPACE_GITATTRIBUTES,
    SpaceFile,
    missing_images,
    untracked_in_space,
    upload_set,
)

# The plan's hardware table and parameter estimate stay reachable as space.SPACE_HARDWARE,
# space.Hardware and space.parameters (explicit re-exports), where callers found them before the
# plan's checks moved to space_plan.py.
from .space_plan import (
    DTYPE_BYTES,
    SPACE_HARDWARE as SPACE_HARDWARE,
    Hardware as Hardware,
    hardware_text,
    parameters as parameters,
    plan_checks,
)

APP_VARIABLES = (
    "OUROBOROS_PRESET",
    "OUROBOROS_TARGET",
    "OUROBOROS_DRAFT",
    "OUROBOROS_DEVICE",
    "OUROBOROS_DTYPE",
    "OUROBOROS_MAX_NEW_TOKENS",
    "OUROBOROS_MAX_PROMPT_CHARS",
    "OUROBOROS_QUEUE_SIZE",
    "OUROBOROS_SESSION_POOL_SIZE",
    "OUROBOROS_THREADS",
)
HARDWARE = tuple(flavor.value for flavor in SpaceHardware)
LOGIN_HINT = "set HF_TOKEN to a token with write access, or run `hf auth login`"


class DeployError(Exception):
    """A deploy that cannot go ahead, with the sentence that says why."""


def space_variables(preset: str | None, pairs: list[str]) -> dict[str, str]:
    """The Space's variables from --preset and each --var KEY=VALUE, keys limited to what the app
    reads."""
    from ..models import DEFAULT_PRESET, presets

    variables = {"OUROBOROS_PRESET": preset} if preset else {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or key not in APP_VARIABLES:
            raise DeployError(
                f"--var takes KEY=VALUE with KEY one of {', '.join(APP_VARIABLES)}; got {pair!r}"
            )
        if variables.get(key, value) != value:
            raise DeployError(f"{key} is given twice, as {variables[key]!r} and {value!r}")
        variables[key] = value
    known = presets()
    if variables.get("OUROBOROS_PRESET", DEFAULT_PRESET) not in known:
        raise DeployError(
            f"preset {variables['OUROBOROS_PRESET']!r} is not one of {', '.join(known)}"
        )
    if variables.get("OUROBOROS_DTYPE", "float32") not in DTYPE_BYTES:
        raise DeployError(
            f"OUROBOROS_DTYPE takes one of {', '.join(DTYPE_BYTES)}; "
            f"got {variables['OUROBOROS_DTYPE']!r}"
        )
    if bool(variables.get("OUROBOROS_TARGET")) != bool(variables.get("OUROBOROS_DRAFT")):
        raise DeployError(
            "OUROBOROS_TARGET and OUROBOROS_DRAFT go together: set both, to folders or Hub ids"
        )
    return variables


def check_hardware(name: str | None) -> str | None:
    if name is not None and name not in HARDWARE:
        raise DeployError(
            f"--hardware {name!r} is not a Space hardware; one of: {', '.join(HARDWARE)}"
        )
    return name


def space_url(repo_id: str) -> str:
    return f"https://huggingface.co/spaces/{repo_id}"


def plan_lines(
    repo_id: str,
    files: list[SpaceFile],
    variables: dict[str, str],
    hardware: str | None,
    private: bool,
) -> list[str]:
    """The deploy's plan, as the dry run prints it: every file with its size, the variables, the
    hardware."""
    rules = lfs_rules(SPACE_GITATTRIBUTES)
    lines = [
        f"Space: {space_url(repo_id)} "
        f"(if new, {'private' if private else 'public'}; if not, as it is)",
        "Files (one commit; files on the Space outside this list are deleted in it):",
    ]
    lines += [
        f"  {f.size:>12,}  {f.path}{'  (LFS)' if stored_in_lfs(f.path, rules) else ''}"
        for f in files
    ]
    total = sum(f.size for f in files)
    lines.append(f"  {total:>12,}  bytes in {len(files)} files ({total / 1e6:.1f} MB)")
    lines.append(
        "Variables: " + (", ".join(f"{k}={v}" for k, v in variables.items()) or "none set")
    )
    lines.append(f"Hardware: {hardware_text(hardware)}")
    return lines


def hub_call(step: str, call, *args, **kwargs):
    """One Hub request; its failure becomes a DeployError whose one line says which step failed and
    why."""
    try:
        return call(*args, **kwargs)
    except (httpx2.HTTPError, HFValidationError, OSError) as err:
        first_line = (str(err).strip().splitlines() or [type(err).__name__])[0]
        raise DeployError(f"{step} failed: {first_line}") from None


def deploy(
    api: HfApi,
    repo_id: str,
    files: list[SpaceFile],
    variables: dict[str, str],
    hardware: str | None,
    private: bool,
    message: str,
) -> str:
    """Create the Space (or keep it), set its variables, replace its files with the set in one
    commit, and request its hardware. Returns the Space's URL."""
    hub_call(
        f"creating the Space {repo_id}",
        api.create_repo,
        repo_id,
        repo_type="space",
        space_sdk="gradio",
        exist_ok=True,
        private=private or None,
    )
    for (
        key,
        value,
    ) in variables.items():  # before the files, so the build they start already sees them
        hub_call(f"setting {key}", api.add_space_variable, repo_id, key, value)
    present = hub_call("listing the Space's files", api.list_repo_files, repo_id, repo_type="space")
    paths = {f.path for f in files}
    operations = [CommitOperationDelete(path_in_repo=name) for name in sorted(set(present) - paths)]
    operations += [
        CommitOperationAdd(
            path_in_repo=f.path,
            path_or_fileobj=f.source if isinstance(f.source, bytes) else str(f.source),
        )
        for f in files
    ]
    hub_call(
        "uploading the files",
        api.create_commit,
        repo_id,
        operations,
        commit_message=message,
        repo_type="space",
    )
    if hardware:
        hub_call(f"requesting {hardware}", api.request_space_hardware, repo_id, hardware)
    return space_url(repo_id)


def source_revision(root: Path = ROOT) -> str:
    done = subprocess.run(
        ["git", "describe", "--always", "--dirty"], cwd=root, capture_output=True, text=True
    )
    return done.stdout.strip() if done.returncode == 0 else "a folder outside git"


def run_deploy(args: argparse.Namespace) -> None:
    try:
        validate_repo_id(args.repo_id)
    except HFValidationError as err:
        raise DeployError(f"{args.repo_id!r} is not a Space id (OWNER/NAME): {err}") from None
    variables = space_variables(args.preset, args.var)
    hardware = check_hardware(args.hardware)
    files = upload_set(ROOT, hardware, args.project_url)
    checks = plan_checks(variables, hardware, {f.path for f in files})
    print(
        "\n".join(plan_lines(args.repo_id, files, variables, hardware, args.private) + checks.lines)
    )
    overridden = checks.refusals if args.deploy_anyway else []
    for warning in checks.warnings + [f"{refusal} (deploying anyway)" for refusal in overridden]:
        print(f"warning: {warning}")
    if not args.project_url:
        readme = (ROOT / "README.md").read_text()
        for image in missing_images(readme, {f.path for f in files}):
            print(
                f"warning: the README's image {image} is not in the Space, so its page leaves it "
                "out; --project-url URL links it from where the project lives"
            )
    for name in untracked_in_space(ROOT):
        print(f"warning: {name} is not tracked by git, so it is left out; git add it to deploy it")
    problems = upload_set_problems(files)
    if problems:
        raise DeployError(
            "the Hub would refuse this upload, or the Space fail to build or read it:\n  "
            + "\n  ".join(problems)
        )
    if checks.refusals and not args.deploy_anyway:
        raise DeployError(
            "the Space could not run this (--deploy-anyway deploys it all the same):\n  "
            + "\n  ".join(checks.refusals)
        )
    if args.dry_run:
        print("Dry run: nothing was sent to the Hub.")
        return
    if get_token() is None:
        raise DeployError(f"no Hugging Face token: {LOGIN_HINT}")
    url = deploy(
        HfApi(),
        args.repo_id,
        files,
        variables,
        hardware,
        args.private,
        f"Deploy Ouroboros race from {source_revision(ROOT)}",
    )
    print(f"Deployed: {url} (it builds and starts on the Hub now)")


def add_deploy_command(commands) -> None:
    """The deploy command and its options, on the top parser's subparsers."""
    push = commands.add_parser(
        "deploy", help="create or update the Space with the upload set, in one commit"
    )
    push.add_argument("repo_id", metavar="OWNER/NAME")
    push.add_argument(
        "--preset", help="sets the Space's OUROBOROS_PRESET (see ouroboros_core/presets.json)"
    )
    push.add_argument(
        "--var",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help=f"sets a Space variable the app reads ({', '.join(APP_VARIABLES)}); repeatable",
    )
    push.add_argument(
        "--hardware", help=f"requests this hardware ({', '.join(HARDWARE)}); default: left as is"
    )
    push.add_argument(
        "--private",
        action="store_true",
        help="makes a new Space private (an existing one keeps its visibility)",
    )
    push.add_argument(
        "--project-url",
        metavar="URL",
        help="where the project's files are on the web (such as "
        "https://github.com/OWNER/REPO/blob/main): "
        "README links to files the Space lacks point there; "
        "without it, those links keep only their text and such images go",
    )
    push.add_argument("--dry-run", action="store_true", help="prints the plan and touches nothing")
    push.add_argument(
        "--deploy-anyway",
        action="store_true",
        help="deploys a pair the plan says the Space could not "
        "run (too big for the hardware's memory, or a folder the upload lacks), as a warning",
    )


def parser() -> argparse.ArgumentParser:
    top = argparse.ArgumentParser(
        prog="python3 -m ouroboros_core.tools.space", description=__doc__.split("\n")[0]
    )
    commands = top.add_subparsers(dest="command", required=True)
    add_deploy_command(commands)
    rehearse = commands.add_parser(
        "rehearse", help="start the upload set as a Space does, here, and race once"
    )
    rehearse.add_argument(
        "--venv",
        type=Path,
        help="a virtual environment to make once and reuse (default: a fresh one each time)",
    )
    return top


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    try:
        if args.command == "deploy":
            run_deploy(args)
            return 0
        from .space_rehearsal import rehearse  # the slow half, loaded only for its command

        return rehearse(args.venv)
    except DeployError as err:
        print(f"error: {err}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
