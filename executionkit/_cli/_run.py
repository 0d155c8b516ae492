"""``executionkit run``: run a workflow, checkpointing to a file and resuming from it."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING

from executionkit._cli._exits import EXIT_FAILED, EXIT_INTERRUPTED, EXIT_OK, CliError
from executionkit._cli._load import load_checkpoint, load_workflow, read_inputs
from executionkit._cli._text import error_text, out, say, show

if TYPE_CHECKING:
    import argparse
    from collections.abc import Callable

    from executionkit._checkpoint import WorkflowCheckpoint


class _Saver:
    """The run's ``checkpoint_fn``: the store, remembering what it last saved or why it failed."""

    def __init__(
        self, store: Callable[[WorkflowCheckpoint], object], last: WorkflowCheckpoint | None
    ) -> None:
        self.store = store
        self.last = last
        self.error: Exception | None = None

    def __call__(self, checkpoint: WorkflowCheckpoint) -> None:
        try:
            self.store(checkpoint)
        except Exception as exc:
            self.error = exc
            raise
        self.last = checkpoint


def run_command(args: argparse.Namespace) -> int:
    """Run ``args.workflow``; print its outputs as JSON, or say what failed and what was saved."""
    from executionkit._errors import RunArgumentError, WorkflowFailed  # noqa: PLC0415
    from executionkit.progress import ConsoleProgress  # noqa: PLC0415
    from executionkit.stores import JsonFileStore  # noqa: PLC0415

    context = read_inputs(args)
    path = None if args.checkpoint is None else Path(args.checkpoint)
    resume = None if path is None else load_checkpoint(path, missing_ok=True)
    workflow = load_workflow(args.workflow)
    total = len(workflow.steps)
    saver = None if path is None else _Saver(JsonFileStore(path), resume)
    if path is not None and not path.parent.is_dir():
        msg = f"--checkpoint {path}: folder {path.parent} does not exist"
        raise CliError(msg)
    try:
        result = workflow.run_sync(
            context,
            checkpoint_fn=saver,
            resume_from=resume,
            # A fresh run names its workflow; a resumed one keeps the checkpoint's metadata.
            metadata={"workflow": args.workflow} if resume is None else None,
            # Outputs that could not be written to the file fail their step at once.
            validate_json=saver is not None,
            on_event=ConsoleProgress(),
        )
    except RunArgumentError as exc:  # before any step ran, CheckpointMismatchError included
        raise CliError(str(exc)) from None
    except WorkflowFailed as failure:
        for name, error in failure.errors.items():
            say(f"step {show(name)} failed: {error_text(error)}")
        say(_saved(path, saver, total))
        return EXIT_FAILED
    except KeyboardInterrupt:
        say(f"interrupted; {_saved(path, saver, total)}")
        return EXIT_INTERRUPTED
    except Exception as exc:
        if saver is None or exc is not saver.error:
            raise
        say(f"could not save the checkpoint to {path}: {error_text(exc)}")
        say(_saved(path, saver, total))
        return EXIT_FAILED
    outputs = dict(result.outputs)
    out(json.dumps(outputs, indent=2, ensure_ascii=False, default=repr))
    return EXIT_OK


def _saved(path: Path | None, saver: _Saver | None, total: int) -> str:
    if path is None or saver is None:
        return "nothing was saved; pass --checkpoint FILE to keep the steps that completed"
    last = saver.last
    if last is None:
        return f"nothing was saved to {path}"
    return (
        f"checkpoint saved to {path} (seq {last.seq}, {last.step_index} of {total} steps "
        f"recorded); run again with the same --checkpoint to resume"
    )
