"""How the kit words a failure: what ``load()`` returned against what was saved."""

from __future__ import annotations

from typing import Any

from executionkit._checkpoint._value import WorkflowCheckpoint

_PREVIEW_CHARS = 80
# Most telling first: what was recorded, then what format 3 records of steps without an
# output (which step_info describes too, so a store dropping them differs there as well).
_ORDER = ("run_id", "seq", "step_index", "outputs", "skipped", "items", "pending", "children")


def preview(value: object) -> str:
    text = repr(value)
    return text if len(text) <= _PREVIEW_CHARS else text[: _PREVIEW_CHARS - 3] + "..."


def describe(checkpoint: object) -> str:
    if isinstance(checkpoint, WorkflowCheckpoint):
        return f"the checkpoint with seq={checkpoint.seq}"
    return preview(checkpoint)


def find_difference(expected: dict[str, Any], got: dict[str, Any]) -> str | None:
    """How ``got`` differs from ``expected``, most telling field first; None if equal."""
    if expected == got:
        return None
    if expected.get("seq") != got.get("seq"):
        return f"load() returned seq={got.get('seq')!r}, expected seq={expected.get('seq')!r}"
    keys = [*_ORDER, *(key for key in expected if key not in _ORDER)]
    keys += [key for key in got if key not in keys]
    for key in keys:
        want, have = expected.get(key), got.get(key)
        if want != have:
            return f"load() returned a checkpoint whose {_field_difference(key, want, have)}"
    return "load() returned a different checkpoint"  # pragma: no cover - dict == covers it


def _field_difference(key: str, want: object, have: object) -> str:
    if isinstance(want, dict) and isinstance(have, dict):
        for name in want:
            if name not in have:
                return f"{key!r} lacks {name!r}"
        for name in have:
            if name not in want:
                return f"{key!r} has {name!r}, which was not saved"
        for name, value in want.items():
            if have[name] != value:
                return f"{key!r}[{name!r}] is {preview(have[name])}, expected {preview(value)}"
    return f"{key!r} is {preview(have)}, expected {preview(want)}"
