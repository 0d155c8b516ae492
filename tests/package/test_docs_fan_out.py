"""The fan-out how-to shows what ``executionkit inspect`` prints for its failed run.

`tests/package/test_docs.py` runs the page's python blocks and compares what they print. The
page also shows an ``inspect`` of the checkpoint file its failed run left, as a shell
session that no test would run: this test replays the blocks up to that run, imports
the page's workflow as the module the session names, runs ``inspect`` on the file, and
compares with what the page shows (``...`` matching any lines, as in test_docs).
"""

from __future__ import annotations

import sys
import tempfile
import types
from typing import TYPE_CHECKING

from test_docs import ROOT, output_matches, parse_blocks, run_block

from executionkit._cli import main
from executionkit.stores import JsonFileStore

if TYPE_CHECKING:
    from pathlib import Path

    import pytest

PAGE = "docs/how-to/fan-out.md"


def _session(text: str, command: str) -> tuple[str, str]:
    """The command line of the shown session starting ``$ command``, and what follows it."""
    blocks = [block for block in parse_blocks(text, PAGE) if block.lang == "text"]
    (shown,) = [block for block in blocks if block.source.startswith(f"$ {command}")]
    first, _, rest = shown.source.partition("\n")
    return first.removeprefix("$ "), rest


def test_the_inspect_the_page_shows_is_what_inspect_prints(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    text = (ROOT / PAGE).read_text(encoding="utf-8")
    command, expected = _session(text, "executionkit inspect")
    examples = [block for block in parse_blocks(text, PAGE) if block.lang == "python"]
    namespace: dict[str, object] = {"__name__": "__main__"}
    for block in examples:
        run_block(block, namespace)
        if "WorkflowFailed" in block.source:  # the failed run: its file is what is shown
            break
    store = namespace["store"]
    assert isinstance(store, JsonFileStore)
    module = types.ModuleType("report")
    module.workflow = namespace["workflow"]  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "report", module)
    args = command.split()[1:]
    assert args[:2] == ["inspect", "summaries.json"]
    assert main(["inspect", str(store.path), *args[2:]]) == 0
    printed = capsys.readouterr().out
    assert "items       summaries: 3 of 5 items recorded" in printed
    assert output_matches(expected, printed), printed
