"""Reading the format 3 fields of a checkpoint: skips, map items, questions, sub-workflows.

Each reader checks its own field (every error naming its path) and `read_kinds`
checks them against one another: a step skipped by a condition never ran, so
it cannot also have finished items, a pending question or a sub-workflow in
progress. What only the workflow can tell (whether anything could skip a step,
which kind of children it has, when its question expires) is checked on resume
(`executionkit._resume._restore`).
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime, timedelta
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

from executionkit._checkpoint._fields import (
    COST_KEYS,
    check_keys,
    fail,
    guard,
    read_count,
    read_dict,
)
from executionkit._errors import CheckpointFormatError
from executionkit._types import TokenUsage

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable

Entries = MappingProxyType[str, Mapping[str, Any]]
"""What ``items``, ``pending`` and ``children`` hold once read: step name to its entry."""


def read_kinds(
    fields: Mapping[str, object],
    version: int,
    outputs: Mapping[str, Any],
    read_child: Callable[[object, str], object],
) -> tuple[MappingProxyType[str, str], Entries, Entries, Entries]:
    """``skipped``, ``items``, ``pending`` and ``children`` from ``fields``, read and agreeing.

    Each is read at its own path (see `guard`); ``read_child(value, path)`` reads
    one nested checkpoint of ``children``.
    """
    skipped = guard("skipped", lambda: read_skipped(fields["skipped"], version, outputs))
    items = guard("items", lambda: read_items(fields["items"], version, outputs))
    pending = guard("pending", lambda: read_pending(fields["pending"], version, outputs))
    children = guard(
        "children", lambda: read_children(fields["children"], version, outputs, read_child)
    )
    _never_ran(skipped, (("items", items), ("pending", pending), ("children", children)))
    return skipped, items, pending, children


_NO_WORK = {
    "items": "has no finished items",
    "pending": "asks no question",
    "children": "has no sub-workflow in progress",
}


def _never_ran(skipped: Iterable[str], work: Iterable[tuple[str, Entries]]) -> None:
    """Refuse a step recorded as skipped that also has work of a step that started."""
    for name in skipped:
        for field, entries in work:
            if name in entries:
                path = f"skipped.{name}"
                msg = (
                    f"checkpoint field {path!r} contradicts '{field}.{name}': a skipped step "
                    f"never runs, so it {_NO_WORK[field]}"
                )
                raise CheckpointFormatError(msg, path=path)


def _needs_version_3(path: str, value: Mapping[str, Any], version: int) -> None:
    if value and version < 3:  # noqa: PLR2004 - the version that introduced it
        msg = f"checkpoint field {path!r} needs format version 3, got version {version}"
        raise CheckpointFormatError(msg, path=path)


def _not_recorded(path: str, names: Iterable[str], outputs: Mapping[str, Any], what: str) -> None:
    done = [name for name in names if name in outputs]
    if done:
        msg = f"checkpoint field {path!r} names recorded steps {done!r}; {what}"
        raise CheckpointFormatError(msg, path=path)


def read_step_names(value: object, path: str) -> dict[str, Any]:
    """A dict keyed by non-empty step names."""
    found = read_dict(value, path)
    if "" in found:
        msg = f"checkpoint field {path!r} must have non-empty step names as keys, got ''"
        raise CheckpointFormatError(msg, path=path)
    return found


def read_skipped(
    value: object, version: int, outputs: Mapping[str, Any]
) -> MappingProxyType[str, str]:
    """``skipped``: step name to the reason a condition skipped it."""
    skipped = read_step_names(value, "skipped")
    _needs_version_3("skipped", skipped, version)
    for name, reason in skipped.items():
        if not isinstance(reason, str):
            fail(f"skipped.{name}", "a str (why the step was skipped)", reason)
    _not_recorded("skipped", skipped, outputs, "a skipped step has no output")
    return MappingProxyType(skipped)


def read_usage(value: object, path: str) -> TokenUsage:
    """A `TokenUsage`, or the dict `to_dict` writes for one."""
    if isinstance(value, TokenUsage):
        for name in COST_KEYS:
            read_count(getattr(value, name), f"{path}.{name}")
        return value
    usage = read_dict(value, path)
    check_keys(usage, frozenset(COST_KEYS), where=f"{path}.")
    return TokenUsage(*(read_count(usage[key], f"{path}.{key}") for key in COST_KEYS))


def read_items(
    value: object, version: int, outputs: Mapping[str, Any]
) -> MappingProxyType[str, Mapping[str, Any]]:
    """``items``: for each unfinished map, its finished items' outputs by key and their usage."""
    items = read_step_names(value, "items")
    _needs_version_3("items", items, version)
    _not_recorded("items", items, outputs, "a finished map's items are in its output")
    result: dict[str, Mapping[str, Any]] = {}
    for name, entry in items.items():
        where = f"items.{name}"
        fields = read_dict(entry, where)
        check_keys(fields, frozenset({"outputs", "cost"}), where=f"{where}.")
        done = read_dict(fields["outputs"], f"{where}.outputs")
        if "" in done:
            fail(f"{where}.outputs", "keyed by non-empty item keys", "")
        cost = read_usage(fields["cost"], f"{where}.cost")
        result[name] = MappingProxyType({"outputs": MappingProxyType(done), "cost": cost})
    return MappingProxyType(result)


