"""Every ```python block in README.md and docs/ runs and prints what the page shows.

Conventions, for whoever writes the pages:

- The ```python blocks of one Markdown file form one script. A block runs after
  all the earlier blocks of its file, in one shared namespace (``__name__`` is
  ``"__main__"``), so the tutorial can build up step by step. Blocks of
  different files never share anything.
- There is one test per block, with the id ``"docs/tutorial.md:42"`` (the line
  of the opening fence). It replays the earlier blocks of the file, then runs
  its own, so each test stands alone and a failure names the block at fault.
  Tracebacks show the same ``path:line`` as the file name.
- Each test runs in a fresh temporary working directory, and `tempfile` creates
  its files and directories inside it too, so examples may write files freely.
- A ```text block that follows a ```python block with only blank lines between
  is that block's expected standard output, compared line by line (trailing
  spaces ignored). ``...`` in it matches any text, as doctest's ELLIPSIS does,
  for values such as timestamps and random run ids.
- Every other fence (```pycon, ```bash, a ```text block elsewhere) is shown,
  never executed.
- Examples must be fast: no real sleep longer than about 0.05 s.
"""

from __future__ import annotations

import contextlib
import io
import re
import signal
import tempfile
import traceback
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
HOW_TO_PAGES = (
    "docs/how-to/handle-failures.md",
    "docs/how-to/cancel-safely.md",
    "docs/how-to/retries-and-timeouts.md",
    "docs/how-to/idempotency-keys.md",
    "docs/how-to/budgets.md",
    "docs/how-to/branch.md",
    "docs/how-to/progress-in-long-steps.md",
    "docs/how-to/change-a-workflow-with-saved-checkpoints.md",
    "docs/how-to/custom-output-types.md",
    "docs/how-to/incremental-checkpoints.md",
    "docs/how-to/store-checkpoints.md",
    "docs/how-to/token-usage-from-llm-clients.md",
    "docs/how-to/command-line.md",
    "docs/how-to/watch-a-run.md",
    "docs/how-to/run-steps-elsewhere.md",
    "docs/how-to/fan-out.md",
    "docs/how-to/wait-for-a-person.md",
    "docs/how-to/compose-workflows.md",
    "docs/how-to/trace-runs.md",
    "docs/how-to/count-what-you-pay.md",
    "docs/how-to/fork-a-run.md",
)
OWNED_PAGES = (
    "docs/index.md",
    "docs/tutorial.md",
    "docs/reference.md",
    "docs/execution-model.md",
    "docs/decisions/0001-core-design.md",
    "docs/decisions/0002-failures-and-interrupts.md",
    "docs/decisions/0003-resume-after-change.md",
    "docs/reliability.md",
    *HOW_TO_PAGES,
)
_OPEN_FENCE = re.compile(r"^```\s*([\w+-]*)")
_CLOSE_FENCE = re.compile(r"^```\s*$")
_LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")


@dataclass(frozen=True)
class Block:
    """One fenced code block of a Markdown file."""

    path: str
    line: int
    lang: str
    source: str
    expected: str | None = None

    @property
    def id(self) -> str:
        return f"{self.path}:{self.line}"


def parse_blocks(text: str, path: str) -> list[Block]:
    """Return every fenced block of ``text``; python blocks carry their expected output."""
    raw: list[tuple[str, int, int, str]] = []  # lang, fence line, closing line, source
    lines = text.splitlines()
    number = 0
    while number < len(lines):
        opening = _OPEN_FENCE.match(lines[number])
        if opening is None:
            number += 1
            continue
        start = number
        number += 1
        body: list[str] = []
        while number < len(lines) and not _CLOSE_FENCE.match(lines[number]):
            body.append(lines[number])
            number += 1
        if number == len(lines):
            msg = f"{path}:{start + 1}: code block is never closed"
            raise ValueError(msg)
        raw.append((opening.group(1).lower(), start + 1, number + 1, "\n".join(body) + "\n"))
        number += 1
    blocks: list[Block] = []
    for position, (lang, line, closing, source) in enumerate(raw):
        expected = None
        if lang == "python" and position + 1 < len(raw):
            next_lang, next_line, _, next_source = raw[position + 1]
            between = lines[closing : next_line - 1]
            if next_lang == "text" and all(not gap.strip() for gap in between):
                expected = next_source
        blocks.append(Block(path, line, lang, source, expected))
    return blocks


