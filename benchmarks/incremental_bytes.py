"""Bytes written by JsonLinesStore versus full snapshots (issue target: <= 1.1x).

Runs a 1,000-step chain whose steps return 1 KB strings twice: once appending
each checkpoint's new outputs as one JSON line (`executionkit.stores.JsonLinesStore`,
see docs/how-to/incremental-checkpoints.md), once writing the full checkpoint as
JSON after every batch. Prints a Markdown table.

    python benchmarks/incremental_bytes.py [--steps 1000] [--size 1000]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from executionkit import Step, Workflow, WorkflowCheckpoint  # noqa: E402
from executionkit.stores import JsonLinesStore  # noqa: E402


def chain(steps: int, size: int) -> Workflow:
    def make(i: int) -> Step:
        text = f"{i:06d}".ljust(size, "x")
        return Step(f"s{i}", lambda _ctx: text, depends_on=(f"s{i - 1}",) if i else ())

    return Workflow([make(i) for i in range(steps)])


def main() -> None:
    """Measure and print the table."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=1000)
    parser.add_argument("--size", type=int, default=1000, help="characters per output")
    args = parser.parse_args()
    workflow = chain(args.steps, args.size)
    with tempfile.TemporaryDirectory() as folder:
        store = JsonLinesStore(Path(folder) / "run.jsonl")
        result = workflow.run_sync(checkpoint_fn=store)
        appended = store.path.stat().st_size
        full = Path(folder) / "full.json"
        rewritten = 0

        def snapshot(checkpoint: WorkflowCheckpoint) -> None:
            nonlocal rewritten
            rewritten += full.write_text(json.dumps(checkpoint.to_dict()), encoding="utf-8")

        workflow.run_sync(checkpoint_fn=snapshot)
    outputs = sum(len(json.dumps(value)) for value in result.outputs.values())
    print(f"| {args.steps:,}-step chain, {args.size:,}-char outputs | bytes | x outputs |")
    print("| --- | ---: | ---: |")
    print(f"| outputs as JSON | {outputs:,} | 1.00 |")
    print(f"| JsonLinesStore (new outputs only) | {appended:,} | {appended / outputs:.3f} |")
    print(f"| full snapshot after every batch | {rewritten:,} | {rewritten / outputs:.1f} |")


if __name__ == "__main__":
    main()
