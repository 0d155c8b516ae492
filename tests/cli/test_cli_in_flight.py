"""``executionkit inspect`` shows what may be spending: attempts in flight, map items counted."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

from executionkit import TokenUsage, WorkflowCheckpoint
from executionkit._cli import main

if TYPE_CHECKING:
    from pathlib import Path

    import pytest


def _inspect(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str]:
    try:
        code = main(["inspect", *args])
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else 1
    return code, capsys.readouterr().out


def test_inspect_lists_attempts_in_flight_and_counts_a_map_s_items(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    checkpoint = WorkflowCheckpoint(
        step_index=1,
        outputs={"split": [1, 2, 3]},
        cost=TokenUsage(),
        run_id="r",
        seq=3,
        in_flight=(("report", None, 2),),
        in_flight_items={"chunks": 3, "one": 1},
    )
    path = tmp_path / "run.json"
    path.write_text(json.dumps(checkpoint.to_dict()), encoding="utf-8")
    code, out = _inspect(capsys, str(path))
    assert code == 0
    lines = out.splitlines()
    at = next(n for n, line in enumerate(lines) if line.startswith("in flight"))
    assert lines[at : at + 3] == [
        "in flight   report, attempt 2",
        "            chunks: 3 items",
        "            one: 1 item",
    ]
    code, out = _inspect(capsys, str(path), "--json")
    summary = json.loads(out)
    assert summary["in_flight"] == [["report", None, 2]]
    assert summary["in_flight_items"] == {"chunks": 3, "one": 1}
