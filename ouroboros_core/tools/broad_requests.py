r"""A broad set of requests a visitor might type, built offline, split into training and held-out.

    python3 -m ouroboros_core.tools.broad_requests --out data/broad

Thirteen kinds (KINDS) besides the code kinds of chat_requests: writing, role-play, reasoning,
maths, coding, extraction, science, humanities, translation, summarization, factual questions,
maths word problems and answers from a passage (requests-train.jsonl, requests-heldout.jsonl).
Each kind has several phrasings; subjects come from broad_words' lists, numbers and names are
drawn, and passages are paragraphs of the GNU manuals and licence texts installed on any Debian
machine (/usr/share/info, /usr/share/common-licenses).

Held out means other phrasings, other subjects and other sources: every fourth phrasing and every
fourth item of each word list is kept for the held-out set alone, and its passages come from other
manuals than training's, so no training request shares a template, a subject or a passage with it.
Requests are written once and committed (data/broad/): the bench and the draft's card read the
files, so every machine races the same held-out requests.
"""

from __future__ import annotations

import argparse
import gzip
import json
import random
import re
from pathlib import Path

from . import broad_words as words

KINDS = (
    "writing",
    "roleplay",
    "reasoning",
    "math",
    "coding",
    "extraction",
    "science",
    "humanities",
    "translation",
    "summarization",
    "factual",
    "word_problem",
    "passage_qa",
)
INFO = Path("/usr/share/info")
LICENSES = Path("/usr/share/common-licenses")
PASSAGE_KINDS = ("summarization", "passage_qa")  # the kinds whose requests carry a passage
# A long request's passage, in characters: about 2,000 to 3,000 tokens of the manuals' English.
LONG_CHARS = (9_000, 12_500)
# Manuals whose paragraphs make training passages; held-out passages come from the others.
TRAIN_MANUALS = ("coreutils", "grep", "sed", "find", "gzip", "diffutils", "gettext", "ed", "time")
HELDOUT_MANUALS = ("wget", "gnupg", "bc", "nettle", "libtasn1", "rluserman", "bzip2", "gpgrt")


def split(items: list, heldout: bool) -> list:
    """Every fourth item for the held-out set, the rest for training."""
    return [item for i, item in enumerate(items) if (i % 4 == 3) == heldout]


def manual_paragraphs(name: str) -> list[str]:
    """Prose paragraphs of one GNU info manual: no menus, tables or code, 200-900 characters."""
    text = ""
    for path in sorted(INFO.glob(f"{name}.info*.gz")):
        text += gzip.open(path, "rt", errors="replace").read()
    return prose(text.split("\n\n"))


def license_paragraphs() -> list[str]:
    found = []
    for path in sorted(LICENSES.glob("*")):
        if path.is_file():
            found += prose(path.read_text(errors="replace").split("\n\n"))
    return found


def prose(blocks: list[str]) -> list[str]:
    kept = []
    for block in blocks:
        text = " ".join(block.split())
        letters = sum(c.isalpha() or c == " " for c in text)
        if (
            200 <= len(text) <= 900
            and letters > 0.9 * len(text)
            and "*" not in text
            and "::" not in text
            and text[0].isupper()
            and text.endswith(".")
        ):
            kept.append(text)
    return kept


def passages(heldout: bool) -> list[str]:
    if heldout:
        found = [p for name in HELDOUT_MANUALS for p in manual_paragraphs(name)]
        return found + license_paragraphs()
    return [p for name in TRAIN_MANUALS for p in manual_paragraphs(name)]


def passage(rng: random.Random, pool: list[str], long: bool = False, chars: int = 0) -> str:
    """One to three neighbouring paragraphs (eight to fourteen for a long one); with `chars`, as
    many neighbouring paragraphs as reach that many characters."""
    count = rng.randint(8, 14) if long else rng.randint(1, 3)
    start = rng.randrange(max(1, len(pool) - count))
    if chars:
        end = start = rng.randrange(len(pool))
        while end < len(pool) and sum(map(len, pool[start:end])) < chars:
            end += 1
        while start > 0 and sum(map(len, pool[start:end])) < chars:
            start -= 1
        return "\n\n".join(pool[start:end])
    return "\n\n".join(pool[start : start + count])


