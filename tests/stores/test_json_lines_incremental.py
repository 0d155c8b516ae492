"""JsonLinesStore writes and computes only what is new, rebuilds exactly, and compacts safely."""

from __future__ import annotations

import asyncio
import json
import os
from typing import TYPE_CHECKING, Any

import pytest

from executionkit import (
    CheckpointFormatError,
    PatternResult,
    Step,
    TokenUsage,
    Workflow,
    WorkflowCheckpoint,
    WorkflowFailed,
    current_step,
)
from executionkit.stores import JsonLinesStore
from executionkit.stores._lines_format import pack_info

if TYPE_CHECKING:
    from collections.abc import Callable
    from pathlib import Path


def fingerprint_bytes(info: Any) -> int:
    """What format 5's code fingerprint adds to a line's packed step info (decision 0018)."""
    if info is None or "code" not in info:
        return 0
    without = {key: value for key, value in info.items() if key != "code"}
    packed = json.dumps(pack_info(info), separators=(",", ":"))
    return len(packed) - len(json.dumps(pack_info(without), separators=(",", ":")))


def chain(n: int, size: int = 20, *, fail_at: int | None = None, tag: str = "") -> Workflow:
    def make(i: int) -> Step:
        def run(_ctx: Any) -> PatternResult[str]:
            if i == fail_at:
                msg = f"step {i} failed"
                raise RuntimeError(msg)
            text = f"{tag}{i:05d}"
            return PatternResult(text + "x" * (size - len(text)), cost=TokenUsage(i, 1, 1))

        return Step(f"s{i}", run, depends_on=(f"s{i - 1}",) if i else ())

    return Workflow([make(i) for i in range(n)])


class Exact:
    """A checkpoint_fn that saves, then checks a fresh store's load() rebuilds it exactly."""

    def __init__(self, path: Path) -> None:
        self.store = JsonLinesStore(path)
        self.saved: list[WorkflowCheckpoint] = []

    def __call__(self, checkpoint: WorkflowCheckpoint) -> None:
        self.store(checkpoint)
        self.saved.append(checkpoint)
        loaded = JsonLinesStore(self.store.path).load()
        assert loaded is not None
        assert loaded.to_dict() == checkpoint.to_dict()
        assert list(loaded.outputs) == list(checkpoint.outputs)  # the order too
        assert list(loaded.step_info) == list(checkpoint.step_info)


