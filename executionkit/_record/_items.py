"""The record's room for map items: each unfinished map's finished items, no asyncio.

A map records each item as it completes, long before the map step itself has an
output. Until then its items live here: restored from a checkpoint, added one
by one, described in every checkpoint (``items``, and ``new_items`` for the
stores that write only what is new), and folded into the map's output, in item
order, once every item is recorded.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

from executionkit._checkpoint._output_log import OutputLog
from executionkit._errors import ContextKeyError
from executionkit._types import TokenUsage

if TYPE_CHECKING:
    from collections.abc import Collection

    from executionkit._define._step_kinds import MapStep

_ZERO = TokenUsage()


@dataclass(frozen=True, slots=True)
class MapDone:
    """What a map step returns once every item is recorded: the keys, in item order."""

    keys: tuple[str, ...]
    mapping: bool


class MapItems:
    """The finished items of one map that has not finished, in recording order."""

    __slots__ = ("cost", "live", "log", "since")

    def __init__(self, stored: Mapping[str, Any], live: dict[str, Any], cost: TokenUsage) -> None:
        """Start from the items restored from a checkpoint (or none)."""
        self.log = OutputLog(stored)
        self.live = live
        self.cost = cost
        self.since = len(self.log)


class Items:
    """The finished items of every map of a run that has not finished."""

    __slots__ = ("maps",)

    def __init__(
        self, restored: Mapping[str, tuple[dict[str, Any], dict[str, Any], TokenUsage]]
    ) -> None:
        """Start from the items restored from a checkpoint: map -> (stored, live, cost)."""
        self.maps: dict[str, MapItems] = {
            name: MapItems(stored, live, cost) for name, (stored, live, cost) in restored.items()
        }

    def __bool__(self) -> bool:
        """Whether some map has items recorded and is not finished."""
        return bool(self.maps)

    def recorded(self, name: str) -> Collection[str]:
        """The keys of the items of map ``name`` recorded so far."""
        entry = self.maps.get(name)
        return () if entry is None else entry.log.index

    def _entry(self, name: str) -> MapItems:
        entry = self.maps.get(name)
        if entry is None:
            entry = self.maps[name] = MapItems({}, {}, _ZERO)
        return entry

    def spent(self, name: str, cost: TokenUsage) -> None:
        """An item of map ``name`` spent ``cost`` (counted even if it cannot be recorded)."""
        entry = self._entry(name)
        entry.cost += cost

    def add(self, name: str, key: str, stored: Any, live: Any) -> None:
        """Record item ``key`` of map ``name``."""
        entry = self.maps.get(name)
        if entry is None:
            entry = self._entry(name)
        entry.log.append(key, stored)
        entry.live[key] = live

    def finish(self, name: str, done: MapDone) -> tuple[Any, Any]:
        """Every item of map ``name`` is recorded: its output, live and stored, in item order."""
        entry = self.maps.pop(name, None)
        if entry is None:  # no items at all
            return ({}, {}) if done.mapping else ([], [])
        values = entry.log.values
        index = entry.log.index
        if done.mapping:
            live = {key: entry.live[key] for key in done.keys}
            return live, {key: values[index[key]] for key in done.keys}
        return [entry.live[key] for key in done.keys], [values[index[key]] for key in done.keys]

    def describe(self, fields: dict[str, Any]) -> tuple[str, ...]:
        """Add ``items`` and ``new_items`` to a checkpoint's fields; return the maps named."""
        items: dict[str, Any] = {}
        new: dict[str, tuple[str, ...]] = {}
        for name, entry in self.maps.items():
            log = entry.log
            end = len(log)
            items[name] = MappingProxyType({"outputs": log.outputs(end), "cost": entry.cost})
            if entry.since < end:
                new[name] = log.names_between(entry.since, end)
                entry.since = end
        fields["items"] = MappingProxyType(items)
        fields["new_items"] = MappingProxyType(new)
        return tuple(items)


def item_pairs(step: MapStep, ctx: Mapping[str, Any]) -> tuple[list[tuple[str, Any]], bool]:
    """The items of map ``step`` in ``ctx`` and their keys, checked: unique non-empty str keys.

    Also whether ``over`` held a mapping. Calls ``step.key``, if any, on each item.
    """
    name = step.name
    try:
        value = ctx[step.over]
    except ContextKeyError as exc:
        msg = (
            f"map step {name!r}: over={step.over!r} names neither a step it depends on nor "
            f"a key of the initial context ({exc})"
        )
        raise LookupError(msg) from None
    mapping = isinstance(value, Mapping)
    if mapping:
        pairs = list(value.items())
    elif isinstance(value, (list, tuple)):
        pairs = [(str(position), item) for position, item in enumerate(value)]
    else:
        msg = (
            f"map step {name!r}: over={step.over!r} must be a list, a tuple or a mapping of "
            f"items, got {type(value).__name__}"
        )
        raise TypeError(msg)
    if step.key is not None:
        pairs = [(step.key(item), item) for _, item in pairs]
    bad = [key for key, _ in pairs if not isinstance(key, str) or not key]
    if bad:
        shown = ", ".join(repr(key) for key in bad[:5]) + (", ..." if len(bad) > 5 else "")  # noqa: PLR2004
        msg = f"map step {name!r}: item keys must be non-empty str, got {shown}"
        raise TypeError(msg)
    if len({key for key, _ in pairs}) != len(pairs):
        counts: dict[str, int] = {}
        for key, _ in pairs:
            counts[key] = counts.get(key, 0) + 1
        twice = sorted(key for key, count in counts.items() if count > 1)
        shown = ", ".join(map(repr, twice[:5])) + (", ..." if len(twice) > 5 else "")  # noqa: PLR2004
        msg = f"map step {name!r}: item keys must be unique; {shown} name more than one item"
        raise ValueError(msg)
    return pairs, mapping
