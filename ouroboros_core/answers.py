"""The target's own earlier answers as drafts (retrieval, as in REST: He et al. 2023).

A small instruct model writes the same phrases in answer after answer ("Here's a Python function
that", "This function takes ... as input and returns"). A draft folder may carry the target's
answers to its training requests (ANSWERS_FILE, the data its draft learned from); the store reads
them into n-gram tables, and `walk` continues a text the way those answers most often went on: after
the text's last 4 tokens where the answers hold them, else its last 3, else 2. Context lookup
(lookup.py) copies from the request's own text; this looks further, at the answers the target gave
to other requests, and costs no forward.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

ANSWERS_FILE = "answers.json"  # in a draft's folder: {"about": ..., "answers": [[token ids]]}
ORDERS = (4, 3, 2)  # the text's last tokens a continuation is keyed on, longest first


class AnswerStore:
    """Per order n, the token that most often followed each run of n tokens in the answers."""

    def __init__(self, answers: list[list[int]]):
        self.next: dict[int, dict[tuple[int, ...], int]] = {}
        for n in ORDERS:
            # (run, next token) pairs counted; the most frequent first, ties in the order first seen
            pairs = Counter(
                (tuple(answer[i - n : i]), answer[i])
                for answer in answers
                for i in range(n, len(answer))
            )
            table = self.next[n] = {}
            for (run, token), _ in pairs.most_common():
                table.setdefault(run, token)
        self.answers = len(answers)
        self.tokens = sum(map(len, answers))

    def walk(self, sequence: list[int], length: int) -> tuple[list[int], int]:
        """Up to `length` tokens after `sequence`, each the one the answers most often wrote after
        the longest run of the tokens before it that they hold; and how many tokens keyed the first
        one (0: none found)."""
        tail = list(sequence[-ORDERS[0] :])
        walked, matched = [], 0
        while len(walked) < length:
            for n in ORDERS:
                token = self.next[n].get(tuple(tail[-n:])) if len(tail) >= n else None
                if token is not None:
                    break
            else:
                break
            matched = matched or n
            walked.append(token)
            tail = tail[1:] + [token]
        return walked, matched


def read_store(path: Path, vocab_size: int) -> AnswerStore:
    """A folder's ANSWERS_FILE as a store; LoadError where it is not a list of token-id lists."""
    from .load_report import LoadError

    try:
        answers = json.loads(path.read_text())["answers"]
    except (OSError, ValueError, KeyError, TypeError) as err:
        raise LoadError(f"{path}: not a JSON object with a list of answers ({err})") from err
    if not isinstance(answers, list) or not all(
        isinstance(answer, list) and all(isinstance(t, int) and 0 <= t < vocab_size for t in answer)
        for answer in answers
    ):
        raise LoadError(f"{path}: answers must be lists of token ids from 0 to {vocab_size - 1}")
    return AnswerStore(answers)
