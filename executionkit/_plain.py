"""Checking that a value is plain JSON data, naming the path of the first violation."""

from __future__ import annotations

import math
from typing import Any, NoReturn

from executionkit._errors import CheckpointValueError, preview

_HINT = (
    "checkpoints hold plain data only: dict with str keys, list, str, int, finite float, "
    "bool, None"
)
# Python refuses to print ints of more digits than sys.get_int_max_str_digits() (at
# least 640, about 2,126 bits), so json.dumps fails on them; only ints past this
# size are printed to find out.
_SAFE_INT_BITS = 2_000
# A path this long is shortened in messages (the error's .path keeps all of it).
_SHOWN_SEGMENTS = 8

Path = list[str | int]
"""Where a value lies inside the checked value: list indexes and dict keys."""


def plain_copy(value: Any, what: str) -> Any:
    r"""Return a deep copy of ``value`` if it survives a JSON round trip equal.

    Raises `CheckpointValueError` otherwise; ``what`` names the value in the
    message, for example ``"progress of step 'x'"``. The copy keeps later changes
    to the caller's objects out of checkpoints already taken.

    Strings must also be encodable as UTF-8 (no lone surrogates such as
    ``"\\udce9"``, which the stores could not write), ints printable in decimal
    (``json.dumps`` fails past Python's digit limit), and the nesting no deeper
    than Python can recurse (it is reported, not raised as `RecursionError`).
    """
    path: Path = []
    try:
        return _copy(value, what, path, set())
    except RecursionError:
        # The path stops where the recursion did: walk to the value found there.
        part = value
        for key in path:
            part = part[key]
        problem = "nested too deeply to check or to store as JSON (RecursionError)"
        _reject(part, what, path, problem)


def _copy(value: Any, what: str, path: Path, active: set[int]) -> Any:
    # Containers are copied here, not in a helper, so that each level of nesting
    # costs one frame: values as deep as before still pass.
    kind = type(value)
    if kind is str:
        if not value.isascii():
            _check_text(value, what, path, "str")
        return value
    if kind is not list and kind is not dict:
        _check_scalar(value, kind, what, path)
        return value
    marker = id(value)
    if marker in active:
        _reject(value, what, path, "a container that contains itself is not valid JSON")
    active.add(marker)
    copied: Any
    if kind is list:
        copied = []
        for index, item in enumerate(value):
            path.append(index)
            copied.append(_copy(item, what, path, active))
            path.pop()
    else:
        copied = {}
        for key, item in value.items():
            if type(key) is not str:
                _reject(key, what, path, f"key {preview(key)} is not a str")
            if not key.isascii():
                _check_text(key, what, path, "key")
            path.append(key)
            copied[key] = _copy(item, what, path, active)
            path.pop()
    active.discard(marker)
    return copied


def _check_scalar(value: Any, kind: type, what: str, path: Path) -> None:
    if value is None or kind is bool:
        return
    if kind is int:
        if value.bit_length() > _SAFE_INT_BITS:
            _check_int(value, what, path)
        return
    if kind is float:
        if not math.isfinite(value):
            _reject(value, what, path, f"float({str(value)!r}) is not valid JSON")
        return
    _reject(value, what, path, f"{preview(value)} ({kind.__name__}) is not plain data")


def _check_text(text: str, what: str, path: Path, role: str) -> None:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        problem = (
            f"{role} {preview(text)} has a lone surrogate {text[exc.start]!r} at index "
            f"{exc.start}, which UTF-8 cannot encode"
        )
        _reject(text, what, path, problem)


def _check_int(value: int, what: str, path: Path) -> None:
    try:
        int.__repr__(value)
    except ValueError:
        problem = (
            f"an int of {value.bit_length():,} bits has more digits than Python prints "
            f"(sys.get_int_max_str_digits()), so it is not valid JSON"
        )
        _reject(value, what, path, problem)


def _path_text(path: Path) -> str:
    return "".join(f"[{key!r}]" if isinstance(key, str) else f"[{key}]" for key in path)


def _reject(value: object, what: str, path: Path, problem: str) -> NoReturn:
    full = _path_text(path)
    shown = full
    if len(path) > _SHOWN_SEGMENTS:
        shown = f"{_path_text(path[:_SHOWN_SEGMENTS])}... ({len(path):,} levels down)"
    where = f" at {shown}" if path else ""
    raise CheckpointValueError(f"{what}{where}: {problem}; {_HINT}", path=full, value=value)
