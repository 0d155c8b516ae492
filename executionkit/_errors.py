"""The exception hierarchy: one root, each subclass also the builtin it refines."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Iterable

    from executionkit._owner import RunOwner


class ExecutionKitError(Exception):
    """Root of the errors executionkit raises about workflows, checkpoints and runs.

    Plain misuse with an obvious builtin meaning raises that builtin instead: a
    non-int `TokenUsage` count is a `TypeError`, writing to a step's ``ctx`` is a
    `TypeError`, and `Workflow.run_sync` inside a running event loop is a
    `RuntimeError`. Exceptions raised by your own steps reach you inside
    `WorkflowFailed.errors`; those raised by ``checkpoint_fn`` propagate as they are.
    """


class WorkflowDefinitionError(ExecutionKitError, ValueError):
    """A `Step` or `Workflow` definition is invalid.

    Raised at construction: empty or duplicate step names, unknown or self
    dependencies, dependency cycles, a ``run`` that is not callable. The message
    names the offending step and what was expected.
    """


class CheckpointFormatError(ExecutionKitError, ValueError):
    """Checkpoint data is malformed.

    Raised by `WorkflowCheckpoint.from_dict` (and by the `WorkflowCheckpoint`
    constructor) when a field is missing, has the wrong type or an impossible
    value, or when the format version is newer than this library reads. Never
    anything else: a field that cannot be read at all (nested deeper than
    Python recurses, or holding an object whose own methods raise) is reported
    as this error too, with the original exception as ``__cause__``.

    Attributes:
        path: The dotted path of the offending field, such as
            ``"cost.input_tokens"``; ``""`` when the whole value is wrong.
    """

    def __init__(self, message: str, *, path: str = "") -> None:
        """Create the error with its message and the offending field's path."""
        super().__init__(message)
        self.path = path


class CheckpointValueError(ExecutionKitError, ValueError):
    """A value bound for a checkpoint is not plain data.

    Raised by `StepContext.save_progress`, for a step's output when the run has
    ``validate_json=True`` (the step then fails with it), and by the stores of
    `executionkit.stores` for a checkpoint they cannot write, when the value
    would not survive a JSON round trip equal: only dicts with str keys, lists,
    str, int, finite floats, bool and None are allowed, strings must be valid
    UTF-8 (no lone surrogates), ints printable in decimal, and the nesting no
    deeper than Python recurses. The message names the step and the path inside
    the value, such as ``['items'][3]['value']``.

    Attributes:
        path: The path inside the value, ``""`` for the value itself.
        value: The offending part of the value.
    """

    def __init__(self, message: str, *, path: str, value: object) -> None:
        """Create the error for the offending ``value`` at ``path``."""
        super().__init__(message)
        self.path = path
        self.value = value


class RunArgumentError(ExecutionKitError, ValueError):
    """An argument of `Workflow.run` does not fit the workflow.

    For example an ``initial_context`` key that collides with a step name, or
    ``metadata`` that is not a dict with str keys. Raised before any step runs.
    """


class CheckpointMismatchError(RunArgumentError):
    """The ``resume_from`` checkpoint does not belong to this workflow or run.

    Raised before any step runs, when the checkpoint records steps the
    workflow does not have (unless ``unknown_steps="discard"``), was taken with
    ``initial_context`` keys that are missing now, carries a different
    ``run_id`` than the one passed, or holds an output its step's ``decode``
    cannot read.
    """


class ContextKeyError(ExecutionKitError, KeyError):
    """A step read a key that is not in its ``ctx``.

    A step's ``ctx`` holds the run's initial context and the outputs of the
    step's ancestors only. The message names the step and, when the key is
    another step, suggests adding it to ``depends_on``.

    Attributes:
        step: The name of the step that read the key.
        key: The key it read.
    """

    def __init__(self, message: str, *, step: str, key: object) -> None:
        """Create the error for ``step`` reading the missing ``key``."""
        super().__init__(message)
        self.step = step
        self.key = key

    def __str__(self) -> str:
        """Return the message itself (`KeyError` would show its repr)."""
        return str(self.args[0])


def safe_str(value: object) -> str:
    """``str(value)``, or a description of the failure when ``__str__`` itself raises.

    Error messages quote values from outside the library; a broken ``__str__``
    must not replace the error being reported with its own.
    """
    try:
        return str(value)
    except Exception as exc:  # noqa: BLE001 - any failure of foreign code is described
        return f"<{type(value).__name__} whose str() raised {type(exc).__name__}>"


def preview(value: object, limit: int = 60) -> str:
    """``repr(value)``, shortened to ``limit`` characters, for error messages.

    Never raises: a value nested too deeply for ``repr`` (a `RecursionError`), an
    int past Python's digit limit or a ``__repr__`` that raises is described by
    a placeholder instead, so the error being reported is the one the caller sees.
    """
    try:
        text = repr(value)
    except RecursionError:
        return "<nested too deeply to show>"
    except Exception as exc:  # noqa: BLE001 - any failure of foreign code is described
        return f"<repr() raised {type(exc).__name__}>"
    return text if len(text) <= limit else text[: limit - 3] + "..."


