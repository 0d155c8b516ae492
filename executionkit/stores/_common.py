"""What every store shares: the stale-writer error and writing checkpoints as JSON."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

from executionkit._errors import ExecutionKitError
from executionkit.stores._unstorable import unstorable

if TYPE_CHECKING:
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


def dumps(data: object) -> str:
    return json.dumps(data, ensure_ascii=False, allow_nan=False, separators=(",", ":"))


def encode(checkpoint: WorkflowCheckpoint, store: str) -> bytes:
    """The checkpoint as compact UTF-8 JSON, or `CheckpointValueError` naming what cannot be."""
    try:
        return dumps(checkpoint.to_dict()).encode("utf-8")
    except (TypeError, ValueError, RecursionError) as exc:  # UnicodeEncodeError is a ValueError
        raise unstorable(checkpoint, store, exc) from exc


TOO_DEEP = "nested too deeply to read"


def loads(text: str | bytes) -> object:
    """``json.loads``, failing with `ValueError` only: a `json.JSONDecodeError` for invalid JSON.

    Valid JSON can fail too: an int past ``sys.get_int_max_str_digits()``
    raises a plain `ValueError`, and nesting deeper than the recursion limit
    a `RecursionError`, turned into a `ValueError` here.
    """
    try:
        return json.loads(text)
    except RecursionError:
        raise ValueError(TOO_DEEP) from None


def same_json(first: str | bytes, second: str | bytes) -> bool:
    """Whether two JSON texts hold the same data (key order aside).

    Text that cannot be read back, or compared without recursing too deep, is
    not the same: the caller then refuses the checkpoint rather than replace it.
    """
    if first == second:
        return True
    try:
        return bool(json.loads(first) == json.loads(second))
    except (TypeError, ValueError, RecursionError):
        return False


def stale(store: str, checkpoint: WorkflowCheckpoint, stored_seq: int) -> StaleCheckpointError:
    return StaleCheckpointError(store, checkpoint.run_id, checkpoint.seq, stored_seq)
