"""JsonLinesStore keeps its file open between saves: reopened when replaced, closed, not shared."""

from __future__ import annotations

import asyncio
import gc
import os
import shutil
from typing import TYPE_CHECKING, Any

import pytest

from executionkit import Step, Workflow, WorkflowCheckpoint
from executionkit.stores import JsonLinesStore

if TYPE_CHECKING:
    from pathlib import Path


async def _one(ctx: Any) -> int:
    del ctx
    return 1


def _checkpoints(steps: int) -> list[WorkflowCheckpoint]:
    saved: list[WorkflowCheckpoint] = []
    workflow = Workflow(
        Step(f"s{i}", _one, depends_on=(f"s{i - 1}",) if i else ()) for i in range(steps)
    )
    asyncio.run(workflow.run(checkpoint_fn=saved.append, checkpoint_every="step"))
    return saved


def _closed(fd: int) -> bool:
    try:
        os.fstat(fd)
    except OSError:
        return True
    return False


def _fd(store: JsonLinesStore) -> int:
    opened = store._open
    assert opened is not None
    return opened.fd


def test_a_file_replaced_between_two_saves_is_written_through_a_new_descriptor(
    tmp_path: Path,
) -> None:
    checkpoints = _checkpoints(3)
    path = tmp_path / "run.jsonl"
    store = JsonLinesStore(path)
    store(checkpoints[0])
    store(checkpoints[1])
    # Another process replaces the file (same lines, another inode), as a compaction does.
    copy = tmp_path / "copy.jsonl"
    shutil.copyfile(path, copy)
    copy.replace(path)
    store(checkpoints[2])
    loaded = JsonLinesStore(path).load()
    assert loaded is not None
    assert loaded.to_dict() == checkpoints[2].to_dict()
    assert len(path.read_bytes().splitlines()) == 3
    store.close()


def test_a_file_deleted_between_two_saves_is_created_again(tmp_path: Path) -> None:
    checkpoints = _checkpoints(2)
    path = tmp_path / "run.jsonl"
    store = JsonLinesStore(path)
    store(checkpoints[0])
    path.unlink()
    store(checkpoints[1])
    loaded = JsonLinesStore(path).load()
    assert loaded is not None
    assert loaded.to_dict() == checkpoints[1].to_dict()
    store.close()


def test_compact_closes_the_descriptor_and_the_next_save_appends_to_the_new_file(
    tmp_path: Path,
) -> None:
    checkpoints = _checkpoints(3)
    path = tmp_path / "run.jsonl"
    store = JsonLinesStore(path)
    store(checkpoints[0])
    store(checkpoints[1])
    fd = _fd(store)
    store.compact()
    assert _closed(fd)
    store(checkpoints[2])
    assert len(path.read_bytes().splitlines()) == 2
    loaded = JsonLinesStore(path).load()
    assert loaded is not None
    assert loaded.to_dict() == checkpoints[2].to_dict()
    store.close()


def test_the_descriptor_is_reused_closed_by_close_and_reopened_by_the_next_save(
    tmp_path: Path,
) -> None:
    checkpoints = _checkpoints(3)
    path = tmp_path / "run.jsonl"
    store = JsonLinesStore(path)
    store(checkpoints[0])
    fd = _fd(store)
    store(checkpoints[1])
    assert _fd(store) == fd
    store.close()
    assert _closed(fd)
    store.close()  # twice is harmless
    store(checkpoints[2])
    loaded = JsonLinesStore(path).load()
    assert loaded is not None
    assert loaded.to_dict() == checkpoints[2].to_dict()
    store.close()


def test_the_descriptor_is_closed_with_the_store(tmp_path: Path) -> None:
    checkpoints = _checkpoints(1)
    store = JsonLinesStore(tmp_path / "run.jsonl")
    store(checkpoints[0])
    fd = _fd(store)
    del store
    gc.collect()
    assert _closed(fd)


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_a_forked_child_opens_its_own_descriptor(tmp_path: Path) -> None:
    checkpoints = _checkpoints(3)
    path = tmp_path / "run.jsonl"
    store = JsonLinesStore(path)
    store(checkpoints[0])
    fd = _fd(store)
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child, measured by its exit status
        code = 1
        try:
            store(checkpoints[1])
            opened = store._open
            code = 0 if opened is not None and opened.pid == os.getpid() else 2
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    assert not _closed(fd)  # the child closed its own copy only
    store(checkpoints[2])  # sees the child's line, appends after it
    assert len(path.read_bytes().splitlines()) == 3
    loaded = JsonLinesStore(path).load()
    assert loaded is not None
    assert loaded.to_dict() == checkpoints[2].to_dict()
    store.close()
