"""What every store shares: the stale-writer error and writing checkpoints as JSON."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

from executionkit._checkpoint._value import WorkflowCheckpoint
from executionkit._errors import CheckpointFormatError, StaleCheckpointError
from executionkit.stores._unstorable import unstorable

if TYPE_CHECKING:
    from collections.abc import Sequence

    from executionkit._checkpoint._ledger import LedgerEntry
    from executionkit._checkpoint._times import Attempt


# One encoder for every call: json.dumps makes a new one whenever an option is given, a
# few microseconds each time on a save's header and rows. encode() keeps no state between
# calls, so threads share it.
_ENCODER = json.JSONEncoder(ensure_ascii=False, allow_nan=False, separators=(",", ":"))


def dumps(data: object) -> str:
    """``data`` as compact JSON text: no ASCII escaping, NaN and infinities refused."""
    return _ENCODER.encode(data)


def encode(checkpoint: WorkflowCheckpoint, store: str) -> bytes:
    """The checkpoint as compact UTF-8 JSON, or `CheckpointValueError` naming what cannot be."""
    try:
        return dumps(checkpoint.to_dict()).encode("utf-8")
    except (TypeError, ValueError, RecursionError) as exc:  # UnicodeEncodeError is a ValueError
        raise unstorable(checkpoint, store, exc) from exc


TOO_DEEP = "nested too deeply to read"


def rebuilt(data: object, where: str, too_deep: str | None = None) -> WorkflowCheckpoint:
    """`WorkflowCheckpoint.from_dict` of stored ``data``, its errors prefixed with ``where``.

    A `CheckpointFormatError` keeps its path; nesting too deep to rebuild is one,
    prefixed with ``too_deep`` (``where`` unless given).
    """
    try:
        return WorkflowCheckpoint.from_dict(data)
    except CheckpointFormatError as exc:
        raise CheckpointFormatError(f"{where}: {exc}", path=exc.path) from exc
    except RecursionError:
        raise CheckpointFormatError(f"{too_deep or where}: {TOO_DEEP}") from None


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


def ledger_length(checkpoint: WorkflowCheckpoint) -> int:
    """How many rows ``checkpoint.ledger`` holds, in O(1) for a checkpoint a run took.

    Reading ``ledger`` of such a checkpoint copies the run's rows; its ``_rows``
    (see ``executionkit._checkpoint._value.SharedFields``) counts them without that.
    """
    fields = vars(checkpoint)
    if "ledger" not in fields and type(fields.get("_rows")) is int:
        rows: int = fields["_rows"]
        return rows
    return len(checkpoint.ledger)


def next_ledger_rows(
    checkpoint: WorkflowCheckpoint, previous: WorkflowCheckpoint | None, held: int
) -> tuple[LedgerEntry, ...] | None:
    """The rows to append to a stored ledger of ``held`` rows, if known in O(new rows).

    Known when ``checkpoint`` and ``previous`` (the stored checkpoint, whose
    ledger holds those ``held`` rows) were taken by the same run, and
    ``checkpoint.new_ledger`` starts right after them: the run's ledger only
    ever grows, so the stored rows are its first ``held`` ones. None otherwise
    (compare row by row, `common_prefix`). ``previous`` None means the caller
    checked the run itself.
    """
    fields = vars(checkpoint)
    shared = fields.get("_shared")
    if shared is None or (previous is not None and vars(previous).get("_shared") is not shared):
        return None
    # Without "_rows_since" the run added no row since the checkpoint before: "_rows".
    if fields.get("_rows_since", fields.get("_rows")) != held:
        return None
    return checkpoint.new_ledger


def attempts_length(checkpoint: WorkflowCheckpoint) -> int:
    """How many entries ``checkpoint.attempts`` holds, in O(1) for a checkpoint a run took.

    As `ledger_length`: such a checkpoint counts them in ``_ended`` (none
    without it) and reading ``attempts`` would copy the run's entries.
    """
    fields = vars(checkpoint)
    if "attempts" not in fields and "_shared" in fields:
        ended = fields.get("_ended", 0)
        if type(ended) is int:
            return ended
    return len(checkpoint.attempts)


def next_attempts(
    checkpoint: WorkflowCheckpoint, previous: WorkflowCheckpoint | None, held: int
) -> tuple[Attempt, ...] | None:
    """The ``attempts`` entries to append to ``held`` stored ones, if known in O(new entries).

    As `next_ledger_rows`: known when ``checkpoint`` (and ``previous``, the
    stored checkpoint, unless None) was taken by the run whose first ``held``
    entries are stored, and its ``new_attempts`` start right after them. None
    otherwise: compare entry by entry (`common_prefix`).
    """
    fields = vars(checkpoint)
    shared = fields.get("_shared")
    if shared is None or (previous is not None and vars(previous).get("_shared") is not shared):
        return None
    ended = fields.get("_ended")
    if ended is None:  # no attempt counted: none, unless the run gave them whole
        return None if held or checkpoint.attempts else ()
    # Without "_ended_since" the run ended no attempt since the checkpoint before.
    if fields.get("_ended_since", ended) != held:
        return None
    return checkpoint.new_attempts


def common_prefix(held: Sequence[object], wanted: Sequence[object]) -> int:
    """How many entries ``held`` and ``wanted`` have in common from the start (the slow path).

    For the append-only logs (ledger rows, attempts): the stored entries a
    checkpoint keeps; those after it are dropped and its own written instead.
    """
    kept = 0
    for stored, row in zip(held, wanted, strict=False):
        if stored != row:
            break
        kept += 1
    return kept