def lines(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


# --- exact rebuild -----------------------------------------------------------------------


def test_exact_rebuild_across_failure_progress_resume_rerun_and_discard(tmp_path: Path) -> None:
    """Every checkpoint of five runs on one file rebuilds to its to_dict(), order included."""
    exact = Exact(tmp_path / "run.jsonl")

    async def stuck(_ctx: Any) -> str:
        await current_step().save_progress({"done": 1})
        msg = "the model timed out"
        raise RuntimeError(msg)

    def steps(last: Callable[..., Any]) -> list[Step]:
        return [
            Step("a", lambda _ctx: {"n": 1}, version="v1"),
            Step("b", lambda ctx: [ctx["a"]], depends_on=("a",)),
            Step("c", lambda _ctx: "c", depends_on=("a",)),
            Step("d", last, depends_on=("b", "c")),
            Step("e", lambda _ctx: "e", depends_on=("d",)),
        ]

    with pytest.raises(WorkflowFailed):
        Workflow(steps(stuck)).run_sync(checkpoint_fn=exact, run_id="r", metadata={"k": 1})
    assert exact.saved[-1].progress
    Workflow(steps(lambda _ctx: "d")).run_sync(checkpoint_fn=exact, resume_from=exact.store.load())
    # rerun: b is replaced, and its new output comes after the ones kept
    Workflow(steps(lambda _ctx: "d")).run_sync(
        checkpoint_fn=exact, resume_from=exact.store.load(), rerun=["b"]
    )
    assert list(exact.saved[-1].outputs) == ["a", "c", "b", "d", "e"]
    # discard: steps the workflow no longer has are dropped
    smaller = Workflow(steps(lambda _ctx: "d")[:3])
    smaller.run_sync(
        checkpoint_fn=exact, resume_from=exact.store.load(), unknown_steps="discard", rerun=["c"]
    )
    assert list(exact.saved[-1].outputs) == ["a", "b", "c"]
    assert len(exact.saved) >= 10  # every one was checked as it was written


async def test_outputs_that_land_mid_batch_out_of_order_rebuild_in_the_checkpoints_order(
    tmp_path: Path,
) -> None:
    """x lands before b; checkpoints taken mid-batch list them in declaration order."""
    exact = Exact(tmp_path / "run.jsonl")
    release_b = asyncio.Event()

    async def x(_ctx: Any) -> str:
        return "x"

    async def b(_ctx: Any) -> str:
        await release_b.wait()
        return "b"

    async def c(_ctx: Any) -> str:
        for _ in range(5):  # yield to the loop (no timing): x lands meanwhile
            await asyncio.sleep(0)
        await current_step().save_progress(1)
        release_b.set()
        for _ in range(5):  # and now b
            await asyncio.sleep(0)
        await current_step().save_progress(2)
        return "c"

    workflow = Workflow(
        [
            Step("a", lambda _ctx: "a"),
            Step("b", b, depends_on=("a",)),
            Step("x", x, depends_on=("a",)),
            Step("c", c, depends_on=("a",)),
        ]
    )
    await workflow.run(checkpoint_fn=exact)
    assert [(list(cp.outputs), cp.new_outputs) for cp in exact.saved] == [
        (["a"], ("a",)),
        (["a", "x"], ("x",)),
        (["a", "b", "x"], ("b",)),  # b comes before x, which an earlier line recorded
        (["a", "b", "x", "c"], ("c",)),
    ]


def test_a_checkpoint_fn_that_skips_checkpoints_still_rebuilds_exactly(tmp_path: Path) -> None:
    """Saving every third checkpoint: new_outputs no longer cover the gap, so all are compared."""
    exact = Exact(tmp_path / "run.jsonl")
    chain(10).run_sync(
        checkpoint_fn=lambda checkpoint: exact(checkpoint) if checkpoint.seq % 3 == 1 else None
    )
    assert [checkpoint.seq for checkpoint in exact.saved] == [1, 4, 7, 10]
    assert [list(line["n"]) for line in lines(exact.store.path)][1:] == [
        ["s1", "s2", "s3"],
        ["s4", "s5", "s6"],
        ["s7", "s8", "s9"],
    ]


def test_a_checkpoint_read_back_with_from_dict_is_compared_with_the_file(tmp_path: Path) -> None:
    """Empty new_outputs: the store writes the outputs the file lacks or holds differently."""
    taken: list[WorkflowCheckpoint] = []
    chain(4).run_sync(checkpoint_fn=taken.append)
    exact = Exact(tmp_path / "run.jsonl")
    exact(taken[1])
    exact(WorkflowCheckpoint.from_dict(json.loads(json.dumps(taken[3].to_dict()))))
    assert list(lines(exact.store.path)[1]["n"]) == ["s2", "s3"]


def test_a_resumed_run_in_another_process_compares_once_then_appends(tmp_path: Path) -> None:
    """Resuming from load(), the first checkpoint is compared; later ones follow it."""
    path = tmp_path / "run.jsonl"
    with pytest.raises(WorkflowFailed):
        chain(6, fail_at=3).run_sync(checkpoint_fn=JsonLinesStore(path))
    exact = Exact(path)
    chain(6).run_sync(checkpoint_fn=exact, resume_from=exact.store.load())
    assert [list(line["n"]) for line in lines(path)][-3:] == [["s3"], ["s4"], ["s5"]]
    assert all("run" not in line for line in lines(path)[1:])


# --- constant cost -----------------------------------------------------------------------


def test_bytes_appended_per_checkpoint_are_its_new_outputs_plus_a_bounded_header(
    tmp_path: Path,
) -> None:
    """2,000 steps of 1 KB: each line is its output plus at most 120 bytes; 1.2x in all."""
    store = JsonLinesStore(tmp_path / "run.jsonl")
    sizes: list[tuple[int, int]] = []

    def save(checkpoint: WorkflowCheckpoint) -> None:
        before = store.path.stat().st_size if store.path.exists() else 0
        store(checkpoint)
        new = sum(len(json.dumps(checkpoint.outputs[name])) for name in checkpoint.new_outputs)
        # Each ledger row is written once too, in the line of the checkpoint that added it,
        # and the attempts running when it was taken (the next step's): format 4 data.
        rows = [row.to_list() for row in checkpoint.new_ledger]
        new += len(json.dumps(rows, separators=(",", ":"))) if rows else 0
        running = [list(attempt) for attempt in checkpoint.in_flight]
        new += len(json.dumps(running, separators=(",", ":"))) if running else 0
        # And format 5's fingerprint of the code that made each new output.
        info = checkpoint.step_info
        new += sum(fingerprint_bytes(info.get(name)) for name in checkpoint.new_outputs)
        # And format 5's entry of each attempt that ended (when it ran), written once.
        timed = [list(entry) for entry in checkpoint.new_attempts]
        key = len(',"a":')
        attempt_bytes.append(key + len(json.dumps(timed, separators=(",", ":"))) if timed else 0)
        new += attempt_bytes[-1]
        sizes.append((store.path.stat().st_size - before, new))

    attempt_bytes: list[int] = []
    result = chain(2000, size=1000).run_sync(checkpoint_fn=save, run_id="r")
    output_bytes = sum(len(json.dumps(value)) for value in result.outputs.values())
    assert sum(attempt_bytes) <= 2000 * 60  # one entry per step, at most 60 bytes with its key
    assert store.path.stat().st_size <= 1.2 * output_bytes + sum(attempt_bytes)
    assert max(written - new for written, new in sizes[1:]) <= 120
    assert sizes[0][0] - sizes[0][1] <= 250  # the first line also says which run


class Counted(dict[str, Any]):
    """An output that counts how often it is serialised (json asks a dict subclass for items)."""

    touched = 0

    def items(self) -> Any:
        Counted.touched += 1
        return super().items()


def test_earlier_outputs_are_never_serialised_again_nor_the_checkpoint_converted(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each save serialises its new outputs only, and never calls to_dict on the checkpoint."""
    converted: list[int] = []
    to_dict = WorkflowCheckpoint.to_dict

    def counting_to_dict(self: WorkflowCheckpoint) -> dict[str, Any]:
        converted.append(len(self.outputs))
        return to_dict(self)

    monkeypatch.setattr(WorkflowCheckpoint, "to_dict", counting_to_dict)

    def make(i: int) -> Step:
        def run(_ctx: Any) -> Counted:
            return Counted(i=i)

        return Step(f"s{i}", run, depends_on=(f"s{i - 1}",) if i else ())

    workflow = Workflow([make(i) for i in range(300)])
    store = JsonLinesStore(tmp_path / "run.jsonl")
    touched: list[int] = []

    def save(checkpoint: WorkflowCheckpoint) -> None:
        Counted.touched = 0
        store(checkpoint)
        touched.append(Counted.touched)

    workflow.run_sync(checkpoint_fn=save)
    assert touched == [1] * 300
    assert set(converted) == {0}  # only the small copy that finds keys of later formats
    monkeypatch.undo()
    assert len(JsonLinesStore(store.path).load().outputs) == 300  # type: ignore[union-attr]


# --- later format keys -------------------------------------------------------------------


def test_lines_of_format_2_have_no_extra_fields(tmp_path: Path) -> None:
    store = JsonLinesStore(tmp_path / "run.jsonl")
    chain(3).run_sync(checkpoint_fn=store)
    assert all("x" not in line for line in lines(store.path))


@pytest.mark.parametrize(
    ("extra", "problem"),
    [
        ("[]", "not a checkpoint line ('x' must be a dict of the fields a line has no key for)"),
        (
            '{"seq": 5}',
            "not a checkpoint line ('x' must be a dict of the fields a line has no key for)",
        ),
    ],
)
def test_a_malformed_extra_field_is_damage(tmp_path: Path, extra: str, problem: str) -> None:
    path = tmp_path / "run.jsonl"
    path.write_text(f'{{"s": 1, "n": {{}}, "c": [0, 0, 0], "x": {extra}}}\n', encoding="utf-8")
    with pytest.raises(CheckpointFormatError) as caught:
        JsonLinesStore(path).load()
    assert str(caught.value) == f"{path}:1: {problem}"


def test_an_extra_field_this_format_lacks_is_named_by_the_rebuild(tmp_path: Path) -> None:
    """Carried as it is, a key of a later format reaches from_dict, which names it."""
    path = tmp_path / "run.jsonl"
    path.write_text('{"s": 1, "n": {}, "c": [0, 0, 0], "x": {"later": {}}}\n', encoding="utf-8")
    with pytest.raises(CheckpointFormatError) as caught:
        JsonLinesStore(path).load()
    message = str(caught.value)
    assert message.startswith(f"{path}: the lines do not rebuild into a valid checkpoint: ")
    assert "'later'" in message


# --- compaction --------------------------------------------------------------------------


def resumed_twice(path: Path) -> list[WorkflowCheckpoint]:
    """A file holding a run, a rerun of s1 and a rerun of s2: lines that no longer count."""
    exact = Exact(path)
    workflow = chain(5, size=200)
    workflow.run_sync(checkpoint_fn=exact, run_id="r")
    for step in ("s1", "s2"):
        workflow.run_sync(checkpoint_fn=exact, resume_from=exact.store.load(), rerun=[step])
    return exact.saved


def test_compact_leaves_one_line_that_rebuilds_the_latest_checkpoint(tmp_path: Path) -> None:
    path = tmp_path / "run.jsonl"
    saved = resumed_twice(path)
    before = path.stat().st_size
    store = JsonLinesStore(path)
    store.compact()
    assert len(lines(path)) == 1
    assert path.stat().st_size < before / 2
    loaded = JsonLinesStore(path).load()
    assert loaded is not None
    assert loaded.to_dict() == saved[-1].to_dict()
    assert list(loaded.outputs) == list(saved[-1].outputs)
    assert not [p for p in tmp_path.iterdir() if p.name != "run.jsonl"]  # no temporary file
    # the same store keeps appending to the compacted file, and refuses stale writers
    exact = Exact(path)
    chain(5, size=200).run_sync(checkpoint_fn=exact, resume_from=loaded, rerun=["s3"])
    assert len(lines(path)) == 3  # the compacted line and two more


def test_compact_of_a_missing_or_empty_file_does_nothing(tmp_path: Path) -> None:
    store = JsonLinesStore(tmp_path / "run.jsonl")
    store.compact()
    assert not store.path.exists()
    store.path.write_bytes(b"")
    store.compact()
    assert store.path.read_bytes() == b""


def test_a_crash_during_compaction_leaves_the_old_file_intact(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The rename fails (as if the process died before it): the old lines stay, and count."""
    path = tmp_path / "run.jsonl"
    saved = resumed_twice(path)
    before = path.read_bytes()
    store = JsonLinesStore(path)

    def fail(*_args: object) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "replace", fail)
    with pytest.raises(OSError, match="No space left on device"):
        store.compact()
    monkeypatch.undo()
    assert path.read_bytes() == before
    assert [p.name for p in tmp_path.iterdir()] == ["run.jsonl"]  # the temporary file is gone
    assert store.load() == saved[-1]
    store.compact()
    assert JsonLinesStore(path).load() == saved[-1]


def test_compact_refuses_a_damaged_file_and_leaves_it(tmp_path: Path) -> None:
    path = tmp_path / "run.jsonl"
    path.write_text('{"s": 1}\n{"s": 2, "n": {}, "c": [0, 0, 0]}\n', encoding="utf-8")
    with pytest.raises(CheckpointFormatError, match=r"run\.jsonl:1: not a checkpoint line"):
        JsonLinesStore(path).compact()
    assert len(lines(path)) == 2
