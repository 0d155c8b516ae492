"""Loading what the commands are given: workflows, checkpoint files and inputs."""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Any

from executionkit._cli._exits import CliError
from executionkit._cli._text import error_text, preview

if TYPE_CHECKING:
    import argparse
    from pathlib import Path

    from executionkit._checkpoint import WorkflowCheckpoint
    from executionkit._workflow import Workflow


def load_workflow(spec: str) -> Workflow:
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
            f"{spec} is {type(target).__name__} {preview(target)}, not a Workflow or a "
            f"function returning one"
        )
        raise CliError(msg)
    try:
        made = target()
    except Exception as exc:  # noqa: BLE001 - the user's factory failing is bad input
        msg = f"calling {spec}() failed: {error_text(exc)}"
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
        msg = f"importing {module_name!r} failed: {error_text(exc)}"
        raise CliError(msg) from None
    except Exception as exc:  # noqa: BLE001 - any failure of the user's module is bad input
        msg = f"importing {module_name!r} failed: {error_text(exc)}"
        raise CliError(msg) from None


def load_checkpoint(path: Path, *, missing_ok: bool) -> WorkflowCheckpoint | None:
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


def read_inputs(args: argparse.Namespace) -> dict[str, Any]:
    """The run's initial context: ``--inputs-json``, then each ``--input`` over it."""
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
