"""What every store shares: the stale-writer error and writing checkpoints as JSON."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

from executionkit._errors import StaleCheckpointError
from executionkit.stores._unstorable import unstorable

if TYPE_CHECKING:
    from executionkit._checkpoint import WorkflowCheckpoint


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