def did_you_mean(name: str, candidates: Iterable[str]) -> str:
    """Return ``"; did you mean 'fetch'?"`` for the candidate closest to ``name``, or ``""``.

    For error messages about an unknown name, appended after the name. A
    candidate equal to ``name`` is never suggested.
    """
    # Imported here: only this error path needs difflib, and importing executionkit
    # must stay fast.
    from difflib import get_close_matches  # noqa: PLC0415

    others = [candidate for candidate in candidates if candidate != name]
    matches = get_close_matches(name, others, n=1)
    return f"; did you mean {matches[0]!r}?" if matches else ""


class StaleCheckpointError(ExecutionKitError):
    """A store holds a newer checkpoint of the run than the one in hand.

    Raised by the stores of `executionkit.stores` when a checkpoint's ``seq`` is lower
    than the stored one of the same ``run_id``, or equal to it with different
    contents: nothing was written. And raised by `Workflow.run` before any step
    runs, once it holds the run's claim (see `RunClaimedError`), when the store
    already holds a later checkpoint of the run than ``resume_from`` (or any,
    for a fresh run): resuming would pay again for the steps recorded since. It
    means another writer got ahead: a second worker running the same run, or a
    run resumed from an older copy of the checkpoint. Resume from the store's
    latest checkpoint to continue from where it stands.

    Attributes:
        run_id: The run both checkpoints belong to.
        seq: The ``seq`` of the refused checkpoint (for a run refused before it
            started, of ``resume_from``; 0 for a fresh run).
        stored_seq: The ``seq`` of the checkpoint the store holds.
        before_start: Whether `Workflow.run` refused to start (nothing ran),
            rather than a store refusing a save.
    """

    def __init__(
        self,
        store: str,
        run_id: str | None,
        seq: int,
        stored_seq: int,
        *,
        before_start: bool = False,
    ) -> None:
        """Create the error for ``store`` refusing ``seq`` because it holds ``stored_seq``."""
        self.run_id = run_id
        self.seq = seq
        self.stored_seq = stored_seq
        self.before_start = before_start
        if before_start:
            start = "a fresh run" if seq == 0 else f"a run resuming from checkpoint seq={seq}"
            message = (
                f"{store}: refused {start} of run {run_id!r}: the store already holds "
                f"checkpoint seq={stored_seq} of that run, saved by another process or "
                f"an earlier invocation; nothing ran. Resume from the store's latest "
                f"checkpoint instead"
            )
        else:
            held = (
                f"a different checkpoint with seq={stored_seq}"
                if seq == stored_seq
                else f"seq={stored_seq}"
            )
            message = (
                f"{store}: refused checkpoint seq={seq} of run {run_id!r}: the store already "
                f"holds {held} of that run, written by another writer or before this run "
                f"resumed from an older checkpoint; resume from the store's load() instead"
            )
        super().__init__(message)


class RunClaimedError(ExecutionKitError, RuntimeError):
    """Another live process (or another run in this one) owns the run: nothing ran.

    Raised by `Workflow.run` before any step starts when its ``checkpoint_fn``
    is a store that grants claims (every shareable store of
    `executionkit.stores`, or your own with a ``claim`` method) and the run is
    claimed by someone else. The claim dies with its owner, so once that
    process has ended, a new attempt succeeds at once.

    Attributes:
        run_id: The run that is owned.
        owner: Who owns it (process id, host, since when), or None when the
            store could not tell (the owner was still writing its details).
    """

    def __init__(self, store: str, run_id: str, owner: RunOwner | None) -> None:
        """Create the error for ``store`` refusing a claim on ``run_id`` held by ``owner``."""
        self.run_id = run_id
        self.owner = owner
        by = "another process" if owner is None else owner.describe()
        super().__init__(
            f"{store}: run {run_id!r} is owned by {by}; nothing ran. Wait for that "
            f"process to end (its claim dies with it), then resume"
        )


class ClaimLostError(ExecutionKitError, RuntimeError):
    """A run lost its claim while it ran; the checkpoint was not written.

    Raised by a store's save when it can no longer vouch that this process owns
    the run, for example when `PostgresStore`'s database session that holds
    the claim was terminated: another process may own the run by now. The run
    stops as with any ``checkpoint_fn`` failure.

    Attributes:
        run_id: The run whose claim was lost.
    """

    def __init__(self, message: str, *, run_id: str) -> None:
        """Create the error with its message, for ``run_id``."""
        super().__init__(message)
        self.run_id = run_id


def error_text(error: Exception) -> str:
    """How a checkpoint's ``errors`` keep a failure: a failed map's with its first causes.

    A map's error is a group of its items' errors, each noted with its key; its own
    message names the keys only, so the causes are added, whole, as ``inspect``
    shows them.
    """
    text = f"{type(error).__name__}: {error}"
    if not isinstance(error, ExceptionGroup):
        return text
    causes = []
    for item in error.exceptions[:_CAUSES]:
        notes = getattr(item, "__notes__", ())
        key = next((n for n in notes if n.startswith("executionkit: item ")), None)
        if key is None:
            return text  # not a map's items: a group the step raised itself
        causes.append(f"{key.removeprefix('executionkit: ')}: {type(item).__name__}: {item}")
    more = len(error.exceptions) - len(causes)
    rest = f"; and {more} more" if more > 0 else ""
    return f"{text}. Why: {'; '.join(causes)}{rest}"


# How many items' errors a failed map's entry in ``errors`` quotes whole.
_CAUSES = 3
