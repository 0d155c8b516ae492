"""The ``executionkit`` command line (``python -m executionkit``).

Commands: ``demo``, ``run``, ``inspect`` and ``graph``. Exit codes: 0 done, 1 a
step failed (or a checkpoint could not be saved), 2 usage or bad input, 130
interrupted. Bad input is reported as one ``executionkit: error: ...`` line on
stderr, never a traceback. Imports stay inside the commands, so that
``executionkit --help`` and ``inspect`` start quickly.
"""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping, Sequence
    from pathlib import Path

    from executionkit._checkpoint import WorkflowCheckpoint
    from executionkit._workflow import Workflow

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_USAGE = 2
EXIT_INTERRUPTED = 130
EXIT_BROKEN_PIPE = 141  # 128 + SIGPIPE, as a shell reports a command killed by it

PREVIEW_CHARS = 60
"""Longest preview of an output, progress value or metadata in ``inspect``."""

_EXIT_CODES = """\
exit codes:
  0    done
  1    a step failed, or a checkpoint could not be saved (what completed is saved)
  2    usage error or bad input (a missing file, not a checkpoint, a wrong MODULE:ATTR)
  130  interrupted with Ctrl-C (what completed is saved)
"""

_READ_EXIT_CODES = """\
exit codes:
  0    done
  2    usage error or bad input (a missing file, not a checkpoint, a wrong MODULE:ATTR)
"""

_RUN_EPILOG = f"""\
MODULE is imported as with 'python -m': from the current directory or PYTHONPATH.
ATTR names a Workflow, or a function taking no arguments that returns one.
--input values are strings; use --inputs-json for numbers, lists or objects
(--input wins over a key of the file). Checkpoints are written atomically to
FILE after every batch. When FILE already holds a checkpoint, the run resumes
from it: pass the same input keys again, since values are never saved.

{_EXIT_CODES}"""


