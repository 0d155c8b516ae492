"""Loading what the commands are given: workflows, checkpoint files and inputs."""

from __future__ import annotations

import json
import math
import os
import shlex
import stat
import sys
from typing import TYPE_CHECKING, Any

from executionkit._cli._exits import CliError
from executionkit._cli._text import error_text, preview

if TYPE_CHECKING:
    import argparse
    from collections.abc import Iterable
    from pathlib import Path

    from executionkit._checkpoint._value import WorkflowCheckpoint
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
    """Read the checkpoint in ``path`` (validated, nothing evaluated); None if there is none.

    Read here rather than through `JsonFileStore.load`, so that a file the store
    would block on (a FIFO) or choke on (JSON nested too deeply) is bad input too.
    """
    from executionkit._checkpoint._value import WorkflowCheckpoint  # noqa: PLC0415

    data = _read_regular_file(path, str(path))
    if data is None:
        if missing_ok:
            return None
        msg = f"{path}: no such file"
        raise CliError(msg)
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        msg = f"{path}: not a checkpoint file: not UTF-8 text ({exc.reason} at byte {exc.start})"
        raise CliError(msg) from None
    if not text.strip():
        if missing_ok:
            return None
        msg = f"{path}: holds no checkpoint (the file is empty)"
        raise CliError(msg)
    parsed = _parsed(path, text)
    try:
        return WorkflowCheckpoint.from_dict(parsed)
    except ValueError as exc:  # CheckpointFormatError: a missing or malformed field
        msg = f"{path}: {exc}"
        raise CliError(msg) from None
    except RecursionError:  # validating walks the outputs
        msg = f"{path}: not a checkpoint file: {_TOO_DEEP}"
        raise CliError(msg) from None


def _parsed(path: Path, text: str) -> object:
    """The JSON of the checkpoint file ``path``, or a `CliError` saying why it is none."""
    try:
        return parse_json(text)
    except json.JSONDecodeError as exc:
        msg = (
            f"{path}: not a checkpoint file: invalid JSON at line {exc.lineno} column "
            f"{exc.colno} ({exc.msg})"
        )
        if exc.msg == "Extra data" and _is_lines_file(text):
            msg += (
                "; it holds JSON Lines, as JsonLinesStore writes them: give it a .jsonl name "
                "to read it"
            )
        raise CliError(msg) from None
    except ValueError as exc:
        msg = f"{path}: not a checkpoint file: {exc}"
        raise CliError(msg) from None


def load_lines_checkpoint(path: Path, *, missing_ok: bool) -> WorkflowCheckpoint | None:
    """The latest checkpoint the JSON Lines file ``path`` holds (`JsonLinesStore`).

    The file is checked as `load_checkpoint` checks one (a FIFO or a device is bad
    input, never read) before the store reads it. A file holding one whole JSON
    checkpoint, as ``--checkpoint FILE.jsonl`` wrote it before it chose the store by
    the name, is refused with the rename that reads it: the store would take it for
    a torn line, and the next save would cut it off.
    """
    from executionkit._errors import ExecutionKitError  # noqa: PLC0415
    from executionkit.stores import JsonLinesStore  # noqa: PLC0415

    data = _read_regular_file(path, str(path))
    if data is None or not data.strip():
        if missing_ok:
            return None
        msg = f"{path}: no such file" if data is None else f"{path}: holds no checkpoint"
        raise CliError(msg)
    if _is_json_checkpoint(data):
        renamed = path.with_suffix(".json")
        if renamed.exists():
            renamed = path.with_name(f"{path.stem}.from-jsonl.json")
        msg = (
            f"{path}: holds one JSON checkpoint, not JSON Lines (as --checkpoint FILE.jsonl "
            f"wrote it before); rename it to resume from it: "
            f"mv {shlex.quote(str(path))} {shlex.quote(str(renamed))}"
        )
        raise CliError(msg)
    try:
        checkpoint = JsonLinesStore(path).load()
    except (ExecutionKitError, ValueError, OSError, RecursionError) as exc:
        text = error_text(exc).removeprefix(f"{type(exc).__name__}: ")
        msg = text if text.startswith(str(path)) else f"{path}: {text}"
        raise CliError(msg) from None
    if checkpoint is None and not missing_ok:
        msg = f"{path}: holds no checkpoint (its only line is torn)"
        raise CliError(msg)
    return checkpoint


def _is_json_checkpoint(data: bytes) -> bool:
    """Whether ``data`` is one JSON object with a checkpoint's fields, not JSON Lines."""
    try:
        parsed = parse_json(data.decode("utf-8"))
    except ValueError:  # not JSON (many lines), not UTF-8, or what the store will refuse
        return False
    return isinstance(parsed, dict) and "step_index" in parsed and "outputs" in parsed


