"""Structure sharing for checkpoints: each checkpoint's outputs are a prefix of one log.

A run only ever adds outputs, and never changes one once recorded, so the
outputs recorded at checkpoint *k* are exactly the first ``step_index`` entries
of the run's append-only log. A checkpoint keeps a view of that prefix instead
of a copy: O(1) to take, however large the workflow, and still a frozen,
independent value, because nothing below its length ever changes.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from itertools import islice
from types import MappingProxyType
from typing import Any


class OutputLog:
    """The run's recorded outputs (in their stored form), in recording order."""

    __slots__ = ("index", "names", "values")

    def __init__(self, outputs: Mapping[str, Any]) -> None:
        """Start from the outputs restored from a checkpoint (or none)."""
        self.names: list[str] = list(outputs)
        self.values: list[Any] = list(outputs.values())
        self.index: dict[str, int] = {name: i for i, name in enumerate(self.names)}

    def __len__(self) -> int:
        """Return the number of recorded outputs."""
        return len(self.names)

    def append(self, name: str, value: Any) -> None:
        """Record one more output."""
        self.index[name] = len(self.names)
        self.names.append(name)
        self.values.append(value)

    def names_between(self, start: int, stop: int) -> tuple[str, ...]:
        """The names recorded from position ``start`` up to (not including) ``stop``."""
        return tuple(self.names[start:stop])

    def outputs(self, length: int) -> MappingProxyType[str, Any]:
        """The first ``length`` outputs, as a read-only mapping.

        A `types.MappingProxyType`, as every checkpoint's ``outputs`` is (and as
        ExecutionKit 0.4 promised), over a `PrefixView`: O(1) however long the log.
        """
        return MappingProxyType(PrefixView(self, length, None))

    def info(
        self, length: int, step_info: Mapping[str, Mapping[str, Any]]
    ) -> MappingProxyType[str, Mapping[str, Any]]:
        """``step_info`` of the first ``length`` outputs, as a read-only mapping (a proxy)."""
        return MappingProxyType(PrefixView(self, length, step_info))


class PrefixView(Mapping[str, Any]):
    """A read-only mapping over the first ``length`` entries of an `OutputLog`.

    Maps each name either to its recorded value or, given ``lookup``, to
    ``lookup[name]`` (used for the per-step info recorded beside outputs).
    """

    __slots__ = ("_length", "_log", "_lookup")

    def __init__(
        self, log: OutputLog, length: int, lookup: Mapping[str, Mapping[str, Any]] | None
    ) -> None:
        """View the first ``length`` entries of ``log``."""
        self._log = log
        self._length = length
        self._lookup = lookup

    def __getitem__(self, key: str) -> Any:
        """Return the value recorded for ``key`` within this prefix."""
        position = self._log.index.get(key)
        if position is None or position >= self._length:
            raise KeyError(key)
        if self._lookup is not None:
            return self._lookup[key]
        return self._log.values[position]

    def __contains__(self, key: object) -> bool:
        """Return whether ``key`` is recorded within this prefix."""
        position = self._log.index.get(key) if isinstance(key, str) else None
        return position is not None and position < self._length

    def __iter__(self) -> Iterator[str]:
        """Yield the names in recording order."""
        return islice(self._log.names, self._length)

    def __len__(self) -> int:
        """Return the number of entries in this prefix."""
        return self._length

    def __reversed__(self) -> Iterator[str]:
        """Yield the names in reverse recording order (``reversed`` of a proxy asks for it)."""
        return reversed(self._log.names[: self._length])

    def copy(self) -> dict[str, Any]:
        """Return the entries as a new dict (``copy()`` of a proxy asks for it)."""
        return dict(self.items())

    def __or__(self, other: object) -> dict[str, Any]:
        """Return a new dict of these entries updated with ``other``, as a dict's ``|`` does."""
        if not isinstance(other, Mapping):
            return NotImplemented
        return {**self, **other}

    def __ror__(self, other: object) -> dict[str, Any]:
        """Return a new dict of ``other`` updated with these entries."""
        if not isinstance(other, Mapping):
            return NotImplemented
        return {**other, **self}

    def __repr__(self) -> str:
        """Show the entries, like a dict."""
        return repr(dict(self.items()))


class Extended(Mapping[str, Any]):
    """A read-only mapping of ``base`` followed by ``extra`` (whose keys ``base`` lacks).

    The ``step_info`` of a checkpoint that also describes steps without an
    output (unfinished maps): O(1) to build however many outputs ``base`` has.
    """

    __slots__ = ("_base", "_extra")

    def __init__(self, base: Mapping[str, Any], extra: Mapping[str, Any]) -> None:
        """View ``base`` then ``extra``."""
        self._base = base
        self._extra = extra

    def __getitem__(self, key: str) -> Any:
        """Return the entry of ``base`` or else of ``extra``."""
        if key in self._extra:
            return self._extra[key]
        return self._base[key]

    def __contains__(self, key: object) -> bool:
        """Return whether either mapping has ``key``."""
        return key in self._extra or key in self._base

    def __iter__(self) -> Iterator[str]:
        """Yield the keys of ``base``, then those of ``extra``."""
        yield from self._base
        yield from self._extra

    def __len__(self) -> int:
        """Return the number of entries."""
        return len(self._base) + len(self._extra)

    def __repr__(self) -> str:
        """Show the entries, like a dict."""
        return repr(dict(self.items()))