class CliError(Exception):
    """Bad input: reported as one ``executionkit: error:`` line, exit code 2."""


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="executionkit",
        description="Resumable workflows of expensive steps, checkpointed where you like.",
        epilog=_EXIT_CODES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    demo = commands.add_parser(
        "demo",
        help="run a workflow that fails, is checkpointed to JSON, and resumes",
        description=(
            "Run a bundled 8-step workflow of simulated LLM calls: the first run fails at "
            "one step, the checkpoint file shows what was saved, the second run resumes "
            "from it and skips every step already paid for."
        ),
    )
    demo.add_argument("--no-delay", action="store_true", help="skip the simulated model latency")

    run = commands.add_parser(
        "run",
        help="run a workflow, checkpointing to a file and resuming from it",
        description=(
            "Import MODULE:ATTR and run it, with progress on stderr. On success its\n"
            "outputs are printed to stdout as a JSON object."
        ),
        epilog=_RUN_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    run.add_argument("workflow", metavar="MODULE:ATTR", help="the workflow to run")
    run.add_argument(
        "--checkpoint",
        metavar="FILE",
        help="JSON file to write checkpoints to, and to resume from when it exists",
    )
    run.add_argument(
        "--input",
        metavar="KEY=VALUE",
        action="append",
        default=[],
        help="an initial-context value (a string); repeat for more",
    )
    run.add_argument(
        "--inputs-json",
        metavar="FILE",
        help="a JSON object of initial-context values (typed values)",
    )

    inspect = commands.add_parser(
        "inspect",
        help="show what a checkpoint file holds (imports nothing)",
        description=(
            "Show a checkpoint file: format, run_id, seq, recorded and failed steps,\n"
            "saved progress, token usage and a preview of each output. Nothing is\n"
            "imported or executed unless --workflow is given."
        ),
        epilog=_READ_EXIT_CODES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    inspect.add_argument("file", metavar="FILE", help="the checkpoint file (JSON)")
    inspect.add_argument(
        "--workflow",
        metavar="MODULE:ATTR",
        help="import this workflow to show the total and the pending steps",
    )
    inspect.add_argument("--json", action="store_true", help="print a JSON object instead")

    graph = commands.add_parser(
        "graph",
        help="print the workflow's dependency graph (Mermaid or Graphviz dot)",
        description=(
            "Print the steps and their dependencies in declaration order. With\n"
            "--checkpoint, each step is marked done, failed or pending."
        ),
        epilog=_READ_EXIT_CODES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    graph.add_argument("workflow", metavar="MODULE:ATTR", help="the workflow to draw")
    graph.add_argument("--checkpoint", metavar="FILE", help="mark steps from this checkpoint")
    graph.add_argument(
        "--format",
        choices=("mermaid", "dot"),
        default="mermaid",
        help="mermaid (renders on GitHub; the default) or dot (Graphviz)",
    )
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line with ``argv`` (default: ``sys.argv[1:]``); return the exit code."""
    args = _parser().parse_args(argv)
    try:
        if args.command == "demo":
            from executionkit._demo import run_demo  # noqa: PLC0415 - keep CLI start-up light

            return run_demo(delay=not args.no_delay)
        command: Callable[[argparse.Namespace], int] = _COMMANDS[args.command]
        return command(args)
    except CliError as exc:
        _say(f"error: {exc}")
        return EXIT_USAGE
    except KeyboardInterrupt:
        _say("interrupted")
        return EXIT_INTERRUPTED
    except BrokenPipeError:
        # Whoever read stdout stopped early (``| head``): end quietly, as Unix tools do,
        # and keep Python from failing again when it flushes stdout at exit.
        import os  # noqa: PLC0415

        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
        return EXIT_BROKEN_PIPE


# --- shared helpers -----------------------------------------------------------------------


def _say(line: str) -> None:
    """Write ``executionkit: line`` to stderr, as one line."""
    sys.stderr.write(f"executionkit: {_one_line(line)}\n")
    sys.stderr.flush()


def _out(text: str) -> None:
    """Write ``text`` and a newline to stdout."""
    sys.stdout.write(f"{text}\n")
    sys.stdout.flush()


def _one_line(text: str) -> str:
    """``text`` with line breaks and other unprintable characters escaped."""
    if text.isprintable():
        return text
    return "".join(
        char if char.isprintable() else char.encode("unicode_escape").decode("ascii")
        for char in text
    )


def _show(name: str) -> str:
    """A name as typed, or JSON-quoted when it has blanks at the ends or odd characters."""
    if name and name.isprintable() and name.strip() == name:
        return name
    return _one_line(_json_text(name))


def _json_text(value: object) -> str:
    import json  # noqa: PLC0415

    try:
        return json.dumps(value, ensure_ascii=False)
    except (TypeError, ValueError):
        return repr(value)


def _preview(value: object) -> str:
    """One line of at most `PREVIEW_CHARS` characters: JSON of ``value``, then truncated."""
    text = _one_line(_json_text(value))
    if len(text) > PREVIEW_CHARS:
        text = text[: PREVIEW_CHARS - 3] + "..."
    return text


def _error_text(error: BaseException) -> str:
    """``Type: first line of the message``."""
    lines = str(error).splitlines()
    first = lines[0] if lines else ""
    name = type(error).__name__
    return f"{name}: {first}" if first else name


def _load_workflow(spec: str) -> Workflow:
    """Import ``MODULE:ATTR``; ATTR is a `Workflow` or a zero-argument function returning one."""
    from executionkit._workflow import Workflow  # noqa: PLC0415

    module_name, colon, attr = spec.partition(":")
    if not colon or not module_name or not attr or ":" in attr:
        msg = f"{spec!r} is not MODULE:ATTR (for example my_pipeline:workflow)"
        raise CliError(msg)
    target: object = _import(module_name)
    for part in attr.split("."):
        try:
            target = getattr(target, part)
        except Exception:  # noqa: BLE001 - AttributeError, or a property that raised
            msg = f"module {module_name!r} has no attribute {attr!r}"
            raise CliError(msg) from None
    if isinstance(target, Workflow):
        return target
    if not callable(target):
        msg = (
            f"{spec} is {type(target).__name__} {_preview(target)}, not a Workflow or a "
            f"function returning one"
        )
        raise CliError(msg)
    try:
        made = target()
    except Exception as exc:  # noqa: BLE001 - the user's factory failing is bad input
        msg = f"calling {spec}() failed: {_error_text(exc)}"
        raise CliError(msg) from None
    if not isinstance(made, Workflow):
        msg = f"{spec}() returned {type(made).__name__}, not a Workflow"
        raise CliError(msg)
    return made


def _import(module_name: str) -> object:
    """Import ``module_name`` as ``python -m`` would: the current directory comes first."""
    import importlib  # noqa: PLC0415
    from pathlib import Path  # noqa: PLC0415

    here = str(Path.cwd())
    if here not in sys.path:
        sys.path.insert(0, here)
    try:
        return importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        missing = exc.name or ""
        if missing and (module_name == missing or module_name.startswith(f"{missing}.")):
            msg = (
                f"no module named {module_name!r} (looked in the current directory and on "
                f"PYTHONPATH)"
            )
            raise CliError(msg) from None
        msg = f"importing {module_name!r} failed: {_error_text(exc)}"
        raise CliError(msg) from None
    except Exception as exc:  # noqa: BLE001 - any failure of the user's module is bad input
        msg = f"importing {module_name!r} failed: {_error_text(exc)}"
        raise CliError(msg) from None


def _load_checkpoint(path: Path, *, missing_ok: bool) -> WorkflowCheckpoint | None:
    """Read the checkpoint in ``path`` (validated, nothing evaluated); None if there is none."""
    from executionkit.stores import JsonFileStore  # noqa: PLC0415

    if not path.exists():
        if missing_ok:
            return None
        msg = f"{path}: no such file"
        raise CliError(msg)
    try:
        checkpoint = JsonFileStore(path).load()
    except ValueError as exc:  # CheckpointFormatError: not JSON, not UTF-8, a bad field
        text = str(exc)
        msg = text if text.startswith(f"{path}:") else f"{path}: {text}"
        raise CliError(msg) from None
    except OSError as exc:
        msg = f"{path}: cannot read: {exc.strerror or exc}"
        raise CliError(msg) from None
    if checkpoint is None and not missing_ok:
        msg = f"{path}: holds no checkpoint (the file is empty)"
        raise CliError(msg)
    return checkpoint


# --- run ----------------------------------------------------------------------------------


def _read_inputs(args: argparse.Namespace) -> dict[str, Any]:
    import json  # noqa: PLC0415
    from pathlib import Path  # noqa: PLC0415

    context: dict[str, Any] = {}
    if args.inputs_json is not None:
        path = Path(args.inputs_json)
        try:
            text = path.read_text(encoding="utf-8")
        except FileNotFoundError:
            msg = f"--inputs-json {path}: no such file"
            raise CliError(msg) from None
        except (OSError, UnicodeDecodeError) as exc:
            reason = exc.strerror if isinstance(exc, OSError) else "not UTF-8 text"
            msg = f"--inputs-json {path}: cannot read: {reason or exc}"
            raise CliError(msg) from None
        try:
            data = json.loads(text)
        except ValueError as exc:
            msg = f"--inputs-json {path}: not JSON ({exc})"
            raise CliError(msg) from None
        if not isinstance(data, dict):
            msg = (
                f"--inputs-json {path}: must hold a JSON object of input names to values, "
                f"got {type(data).__name__}"
            )
            raise CliError(msg)
        context.update(data)
    given: set[str] = set()
    for item in args.input:
        key, equals, value = item.partition("=")
        if not equals or not key:
            msg = f"--input {item!r} is not KEY=VALUE"
            raise CliError(msg)
        if key in given:
            msg = f"--input {key!r} is given twice"
            raise CliError(msg)
        given.add(key)
        context[key] = value
    return context


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


def _run(args: argparse.Namespace) -> int:
    from pathlib import Path  # noqa: PLC0415

    from executionkit._errors import RunArgumentError, WorkflowFailed  # noqa: PLC0415
    from executionkit.progress import ConsoleProgress  # noqa: PLC0415
    from executionkit.stores import JsonFileStore  # noqa: PLC0415

    context = _read_inputs(args)
    path = None if args.checkpoint is None else Path(args.checkpoint)
    resume = None if path is None else _load_checkpoint(path, missing_ok=True)
    workflow = _load_workflow(args.workflow)
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
            _say(f"step {_show(name)} failed: {_error_text(error)}")
        _say(_saved(path, saver, total))
        return EXIT_FAILED
    except KeyboardInterrupt:
        _say(f"interrupted; {_saved(path, saver, total)}")
        return EXIT_INTERRUPTED
    except Exception as exc:
        if saver is None or exc is not saver.error:
            raise
        _say(f"could not save the checkpoint to {path}: {_error_text(exc)}")
        _say(_saved(path, saver, total))
        return EXIT_FAILED
    import json  # noqa: PLC0415

    outputs = dict(result.outputs)
    _out(json.dumps(outputs, indent=2, ensure_ascii=False, default=repr))
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


# --- inspect ------------------------------------------------------------------------------


def _inspect(args: argparse.Namespace) -> int:
    from pathlib import Path  # noqa: PLC0415

    path = Path(args.file)
    checkpoint = _load_checkpoint(path, missing_ok=False)
    assert checkpoint is not None  # noqa: S101 - missing_ok=False never returns None
    workflow = None if args.workflow is None else _load_workflow(args.workflow)
    summary = describe(checkpoint, workflow, file=str(path))
    if args.json:
        import json  # noqa: PLC0415

        _out(json.dumps(summary, indent=2, ensure_ascii=False))
    else:
        _out(_describe_text(summary))
    return EXIT_OK


def describe(
    checkpoint: WorkflowCheckpoint, workflow: Workflow | None, *, file: str
) -> dict[str, Any]:
    """What ``inspect --json`` prints: plain data about ``checkpoint``.

    Outputs and progress values appear as previews of at most `PREVIEW_CHARS`
    characters. ``total``, ``pending`` and ``unknown`` are None without a workflow.
    """
    outputs = checkpoint.outputs
    names = list(outputs)
    total = pending = unknown = None
    if workflow is not None:
        declared = [step.name for step in workflow.steps]
        known = set(declared)
        names = [name for name in declared if name in outputs]
        unknown = [name for name in outputs if name not in known]
        names += unknown
        total = len(declared)
        pending = [name for name in declared if name not in outputs]
    cost = checkpoint.cost
    return {
        "file": file,
        "version": checkpoint.version,
        "run_id": checkpoint.run_id,
        "seq": checkpoint.seq,
        "created_at": checkpoint.created_at,
        "metadata": dict(checkpoint.metadata),
        "context_keys": list(checkpoint.context_keys),
        "cost": {
            "input_tokens": cost.input_tokens,
            "output_tokens": cost.output_tokens,
            "llm_calls": cost.llm_calls,
        },
        "recorded": names,
        "total": total,
        "pending": pending,
        "unknown": unknown,
        "failed": dict(checkpoint.errors),
        "progress": {name: _preview(value) for name, value in checkpoint.progress.items()},
        "outputs": {name: _preview(outputs[name]) for name in names},
    }


def _describe_text(summary: Mapping[str, Any]) -> str:
    lines: list[str] = []

    def field(label: str, *values: str) -> None:
        for number, value in enumerate(values or ("(none)",)):
            lines.append(f"{label if number == 0 else '':<12}{value}")

    version = summary["version"]
    field("file", _one_line(summary["file"]))
    field("format", f"version {version}" + (" (ExecutionKit 0.4)" if version == 0 else ""))
    field("run_id", _one_line(summary["run_id"] or "-"))
    field("seq", str(summary["seq"]))
    field("created_at", _one_line(summary["created_at"] or "-"))
    if summary["metadata"]:
        field("metadata", _preview(summary["metadata"]))
    keys = summary["context_keys"]
    if keys:
        field("context", f"{', '.join(map(_show, keys))} (key names only, never values)")
    field("tokens", _usage_text(summary["cost"]))
    recorded = len(summary["recorded"])
    if summary["total"] is None:
        field("steps", f"{recorded} recorded (--workflow MODULE:ATTR shows the total)")
    else:
        field("steps", f"{recorded - len(summary['unknown'])} of {summary['total']} recorded")
        field("pending", ", ".join(map(_show, summary["pending"])) or "(none)")
        if summary["unknown"]:
            names = ", ".join(map(_show, summary["unknown"]))
            field("unknown", f"{names} (recorded, but not a step of the workflow)")
    field("failed", *(f"{_show(name)}: {_one_line(e)}" for name, e in summary["failed"].items()))
    field("progress", *(f"{_show(name)}: {p}" for name, p in summary["progress"].items()))
    outputs = summary["outputs"]
    lines.append("outputs" if outputs else "outputs     (none)")
    width = min(max((len(_show(name)) for name in outputs), default=0), 24)
    lines.extend(f"  {_show(name):<{width}}  {preview}" for name, preview in outputs.items())
    return "\n".join(lines)


def _usage_text(cost: Mapping[str, int]) -> str:
    calls = cost["llm_calls"]
    total = cost["input_tokens"] + cost["output_tokens"]
    return (
        f"{cost['input_tokens']} in + {cost['output_tokens']} out = {total} tokens, "
        f"{calls} LLM call{'' if calls == 1 else 's'}"
    )


# --- graph --------------------------------------------------------------------------------

_MERMAID_STYLES = (
    ("done", "fill:#d3f9d8,stroke:#2b8a3e,color:#1b4332"),
    ("failed", "fill:#ffe3e3,stroke:#c92a2a,color:#5c0011"),
    ("pending", "fill:#f1f3f5,stroke:#868e96,color:#343a40"),
)
_DOT_FILLS = {"done": "#d3f9d8", "failed": "#ffe3e3", "pending": "#f1f3f5"}


def _graph(args: argparse.Namespace) -> int:
    from pathlib import Path  # noqa: PLC0415

    from executionkit._checkpoint import LEGACY_VERSION  # noqa: PLC0415

    checkpoint = None
    if args.checkpoint is not None:
        path = Path(args.checkpoint)
        checkpoint = _load_checkpoint(path, missing_ok=False)
    workflow = _load_workflow(args.workflow)
    statuses = None if checkpoint is None else step_statuses(workflow, checkpoint)
    if checkpoint is not None and checkpoint.version != LEGACY_VERSION:
        known = {step.name for step in workflow.steps}
        unknown = [name for name in checkpoint.outputs if name not in known]
        if unknown:
            _say(
                f"warning: {args.checkpoint} records steps {args.workflow} does not have: "
                f"{', '.join(map(_show, unknown))}"
            )
    draw = mermaid if args.format == "mermaid" else dot
    _out(draw(workflow, statuses))
    return EXIT_OK


def step_statuses(workflow: Workflow, checkpoint: WorkflowCheckpoint) -> dict[str, str]:
    """Each step's state in ``checkpoint``: ``done``, ``failed`` or ``pending``."""
    return {
        step.name: "done"
        if step.name in checkpoint.outputs
        else "failed"
        if step.name in checkpoint.errors
        else "pending"
        for step in workflow.steps
    }


def _edges(workflow: Workflow) -> list[tuple[int, int]]:
    """(dependency, step) index pairs: by step in declaration order, then ``depends_on``."""
    index = {step.name: position for position, step in enumerate(workflow.steps)}
    return [
        (index[dep], position)
        for position, step in enumerate(workflow.steps)
        for dep in step.depends_on
    ]


def mermaid(workflow: Workflow, statuses: Mapping[str, str] | None = None) -> str:
    """The graph as a Mermaid flowchart, steps styled by state when ``statuses`` is given."""
    lines = ["flowchart TD"]
    for position, step in enumerate(workflow.steps):
        lines.append(f'    s{position}["{_mermaid_label(step.name)}"]')
    lines.extend(f"    s{dep} --> s{position}" for dep, position in _edges(workflow))
    if statuses is not None:
        for state, style in _MERMAID_STYLES:
            lines.append(f"    classDef {state} {style}")
        for state, _ in _MERMAID_STYLES:
            members = [
                f"s{position}"
                for position, step in enumerate(workflow.steps)
                if statuses[step.name] == state
            ]
            if members:
                lines.append(f"    class {','.join(members)} {state}")
    return "\n".join(lines)


def _mermaid_label(name: str) -> str:
    text = _one_line(name)
    for char, code in (("#", "#35;"), ('"', "#quot;"), ("<", "#lt;"), (">", "#gt;")):
        text = text.replace(char, code)
    return text


def dot(workflow: Workflow, statuses: Mapping[str, str] | None = None) -> str:
    """The graph in Graphviz dot, steps filled by state when ``statuses`` is given."""
    style = "rounded" if statuses is None else "rounded,filled"
    lines = [
        "digraph workflow {",
        "    rankdir=TB;",
        f'    node [shape=box, style="{style}"];',
    ]
    for position, step in enumerate(workflow.steps):
        attributes = f'label="{_dot_label(step.name)}"'
        if statuses is not None:
            attributes += f', fillcolor="{_DOT_FILLS[statuses[step.name]]}"'
        lines.append(f"    n{position} [{attributes}];")
    lines.extend(f"    n{dep} -> n{position};" for dep, position in _edges(workflow))
    lines.append("}")
    return "\n".join(lines)


def _dot_label(name: str) -> str:
    return _one_line(name).replace("\\", "\\\\").replace('"', '\\"')


_COMMANDS: dict[str, Callable[[argparse.Namespace], int]] = {
    "run": _run,
    "inspect": _inspect,
    "graph": _graph,
}


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
