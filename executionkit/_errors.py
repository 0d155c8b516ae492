"""The exception hierarchy: one root, each subclass also the builtin it refines."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Mapping

    from executionkit._checkpoint import WorkflowCheckpoint


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
    value, or when the format version is newer than this library reads.

    Attributes:
        path: The dotted path of the offending field, such as
            ``"cost.input_tokens"``; ``""`` when the whole value is wrong.
    """

    def __init__(self, message: str, *, path: str = "") -> None:
        """Create the error with its message and the offending field's path."""
        super().__init__(message)
        self.path = path


class RunArgumentError(ExecutionKitError, ValueError):
    """An argument of `Workflow.run` does not fit the workflow.

    For example an ``initial_context`` key that collides with a step name, or
    ``metadata`` that is not a dict with str keys. Raised before any step runs.
    """


class CheckpointMismatchError(RunArgumentError):
    """The ``resume_from`` checkpoint does not belong to this workflow or run.

    Raised before any step runs, when the checkpoint records steps the
    workflow does not have, was taken with ``initial_context`` keys that are
    missing now, or carries a different ``run_id`` than the one passed.
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


class WorkflowFailed(ExecutionKitError):  # noqa: N818 - the name reads as an event, like StopIteration
    """One or more steps raised; everything that completed was checkpointed.

    Before this is raised, the steps still running in the failing batch were
    allowed to finish, their outputs were recorded and ``checkpoint_fn`` was
    called with a checkpoint whose ``errors`` name each failed step. Resume
    from `checkpoint` to run only the failed steps and what depends on them.

    Attributes:
        errors: Step name -> the exception that step raised, in declaration
            order. The first is also this exception's ``__cause__``.
        checkpoint: The checkpoint taken after the failure, usable as
            ``resume_from`` even if you stored nothing yourself.
    """

    def __init__(
        self,
        errors: Mapping[str, BaseException],
        checkpoint: WorkflowCheckpoint,
    ) -> None:
        """Create the error from the failed steps and the checkpoint taken."""
        self.errors = dict(errors)
        self.checkpoint = checkpoint
        names = ", ".join(repr(name) for name in self.errors)
        count = len(self.errors)
        first = next(iter(self.errors.values()))
        detail = f"{type(first).__name__}: {first}"
        more = "" if count == 1 else f" (and {count - 1} more; see .errors)"
        noun = "step" if count == 1 else "steps"
        super().__init__(
            f"workflow failed: {noun} {names} raised; first error: {detail}{more}. "
            f".checkpoint (seq={checkpoint.seq}) records the {checkpoint.step_index} "
            f"completed step(s); resume from it to run only what is left"
        )
