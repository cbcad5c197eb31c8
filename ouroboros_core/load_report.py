"""What loading a pair tells its caller: the stages it reports as it goes, and the error that says
what to do when it cannot."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass


class LoadError(RuntimeError):
    """A model could not be found or loaded; the message says what to do about it."""


@dataclass(frozen=True)
class LoadStage:
    """How far loading a pair has got, for a page or a log that shows it while it happens."""

    # "download", "load" or "warm up" (the last one the caller's: load_engine never warms up)
    stage: str
    text: str  # one line for a person: what is happening, with its counts
    done: int | None = None  # files or bytes done so far, where known
    total: int | None = None  # of this many


Report = Callable[[LoadStage], None]


def ignore(stage: LoadStage) -> None:
    """The report of a caller that does not watch the loading."""


def size_text(size: int) -> str:
    for unit, scale in (("KiB", 2**10), ("MiB", 2**20)):
        if round(size / scale) < 1024:  # the unit whose rounded figure stays under 1024
            return f"{size / scale:.0f} {unit}"
    return f"{size / 2**30:.1f} GiB"
