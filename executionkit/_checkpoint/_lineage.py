"""Where a run comes from: the ``trace`` it continues and the ``lineage`` of a fork.

Each reader checks its own field and names the path of anything wrong, as the
readers of `executionkit._checkpoint._fields` do (decision 0010).
"""

from __future__ import annotations

import re
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

from executionkit._checkpoint._fields import (
    check_keys,
    fail,
    needs_version_4,
    optional_str,
    read_count,
    read_dict,
)

if TYPE_CHECKING:
    from collections.abc import Mapping

__all__ = [
    "LINEAGE_KEYS",
    "lineage_dict",
    "read_lineage",
    "read_trace",
]

_TRACEPARENT = re.compile(r"[0-9a-f]{2}-([0-9a-f]{32})-([0-9a-f]{16})-[0-9a-f]{2}")
LINEAGE_KEYS = frozenset({"parent_run_id", "parent_seq", "overridden", "rerun", "note"})


def read_trace(value: object, version: int) -> str | None:
    """``trace``: a W3C ``traceparent`` string (``00-<trace id>-<span id>-<flags>``) or None."""
    if value is None:
        return None
    match = _TRACEPARENT.fullmatch(value) if type(value) is str else None
    if match is None or set(match[1]) == {"0"} or set(match[2]) == {"0"}:
        fail(
            "trace",
            "a W3C traceparent str such as '00-<32 hex>-<16 hex>-01' (ids not all zero) or None",
            value,
        )
    needs_version_4("trace", value, version)
    return match[0]


def _names(value: object, path: str) -> tuple[str, ...]:
    if not isinstance(value, (list, tuple)) or not all(type(n) is str and n for n in value):
        fail(path, "a list of step paths", value)
    return tuple(value)


def read_lineage(value: object, version: int) -> Mapping[str, Any]:
    """``lineage``: where a fork came from, or ``{}`` for a run that is not a fork."""
    lineage = read_dict(value, "lineage")
    if not lineage:
        return MappingProxyType({})
    needs_version_4("lineage", lineage, version)
    check_keys(lineage, LINEAGE_KEYS, where="lineage.")
    parent = lineage["parent_run_id"]
    if type(parent) is not str or not parent:
        fail("lineage.parent_run_id", "a non-empty str", parent)
    return MappingProxyType(
        {
            "parent_run_id": parent,
            "parent_seq": read_count(lineage["parent_seq"], "lineage.parent_seq"),
            "overridden": _names(lineage["overridden"], "lineage.overridden"),
            "rerun": _names(lineage["rerun"], "lineage.rerun"),
            "note": optional_str(lineage["note"], "lineage.note"),
        }
    )


def lineage_dict(lineage: Mapping[str, Any]) -> dict[str, Any]:
    """``lineage`` as the dict the format writes."""
    if not lineage:
        return {}
    return {
        "parent_run_id": lineage["parent_run_id"],
        "parent_seq": lineage["parent_seq"],
        "overridden": list(lineage["overridden"]),
        "rerun": list(lineage["rerun"]),
        "note": lineage["note"],
    }