def keyword(rng: random.Random, text: str) -> str:
    """A content word of the text a question can ask about."""
    candidates = [w for w in re.findall(r"\b[a-z]{7,}\b", text) if w not in STOP]
    return rng.choice(candidates) if candidates else "the main idea"


STOP = {
    "because",
    "without",
    "through",
    "between",
    "another",
    "however",
    "example",
    "whether",
    "therefore",
    "following",
    "otherwise",
    "although",
    "including",
    "several",
}


def fill_templates(
    kind: str, rng: random.Random, heldout: bool, pool: list[str], chars: int = 0
) -> str:
    template = rng.choice(split(words.TEMPLATES[kind], heldout))
    pick = lambda items: rng.choice(split(items, heldout))  # noqa: E731
    slots = {
        "form": pick(words.WRITING_FORMS),
        "subject": pick(words.WRITING_SUBJECTS),
        "role": pick(words.ROLES),
        "situation": pick(words.SITUATIONS),
        "concept": pick(words.SCIENCE_CONCEPTS),
        "topic": pick(words.HUMANITIES_TOPICS),
        "task": pick(words.CODING_TASKS),
        "country": pick(words.COUNTRIES),
        "animal": pick(words.ANIMALS),
        "fact": pick(words.FACT_SUBJECTS),
    }
    if kind == "coding":
        slots["language"] = pick(words.LANGUAGES)
    if kind == "translation":
        slots["language"] = pick(words.TARGET_LANGUAGES)
        slots["sentence"] = pick(words.EVERYDAY_SENTENCES)
    if kind in PASSAGE_KINDS:
        slots["passage"] = passage(rng, pool, long=rng.random() < 0.08, chars=chars)
        slots["word"] = keyword(rng, slots["passage"])
    if kind == "extraction":
        slots["document"] = document(rng, heldout)
    return template.format(**slots)


def document(rng: random.Random, heldout: bool) -> str:
    """A short made-up note, email or invoice with names, dates, places and amounts."""
    people = rng.sample(split(words.PEOPLE, heldout), 3)
    day, month = rng.randint(1, 28), rng.choice(["March", "June", "September", "December"])
    place = rng.choice(split(words.COUNTRIES, heldout))
    amount = rng.randint(20, 900)
    shapes = [
        f"Hi {people[0]},\n\nThanks for the meeting on {month} {day}. {people[1]} will send the "
        f"budget of ${amount} by Friday, and {people[2]} is booking the trip to {place}. Please "
        f"confirm by email ({people[0].lower()}@example.com).\n\nBest,\n{people[1]}",
        f"Invoice {rng.randint(1000, 9999)}\nBilled to: {people[0]} {people[1]}son\nDate: {day} "
        f"{month}\nItems: {rng.randint(2, 9)} chairs at ${amount // 10} each\nShip to: {place}\n"
        f"Contact: {people[2]} ({people[2].lower()}@shop.example)",
        f"Meeting notes, {month} {day}. Present: {', '.join(people)}. {people[0]} presented the "
        f"sales figures ({amount} units, up {rng.randint(2, 30)}%). {people[1]} will visit the "
        f"{place} office next month. {people[2]} must update the website before {month} "
        f"{min(28, day + 7)}.",
        f"{people[0]} ({rng.randint(21, 70)}) moved from {place} to a new job on {month} {day}. "
        f"Her manager, {people[1]}, says the team of {rng.randint(3, 40)} people will grow. "
        f"{people[2]} paid ${amount} for the welcome dinner.",
    ]
    return rng.choice(shapes)


