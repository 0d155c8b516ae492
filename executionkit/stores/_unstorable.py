"""Naming the part of a checkpoint that the stores cannot write as UTF-8 JSON.

Runs only after ``json.dumps`` (or the UTF-8 encoding of its text) failed, so
it may be slow; it must not fail itself, whatever the value holds.
"""

from __future__ import annotations

import json
import math
from typing import TYPE_CHECKING, Any

from executionkit._errors import CheckpointValueError

if TYPE_CHECKING:
    from collections.abc import Iterator, Mapping

    from executionkit._checkpoint._value import WorkflowCheckpoint

_DATA_HINT = (
    "stores write JSON, so steps must return dicts, lists, str, int, finite float, bool or "
    "None (or give the Step encode/decode; run with validate_json=True to catch this when "
    "the step returns)"
)
_PREVIEW_CHARS = 60
_Found = tuple[str, object, str]
"""Where the part is (``['items'][3]``), the part itself, and what is wrong with it."""


def unstorable(checkpoint: WorkflowCheckpoint, store: str, exc: Exception) -> Exception:
    """A `CheckpointValueError` naming the first part of ``checkpoint`` JSON cannot hold."""
    head = f"{store}: cannot store checkpoint seq={checkpoint.seq} of run {checkpoint.run_id!r}"
    fields = {
        "run_id": checkpoint.run_id,
        "created_at": checkpoint.created_at,
        "context_keys": list(checkpoint.context_keys),
    }
    parts: tuple[tuple[str, Mapping[str, Any]], ...] = (
        ("the output of step", checkpoint.outputs),
        ("the items of map step", _items(checkpoint)),
        ("the progress of step", checkpoint.progress),
        ("the metadata value", checkpoint.metadata),
        ("the error of step", checkpoint.errors),
        ("the field", fields),
    )
    for what, mapping in parts:
        for name, value in mapping.items():
            found = _find_unstorable(value)
            if found is not None:
                path, bad, problem = found
                where = f" at {path}" if path else ""
                msg = f"{head}: {what} {name!r}{where}: {problem}; {_DATA_HINT}"
                return CheckpointValueError(msg, path=path, value=bad)
    msg = f"{head} as JSON: {type(exc).__name__}: {exc}; {_DATA_HINT}"
    return CheckpointValueError(msg, path="", value=None)


def _items(checkpoint: WorkflowCheckpoint) -> dict[str, dict[str, Any]]:
    """Each unfinished map's items by key, for the path to name the item."""
    return {name: dict(entry["outputs"]) for name, entry in checkpoint.items.items()}


def _find_unstorable(value: object) -> _Found | None:
    """The first part of ``value`` that cannot be written, or None.

    Walks the value with a stack of its own rather than by recursion, so that
    no depth makes the search itself fail. Whatever it finds nothing wrong
    with, ``json.dumps`` is asked about as a whole: what is left (such as
    nesting too deep for its recursion) is named after what it says.
    """
    path: list[str] = []
    open_ids: set[int] = set()  # the containers along the path: one seen again is a cycle
    frames: list[tuple[int, Iterator[tuple[str, Any]]]] = []
    item: Any = value
    while True:
        problem = _problem(item, open_ids)
        if problem is not None:
            return "".join(path), problem[0], problem[1]
        if isinstance(item, (list, tuple, dict)):
            open_ids.add(id(item))
            frames.append((id(item), _children(item)))
        while frames:
            marker, children = frames[-1]
            del path[len(frames) - 1 :]  # the path now leads to the open container
            child = next(children, None)
            if child is not None:
                path.append(child[0])
                item = child[1]
                break
            frames.pop()
            open_ids.discard(marker)
        else:
            return _refused_whole(value)


def _children(value: list[Any] | tuple[Any, ...] | dict[Any, Any]) -> Iterator[tuple[str, Any]]:
    if isinstance(value, dict):  # its keys were checked before: their repr cannot fail
        return ((f"[{key!r}]", item) for key, item in value.items())
    return ((f"[{index}]", item) for index, item in enumerate(value))


def _problem(value: object, open_ids: set[int]) -> tuple[object, str] | None:
    """The part of ``value`` itself (not inside it) that cannot be written, and why."""
    if isinstance(value, (list, tuple, dict)):
        if id(value) in open_ids:
            return value, "a container that contains itself is not valid JSON"
        if isinstance(value, dict):
            for key in value:
                if key is not None and not isinstance(key, (str, int, float)):
                    return key, f"key {_preview(key)} is not a str"
                problem = _scalar_problem(key, is_key=True)
                if problem is not None:
                    return key, problem
        return None
    if value is not None and not isinstance(value, (str, int, float)):
        return value, f"{_preview(value)} ({type(value).__name__}) is not JSON data"
    problem = _scalar_problem(value, is_key=False)
    return None if problem is None else (value, problem)


def _scalar_problem(value: object, *, is_key: bool) -> str | None:
    """Why a str, int or float cannot be written as UTF-8 JSON, or None if it can."""
    if isinstance(value, str):
        try:
            value.encode("utf-8")
        except UnicodeEncodeError as exc:
            what = f"key {_preview(value)}" if is_key else f"{_preview(value)} (str)"
            return (
                f"{what} holds the lone surrogate {value[exc.start]!r} at index {exc.start}, "
                f"which UTF-8 cannot encode (a name os.listdir or os.fsdecode could not decode?)"
            )
    elif isinstance(value, float):
        if not math.isfinite(value):
            return f"{'key ' if is_key else ''}float({str(value)!r}) is not valid JSON"
    elif isinstance(value, int):
        try:
            int.__repr__(value)
        except ValueError as exc:  # past sys.get_int_max_str_digits()
            what = "an int key" if is_key else "an int"
            return f"{what} of {value.bit_length()} bits cannot be written: {exc}"
    return None


def _refused_whole(value: object) -> _Found | None:
    try:
        json.dumps(value, ensure_ascii=False, allow_nan=False)
    except (TypeError, ValueError, RecursionError) as exc:
        return "", value, f"json cannot write it ({type(exc).__name__}: {exc})"
    return None


def _preview(value: object) -> str:
    try:
        text = repr(value)
    except Exception:  # noqa: BLE001 - a broken __repr__, or an int past the digit limit
        text = f"<{type(value).__name__} object>"
    return text if len(text) <= _PREVIEW_CHARS else text[: _PREVIEW_CHARS - 3] + "..."
