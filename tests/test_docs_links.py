"""The docs hold together: every section of docs/BENCHMARKS.md the code cites exists, every run file
a doc names or links is there, every run file is named by some doc (or read by a test or a tool),
every link into BENCHMARKS.md lands on a heading, and the page stays short enough to read."""

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
RUNS = DOCS / "bench-runs"
BENCHMARKS = DOCS / "BENCHMARKS.md"
MAX_BENCHMARKS_LINES = 500

# `docs/BENCHMARKS.md, *Title*` or `docs/BENCHMARKS.md, "Title"`, read across comment lines
CITATION = re.compile(r'BENCHMARKS\.md,\s+(?:\*([^*]+)\*|"([^"]+)")')
RUN_NAME = re.compile(r"bench-runs/([\w.+-]+)")
RUN_LINK = re.compile(r"\]\(([^)#\s]*bench-runs/[^)#\s]+)\)")
ANCHOR_LINK = re.compile(r"BENCHMARKS\.md#([\w-]+)")


def prose(text: str) -> str:
    """Text with its line breaks and comment markers folded away, so a citation split over two
    comment or docstring lines reads as one."""
    return re.sub(r"\s*\n\s*(?:#+\s*)?", " ", text)


def headings(markdown: str) -> list[str]:
    """The page's headings, as written after their #s (code blocks' lines are not headings)."""
    found, fenced = [], False
    for line in markdown.splitlines():
        if line.startswith("```"):
            fenced = not fenced
        elif not fenced and re.match(r"#{1,6} ", line):
            found.append(line.lstrip("#").strip())
    return found


def anchor(heading: str) -> str:
    """The anchor GitHub gives a heading: lower case, punctuation dropped, spaces as hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.lower()).replace(" ", "-")


def cited_titles(source: str) -> list[str]:
    return [star or quoted for star, quoted in CITATION.findall(prose(source))]


def code_files() -> list[Path]:
    return [ROOT / "app.py", *sorted((ROOT / "ouroboros_core").rglob("*.py"))] + sorted(
        (ROOT / "ui").rglob("*.py")
    )


def doc_files() -> list[Path]:
    return [ROOT / "README.md", *sorted(DOCS.glob("*.md"))]


def readers_of_runs() -> list[Path]:
    """Beyond the docs, what may read a run file directly: the tests and the workbench's tools."""
    return sorted((ROOT / "tests").rglob("*.py")) + sorted(
        (ROOT / "ouroboros_core" / "tools").rglob("*.py")
    )


def missing_sections(sources: dict[str, str], page: str) -> list[str]:
    titles = set(headings(page))
    return [
        f"{name} cites {title!r}"
        for name, source in sources.items()
        for title in cited_titles(source)
        if title not in titles
    ]


def broken_run_links(doc: Path, text: str, runs: set[str]) -> list[str]:
    """Run files a doc names that are not there, and links that do not resolve from the doc."""
    named = [f"{doc.name} names {n}" for n in RUN_NAME.findall(text) if n.rstrip(".") not in runs]
    linked = [
        f"{doc.name} links {t}" for t in RUN_LINK.findall(text) if not (doc.parent / t).is_file()
    ]
    return named + linked


def test_the_code_cites_only_sections_benchmarks_has():
    sources = {str(p.relative_to(ROOT)): p.read_text() for p in code_files()}
    cited = [title for source in sources.values() for title in cited_titles(source)]
    assert len(cited) >= 10, f"the citations read nothing: {cited}"
    missing = missing_sections(sources, BENCHMARKS.read_text())
    assert not missing, f"sections docs/BENCHMARKS.md does not have: {missing}"


def test_every_run_file_a_doc_names_or_links_is_there():
    runs = {p.name for p in RUNS.iterdir()}
    broken = [
        fault for doc in doc_files() for fault in broken_run_links(doc, doc.read_text(), runs)
    ]
    assert not broken, f"run files missing: {broken}"


def test_every_link_into_benchmarks_lands_on_a_heading():
    anchors = {anchor(title) for title in headings(BENCHMARKS.read_text())}
    dangling = [
        f"{doc.name}: #{name}"
        for doc in doc_files()
        for name in ANCHOR_LINK.findall(doc.read_text())
        if name not in anchors
    ]
    assert not dangling, f"links to no heading of docs/BENCHMARKS.md: {dangling}"


def test_every_run_file_is_cited():
    cited = {
        name
        for path in doc_files() + readers_of_runs()
        for name in RUN_NAME.findall(path.read_text())
    }
    uncited = sorted(p.name for p in RUNS.iterdir() if p.name not in cited)
    assert not uncited, f"run files no doc cites (cite them, or `git rm` them): {uncited}"


def test_benchmarks_stays_short():
    lines = len(BENCHMARKS.read_text().splitlines())
    assert lines < MAX_BENCHMARKS_LINES, f"docs/BENCHMARKS.md has {lines} lines"


def test_the_checks_can_fail(tmp_path):
    # A citation split over comment lines is read whole, and one naming no heading is reported.
    code = (
        '# as measured (docs/BENCHMARKS.md, *Long\n# requests*) and (docs/BENCHMARKS.md, "Gone")\n'
    )
    assert cited_titles(code) == ["Long requests", "Gone"]
    page = "# T\n```bash\n# not a heading\n```\n## Long requests\n"
    assert headings(page) == ["T", "Long requests"]
    assert missing_sections({"a.py": code}, page) == ["a.py cites 'Gone'"]
    assert anchor("The broad mix: what visitors ask") == "the-broad-mix-what-visitors-ask"
    # A named file that is not there, and a link that does not resolve from its doc, are reported.
    (tmp_path / "bench-runs").mkdir()
    (tmp_path / "bench-runs" / "a.json").write_text("{}")
    doc = tmp_path / "README.md"
    text = "[1](bench-runs/a.json), [2](docs/bench-runs/a.json), `bench-runs/b.json`."
    assert broken_run_links(doc, text, {"a.json"}) == [
        "README.md names b.json",
        "README.md links docs/bench-runs/a.json",
    ]
