"""The target's stored answers as drafts (lookup.AnswerStore, lookup.StoredLookup): the store
walks what they most often wrote next, loads from a draft's folder, and a race that walks it stays
the target's own decoding."""

from __future__ import annotations

import json
import random
import shutil
from collections import Counter

import pytest
import torch

from conftest import reference_ids
from ouroboros_core import LoadError, load_engine
from ouroboros_core.lookup import ANSWERS_FILE, ORDERS, AnswerStore, read_store
from ouroboros_core.models import ASSETS, load_model

PROMPT = 'def count_words(text):\n    """Return how many words the text holds."""\n'
N = 48


def test_the_walk_follows_the_longest_run_of_last_tokens_the_answers_hold():
    store = AnswerStore([[1, 2, 3, 4, 5, 6], [9, 3, 4, 7], [8, 3, 4, 7], [0, 2, 3, 4, 5, 6]])
    # after 2 3 4 the answers wrote 5; after 3 4 alone, 5 twice and 7 twice: the longer run keys it
    assert store.walk([7, 2, 3, 4], 3) == ([5, 6], 3)
    # 5 3 4 unseen; after 3 4 the tie goes to 5, seen first
    assert store.walk([5, 3, 4], 1) == ([5], 2)
    assert AnswerStore([[3, 4, 7], [3, 4, 5], [3, 4, 7]]).walk([3, 4], 1) == ([7], 2)  # the most
    assert store.walk([1, 2, 3, 4], 2) == ([5, 6], 4)
    assert store.walk([6], 4) == ([], 0)  # nothing followed a lone 6, and one token keys nothing
    assert store.walk([42, 43], 4) == ([], 0)


def counted_table(answers: list[list[int]], n: int) -> dict[tuple[int, ...], int]:
    """The store's table for runs of n tokens, written the plain way: every (run, next token) pair
    counted, the most counted first, a tie to the pair seen first."""
    pairs = Counter((tuple(a[i - n : i]), a[i]) for a in answers for i in range(n, len(a)))
    table: dict[tuple[int, ...], int] = {}
    for (run, token), _ in pairs.most_common():
        table.setdefault(run, token)
    return table


def test_the_store_keeps_for_every_run_the_token_counted_most_and_first_seen_on_a_tie():
    rng = random.Random(7)
    for _ in range(300):
        vocab = rng.choice([2, 3, 5, 300])
        answers = [
            [rng.randrange(vocab) for _ in range(rng.randrange(0, 14))]
            for _ in range(rng.randrange(0, 8))
        ]
        store = AnswerStore(answers)
        for n in ORDERS:
            table = counted_table(answers, n)
            unseen = [tuple(rng.randrange(-1, vocab + 2) for _ in range(n)) for _ in range(20)]
            for run in list(table) + unseen:
                assert store.next[n].get(list(run)) == table.get(run), (answers, run)
    assert store.tokens == sum(map(len, answers)) and store.answers == len(answers)


def test_a_store_file_that_is_not_lists_of_token_ids_is_refused(tmp_path):
    path = tmp_path / ANSWERS_FILE
    for text in ("[1, 2]", '{"answers": [[1, 2], [3, "a"]]}', '{"answers": [[1, 99]]}', "{"):
        path.write_text(text)
        with pytest.raises(LoadError, match="answers|JSON"):
            read_store(path, vocab_size=50)


@pytest.fixture(scope="module")
def stored(tmp_path_factory):
    """The embedded draft's folder with a store holding the target's own answer to PROMPT."""
    folder = tmp_path_factory.mktemp("stored") / "draft"
    shutil.copytree(ASSETS / "models" / "draft", folder)
    target = load_model(ASSETS / "models" / "target", torch.device("cpu"), torch.float32, False)
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(ASSETS / "models" / "target")
    prompt_ids = tokenizer(PROMPT)["input_ids"]
    answer = reference_ids(target, tokenizer, PROMPT, N)
    (folder / ANSWERS_FILE).write_text(json.dumps({"answers": [prompt_ids[-4:] + answer]}))
    return folder, answer


def test_the_loader_reads_the_folders_store(stored):
    folder, answer = stored
    model = load_model(folder, torch.device("cpu"), torch.float32, False)
    assert (model.answer_store.answers, model.answer_store.tokens) == (1, 4 + len(answer))


