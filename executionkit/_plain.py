"""Checking that a value is plain JSON data, naming the path of the first violation."""

from __future__ import annotations

import math
from typing import Any, NoReturn

from executionkit._errors import CheckpointValueError

_HINT = (
    "checkpoints hold plain data only: dict with str keys, list, str, int, finite float, "
    "bool, None"
)
_PREVIEW_CHARS = 60


def plain_copy(value: Any, what: str) -> Any:
    """Return a deep copy of ``value`` if it survives a JSON round trip equal.

    Raises `CheckpointValueError` otherwise; ``what`` names the value in the
    message, for example ``"progress of step 'x'"``. The copy keeps later changes
    to the caller's objects out of checkpoints already taken.
    """
    return _copy(value, what, [], set())


def _copy(value: Any, what: str, path: list[str], active: set[int]) -> Any:
    kind = type(value)
    if value is None or kind in (str, bool, int):
        return value
    if kind is float:
        if not math.isfinite(value):
            _reject(value, what, path, f"float({str(value)!r}) is not valid JSON")
        return value
    if kind is not list and kind is not dict:
        _reject(value, what, path, f"{_preview(value)} ({kind.__name__}) is not plain data")
    marker = id(value)
    if marker in active:
        _reject(value, what, path, "a container that contains itself is not valid JSON")
    active.add(marker)
    copied: Any
    if kind is list:
        copied = []
        for index, item in enumerate(value):
            path.append(f"[{index}]")
            copied.append(_copy(item, what, path, active))
            path.pop()
    else:
        copied = {}
        for key, item in value.items():
            if type(key) is not str:
                _reject(key, what, path, f"key {_preview(key)} is not a str")
            path.append(f"[{key!r}]")
            copied[key] = _copy(item, what, path, active)
            path.pop()
    active.discard(marker)
    return copied


def _preview(value: object) -> str:
    text = repr(value)
    return text if len(text) <= _PREVIEW_CHARS else text[: _PREVIEW_CHARS - 3] + "..."


def _reject(value: object, what: str, path: list[str], problem: str) -> NoReturn:
    where = f" at {''.join(path)}" if path else ""
    raise CheckpointValueError(
        f"{what}{where}: {problem}; {_HINT}", path="".join(path), value=value
    )