def doc_files() -> list[Path]:
    """README.md (if present) and every Markdown file under docs/, in a stable order."""
    readme = ROOT / "README.md"
    files = [readme] if readme.is_file() else []
    return files + sorted((ROOT / "docs").glob("**/*.md"))


def collect_examples() -> list[Block]:
    """Every ```python block of the documentation files."""
    examples: list[Block] = []
    for file in doc_files():
        relative = file.relative_to(ROOT).as_posix()
        blocks = parse_blocks(file.read_text(encoding="utf-8"), relative)
        examples.extend(block for block in blocks if block.lang == "python")
    return examples


def output_matches(expected: str, actual: str) -> bool:
    """Compare outputs line by line, ignoring trailing spaces; ``...`` matches anything."""

    def normalise(text: str) -> str:
        return "\n".join(line.rstrip() for line in text.strip("\n").splitlines())

    pattern = ".*?".join(re.escape(part) for part in normalise(expected).split("..."))
    return re.fullmatch(pattern, normalise(actual), flags=re.DOTALL) is not None


def run_block(block: Block, namespace: dict[str, object]) -> str:
    """Execute ``block`` in ``namespace`` and return what it printed."""
    code = compile(block.source, block.id, "exec")
    buffer = io.StringIO()
    with contextlib.redirect_stdout(buffer):
        exec(code, namespace)  # noqa: S102 - running the documentation is the point
    return buffer.getvalue()


EXAMPLES = collect_examples()