_PENDING_KEYS = frozenset({"question", "asked_at", "expires_at"})


def _read_moment(value: object, path: str, *, optional: bool) -> str | None:
    if value is None and optional:
        return None
    if not isinstance(value, str) or not _is_utc(value):
        fail(path, "a UTC ISO-8601 timestamp str" + (" or None" if optional else ""), value)
    return value


def read_moment(value: object, path: str) -> str:
    """``value`` if it is a UTC ISO-8601 timestamp str; else raise naming ``path``."""
    if not isinstance(value, str) or not _is_utc(value):
        fail(path, "a UTC ISO-8601 timestamp str", value)
    return value


def _is_utc(text: str) -> bool:
    try:
        moment = datetime.fromisoformat(text)
    except ValueError:
        return False
    # Another offset may name the same moment, but the format writes every time in UTC.
    return moment.utcoffset() == timedelta(0)


def read_pending(
    value: object, version: int, outputs: Mapping[str, Any]
) -> MappingProxyType[str, Mapping[str, Any]]:
    """``pending``: for each unanswered question, the question and when it was asked."""
    pending = read_step_names(value, "pending")
    _needs_version_3("pending", pending, version)
    _not_recorded("pending", pending, outputs, "an answered question is an output")
    result: dict[str, Mapping[str, Any]] = {}
    for name, entry in pending.items():
        where = f"pending.{name}"
        fields = read_dict(entry, where)
        check_keys(fields, _PENDING_KEYS, where=f"{where}.")
        asked_at = _read_moment(fields["asked_at"], f"{where}.asked_at", optional=False)
        expires_at = _read_moment(fields["expires_at"], f"{where}.expires_at", optional=True)
        result[name] = MappingProxyType(
            {"question": fields["question"], "asked_at": asked_at, "expires_at": expires_at}
        )
    return MappingProxyType(result)


def read_children(
    value: object,
    version: int,
    outputs: Mapping[str, Any],
    read_child: Callable[[object, str], object],
) -> MappingProxyType[str, Mapping[str, Any]]:
    """``children``: the checkpoint of each sub-workflow in progress, or of each item's.

    ``read_child(value, path)`` reads one nested checkpoint.
    """
    children = read_step_names(value, "children")
    _needs_version_3("children", children, version)
    _not_recorded("children", children, outputs, "a finished sub-workflow is an output")
    result: dict[str, Mapping[str, Any]] = {}
    for name, entry in children.items():
        where = f"children.{name}"
        fields = read_dict(entry, where)
        if set(fields) == {"checkpoint"}:
            child = read_child(fields["checkpoint"], f"{where}.checkpoint")
            result[name] = MappingProxyType({"checkpoint": child})
        elif set(fields) == {"items"}:
            keyed = read_dict(fields["items"], f"{where}.items")
            result[name] = MappingProxyType(
                {
                    "items": MappingProxyType(
                        {
                            key: read_child(item, f"{where}.items.{key}")
                            for key, item in keyed.items()
                        }
                    )
                }
            )
        else:
            fail(where, "{'checkpoint': {...}} or {'items': {key: {...}}}", entry)
    return MappingProxyType(result)


def read_new_items(
    value: object, items: Mapping[str, Mapping[str, Any]]
) -> MappingProxyType[str, tuple[str, ...]]:
    """``new_items``: map step to the keys of its items new since the last checkpoint."""
    found = read_dict(value, "new_items")
    for name, keys in found.items():
        held = items[name]["outputs"] if name in items else {}
        if not isinstance(keys, tuple) or not all(
            isinstance(key, str) and key in held for key in keys
        ):
            fail(f"new_items.{name}", "a tuple of keys of items recorded for that map", keys)
    return MappingProxyType(found)
