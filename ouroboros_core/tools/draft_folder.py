"""What a trained draft's folder holds besides its weights (train_draft): its vocabulary
(models.DRAFT_VOCABULARY) and the target's answers its store walks (lookup.ANSWERS_FILE)."""

from __future__ import annotations

import json
from pathlib import Path


# Token ids below this always stay in the draft's vocabulary: a byte-level BPE numbers its bytes and
# its earliest (most frequent) merges first, so text unlike the training answers still finds its
# common pieces.
COMMON_IDS = 8192


def vocabulary(rows: list[dict], vocab_size: int, start: str = "") -> list[int]:
    """The draft's vocabulary (models.DRAFT_VOCABULARY): every token of the training rows, requests
    included, the COMMON_IDS first ids, and the vocabulary of the draft training goes on from. The
    draft's output layer reads these rows alone, in training as at run time."""
    from ouroboros_core.models import DRAFT_VOCABULARY

    ids = set(range(min(COMMON_IDS, vocab_size))) | {t for row in rows for t in row["ids"]}
    if start and (Path(start) / DRAFT_VOCABULARY).is_file():
        ids |= set(json.loads((Path(start) / DRAFT_VOCABULARY).read_text()))
    return sorted(ids)


def write_vocabulary(ids: list[int], out: Path) -> int:
    from ouroboros_core.models import DRAFT_VOCABULARY

    (out / DRAFT_VOCABULARY).write_text(json.dumps(ids) + "\n")
    return len(ids)


def write_answers(rows: list[dict], out: Path, start: str = "") -> int:
    """The target's answers the draft learned from, as the store lookup walks
    (lookup.AnswerStore): each answer after the last tokens of its request (the chat template's
    turn marks, which its first tokens follow), after the store of the draft training went on
    from. Returns their tokens."""
    from ouroboros_core.lookup import ANSWERS_FILE

    earlier = Path(start) / ANSWERS_FILE if start else None
    answers = json.loads(earlier.read_text())["answers"] if earlier and earlier.is_file() else []
    # rows read back from a store are in it already, and so are the answers a draft trained on
    # before (training goes on over all the samples, old and new)
    known = set(map(tuple, answers))
    answers += [
        answer
        for answer in (stored_form(row) for row in rows if not row.get("stored"))
        if tuple(answer) not in known
    ]
    about = (
        "The target's answers to the draft's training requests (ouroboros_core/tools/"
        "chat_requests.py and broad_requests.py), each after its request's last 4 tokens; written "
        "by train_draft"
    )
    text = json.dumps({"about": about, "answers": answers}, separators=(",", ":"))
    (out / ANSWERS_FILE).write_text(text + "\n")
    return sum(map(len, answers))


def stored_form(row: dict) -> list[int]:
    """A row's answer as the store holds it: after the last tokens of its request."""
    from ouroboros_core.lookup import ORDERS

    return row["ids"][max(0, row["prompt_tokens"] - ORDERS[0]) :]


def store_rows(folder: Path) -> list[dict]:
    """A draft folder's stored answers (answers.json) as training rows: each answer after the last
    tokens of its request, the only context the store kept; marked stored, so they are not stored
    twice."""
    from ouroboros_core.lookup import ANSWERS_FILE, ORDERS

    answers = json.loads((folder / ANSWERS_FILE).read_text())["answers"]
    return [
        {"id": f"stored:{i}", "ids": ids, "prompt_tokens": ORDERS[0], "stored": True}
        for i, ids in enumerate(answers)
    ]