def _is_lines_file(text: str) -> bool:
    """Whether the first line of ``text`` is a line `JsonLinesStore` writes."""
    try:
        first = parse_json(text.split("\n", 1)[0])
    except ValueError:
        return False
    return isinstance(first, dict) and "s" in first and "n" in first


def read_inputs(args: argparse.Namespace) -> dict[str, Any]:
    """The run's initial context: ``--inputs-json``, then each ``--input`` over it."""
    context: dict[str, Any] = {}
    if args.inputs_json is not None:
        from_file = read_json_object("--inputs-json", args.inputs_json, "input names to values")
        context.update(from_file)
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


def read_json_object(flag: str, file: str, what: str) -> dict[str, Any]:
    """The JSON object in ``file``, given with ``flag``; ``what`` its keys and values are.

    Hostile files are refused as checkpoint files are: one `CliError` naming the flag
    and the file, for anything that is not a regular file of strict JSON.
    """
    from pathlib import Path  # noqa: PLC0415

    path = Path(file)
    label = f"{flag} {path}"
    data = _read_regular_file(path, label)
    if data is None:
        msg = f"{label}: no such file"
        raise CliError(msg)
    try:
        parsed = parse_json(data.decode("utf-8"))
    except UnicodeDecodeError:
        msg = f"{label}: cannot read: not UTF-8 text"
        raise CliError(msg) from None
    except ValueError as exc:
        msg = f"{label}: not JSON ({exc})"
        raise CliError(msg) from None
    if not isinstance(parsed, dict):
        msg = f"{label}: must hold a JSON object of {what}, got {type(parsed).__name__}"
        raise CliError(msg)
    return parsed


# --- reading files given on the command line ----------------------------------------------

_TOO_DEEP = "nested too deeply to read"

_KINDS = (
    (stat.S_ISDIR, "a folder"),
    (stat.S_ISFIFO, "a named pipe (FIFO)"),
    (stat.S_ISSOCK, "a socket"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
)


def _read_regular_file(path: Path, label: str) -> bytes | None:
    """The contents of the regular file at ``path``, or None if there is nothing there.

    The file is opened without blocking and checked before anything is read: reading
    a FIFO would wait for a writer, possibly forever, and a device may never end.
    ``label`` starts each error message.
    """
    flags = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_BINARY", 0)
    try:
        fd = os.open(path, flags)
    except FileNotFoundError:
        return None
    except OSError as exc:
        msg = f"{label}: cannot read: {exc.strerror or exc}"
        raise CliError(msg) from None
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            kind = next((name for test, name in _KINDS if test(mode)), "a special file")
            msg = f"{label}: cannot read: {kind}, not a regular file"
            raise CliError(msg)
        with os.fdopen(fd, "rb", closefd=False) as file:
            return file.read()
    except OSError as exc:
        msg = f"{label}: cannot read: {exc.strerror or exc}"
        raise CliError(msg) from None
    finally:
        os.close(fd)


def parse_json(text: str) -> object:
    """Parse ``text`` as strict JSON, refusing what Python's `json` would let through.

    Raises:
        json.JSONDecodeError: If ``text`` is not JSON at all.
        ValueError: With a one-line reason, for JSON nested too deeply to read, an
            integer longer than Python converts, ``NaN``, ``Infinity`` or a number out
            of a float's range, and strings holding lone surrogates (not Unicode text,
            and not printable or writable as UTF-8).
    """
    try:
        data = json.loads(
            text, parse_constant=_no_constant, parse_int=_int, parse_float=_finite_float
        )
    except RecursionError:
        raise ValueError(_TOO_DEEP) from None
    _check_strings(data)
    return data


def _no_constant(name: str) -> object:
    msg = f"{name} is not a JSON value"
    raise ValueError(msg)


def _int(text: str) -> int:
    # int() would raise too, but with advice about sys.set_int_max_str_digits().
    limit = sys.get_int_max_str_digits()
    digits = len(text.lstrip("-"))
    if limit and digits > limit:
        msg = f"an integer of {digits} digits (at most {limit} are read)"
        raise ValueError(msg)
    return int(text)


def _finite_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        msg = f"the number {preview(text)} is out of range for a float"
        raise ValueError(msg)
    return value


def _check_strings(data: object) -> None:
    """Raise ValueError if a string or key anywhere in ``data`` holds a lone surrogate."""
    pending = [data]  # a loop, not recursion: json.loads nests deeper than a walk could
    while pending:
        item = pending.pop()
        if isinstance(item, list):
            pending.extend(item)
            continue
        strings: Iterable[object] = (item,)
        if isinstance(item, dict):
            pending.extend(item.values())
            strings = item.keys()
        for string in strings:
            if isinstance(string, str):
                _check_text(string)


def _check_text(text: str) -> None:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        msg = (
            f"a string holds the lone surrogate \\u{ord(text[exc.start]):04x}, which is not "
            f"Unicode text"
        )
        raise ValueError(msg) from None
