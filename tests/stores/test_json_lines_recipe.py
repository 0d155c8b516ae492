"""executionkit.stores.JsonLinesStore, the store of docs/how-to/incremental-checkpoints.md."""

from __future__ import annotations

import errno
import json
import os
import re
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
from executionkit.stores import JsonLinesStore, StaleCheckpointError
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


def chain(n: int, size: int = 20, *, fail_at: int | None = None) -> Workflow:
    def make(i: int) -> Step:
        def run(ctx: Any) -> PatternResult[str]:
            if i == fail_at:
                msg = f"step {i} failed"
                raise RuntimeError(msg)
            return PatternResult(f"{i:04d}" + "x" * (size - 4), cost=TokenUsage(i, 1, 1))

        return Step(f"s{i}", run, depends_on=(f"s{i - 1}",) if i else ())

    return Workflow([make(i) for i in range(n)])


def both(
    store: JsonLinesStore, kept: list[WorkflowCheckpoint]
) -> Callable[[WorkflowCheckpoint], None]:
    def save(checkpoint: WorkflowCheckpoint) -> None:
        store(checkpoint)
        kept.append(checkpoint)

    return save


def lines(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


def test_rebuild_equals_every_checkpoint_as_it_is_written(tmp_path: Path) -> None:
    """After each append, load() gives back exactly the checkpoint just stored."""
    store = JsonLinesStore(tmp_path / "run.jsonl")
    seen: list[bool] = []

    def save(checkpoint: WorkflowCheckpoint) -> None:
        store(checkpoint)
        seen.append(JsonLinesStore(store.path).load() == checkpoint)

    workflow = Workflow(
        [
            Step("a", lambda ctx: {"n": 1}, version="1"),
            Step("b", lambda ctx: [ctx["a"]], depends_on=("a",)),
            Step("c", lambda ctx: "c", depends_on=("a",)),
            Step("d", lambda ctx: None, depends_on=("b", "c")),
        ]
    )
    workflow.run_sync({"doc": 1}, checkpoint_fn=save, metadata={"job": "j"}, run_id="r1")
    assert seen == [True, True, True]


def test_the_lines_hold_only_new_outputs_in_the_documented_format(tmp_path: Path) -> None:
    """s, n (output and info), c, t; the first line also says which run the file holds."""
    store = JsonLinesStore(tmp_path / "run.jsonl")
    workflow = Workflow(
        [
            Step("a", lambda ctx: PatternResult("A", cost=TokenUsage(5, 2, 1)), version="v2"),
            Step("b", lambda ctx: ["B"], depends_on=("a",)),
        ]
    )
    kept: list[WorkflowCheckpoint] = []
    workflow.run_sync(
        {"doc": "secret"}, checkpoint_fn=both(store, kept), run_id="r", metadata={"k": 1}
    )
    first, second = lines(store.path)
    # The attempts running when a checkpoint was taken ("f", format 4), if any: b may
    # have started before the checkpoint of a was taken.
    running = [{"f": [list(a) for a in c.in_flight]} if c.in_flight else {} for c in kept]
    # When each attempt ran ("a", format 5): the entries of the attempts ended since.
    timed = [{"a": [list(e) for e in c.new_attempts]} if c.new_attempts else {} for c in kept]
    assert [[entry[:4] for entry in c.new_attempts] for c in kept] == [
        [("a", None, 1, "ok")],
        [("b", None, 1, "ok")],
    ]
    # Format 5: the fingerprint of the code that made each output ("c" in its info).
    code = {name: kept[-1].step_info[name]["code"] for name in ("a", "b")}
    assert first == {
        "s": 1,
        "n": {"a": ["A", {"v": "v2", "d": [], "c": code["a"]}]},
        "c": [5, 2, 1],
        "t": first["t"],
        "run": {"run_id": "r", "context_keys": ["doc"], "metadata": {"k": 1}, "keep": ["a"]},
        "l": [["a", None, 1, "ok", None, 5, 2, 1]],  # the ledger rows since the line before
        **timed[0],
        **running[0],
    }
    assert second == {
        "s": 2,
        "n": {"b": [["B"], {"v": None, "d": ["a"], "c": code["b"]}]},
        "c": [5, 2, 1],
        "t": second["t"],
        **timed[1],
        **running[1],
    }
    assert "secret" not in store.path.read_text(encoding="utf-8")


def test_a_torn_last_line_is_ignored(tmp_path: Path) -> None:
    """A crash mid-write leaves a partial line; load() returns the checkpoint before it."""
    store = JsonLinesStore(tmp_path / "run.jsonl")
    kept: list[WorkflowCheckpoint] = []
    chain(5).run_sync(checkpoint_fn=both(store, kept))
    text = store.path.read_text(encoding="utf-8")
    store.path.write_text(text[: len(text) - 10], encoding="utf-8")
    assert store.load() == kept[-2]


def test_a_complete_line_without_its_newline_does_not_count(tmp_path: Path) -> None:
    """A line counts once its newline is written, whatever came before it."""
    store = JsonLinesStore(tmp_path / "run.jsonl")
    kept: list[WorkflowCheckpoint] = []
    chain(3).run_sync(checkpoint_fn=both(store, kept))
    text = store.path.read_text(encoding="utf-8")
    store.path.write_text(text[:-1], encoding="utf-8")
    assert store.load() == kept[-2]


def test_a_damaged_last_line_with_its_newline_counts_as_torn(tmp_path: Path) -> None:
    """Power loss can leave garbage ending in a newline; only the last line may be so."""
    store = JsonLinesStore(tmp_path / "run.jsonl")
    kept: list[WorkflowCheckpoint] = []
    chain(3).run_sync(checkpoint_fn=both(store, kept))
    with store.path.open("a", encoding="utf-8") as file:
        file.write('{"s": 4, "n": {\n')
    assert JsonLinesStore(store.path).load() == kept[-1]


def test_a_run_resumed_after_a_torn_line_cuts_it_off_and_appends(tmp_path: Path) -> None:
    """The torn bytes are truncated before the next line, so the file stays readable."""
    path = tmp_path / "run.jsonl"
    kept: list[WorkflowCheckpoint] = []
    workflow = chain(4)
    workflow.run_sync(checkpoint_fn=both(JsonLinesStore(path), kept))
    text = path.read_text(encoding="utf-8")
    path.write_text(text[: len(text) - 7], encoding="utf-8")  # the last checkpoint is torn

    store = JsonLinesStore(path)
    restored = store.load()
    assert restored == kept[-2]
    result = workflow.run_sync(checkpoint_fn=both(store, kept), resume_from=restored)
    assert result.executed == ("s3",)
    assert JsonLinesStore(path).load() == kept[-1]
    assert [line["s"] for line in lines(path)] == [1, 2, 3, 4]


def test_a_write_that_fails_half_way_loses_only_that_checkpoint(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Disk full mid-append: the run stops; the same store's next save repairs the file."""
    store = JsonLinesStore(tmp_path / "run.jsonl")
    taken: list[WorkflowCheckpoint] = []
    chain(4).run_sync(checkpoint_fn=taken.append)
    store(taken[0])
    store(taken[1])
    real_write = os.write

    def write(fd: int, data: Any) -> int:
        real_write(fd, bytes(data[: len(data) // 2]))
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "write", write)
    with pytest.raises(OSError, match="No space left on device"):
        store(taken[2])
    monkeypatch.undo()
    assert not store.path.read_bytes().endswith(b"\n")  # a torn line was left behind
    assert JsonLinesStore(store.path).load() == taken[1]
    store(taken[2])
    store(taken[3])
    assert JsonLinesStore(store.path).load() == taken[3]
    assert [line["s"] for line in lines(store.path)] == [1, 2, 3, 4]


def test_a_damaged_line_in_the_middle_is_an_error(tmp_path: Path) -> None:
    """Only the last line may be torn; anything else means the file is not this store's."""
    store = JsonLinesStore(tmp_path / "run.jsonl")
    chain(4).run_sync(checkpoint_fn=store)
    text = store.path.read_text(encoding="utf-8").splitlines()
    text[1] = text[1][:5]
    store.path.write_text("\n".join(text) + "\n", encoding="utf-8")
    with pytest.raises(CheckpointFormatError) as caught:
        store.load()
    assert str(caught.value) == f"{store.path}:2: not a checkpoint line (invalid JSON)"
    damaged = store.path.read_bytes()
    with pytest.raises(CheckpointFormatError, match=re.escape(":2: not a checkpoint line")):
        JsonLinesStore(store.path)(WorkflowCheckpoint(0, {}, TokenUsage(), run_id="x"))
    assert store.path.read_bytes() == damaged  # never appended to


@pytest.mark.parametrize(
    ("line", "detail"),
    [
        ("[1, 2]", "not a JSON object"),
        ('{"s": "1", "n": {}, "c": [0, 0, 0]}', "'s' must be an int"),
        ('{"s": true, "n": {}, "c": [0, 0, 0]}', "'s' must be an int"),
        ('{"s": 2, "n": [], "c": [0, 0, 0]}', "'n' must be an object"),
        ('{"s": 2, "n": {}, "c": 5}', "'c' must be a list"),
        ('{"s": 2, "n": {}, "c": [0, 0]}', "'c' must hold three counts"),
        ('{"s": 2, "n": {"x": "out"}, "c": [0, 0, 0]}', "step 'x' must be [output, info]"),
        (
            '{"s": 2, "n": {"x": ["out", 7]}, "c": [0, 0, 0]}',
            "step 'x': step info must be a list, {'v', 'd'} (with 'k', 'c', 'a' if any) or null",
        ),
        (
            '{"s": 2, "n": {}, "c": [0, 0, 0], "progress_info": []}',
            "'progress_info' must be a dict",
        ),
        ('{"s": 2, "n": {}, "c": [0, 0, 0], "run": 3}', "'run' must be a dict"),
        (
            '{"s": 2, "n": {}, "c": [0, 0, 0], "run": {"keep": "a"}}',
            "'run.keep' must be a list",
        ),
        (
            '{"s": 2, "n": {}, "c": [0, 0, 0], "run": {"keep": ["ghost"]}}',
            "'run.keep' names 'ghost', which no line recorded",
        ),
    ],
)
def test_a_malformed_line_is_named_with_its_problem(
    tmp_path: Path, line: str, detail: str
) -> None:
    store = JsonLinesStore(tmp_path / "run.jsonl")
    chain(1).run_sync(checkpoint_fn=store, run_id="r")
    with store.path.open("a", encoding="utf-8") as file:
        file.write(line + "\n")
    with pytest.raises(CheckpointFormatError) as caught:
        store.load()
    assert str(caught.value) == f"{store.path}:2: not a checkpoint line ({detail})"


def test_lines_that_rebuild_an_invalid_checkpoint_are_an_error(tmp_path: Path) -> None:
    """Each line may look right while the whole does not: from_dict's message, with the file."""
    path = tmp_path / "run.jsonl"
    path.write_text('{"s": -1, "n": {}, "c": [0, 0, 0], "t": null}\n', encoding="utf-8")
    with pytest.raises(CheckpointFormatError) as caught:
        JsonLinesStore(path).load()
    assert str(caught.value) == (
        f"{path}: the lines do not rebuild into a valid checkpoint: checkpoint field 'seq' "
        f"must be a non-negative int, got int -1"
    )
    assert caught.value.path == "seq"


def test_progress_that_is_not_a_dict_is_named_by_the_rebuild(tmp_path: Path) -> None:
    path = tmp_path / "run.jsonl"
    path.write_text('{"s": 1, "n": {}, "c": [0, 0, 0], "t": null, "progress": 5}\n', "utf-8")
    with pytest.raises(CheckpointFormatError) as caught:
        JsonLinesStore(path).load()
    assert str(caught.value) == (
        f"{path}: the lines do not rebuild into a valid checkpoint: checkpoint field "
        f"'progress' must be a dict, got int 5"
    )


def test_empty_or_missing_file_holds_no_checkpoint(tmp_path: Path) -> None:
    """Nothing stored yet: load() says so with None."""
    store = JsonLinesStore(tmp_path / "run.jsonl")
    assert store.load() is None
    store.path.write_text("", encoding="utf-8")
    assert store.load() is None
    store.path.write_text("\n\n", encoding="utf-8")
    assert store.load() is None


def test_failed_run_then_resume_from_the_file(tmp_path: Path) -> None:
    """Failure, errors and progress are stored; a new process resumes and appends."""
    path = tmp_path / "run.jsonl"
    kept: list[WorkflowCheckpoint] = []

    async def slow(ctx: Any) -> str:
        await current_step().save_progress({"upto": 2})
        msg = "boom"
        raise RuntimeError(msg)

    failing = Workflow([Step("a", lambda ctx: "a"), Step("b", slow, depends_on=("a",))])
    with pytest.raises(WorkflowFailed) as caught:
        failing.run_sync(checkpoint_fn=both(JsonLinesStore(path), kept))
    loaded = JsonLinesStore(path).load()
    assert loaded == caught.value.checkpoint
    assert dict(loaded.errors) == {"b": "RuntimeError: boom"}
    assert dict(loaded.progress) == {"b": {"upto": 2}}

    fixed = Workflow([Step("a", lambda ctx: "a"), Step("b", lambda ctx: "b", depends_on=("a",))])
    result = fixed.run_sync(resume_from=loaded, checkpoint_fn=both(JsonLinesStore(path), kept))
    assert result.executed == ("b",)
    assert JsonLinesStore(path).load() == kept[-1]
    assert dict(kept[-1].outputs) == {"a": "a", "b": "b"}


def test_outputs_dropped_on_resume_do_not_come_back(tmp_path: Path) -> None:
    """A rerun drops recorded outputs; the file says so and a rebuild agrees."""
    path = tmp_path / "run.jsonl"
    kept: list[WorkflowCheckpoint] = []
    workflow = chain(4)
    workflow.run_sync(checkpoint_fn=both(JsonLinesStore(path), kept))
    stored = JsonLinesStore(path).load()
    assert stored is not None
    mid: list[WorkflowCheckpoint] = []

    def stop_after_first(checkpoint: WorkflowCheckpoint) -> None:
        JsonLinesStore(path)(checkpoint)
        mid.append(checkpoint)
        if len(mid) == 1:
            msg = "process dies after the first checkpoint of the rerun"
            raise RuntimeError(msg)

    with pytest.raises(RuntimeError, match="process dies"):
        workflow.run_sync(resume_from=stored, rerun=["s2"], checkpoint_fn=stop_after_first)
    rebuilt = JsonLinesStore(path).load()
    assert rebuilt == mid[0]
    assert list(rebuilt.outputs) == ["s0", "s1", "s2"]


def test_new_metadata_on_resume_is_stored(tmp_path: Path) -> None:
    """Metadata passed again on resume changes what the file holds, without a drop."""
    store = JsonLinesStore(tmp_path / "run.jsonl")
    kept: list[WorkflowCheckpoint] = []
    workflow = chain(3, fail_at=2)
    with pytest.raises(WorkflowFailed):
        workflow.run_sync(checkpoint_fn=both(store, kept), metadata={"attempt": 1})
    restored = store.load()
    chain(3).run_sync(
        checkpoint_fn=both(store, kept), resume_from=restored, metadata={"attempt": 2}
    )
    loaded = JsonLinesStore(store.path).load()
    assert loaded == kept[-1]
    assert dict(loaded.metadata) == {"attempt": 2}


def test_a_checkpoint_from_elsewhere_is_written_whole(tmp_path: Path) -> None:
    """Resuming into an empty file, the first line holds every output, not just the new ones."""
    kept: list[WorkflowCheckpoint] = []
    with pytest.raises(WorkflowFailed) as caught:
        chain(3, fail_at=2).run_sync(checkpoint_fn=kept.append)
    store = JsonLinesStore(tmp_path / "elsewhere.jsonl")
    chain(3).run_sync(checkpoint_fn=both(store, kept), resume_from=caught.value.checkpoint)
    assert kept[-1].new_outputs == ("s2",)
    assert list(lines(store.path)[0]["n"]) == ["s0", "s1", "s2"]
    assert store.load() == kept[-1]


def test_another_run_starts_the_file_over(tmp_path: Path) -> None:
    """A checkpoint of a different run_id replaces what the file holds."""
    store = JsonLinesStore(tmp_path / "run.jsonl")
    chain(3).run_sync(checkpoint_fn=store, run_id="first")
    kept: list[WorkflowCheckpoint] = []
    chain(2).run_sync(checkpoint_fn=both(store, kept), run_id="second")
    loaded = JsonLinesStore(store.path).load()
    assert loaded == kept[-1]
    assert loaded.run_id == "second"
    assert list(loaded.outputs) == ["s0", "s1"]


def test_a_stale_checkpoint_is_refused_and_the_same_one_again_is_harmless(tmp_path: Path) -> None:
    store = JsonLinesStore(tmp_path / "run.jsonl")
    kept: list[WorkflowCheckpoint] = []
    chain(3).run_sync(checkpoint_fn=both(store, kept), run_id="r")
    size = store.path.stat().st_size
    store(kept[-1])
    store(WorkflowCheckpoint.from_dict(kept[-1].to_dict()))
    assert store.path.stat().st_size == size
    with pytest.raises(StaleCheckpointError) as caught:
        JsonLinesStore(store.path)(kept[0])
    assert str(caught.value) == (
        f"JsonLinesStore({str(store.path)!r}): refused checkpoint seq=1 of run 'r': the store "
        f"already holds seq=3 of that run, written by another writer or before this run resumed "
        f"from an older checkpoint; resume from the store's load() instead"
    )
    assert store.path.stat().st_size == size


def test_a_hand_made_checkpoint_without_step_info_round_trips(tmp_path: Path) -> None:
    store = JsonLinesStore(tmp_path / "run.jsonl")
    checkpoint = WorkflowCheckpoint(1, {"a": [1, 2]}, TokenUsage(3, 4, 5), run_id="r", seq=1)
    store(checkpoint)
    assert lines(store.path)[0]["n"] == {"a": [[1, 2], None]}
    assert JsonLinesStore(store.path).load() == checkpoint


def test_checkpoints_of_older_formats_are_refused(tmp_path: Path) -> None:
    store = JsonLinesStore(tmp_path / "run.jsonl")
    old = WorkflowCheckpoint(0, {}, TokenUsage(), version=1, run_id="r")
    with pytest.raises(ValueError) as caught:
        store(old)
    assert str(caught.value) == (
        f"JsonLinesStore({str(store.path)!r}) stores checkpoints of format version 5 (what "
        f"Workflow.run writes), got version 1; resume from it and store the run's own checkpoints"
    )
    assert not store.path.exists()


def test_an_output_json_cannot_hold_names_the_step(tmp_path: Path) -> None:
    store = JsonLinesStore(tmp_path / "run.jsonl")
    workflow = Workflow([Step("a", lambda ctx: "ok"), Step("b", lambda ctx: {"tags": {1, 2}})])
    with pytest.raises(ValueError) as caught:
        workflow.run_sync(checkpoint_fn=store, run_id="r")
    assert str(caught.value) == (
        f"JsonLinesStore({str(store.path)!r}): cannot store checkpoint seq=1 of run 'r': the "
        f"output of step 'b' at ['tags']: {{1, 2}} (set) is not JSON data; stores write JSON, "
        f"so steps must return dicts, lists, str, int, finite float, bool or None (or give the "
        f"Step encode/decode; run with validate_json=True to catch this when the step returns)"
    )
    assert store.load() is None


def test_bytes_written_stay_close_to_the_output_bytes(tmp_path: Path) -> None:
    """A 200-step chain of 1 KB outputs: at most 1.1x the outputs' own JSON bytes."""
    store = JsonLinesStore(tmp_path / "run.jsonl")
    kept: list[WorkflowCheckpoint] = []
    result = chain(200, size=1000).run_sync(checkpoint_fn=both(store, kept))
    output_bytes = sum(len(json.dumps(value)) for value in result.outputs.values())
    written = store.path.stat().st_size
    assert store.load() is not None
    # Format 4 data, written once each: the ledger rows (one per step here), and in
    # each line the attempts running when its checkpoint was taken (the next step's).
    format_4 = sum(
        len(json.dumps([row.to_list() for row in c.new_ledger]))
        + len(json.dumps([list(attempt) for attempt in c.in_flight]))
        for c in kept
    )
    # Format 5's fingerprint of the code that made each output, written with it once.
    format_5 = sum(
        fingerprint_bytes(c.step_info.get(name)) for c in kept for name in c.new_outputs
    )
    # And format 5's entry of each attempt that ended, when it ran: written once too.
    format_5 += sum(
        len(json.dumps([list(entry) for entry in c.new_attempts], separators=(",", ":")))
        for c in kept
    )
    assert written <= 1.1 * output_bytes + format_4 + format_5
    full_snapshots = tmp_path / "full.json"
    total = 0

    def full(checkpoint: WorkflowCheckpoint) -> None:
        nonlocal total
        total += full_snapshots.write_text(json.dumps(checkpoint.to_dict()), encoding="utf-8")

    chain(200, size=1000).run_sync(checkpoint_fn=full)
    assert total > 50 * output_bytes  # full snapshots grow with the square of the length
