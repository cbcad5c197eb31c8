"""The text the embedded pair learns from and is judged on, and its tokenizer.

Training data: the Python standard library's own source (PSF licence), which every machine with
Python has.
Held-out data: the source of pip, an installed PyPI package that is not in the corpus.
"""

from __future__ import annotations

import sysconfig
from pathlib import Path

EOS = "<|endoftext|>"
# Folders that hold data rather than code written by people (tables, generated text, sample trees),
# and the test suites: 62% of the stdlib's characters, assert-heavy code that looks nothing like a
# function with a docstring, which is what users (and HumanEval stubs) ask the pair to continue.
SKIP_PARTS = {
    "site-packages",
    "__pycache__",
    "encodings",
    "pydoc_data",
    "lib2to3",
    "idlelib",
    "turtledemo",
    "data",
    "test",
    "tests",
    "idle_test",
}


def stdlib_files() -> list[Path]:
    root = Path(sysconfig.get_paths()["stdlib"])
    files = []
    for path in sorted(root.rglob("*.py")):
        if SKIP_PARTS.intersection(path.relative_to(root).parts):
            continue
        files.append(path)
    return files


def clean_source(text: str) -> str | None:
    """Keep code written by people: drop files that are mostly long data lines or oversized."""
    lines = text.splitlines()
    if not lines or len(text) > 300_000:
        return None
    long_lines = sum(len(line) > 120 for line in lines)
    if long_lines > 0.02 * len(lines):
        return None
    return "\n".join(line.rstrip() for line in lines).replace("\t", "    ") + "\n"


def load_corpus(max_chars: int | None = None) -> list[str]:
    docs = []
    total = 0
    for path in stdlib_files():
        try:
            text = path.read_text(encoding="utf-8")
        except (UnicodeDecodeError, OSError):
            continue
        cleaned = clean_source(text)
        if cleaned is None:
            continue
        docs.append(cleaned)
        total += len(cleaned)
        if max_chars is not None and total >= max_chars:
            break
    return docs


def heldout_files() -> list[Path]:
    """Python that is not in the corpus: the source of an installed PyPI package (pip, present
    everywhere)."""
    import pip

    root = Path(pip.__file__).parent / "_internal"
    return sorted(root.rglob("*.py"))


def function_stubs(paths: list[Path], root: Path, per_file: int | None = 1) -> list[dict]:
    """Functions cut after their docstring, as HumanEval's stubs are: the first `per_file` in each
    file (all of them with None) that have a docstring and a body after it, dedented, in path and
    line order. Each is {"id": "file:function", "prompt": ...}."""
    import ast
    import textwrap

    stubs = []
    for path in paths:
        text = path.read_text(encoding="utf-8", errors="replace")
        try:
            tree = ast.parse(text)
        except SyntaxError:
            continue
        lines = text.splitlines(keepends=True)
        functions = [
            node
            for node in ast.walk(tree)
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
        ]
        taken = 0
        for node in sorted(functions, key=lambda f: f.lineno):
            if per_file is not None and taken == per_file:
                break
            if ast.get_docstring(node) and len(node.body) > 1:
                stub = textwrap.dedent("".join(lines[node.lineno - 1 : node.body[0].end_lineno]))
                stubs.append(
                    {"id": f"{path.relative_to(root)}:{node.name}", "prompt": stub.rstrip() + "\n"}
                )
                taken += 1
    return stubs


def heldout_prompts(limit: int | None = None) -> list[dict]:
    """Function stubs the pair never saw: from pip's source, one function per file, spread evenly
    over the files in path order."""
    import pip

    stubs = function_stubs(heldout_files(), Path(pip.__file__).parent)
    if limit and len(stubs) > limit:
        stubs = [stubs[i * len(stubs) // limit] for i in range(limit)]
    return stubs


def train_tokenizer(docs: list[str], vocab_size: int):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    # A newline is a token of its own, never merged with the next line's indentation: prompts such
    # as HumanEval stubs end with a bare "\n", and a model that only ever saw "\n" fused with spaces
    # reads a bare one as "the next line starts at column 0" and writes unindented code.
    tok.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split("\n", behavior="isolated"),
            pre_tokenizers.ByteLevel(add_prefix_space=False),
        ]
    )
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=[EOS],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(docs, trainer=trainer)
    return PreTrainedTokenizerFast(
        tokenizer_object=tok, eos_token=EOS, bos_token=EOS, unk_token=None
    )
