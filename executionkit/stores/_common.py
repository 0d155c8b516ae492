"""What every store shares: the stale-writer error and writing checkpoints as JSON."""

from __future__ import annotations

import json
import math
from typing import TYPE_CHECKING, Any

from executionkit._errors import CheckpointValueError, ExecutionKitError

if TYPE_CHECKING:
    from collections.abc import Mapping

    from executionkit._checkpoint import WorkflowCheckpoint


class StaleCheckpointError(ExecutionKitError):
    """A store refused a checkpoint that is not newer than the one it holds for the run.

    Raised by the stores of `executionkit.stores` when a checkpoint's ``seq`` is lower
    than the stored one of the same ``run_id``, or equal to it with different
    contents. It means another writer got ahead: a second worker running the
    same run, or a run resumed from an older copy of the checkpoint. Nothing
    was written; resume from the store's ``load()`` to continue from the
    newest checkpoint.

    Attributes:
        run_id: The run both checkpoints belong to.
        seq: The ``seq`` of the refused checkpoint.
        stored_seq: The ``seq`` of the checkpoint the store holds.
    """

    def __init__(self, store: str, run_id: str | None, seq: int, stored_seq: int) -> None:
        """Create the error for ``store`` refusing ``seq`` because it holds ``stored_seq``."""
        self.run_id = run_id
        self.seq = seq
        self.stored_seq = stored_seq
        held = (
            f"a different checkpoint with seq={stored_seq}"
            if seq == stored_seq
            else f"seq={stored_seq}"
        )
        super().__init__(
            f"{store}: refused checkpoint seq={seq} of run {run_id!r}: the store already "
            f"holds {held} of that run, written by another writer or before this run "
            f"resumed from an older checkpoint; resume from the store's load() instead"
        )


_DATA_HINT = (
    "stores write JSON, so steps must return dicts, lists, str, int, finite float, bool or "
    "None (or give the Step encode/decode; run with validate_json=True to catch this when "
    "the step returns)"
)
_PREVIEW_CHARS = 60


def dumps(data: object) -> str:
    return json.dumps(data, ensure_ascii=False, allow_nan=False, separators=(",", ":"))


def encode(checkpoint: WorkflowCheckpoint, store: str) -> str:
    """The checkpoint as compact JSON, or `CheckpointValueError` naming what JSON cannot hold."""
    try:
        return dumps(checkpoint.to_dict())
    except (TypeError, ValueError, RecursionError) as exc:
        raise unstorable(checkpoint, store, exc) from exc


def unstorable(checkpoint: WorkflowCheckpoint, store: str, exc: Exception) -> Exception:
    """A `CheckpointValueError` naming the first part of ``checkpoint`` JSON cannot hold."""
    head = f"{store}: cannot store checkpoint seq={checkpoint.seq} of run {checkpoint.run_id!r}"
    parts: tuple[tuple[str, Mapping[str, Any]], ...] = (
        ("the output of step", checkpoint.outputs),
        ("the progress of step", checkpoint.progress),
        ("the metadata value", checkpoint.metadata),
    )
    try:
        for what, mapping in parts:
            for name, value in mapping.items():
                found = _find_unstorable(value, [], set())
                if found is not None:
                    path, bad, problem = found
                    where = f" at {path}" if path else ""
                    msg = f"{head}: {what} {name!r}{where}: {problem}; {_DATA_HINT}"
                    return CheckpointValueError(msg, path=path, value=bad)
    except RecursionError:  # too deep to walk: fall back on what json said
        pass
    msg = f"{head} as JSON: {type(exc).__name__}: {exc}; {_DATA_HINT}"
    return CheckpointValueError(msg, path="", value=None)


def _preview(value: object) -> str:
    text = repr(value)
    return text if len(text) <= _PREVIEW_CHARS else text[: _PREVIEW_CHARS - 3] + "..."


def _find_unstorable(
    value: object, path: list[str], active: set[int]
) -> tuple[str, object, str] | None:
    """The path, value and problem of the first part ``json.dumps`` refuses, or None."""
    if value is None or isinstance(value, (str, int)):
        return None
    if isinstance(value, float):
        if math.isfinite(value):
            return None
        return "".join(path), value, f"float({str(value)!r}) is not valid JSON"
    if not isinstance(value, (list, tuple, dict)):
        problem = f"{_preview(value)} ({type(value).__name__}) is not JSON data"
        return "".join(path), value, problem
    if id(value) in active:
        return "".join(path), value, "a container that contains itself is not valid JSON"
    active.add(id(value))
    found = _find_in_items(value, path, active)
    active.discard(id(value))
    return found


def _find_in_items(
    value: list[Any] | tuple[Any, ...] | dict[Any, Any], path: list[str], active: set[int]
) -> tuple[str, object, str] | None:
    items: Any
    if isinstance(value, dict):
        for key in value:
            if key is not None and not isinstance(key, (str, int, float)):
                return "".join(path), key, f"key {_preview(key)} is not a str"
        items = ((f"[{key!r}]", item) for key, item in value.items())
    else:
        items = ((f"[{index}]", item) for index, item in enumerate(value))
    for step, item in items:
        path.append(step)
        found = _find_unstorable(item, path, active)
        path.pop()
        if found is not None:
            return found
    return None


def same_json(first: str, second: str) -> bool:
    """Whether two JSON texts hold the same data (key order aside)."""
    return bool(json.loads(first) == json.loads(second))


def stale(store: str, checkpoint: WorkflowCheckpoint, stored_seq: int) -> StaleCheckpointError:
    return StaleCheckpointError(store, checkpoint.run_id, checkpoint.seq, stored_seq)
