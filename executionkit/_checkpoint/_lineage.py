"""Reading the format 4 fields of a checkpoint: the ledger, attempts in flight, trace, lineage.

Each reader checks its own field and names the path of anything wrong, as the
readers of `executionkit._checkpoint._fields` do (decision 0010).
"""

from __future__ import annotations

import re
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

from executionkit._checkpoint._fields import check_keys, fail, read_count, read_dict
from executionkit._checkpoint._ledger import OUTCOMES, LedgerEntry
from executionkit._errors import CheckpointFormatError
from executionkit._types import TokenUsage

if TYPE_CHECKING:
    from collections.abc import Mapping

__all__ = [
    "LINEAGE_KEYS",
    "lineage_dict",
    "read_in_flight",
    "read_ledger",
    "read_lineage",
    "read_new_ledger",
    "read_trace",
]

_ROW_LENGTH = 8
_OUTCOMES_TEXT = ", ".join(map(repr, OUTCOMES))
_TRACEPARENT = re.compile(r"[0-9a-f]{2}-([0-9a-f]{32})-([0-9a-f]{16})-[0-9a-f]{2}")
LINEAGE_KEYS = frozenset({"parent_run_id", "parent_seq", "overridden", "rerun", "note"})


def _needs_version_4(path: str, value: object, version: int) -> None:
    if value and version < 4:  # noqa: PLR2004 - the version that introduced it
        msg = f"checkpoint field {path!r} needs format version 4, got version {version}"
        raise CheckpointFormatError(msg, path=path)


def _optional_str(value: object, path: str) -> str | None:
    if value is not None and (type(value) is not str or not value):
        fail(path, "a non-empty str or None", value)
    return value


def _row(value: object, path: str) -> LedgerEntry:
    if isinstance(value, LedgerEntry):
        fields: Any = value.to_list()
    elif isinstance(value, (list, tuple)) and len(value) == _ROW_LENGTH:
        fields = value
    else:
        expected = "a list of 8 values [step, item, attempt, outcome, model, in, out, calls]"
        fail(path, expected, value)
    step, item, attempt, outcome, model, tokens_in, tokens_out, calls = fields
    if type(step) is not str or not step:
        fail(f"{path}[0]", "a step path (a non-empty str)", step)
    _optional_str(item, f"{path}[1]")
    if type(attempt) is not int or attempt < 1:
        fail(f"{path}[2]", "an attempt number (an int of at least 1)", attempt)
    if outcome not in OUTCOMES or type(outcome) is not str:
        fail(f"{path}[3]", f"one of {_OUTCOMES_TEXT}", outcome)
    _optional_str(model, f"{path}[4]")
    usage = TokenUsage(
        read_count(tokens_in, f"{path}[5]"),
        read_count(tokens_out, f"{path}[6]"),
        read_count(calls, f"{path}[7]"),
    )
    if isinstance(value, LedgerEntry):
        return value
    return LedgerEntry(step, item, attempt, outcome, model, usage)


def read_ledger(value: object, version: int) -> tuple[LedgerEntry, ...]:
    """``ledger``: a list of rows, each checked at ``ledger[i]``."""
    if not isinstance(value, (list, tuple)):
        fail("ledger", "a list of ledger rows", value)
    _needs_version_4("ledger", value, version)
    return tuple(_row(row, f"ledger[{index}]") for index, row in enumerate(value))


def read_new_ledger(value: object, ledger: tuple[LedgerEntry, ...]) -> tuple[LedgerEntry, ...]:
    """``new_ledger``: the last rows of ``ledger`` (those since the previous checkpoint)."""
    if not isinstance(value, tuple) or len(value) > len(ledger):
        fail("new_ledger", "a tuple of the last rows of 'ledger'", value)
    if value and tuple(ledger[len(ledger) - len(value) :]) != value:
        fail("new_ledger", "a tuple of the last rows of 'ledger'", value)
    return value


def read_in_flight(value: object, version: int) -> tuple[tuple[str, str | None, int], ...]:
    """``in_flight``: ``[step path, item key or None, attempt]`` for each attempt running."""
    if not isinstance(value, (list, tuple)):
        fail("in_flight", "a list of [step, item, attempt]", value)
    _needs_version_4("in_flight", value, version)
    attempts: list[tuple[str, str | None, int]] = []
    for index, entry in enumerate(value):
        path = f"in_flight[{index}]"
        if not isinstance(entry, (list, tuple)) or len(entry) != 3:  # noqa: PLR2004
            fail(path, "a list [step, item, attempt]", entry)
        step, item, attempt = entry
        if type(step) is not str or not step:
            fail(f"{path}[0]", "a step path (a non-empty str)", step)
        _optional_str(item, f"{path}[1]")
        if type(attempt) is not int or attempt < 1:
            fail(f"{path}[2]", "an attempt number (an int of at least 1)", attempt)
        attempts.append((step, item, attempt))
    return tuple(attempts)


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
    _needs_version_4("trace", value, version)
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
    _needs_version_4("lineage", lineage, version)
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
            "note": _optional_str(lineage["note"], "lineage.note"),
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