def math_question(rng: random.Random, heldout: bool) -> str:
    a, b, c = rng.randint(2, 19), rng.randint(3, 60), rng.randint(20, 200)
    questions = [
        f"Solve for x: {a}x + {b} = {a * rng.randint(2, 15) + b}",
        f"What is {rng.randint(5, 45)}% of {c * 2}?",
        f"What is the derivative of {a}x^3 + {b}x^2 - x?",
        f"Simplify the fraction {a * 6}/{a * 8}.",
        f"What is {rng.randint(11, 99)} times {rng.randint(11, 99)}?",
        f"Is {rng.choice([91, 97, 119, 131, 143, 157, 221, 229])} a prime number? Explain.",
        f"What is the area of a circle with radius {a}?",
        f"Find the mean and median of {', '.join(str(rng.randint(1, 50)) for _ in range(6))}.",
        f"what is the square root of {a * a}",
        f"Factor x^2 + {a + b}x + {a * b}.",
        f"Convert {rng.randint(1, 7)}/8 to a decimal and a percentage.",
        f"What is the sum of the integers from 1 to {c}?",
        f"Solve the system: x + y = {a + b}, x - y = {b - a}.",
        "How many degrees are in the interior angles of a polygon with "
        f"{rng.randint(5, 12)} sides?",
        f"Expand ({a}x + {rng.randint(1, 9)})^2.",
        f"What is {a}^{rng.randint(2, 4)}?",
    ]
    return rng.choice(split(questions, heldout))


def word_problem(rng: random.Random, heldout: bool) -> str:
    name, other = rng.sample(split(words.PEOPLE, heldout), 2)
    item, price = rng.choice(split(words.ITEMS, heldout))
    n, m, k = rng.randint(3, 12), rng.randint(2, 9), rng.randint(20, 90)
    problems = [
        f"{name} buys {n} {item} at ${price:.2f} each and pays with a $50 bill. How much change "
        "does she get?",
        f"A train travels at {k} km/h for {m} hours. How far does it go?",
        f"{name} has {n * m} {item} and shares them equally among {m} friends. How many does each "
        "friend get?",
        f"{name} is {m} years older than {other}. In {n} years their ages will add up to {k}. How "
        f"old is {other} now?",
        f"A recipe needs {m} eggs for {n} people. How many eggs are needed for {n * 3} people?",
        f"{name} reads {k} pages a day. How many days does a {k * n + m} page book take?",
        f"A shop sells {item} for ${price:.2f}. On sale they are {rng.choice([10, 20, 25])}% off. "
        f"What do {n} of them cost on sale?",
        f"{name} can paint a fence in {n} hours and {other} in {n + m} hours. How long do they "
        "take together?",
        f"A tank holds {k * 10} litres and fills at {m * 5} litres per minute. How long until it "
        "is full?",
        f"{name} saves ${n * 5} a week. How many weeks until she can buy a bike costing ${k * 10}?",
        f"There are {k} students in a class; {n} of every {n + m} are girls. How many boys are "
        "there?",
        f"A rectangle is {n} m wide and {k} m long. What are its area and perimeter?",
    ]
    return rng.choice(split(problems, heldout))


def reasoning_question(rng: random.Random, heldout: bool) -> str:
    a, b, c, d = rng.sample(split(words.PEOPLE, heldout), 4)
    start, step = rng.randint(1, 9), rng.randint(2, 5)
    questions = [
        f"{a} is taller than {b}. {b} is taller than {c}. Who is the shortest? Explain.",
        f"All {rng.choice(['roses', 'cats', 'cars', 'birds'])} in the garden are red. {a} saw one "
        "in the garden. What colour was it? Explain your reasoning.",
        f"What comes next in the sequence {', '.join(str(start * step**i) for i in range(5))}?",
        f"If {a} finished the race before {b}, and {c} finished after {b} but before {d}, what "
        "was the finishing order?",
        "Which is the odd one out: apple, banana, carrot, cherry? Why?",
        f"{a} says: 'I always lie.' Can that statement be true? Think it through.",
        f"A bat and a ball cost ${step + 0.1:.2f} in total. The bat costs ${step:.2f} more than "
        "the ball. How much is the ball?",
        f"If it takes {step} machines {step} minutes to make {step} widgets, how long do "
        f"{step * 20} machines take to make {step * 20} widgets?",
        f"{a}, {b} and {c} each have a different pet: a dog, a cat and a fish. {a} is allergic "
        f"to fur and {b} does not own the dog. Who owns which pet?",
        f"What comes next: {', '.join(chr(65 + start + step * i) for i in range(4))}?",
        "Is the following argument valid? 'If it rains, the street is wet. The street is wet. "
        "So it rained.' Explain.",
        f"There are {step + 2} people in a room and each shakes hands with every other once. How "
        "many handshakes are there?",
    ]
    return rng.choice(split(questions, heldout))


