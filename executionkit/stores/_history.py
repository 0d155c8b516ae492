"""What the stores say about a run's checkpoints without rebuilding them: `CheckpointInfo`.

Listing is meant to cost what the stored headers cost, never a rebuild per
checkpoint: each store computes a `CheckpointInfo` from what it holds apart
from the outputs (the SQL stores' header rows and the ``added``/``dropped``
seqs of their rows; the lines of a JSON Lines file). Loading one checkpoint by
``seq`` is then one rebuild, and a ``seq`` the store does not keep raises
`CheckpointNotKeptError`, naming what it keeps.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from executionkit._errors import ExecutionKitError

if TYPE_CHECKING:
    from collections.abc import Iterable

    from executionkit._checkpoint._value import WorkflowCheckpoint


@dataclass(frozen=True, slots=True)
class CheckpointInfo:
    """One stored checkpoint of a run, described without rebuilding it.

    What `SQLiteStore.checkpoints`, `PostgresStore.checkpoints` and
    `JsonLinesStore.checkpoints` list, oldest first; `load(..., seq=info.seq)`
    rebuilds the checkpoint itself.

    Attributes:
        run_id: The run the checkpoint belongs to.
        seq: Its ``seq``: 1 for a run's first checkpoint, one more for each after.
        created_at: When it was taken (UTC ISO 8601), or None if it does not say.
        step_index: How many outputs it records (its ``step_index``).
        new_outputs: The steps whose outputs it holds and the checkpoint saved
            before it did not hold, or held with another value, in the order
            they were recorded. A step re-run to the very same output may be
            left out: a store that writes only what differs cannot tell it
            from an output kept.
        errors: The steps that had failed when it was taken (its ``errors``).
        pending: How many questions of ask steps wait for an answer in it.
        items: How many finished items of unfinished maps it records.
    """

    run_id: str | None
    seq: int
    created_at: str | None
    step_index: int
    new_outputs: tuple[str, ...]
    errors: tuple[str, ...]
    pending: int
    items: int

    @classmethod
    def of(cls, checkpoint: WorkflowCheckpoint) -> CheckpointInfo:
        """Describe a checkpoint in hand (``new_outputs`` as it has them: none once read back)."""
        return cls(
            run_id=checkpoint.run_id,
            seq=checkpoint.seq,
            created_at=checkpoint.created_at,
            step_index=checkpoint.step_index,
            new_outputs=tuple(checkpoint.new_outputs),
            errors=tuple(checkpoint.errors),
            pending=len(checkpoint.pending),
            items=sum(len(entry["outputs"]) for entry in checkpoint.items.values()),
        )


class CheckpointNotKeptError(ExecutionKitError, LookupError):
    """A store was asked for a checkpoint ``seq`` of a run that it does not keep.

    Raised by ``load(..., seq=N)`` of the stores of `executionkit.stores` when
    the run has checkpoints, but none with that ``seq``: it was never saved, or
    not kept (a store without ``history=True`` keeps only the latest; `prune`
    deletes older ones; a JSON Lines file keeps those of its current run until
    `compact`). Also a `LookupError`.

    Attributes:
        run_id: The run asked about.
        seq: The ``seq`` asked for.
        kept: The seqs of the run's checkpoints the store keeps, oldest first.
    """

    def __init__(
        self, store: str, run_id: str | None, seq: int, kept: Iterable[int], *, note: str = ""
    ) -> None:
        """Create the error for ``store`` lacking ``seq`` of ``run_id``; ``note`` says why."""
        self.run_id = run_id
        self.seq = seq
        self.kept = tuple(kept)
        message = (
            f"{store}, run {run_id!r}: keeps no checkpoint seq={seq}; it keeps "
            f"{seq_ranges(self.kept)}"
        )
        super().__init__(f"{message} ({note})" if note else message)


def seq_ranges(seqs: Iterable[int]) -> str:
    """``seq 1-3, 5`` for ``[1, 2, 3, 5]``: consecutive seqs as ranges; ``none`` if empty."""
    ordered = sorted(set(seqs))
    if not ordered:
        return "none"
    parts: list[str] = []
    start = previous = ordered[0]
    for seq in [*ordered[1:], None]:
        if seq is not None and seq == previous + 1:
            previous = seq
            continue
        parts.append(str(start) if start == previous else f"{start}-{previous}")
        if seq is not None:
            start = previous = seq
    return f"seq {', '.join(parts)}"


def check_seq(seq: object) -> int:
    """``seq`` if it is an int (not a bool), else `TypeError`."""
    if type(seq) is not int:
        msg = f"seq must be an int, got {type(seq).__name__} {seq!r}"
        raise TypeError(msg)
    return seq