def test_walking_the_store_keeps_every_method_the_targets_own_and_saves_forwards(stored):
    folder, answer = stored
    engine = load_engine(str(ASSETS / "models" / "target"), str(folder), "cpu")
    without = engine.generate(PROMPT, "ouroboros", N, stored_answers=0)
    walked = engine.generate(PROMPT, "ouroboros", N, stored_answers=8)
    assert walked.token_ids == without.token_ids == answer
    assert walked.stats.target_forwards < without.stats.target_forwards
    options = dict(temperature=0.8, top_p=0.95, seed=2)
    vanilla = engine.generate(PROMPT, "vanilla", N, **options)
    assert engine.generate(PROMPT, "ouroboros", N, **options).token_ids == vanilla.token_ids


def test_train_draft_stores_each_answer_after_its_requests_last_tokens(tmp_path):
    from ouroboros_core.tools.train_draft import write_answers

    rows = [
        {"ids": [5, 6, 7, 8, 9, 1, 2, 3], "prompt_tokens": 5},  # request 5-9, answer 1 2 3
        {"ids": [4, 6, 7, 8, 9, 1, 2, 4], "prompt_tokens": 5},
    ]
    assert write_answers(rows, tmp_path) == 14
    store = read_store(tmp_path / ANSWERS_FILE, vocab_size=10)
    assert store.walk([0, 6, 7, 8, 9], 3) == ([1, 2, 3], 4)  # the chat turn's marks key the start
    # going on from that draft over the same samples and one more: only the new answer is added
    more = rows + [{"ids": [3, 6, 7, 8, 9, 2, 2], "prompt_tokens": 5}]
    again = tmp_path / "again"
    again.mkdir()
    assert write_answers(more, again, start=str(tmp_path)) == 14 + 6
    assert read_store(again / ANSWERS_FILE, vocab_size=10).answers == 3


def test_going_on_with_the_store_learns_a_stored_answer_the_samples_hold_once(tmp_path):
    from ouroboros_core.tools.train_draft import DraftTraining, training_rows, write_answers

    old = {"ids": [5, 6, 7, 8, 9, 1, 2, 3], "prompt_tokens": 5, "temperature": 0.0}
    code = {"ids": [4, 6, 7, 8, 9, 4, 4], "prompt_tokens": 5, "temperature": 0.0}
    new = {"ids": [3, 6, 7, 8, 9, 2, 2], "prompt_tokens": 5, "temperature": 0.0}
    start = tmp_path / "start"
    start.mkdir()
    write_answers([old, code], start)
    samples = tmp_path / "samples.jsonl"
    samples.write_text("".join(json.dumps(row) + "\n" for row in (old, new)))
    cfg = DraftTraining(start=str(start), with_store=True)
    rows = training_rows(cfg, [samples])
    # the old answer once, with its whole request; the stored code answer after its last tokens
    assert [row["ids"] for row in rows] == [old["ids"], new["ids"], [6, 7, 8, 9, 4, 4]]
    assert [row["ids"] for row in training_rows(DraftTraining(), [samples])] == [
        old["ids"],
        new["ids"],
    ]


def test_train_draft_answers_only_stores_every_samples_file_and_trains_nothing(tmp_path, capsys):
    from ouroboros_core.tools.train_draft import main

    files = []
    for name, rows in (
        ("a.jsonl", [{"ids": [5, 6, 7, 8, 9, 1, 2, 3], "prompt_tokens": 5}]),
        ("b.jsonl", [{"ids": [4, 6, 7, 8, 9, 1, 2, 4], "prompt_tokens": 5}] * 2),
    ):
        files.append(tmp_path / name)
        files[-1].write_text("".join(json.dumps(row) + "\n" for row in rows))
    draft = tmp_path / "draft"
    with pytest.raises(SystemExit):  # no draft in the folder yet
        main(["--answers-only", "--samples", *map(str, files), "--out", str(draft)])
    assert "no draft there" in capsys.readouterr().err
    draft.mkdir()
    (draft / "config.json").write_text("{}")
    main(["--answers-only", "--samples", *map(str, files), "--out", str(draft)])
    assert sorted(path.name for path in draft.iterdir()) == [ANSWERS_FILE, "config.json"]
    store = read_store(draft / ANSWERS_FILE, vocab_size=10)
    assert store.answers == 3 and store.walk([0, 6, 7, 8, 9], 3) == ([1, 2, 4], 4)
    with pytest.raises(SystemExit):  # training needs the held-out answers
        main(["--samples", str(files[0]), "--out", str(draft)])
    assert "--heldout" in capsys.readouterr().err