def with_style(rng: random.Random, text: str) -> str:
    """Phrasings as people type them: now and then a greeting, a polite opener, or no capitals."""
    roll = rng.random()
    if roll < 0.08:
        return rng.choice(["Hi! ", "Hello, ", "Hey, ", "Quick question: "]) + text
    if roll < 0.14 and "\n" not in text:
        return text[0].lower() + text[1:].rstrip(".?")
    if roll < 0.2:
        return text + rng.choice([" Thanks!", " Please be concise.", " Keep it under 100 words."])
    return text


def build(kind: str, rng: random.Random, heldout: bool, pool: list[str]) -> str:
    if kind == "math":
        return math_question(rng, heldout)
    if kind == "word_problem":
        return word_problem(rng, heldout)
    if kind == "reasoning":
        return reasoning_question(rng, heldout)
    return fill_templates(kind, rng, heldout, pool)


def requests(per_kind: int, heldout: bool, seed: int) -> list[dict]:
    """per_kind distinct requests of each kind, {"id", "kind", "prompt", "chat"}, kinds taking
    turns."""
    rng = random.Random(seed)
    pool = passages(heldout)
    by_kind = {}
    for kind in KINDS:
        seen: dict[str, None] = {}
        for _ in range(per_kind * 20):
            if len(seen) >= per_kind:
                break
            text = build(kind, rng, heldout, pool)
            seen.setdefault(text if heldout else with_style(rng, text))
        by_kind[kind] = list(seen)
    prefix = "heldout" if heldout else "train"
    # Some manuals carry a licence's text, which held-out passages quote too: a training request
    # holding a held-out paragraph is dropped (the rest keep their ids).
    held = set() if heldout else set(passages(heldout=True))
    out = []
    for i in range(per_kind):
        for kind in KINDS:
            if i < len(by_kind[kind]) and not (
                kind in PASSAGE_KINDS and quotes(by_kind[kind][i], held)
            ):
                out.append(
                    {
                        "id": f"{prefix}:{kind}:{i}",
                        "kind": kind,
                        "prompt": by_kind[kind][i],
                        "chat": True,
                    }
                )
    return out


def quotes(text: str, paragraphs: set[str]) -> bool:
    """Whether the text holds one of the paragraphs whole."""
    return any(paragraph in text for paragraph in paragraphs)


def long_requests(count: int, seed: int = 2) -> list[dict]:
    """count held-out requests over a long passage (LONG_CHARS characters: 2,000 to 3,000 tokens of
    English prose), summaries and answers from it taking turns: the requests whose verification
    runs over a long context."""
    rng = random.Random(seed)
    training = set(passages(heldout=False))
    pool = [p for p in passages(heldout=True) if p not in training]
    out = []
    for i in range(count):
        kind = PASSAGE_KINDS[i % 2]
        prompt = fill_templates(kind, rng, True, pool, chars=rng.randint(*LONG_CHARS))
        out.append({"id": f"long:{kind}:{i}", "kind": kind, "prompt": prompt, "chat": True})
    return out


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--out", type=Path, required=True, help="folder for the two JSONL files")
    parser.add_argument("--per-kind", type=int, default=700, help="training requests per kind")
    parser.add_argument("--heldout-per-kind", type=int, default=12)
    parser.add_argument("--long", type=int, default=6, help="held-out requests over a long passage")
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    for name, rows in (
        ("requests-train.jsonl", requests(args.per_kind, False, seed=0)),
        ("requests-heldout.jsonl", requests(args.heldout_per_kind, True, seed=1)),
        ("requests-long.jsonl", long_requests(args.long)),
    ):
        text = "".join(json.dumps(row, ensure_ascii=False) + "\n" for row in rows)
        (args.out / name).write_text(text)
        print(f"{len(rows)} requests -> {args.out / name}")


if __name__ == "__main__":
    main()
