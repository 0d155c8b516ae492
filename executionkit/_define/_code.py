"""Code fingerprints: what a step's function is made of, hashed, to tell when it changed.

A step's output is recorded with the fingerprint of its function (``code`` in
the checkpoint's ``step_info``); a resume compares it with the function's now
(decision 0018). The fingerprint covers the function's own compiled code (its
bytecode, the names it uses, its constants: a prompt template written in it),
its default arguments and the values it closes over when they are plain data
(a prompt template passed in as data), and, for a `functools.partial`, its
function and arguments. It does not cover the functions it calls, module-level
values it reads, or anything outside Python (a model's version): give the step
a ``version`` for those. Bytecode differs between Python versions, so a new
minor version of Python fingerprints every step anew.

Stable across processes and machines of one Python version: no ``id()``, no
``hash()`` (randomised for str), nothing but the code and plain values.
"""

from __future__ import annotations

import functools
import hashlib
import types
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from collections.abc import Mapping

__all__ = ["changed_code", "fingerprint"]

_PRIMITIVES = (str, bytes, int, float, complex, bool, type(None), type(Ellipsis))
_DEPTH = 4
_HOPS = 8  # decorators followed through __wrapped__, at most (a cycle ends here)
"""How deep functions closed over (or partials of partials) are followed."""


def fingerprint(run: object) -> str | None:
    """16 hex digits of SHA-256 over what ``run``'s code is made of; None for no function."""
    digest = hashlib.sha256()
    if not _feed(digest, run, _DEPTH):
        return None
    return digest.hexdigest()[:16]


def changed_code(
    step_info: Mapping[str, Mapping[str, Any]], recorded: Mapping[str, Mapping[str, Any]]
) -> dict[str, tuple[str, str]]:
    """The steps whose ``recorded`` fingerprint differs from their workflow's ``step_info``.

    Step name to (recorded, current), in the order of ``recorded``; a step
    either side lacks a fingerprint for is unknown, never changed.
    """
    changed: dict[str, tuple[str, str]] = {}
    for name, entry in recorded.items():
        own = step_info.get(name)
        old = entry.get("code")
        new = None if own is None else own.get("code")
        if old is not None and new is not None and old != new:
            changed[name] = (old, new)
    return changed


def _feed(digest: Any, run: object, depth: int, hops: int = _HOPS) -> bool:
    """Add what ``run`` is made of to ``digest``; whether it is code at all."""
    wrapped = getattr(run, "__wrapped__", None)
    if wrapped is not None and hops > 0:  # a decorator (functools.wraps): its function counts
        return _feed(digest, wrapped, depth, hops - 1) or _feed_own(digest, run, depth)
    return _feed_own(digest, run, depth)


def _feed_own(digest: Any, run: object, depth: int) -> bool:
    """`_feed` of ``run`` itself, not of a function it wraps."""
    update = digest.update
    if isinstance(run, functools.partial):
        update(b"partial\0")
        _feed(digest, run.func, depth - 1)
        update(_canon(run.args, depth).encode())
        update(_canon(run.keywords, depth).encode())
        return True
    if isinstance(run, types.MethodType):
        return _feed(digest, run.__func__, depth)
    if isinstance(run, types.FunctionType):
        update(b"function\0")
        _feed_code(digest, run.__code__)
        update(_canon(run.__defaults__, depth).encode())
        update(_canon(run.__kwdefaults__, depth).encode())
        cells = run.__closure__ or ()
        update(_canon(tuple(_cell(cell) for cell in cells), depth).encode())
        return True
    if isinstance(run, (types.BuiltinFunctionType, types.BuiltinMethodType)):
        update(f"builtin\0{getattr(run, '__module__', '')}.{run.__qualname__}".encode())
        return True
    call = getattr(type(run), "__call__", None)  # noqa: B004 - the class's own __call__
    if isinstance(call, types.FunctionType):  # an instance of a class with __call__
        update(f"instance\0{type(run).__qualname__}\0".encode())
        _feed(digest, call, depth)
        state = getattr(run, "__dict__", None)
        update(_canon(state, depth).encode())
        return True
    return False


def _feed_code(digest: Any, code: types.CodeType) -> None:
    update = digest.update
    update(code.co_code)
    update("\0".join(code.co_names).encode())
    update("\0".join(code.co_freevars).encode())
    update(str(code.co_argcount).encode())
    for constant in code.co_consts:
        if isinstance(constant, types.CodeType):
            _feed_code(digest, constant)
        else:
            update(_canon(constant, 1).encode())
        update(b"\0")


def _cell(cell: types.CellType) -> object:
    try:
        return cell.cell_contents
    except ValueError:  # an empty cell: a name bound later
        return None


def _canon(value: object, depth: int) -> str:
    """A text for ``value`` that is the same in every process: plain data, else its type."""
    if isinstance(value, _PRIMITIVES):
        try:
            return f"{type(value).__name__}:{value!r}"
        except Exception:  # noqa: BLE001 - an int past the digit limit, a subclass's repr
            return f"<{type(value).__qualname__} unprintable>"
    text = _canon_holder(value, depth - 1) if depth > 0 else None
    # Anything else (a client, a lock): what it is, not its state.
    return f"<{type(value).__qualname__}>" if text is None else text


def _canon_holder(value: object, depth: int) -> str | None:
    """`_canon` of a container or a function inside, ``depth`` levels down; None otherwise."""
    if isinstance(value, (list, tuple)):
        return "[" + ",".join(_canon(item, depth) for item in value) + "]"
    if isinstance(value, (set, frozenset)):
        return "{" + ",".join(sorted(_canon(item, depth) for item in value)) + "}"
    if isinstance(value, dict):
        items = sorted((_canon(k, depth), _canon(v, depth)) for k, v in list(value.items()))
        return "{" + ",".join(f"{k}:{v}" for k, v in items) + "}"
    if callable(value):
        return f"<{type(value).__qualname__} {fingerprint(value) if depth > 0 else None}>"
    return None
