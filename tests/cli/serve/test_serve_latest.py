"""The page reads each run's latest checkpoint again only when its seq moved."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pytest

from executionkit import Step, Workflow
from executionkit._cli._location import parse_location
from executionkit._cli._serve._runs import Source
from executionkit.stores import SQLiteStore

if TYPE_CHECKING:
    from pathlib import Path


def test_a_run_is_loaded_again_only_when_it_moved(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = SQLiteStore(tmp_path / "runs.db")
    flow = Workflow([Step("a", lambda ctx: 1), Step.ask("q", lambda ctx: "?", depends_on=("a",))])
    flow.run_sync(checkpoint_fn=store, run_id="r")
    source = Source(parse_location(f"sqlite:///{tmp_path}/runs.db"), None)
    loads: list[str] = []
    original = SQLiteStore.load

    def counted(self: SQLiteStore, run_id: str | None = None, **kwargs: Any) -> Any:
        loads.append(run_id or "")
        return original(self, run_id, **kwargs)

    monkeypatch.setattr(SQLiteStore, "load", counted)
    for _ in range(3):
        with source.reading() as reader:
            seen = source.latest(reader, "r", (reader.seqs() or {}).get("r"))
        assert seen is not None
        assert list(seen.pending) == ["q"]
    assert loads == ["r"]  # read once, then served as it was
    latest = store.load("r")
    assert latest is not None
    flow.run_sync(checkpoint_fn=store, resume_from=latest, answers={"q": "yes"})
    with source.reading() as reader:
        moved = source.latest(reader, "r", (reader.seqs() or {}).get("r"))
    assert moved is not None
    assert moved.outputs["q"] == "yes"  # the run moved: loaded again
    assert loads == ["r", "r", "r"]  # the test's own load, then the page's


def test_a_failed_map_with_items_recorded_is_one_row_without_the_workflow(tmp_path: Path) -> None:
    """Seen by eye in a screenshot: the map's name is in ``errors`` and in ``items``."""
    from executionkit import WorkflowFailed  # noqa: PLC0415
    from executionkit._cli._serve._runs import step_views  # noqa: PLC0415

    def item(value: int, ctx: Any) -> int:
        if value == 2:
            msg = "unlucky"
            raise ValueError(msg)
        return value

    flow = Workflow([Step("items", lambda ctx: [1, 2, 3]), Step.map("each", item, over="items")])
    saved: list[Any] = []
    with pytest.raises(WorkflowFailed):
        flow.run_sync(checkpoint_fn=saved.append)
    checkpoint = saved[-1]
    assert "each" in checkpoint.errors
    assert "each" in checkpoint.items
    views = step_views(checkpoint, None, {}, {})
    assert [view.name for view in views] == ["items", "each"]
