"""What the rehearsal found: /race's answer and the app's log checked, and the summary it prints
(space_rehearsal.py starts the Space and races).
"""

from __future__ import annotations

import re
import sys
from dataclasses import dataclass

from .space_checks import front_matter
from .space_files import SpaceFile

LOG_TAIL_CHARS = 6000


@dataclass(frozen=True)
class Start:
    """What one start of the app measured, in seconds from launching `python app.py`."""

    page_s: float  # the first HTTP 200 on /
    answer_s: float  # the first race's full answer (it waits for the pair if the page came first)
    result: dict  # that answer: {"vanilla": {...}, "ouroboros": {..., "verdict": {...}}}
    log: str  # the app's stdout and stderr


def race_problems(result) -> list[str]:
    """What is wrong with /race's answer: both lanes present, the same tokens, verdict identical."""
    if not isinstance(result, dict) or not {"vanilla", "ouroboros"} <= result.keys():
        return [f"/race answered {str(result)[:200]!r}, not the two lanes"]
    vanilla, ouroboros = result["vanilla"].get("token_ids"), result["ouroboros"].get("token_ids")
    problems = []
    if not vanilla:
        problems.append("the vanilla lane wrote no tokens")
    if vanilla != ouroboros:
        problems.append(f"the lanes differ: vanilla {vanilla}, ouroboros {ouroboros}")
    kind = (result["ouroboros"].get("verdict") or {}).get("kind")
    if kind != "identical":
        problems.append(f"the Ouroboros lane's verdict is {kind!r}, not 'identical'")
    return problems


# A progress bar (tqdm's, as transformers loads weights), each redraw begun by a carriage return: a
# bar another thread draws can land inside a traceback, even inside one of its lines.
PROGRESS_BAR = re.compile(r"\n[^\n|]*\d+%\|[^|\n]*\|[^\[\n]*\[[^\]\n]*\]")


def log_lines(log: str) -> list[str]:
    """The log's lines with progress bars taken out, each with the carriage return that began it (a
    file read as text reads it as a line break), so a line a bar cut in two is whole again; and
    without blank ones (a traceback holds none)."""
    text = "\n" + log.replace("\r\n", "\n").replace("\r", "\n")
    return [line for line in PROGRESS_BAR.sub("", text).split("\n") if line.strip()]


def log_tracebacks(log: str) -> tuple[list[str], list[tuple[str, str]]]:
    """The closing line of each traceback in the app's log: those raised, and, with the line that
    names where, those Python ignored (an error in a __del__)."""
    raised, ignored = [], []
    lines = log_lines(log)
    for i, line in enumerate(lines):
        if line.startswith("Traceback (most recent call last)"):
            end = next(
                (j for j in range(i + 1, len(lines)) if not lines[j].startswith(" ")), len(lines)
            )
            closing = lines[end] if end < len(lines) else "(the log ends inside it)"
            if i and lines[i - 1].startswith("Exception ignored in"):
                ignored.append((lines[i - 1], closing))
            else:
                raised.append(closing)
    return raised, ignored


def log_problems(log: str) -> list[str]:
    return [f"the app's log holds a traceback: {closing}" for closing in log_tracebacks(log)[0]]


def print_tail(what: str, text: str) -> None:
    tail = text[-LOG_TAIL_CHARS:]
    print(f"--- {what} (last {len(tail)} characters) ---\n{tail.rstrip()}\n--- end ---", flush=True)


def python_note(files: list[SpaceFile]) -> str:
    here = f"{sys.version_info.major}.{sys.version_info.minor}"
    space = str(front_matter(files).get("python_version"))
    note = f"Python {sys.version.split()[0]}"
    return (
        note
        if space == here
        else f"{note}, but the Space runs Python {space}: a rehearsal, not a replica"
    )


def summary(
    files: list[SpaceFile], build: list[str], install_s: float, start: Start, problems: list[str]
) -> str:
    ouroboros = start.result.get("ouroboros", {}) if isinstance(start.result, dict) else {}
    verdict = (ouroboros.get("verdict") or {}).get("kind")
    return (
        f"Rehearsal of the Space's start ({python_note(files)}):\n"
        f"  install  {install_s:7.1f} s  "
        f"requirements.txt, then the Space build's {' '.join(build)}\n"
        f"  page     {start.page_s:7.1f} s  from starting python app.py to HTTP 200 on /\n"
        f"  race     {start.answer_s:7.1f} s  "
        "from starting python app.py to the first race's answer "
        f"({len(ouroboros.get('token_ids') or [])} tokens, verdict {verdict!r})\n"
        "  checks   upload set, LFS coverage, front matter: ok; "
        "identical lanes, no traceback in the log: "
        f"{'FAILED' if problems else 'ok'}" + ignored_note(start.log)
    )


def ignored_note(log: str) -> str:
    """A note on the exceptions Python ignored (not failures: the app went on). Gradio's discarded
    event loops were one (ui.threads.GradioLoops closes them now)."""
    closings = [closing for _, closing in log_tracebacks(log)[1]]
    if not closings:
        return ""
    return f"\n  note     the log holds {len(closings)} exception(s) Python ignored: {closings[0]}"
