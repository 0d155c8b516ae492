"""The docs site builds with ``mkdocs build --strict`` and holds every page and public name.

The build runs as a subprocess with this interpreter, exactly as the check command
runs it, into a temporary folder; it needs no network. Broken links, missing
anchors, pages left out of the nav and docstring warnings are warnings, which
``--strict`` turns into a failed build: the last test proves that each one does.
"""

from __future__ import annotations

import html
import inspect
import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

import executionkit

if TYPE_CHECKING:
    from collections.abc import Callable

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"


@dataclass(frozen=True)
class Build:
    """The outcome of one ``mkdocs build --strict``."""

    returncode: int
    log: str
    site: Path


def build(project: Path, site: Path) -> Build:
    """Build the site of ``project`` (a folder holding mkdocs.yml) into ``site``."""
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}  # Material's advert on stderr
    done = subprocess.run(  # noqa: S603 - our own interpreter and the pinned mkdocs
        [
            sys.executable,
            "-m",
            "mkdocs",
            "build",
            "--strict",
            "-f",
            str(project / "mkdocs.yml"),
            "--site-dir",
            str(site),
        ],
        cwd=project,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    return Build(done.returncode, done.stdout + done.stderr, site)


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Build:
    """The real site, built once for the tests that look inside it."""
    return build(ROOT, tmp_path_factory.mktemp("site"))


def page_path(markdown: Path) -> str:
    """Where mkdocs (with directory URLs) writes the page of a Markdown file."""
    relative = markdown.relative_to(DOCS).with_suffix("")
    if relative.name == "index":
        return (relative.parent / "index.html").as_posix()
    return (relative / "index.html").as_posix()


def as_html(docstring_line: str) -> str:
    """A docstring's line as Markdown renders it: escaped, backticks as <code>."""
    escaped = html.escape(docstring_line, quote=False)
    return re.sub(r"``?([^`]+?)``?", r"<code>\1</code>", escaped)


def test_the_strict_build_passes(site: Build) -> None:
    """No warning at all: strict mode aborts on the first one."""
    assert site.returncode == 0, site.log
    assert "WARNING" not in site.log
    assert "Documentation built in" in site.log


def test_the_main_pages_are_built(site: Build) -> None:
    """Home, tutorial, reference, the API page and every how-to have their page."""
    how_tos = sorted(DOCS.glob("how-to/*.md"))
    assert len(how_tos) >= 9
    expected = [
        "index.html",
        "tutorial/index.html",
        "reference/index.html",
        "api/index.html",
        "execution-model/index.html",
        *(page_path(page) for page in how_tos),
    ]
    missing = [page for page in expected if not (site.site / page).is_file()]
    assert missing == []


def test_every_markdown_file_becomes_a_page(site: Build) -> None:
    """Nothing under docs/ is silently left out of the site."""
    pages = sorted(DOCS.glob("**/*.md"))
    missing = [page_path(page) for page in pages if not (site.site / page_path(page)).is_file()]
    assert missing == []


@pytest.mark.parametrize("name", executionkit.__all__)
def test_the_api_page_documents_each_public_name(site: Build, name: str) -> None:
    """Each name has its anchor and the first line of its docstring, code in backticks as code."""
    api = (site.site / "api" / "index.html").read_text(encoding="utf-8")
    assert f'id="executionkit.{name}"' in api
    summary = (inspect.getdoc(getattr(executionkit, name)) or "").splitlines()[0]
    assert summary
    assert as_html(summary) in api


def test_methods_and_arguments_come_from_the_docstrings(site: Build) -> None:
    """Members get their own anchors; Args sections become parameter tables; no plumbing."""
    api = (site.site / "api" / "index.html").read_text(encoding="utf-8")
    for member in (
        "Workflow.run",
        "Workflow.run_sync",
        "WorkflowCheckpoint.to_dict",
        "WorkflowCheckpoint.from_dict",
        "StepContext.save_progress",
        "StepContext.idempotency_key",
        "TokenUsage.total_tokens",
    ):
        assert f'id="executionkit.{member}"' in api
    assert "<code>max_concurrency</code>" in api
    assert "<code>retry_jitter</code>" in api
    for plumbing in ("__post_init__", "__repr__", "__hash__", "_host"):
        assert f'id="executionkit.Step.{plumbing}"' not in api
        assert f"executionkit.StepContext.{plumbing}" not in api


def test_the_site_fetches_nothing_from_the_web(site: Build) -> None:
    """No web fonts or analytics: the pages load no stylesheet or script from elsewhere."""
    external = re.compile(r"""<(?:link|script)[^>]*(?:href|src)="https?://""")
    offenders = [
        page.relative_to(site.site).as_posix()
        for page in sorted(site.site.glob("**/*.html"))
        if external.search(page.read_text(encoding="utf-8"))
    ]
    assert offenders == []


def copy_project(target: Path) -> Path:
    """mkdocs.yml and docs/ copied, with the package next to them, to break on purpose."""
    target.mkdir()
    shutil.copy(ROOT / "mkdocs.yml", target / "mkdocs.yml")
    shutil.copytree(DOCS, target / "docs")
    (target / "executionkit").symlink_to(ROOT / "executionkit", target_is_directory=True)
    return target


def _append(path: Path, text: str) -> None:
    path.write_text(path.read_text(encoding="utf-8") + text, encoding="utf-8")


def _break_anchor(project: Path) -> None:
    _append(project / "docs" / "tutorial.md", "\nSee [this](reference.md#no-such-heading).\n")


def _break_link(project: Path) -> None:
    _append(project / "docs" / "how-to" / "budgets.md", "\nSee [this](../no-such-page.md).\n")


def _leave_out_of_nav(project: Path) -> None:
    (project / "docs" / "orphan.md").write_text("# Orphan\n", encoding="utf-8")


def _bad_docstring(project: Path) -> None:
    source = (
        "def f(x: int) -> int:\n"
        '    """Do.\n'
        "\n"
        "    Args:\n"
        "        y (int): Not a parameter.\n"
        '    """\n'
        "    return x\n"
    )
    (project / "sample.py").write_text(source, encoding="utf-8")
    _append(project / "docs" / "api.md", "\n::: sample.f\n")


BREAKAGES: tuple[tuple[Callable[[Path], None], str], ...] = (
    (
        _break_anchor,
        (
            "WARNING -  Doc file 'tutorial.md' contains a link 'reference.md#no-such-heading', "
            "but the doc 'reference.md' does not contain an anchor '#no-such-heading'.\n"
        ),
    ),
    (
        _break_link,
        (
            "WARNING -  Doc file 'how-to/budgets.md' contains a link '../no-such-page.md', but "
            "the target 'no-such-page.md' is not found among documentation files.\n"
        ),
    ),
    (
        _leave_out_of_nav,
        (
            "WARNING -  The following pages exist in the docs directory, but are not included "
            'in the "nav" configuration:\n  - orphan.md\n'
        ),
    ),
    (
        _bad_docstring,
        (
            "WARNING -  griffe: sample.py:5: Parameter 'y' does not appear in the function "
            "signature\n"
        ),
    ),
)


def test_the_strict_build_rejects_broken_links_omitted_pages_and_docstring_warnings(
    tmp_path: Path,
) -> None:
    """Each breakage is a warning of its own, so each alone fails the strict build.

    One build with all of them keeps the suite fast; the exact count shows that
    the untouched copy adds no warning of its own.
    """
    project = copy_project(tmp_path / "project")
    for breakage, _ in BREAKAGES:
        breakage(project)
    broken = build(project, tmp_path / "site")
    assert broken.returncode == 1, broken.log
    for _, warning in BREAKAGES:
        assert warning in broken.log
    assert f"Aborted with {len(BREAKAGES)} warnings in strict mode!" in broken.log
