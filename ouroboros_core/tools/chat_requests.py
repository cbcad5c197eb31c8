"""Requests a person might send a small instruct model, built offline from documented Python code.

The default pair's draft learns from the target's answers to these (`target_samples --pair
smollm2`), and the benchmark races the held-out ones. Each request comes from one documented
function or class and is one of a few kinds a visitor types: write a function, explain code, list
things, write a class, answer as JSON, write a test; a share are plain completions (a function stub,
no chat turn), as the page also accepts raw text.

Training requests come from the Python standard library; held-out requests from pip's own source (an
installed PyPI package outside the standard library), so no held-out request shares a function with
training.
"""

from __future__ import annotations

import ast
import random
import re
import sysconfig
import textwrap
from pathlib import Path

from .corpus import heldout_files, stdlib_files

KINDS = ("function", "explain", "list", "class", "json", "test", "complete")


def first_sentence(docstring: str) -> str | None:
    """The docstring's summary as a clause a request can end with, or None when it reads badly."""
    text = " ".join(docstring.strip().split("\n\n")[0].split())
    text = re.split(r"(?<=[.!?])\s", text)[0].rstrip(".")
    if not 12 <= len(text) <= 160 or any(
        mark in text for mark in (">>>", "::", "`", "|", "{", "}")
    ):
        return None
    return text[0].lower() + text[1:]


def documented(paths: list[Path], root: Path) -> list[dict]:
    """Every documented function and class in the files: its name, module, signature, summary and
    source."""
    found = []
    for path in paths:
        text = path.read_text(encoding="utf-8", errors="replace")
        try:
            tree = ast.parse(text)
        except SyntaxError:
            continue
        module = ".".join(path.relative_to(root).with_suffix("").parts).removesuffix(".__init__")
        lines = text.splitlines(keepends=True)
        for node in ast.walk(tree):
            if not isinstance(node, (ast.FunctionDef, ast.ClassDef)) or node.name.startswith("_"):
                continue
            summary = first_sentence(ast.get_docstring(node) or "")
            if summary is None:
                continue
            source = textwrap.dedent("".join(lines[node.lineno - 1 : node.end_lineno]))
            args = ast.unparse(node.args) if isinstance(node, ast.FunctionDef) else ""
            found.append(
                {
                    "name": node.name,
                    "module": module,
                    "summary": summary,
                    "source": source,
                    "class": isinstance(node, ast.ClassDef),
                    "args": args,
                    "stub": textwrap.dedent(
                        "".join(lines[node.lineno - 1 : node.body[0].end_lineno])
                    )
                    if isinstance(node, ast.FunctionDef)
                    and len(node.body) > 1
                    and isinstance(node.body[0], ast.Expr)
                    else None,
                }
            )
    return found


def request_for(item: dict, kind: str) -> tuple[str, bool] | None:
    """(request text, chat) for one documented item and kind, or None where the kind does not fit
    it."""
    name, module, summary, source = item["name"], item["module"], item["summary"], item["source"]
    short_source = source.count("\n") <= 30 and len(source) <= 1500
    if kind == "function" and not item["class"]:
        return f"Write a Python function `{name}({item['args']})` that does this: {summary}.", True
    if kind == "explain" and short_source:
        return (
            f"Explain what this Python code does, briefly:\n\n```python\n{source.rstrip()}\n```",
            True,
        )
    if kind == "list":
        return (
            f"List the main things a Python programmer should know about `{module}`, "
            "one line each.",
            True,
        )
    if kind == "class" and item["class"]:
        return f"Write a small Python class `{name}` for this: {summary}. Keep it short.", True
    if kind == "json" and not item["class"]:
        return (
            f"Describe the Python function `{name}({item['args']})` as a JSON object with the keys "
            f'"name", "arguments" and "purpose". Its purpose: {summary}.'
        ), True
    if kind == "test" and not item["class"] and short_source:
        return f"Write pytest tests for this function:\n\n```python\n{source.rstrip()}\n```", True
    if kind == "complete" and item["stub"] and len(item["stub"]) <= 1200:
        return item["stub"].rstrip() + "\n", False
    return None


def build(items: list[dict], seed: int, prefix: str, limit: int | None = None) -> list[dict]:
    """One request per item, its kind drawn so every kind appears (plain completions about one in
    eight); {"id", "kind", "prompt", "chat"}."""
    rng = random.Random(seed)
    weights = {
        "function": 3,
        "explain": 2,
        "list": 1,
        "class": 1,
        "json": 1,
        "test": 1,
        "complete": 1.3,
    }
    requests, seen = [], set()
    for index, item in enumerate(items):
        kinds = rng.choices(list(weights), weights=list(weights.values()), k=3)
        for kind in kinds:
            made = request_for(item, kind)
            if made is not None and made[0] not in seen:
                seen.add(made[0])
                requests.append(
                    {
                        "id": f"{prefix}{index}:{item['module']}.{item['name']}",
                        "kind": kind,
                        "prompt": made[0],
                        "chat": made[1],
                    }
                )
                break
    rng.shuffle(requests)
    return requests[:limit] if limit else requests


def training_requests(limit: int | None = None, seed: int = 0) -> list[dict]:
    """Requests about the standard library's documented functions and classes."""
    root = Path(sysconfig.get_paths()["stdlib"])
    return build(documented(stdlib_files(), root), seed, "train:", limit)


def heldout_requests(limit: int | None = None, seed: int = 1) -> list[dict]:
    """Requests about pip's documented functions and classes, none of them in training, the kinds
    taking turns so that a short bench sees every kind."""
    import pip

    requests = build(
        documented(heldout_files(), Path(pip.__file__).parent.parent), seed, "heldout:"
    )
    by_kind = {kind: [request for request in requests if request["kind"] == kind] for kind in KINDS}
    mixed = [group[i] for i in range(len(requests)) for group in by_kind.values() if i < len(group)]
    return mixed[:limit] if limit else mixed