@pytest.mark.parametrize("block", EXAMPLES, ids=[block.id for block in EXAMPLES])
def test_example_runs_and_prints_what_the_docs_show(
    block: Block, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The block runs after the earlier blocks of its file and prints its ```text block.

    It runs with SIGTERM's default action, as in a program of a reader's: a
    session fixture (the PostgreSQL server's) may have replaced it in this worker.
    """
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    previous = signal.signal(signal.SIGTERM, signal.SIG_DFL)
    try:
        _run_in_order(block)
    finally:
        signal.signal(signal.SIGTERM, previous)


def _run_in_order(block: Block) -> None:
    namespace: dict[str, object] = {"__name__": "__main__"}
    for earlier in EXAMPLES:
        if earlier.path == block.path and earlier.line < block.line:
            run_block(earlier, namespace)
    output = run_block(block, namespace)
    if block.expected is not None:
        assert output_matches(block.expected, output), (
            f"{block.id} printed:\n{output}\nbut the page shows:\n{block.expected}"
        )


@pytest.mark.parametrize("block", EXAMPLES, ids=[block.id for block in EXAMPLES])
def test_example_compiles(block: Block) -> None:
    """Every python block is valid Python on its own."""
    compile(block.source, block.id, "exec")


def test_every_page_is_collected_and_the_main_pages_have_examples() -> None:
    """The glob finds the pages, so an empty collection cannot pass silently."""
    found = {file.relative_to(ROOT).as_posix() for file in doc_files()}
    assert set(OWNED_PAGES) <= found
    with_examples = {block.path for block in EXAMPLES}
    main_pages = {"docs/tutorial.md", "docs/reference.md", "docs/execution-model.md"}
    assert main_pages | set(HOW_TO_PAGES) <= with_examples


def test_index_links_every_page() -> None:
    """Every page under docs/ is reachable from the index."""
    index = (ROOT / "docs" / "index.md").read_text(encoding="utf-8")
    linked = {
        (ROOT / "docs" / target.partition("#")[0]).resolve() for target in _LINK.findall(index)
    }
    pages = {file.resolve() for file in (ROOT / "docs").glob("**/*.md")} - {
        ROOT / "docs" / "index.md"
    }
    assert sorted(str(page.relative_to(ROOT)) for page in pages - linked) == []


def _anchors(markdown: str) -> set[str]:
    """GitHub-style heading anchors of a page."""
    anchors: set[str] = set()
    in_code = False
    for line in markdown.splitlines():
        if line.startswith("```"):
            in_code = not in_code
        if in_code or not line.startswith("#"):
            continue
        title = line.lstrip("#").strip().lower()
        slug = re.sub(r"[^\w\- ]", "", title).replace(" ", "-")
        candidate, suffix = slug, 0
        while candidate in anchors:
            suffix += 1
            candidate = f"{slug}-{suffix}"
        anchors.add(candidate)
    return anchors


@pytest.mark.parametrize("page", [file.relative_to(ROOT).as_posix() for file in doc_files()])
def test_relative_links_point_at_existing_pages_and_headings(page: str) -> None:
    """Links between the pages resolve, down to the heading anchor."""
    source = ROOT / page
    text = source.read_text(encoding="utf-8")
    prose = re.sub(r"^```.*?^```", "", text, flags=re.MULTILINE | re.DOTALL)
    broken: list[str] = []
    for target in _LINK.findall(prose):
        if target.startswith(("http://", "https://", "mailto:")):
            continue
        file_part, _, anchor = target.partition("#")
        linked = (source.parent / file_part).resolve() if file_part else source
        if linked.is_dir() and not anchor:
            continue  # a folder link, such as docs/decisions/, is fine on GitHub
        if not linked.is_file():
            broken.append(f"{target} (no such file)")
        elif anchor and anchor not in _anchors(linked.read_text(encoding="utf-8")):
            broken.append(f"{target} (no such heading)")
    assert broken == []


SAMPLE = """\
# Title

```python
print("one")
```

```text
one
```

Prose between.

```python
x = 1
```

Prose, so the next block is not output.

```text
not an expected output
```

```pycon
>>> 1 + 1
2
```
"""


def test_parser_finds_fences_and_attaches_expected_output() -> None:
    """Python blocks get the ```text block right after them; other fences are kept apart."""
    blocks = parse_blocks(SAMPLE, "sample.md")
    assert [(block.lang, block.line) for block in blocks] == [
        ("python", 3),
        ("text", 7),
        ("python", 13),
        ("text", 19),
        ("pycon", 23),
    ]
    assert blocks[0].source == 'print("one")\n'
    assert blocks[0].expected == "one\n"
    assert blocks[2].expected is None
    assert blocks[0].id == "sample.md:3"


def test_parser_rejects_an_unclosed_fence() -> None:
    """A fence that never closes is a broken page, not an empty example."""
    with pytest.raises(ValueError, match=re.escape("broken.md:2: code block is never closed")):
        parse_blocks("text\n```python\nprint(1)\n", "broken.md")


@pytest.mark.parametrize(
    ("expected", "actual", "matches"),
    [
        ("a\nb\n", "a\nb\n", True),
        ("a\nb", "a  \nb\n\n", True),
        ("a\nb\n", "a\nc\n", False),
        ('"run_id": "...",', '"run_id": "0f3a",', True),
        ("seq=...; done", "seq=12; done", True),
        ("seq=...; done", "seq=12; failed", False),
        ("first\n...\nlast", "first\nmiddle\nmore\nlast", True),
        ("a (b) [c]", "a (b) [c]", True),
    ],
)
def test_output_comparison(expected: str, actual: str, matches: bool) -> None:
    """Outputs compare exactly, except trailing blanks and ``...`` wildcards."""
    assert output_matches(expected, actual) is matches


def test_a_raising_example_fails_the_test() -> None:
    """An exception in a block propagates, with the block's path and line in the traceback."""
    block = Block("docs/x.md", 7, "python", "print('before')\nraise RuntimeError('boom')\n")
    with pytest.raises(RuntimeError, match="boom") as caught:
        run_block(block, {"__name__": "__main__"})
    frame = traceback.extract_tb(caught.value.__traceback__)[-1]
    assert (frame.filename, frame.lineno) == ("docs/x.md:7", 2)


def test_blocks_of_one_file_share_a_namespace() -> None:
    """A later block sees the names an earlier block of the same run defined."""
    namespace: dict[str, object] = {"__name__": "__main__"}
    run_block(Block("a.md", 1, "python", "value = 41\n"), namespace)
    assert run_block(Block("a.md", 5, "python", "print(value + 1)\n"), namespace) == "42\n"
