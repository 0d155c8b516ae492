"""One ``step_info`` entry: what a checkpoint records of a step, in a few bytes.

Every checkpoint's ``step_info`` maps each recorded step to its version, its
dependencies and (unless it is a plain step) its kind. A workflow builds one
entry per step, and `WorkflowCheckpoint.from_dict` one per recorded step, so at
100,000 steps their size is the workflow's size: a read-only dict behind a
`types.MappingProxyType` costs about 250 bytes, this class about 56.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

_PLAIN_KEYS = ("version", "depends_on")
_KIND_KEYS = ("version", "depends_on", "kind")
LATER_INFO_KEYS = ("code", "answered_by")
"""The optional keys format 5 adds to an entry, in the order an entry lists them."""
_NONE: tuple[tuple[str, str], ...] = ()


class StepInfo(Mapping[str, Any]):
    """A read-only mapping ``{"version", "depends_on"[, "kind"][, "code"][, "answered_by"]}``.

    ``kind`` is absent for a plain step; ``code`` (the fingerprint of the code
    that made the output) and ``answered_by`` (``"deadline"`` for an answer
    taken from an ask step's default) are format 5's, absent when unknown or
    unused. Equal to any mapping with the same items (a dict, a proxy), so code
    written against the dict the format describes keeps working.
    """

    __slots__ = ("_depends_on", "_kind", "_more", "_version")

    def __init__(
        self,
        version: str | None,
        depends_on: tuple[str, ...],
        kind: str | None,
        more: tuple[tuple[str, str], ...] = _NONE,
    ) -> None:
        """Describe a step; ``kind`` is None for a plain step; ``more``: format 5's keys."""
        self._version = version
        self._depends_on = depends_on
        self._kind = kind
        self._more = more

    def __getitem__(self, key: str) -> Any:
        """Return the entry's field ``key``."""
        if key == "version":
            return self._version
        if key == "depends_on":
            return self._depends_on
        if key == "kind" and self._kind is not None:
            return self._kind
        for name, value in self._more:
            if name == key:
                return value
        raise KeyError(key)

    def get(self, key: str, default: Any = None) -> Any:
        """Return field ``key``, or ``default`` when the entry has none."""
        try:
            return self[key]
        except KeyError:
            return default

    def __contains__(self, key: object) -> bool:
        """Return whether the entry has field ``key``."""
        if key in _PLAIN_KEYS or (key == "kind" and self._kind is not None):
            return True
        return any(name == key for name, _ in self._more)

    def __iter__(self) -> Iterator[str]:
        """Yield the field names: version, depends_on, then kind, code, answered_by if set."""
        keys = _PLAIN_KEYS if self._kind is None else _KIND_KEYS
        if not self._more:
            return iter(keys)
        return iter((*keys, *(name for name, _ in self._more)))

    def __len__(self) -> int:
        """Return the number of fields."""
        return (2 if self._kind is None else 3) + len(self._more)

    @property
    def more(self) -> tuple[tuple[str, str], ...]:
        """Format 5's keys of the entry, ``(("code", "ab12..."),)``; empty without any."""
        return self._more

    def with_more(self, more: tuple[tuple[str, str], ...]) -> StepInfo:
        """This entry with format 5's keys ``more`` (``(("code", "ab12..."),)``) instead."""
        return StepInfo(self._version, self._depends_on, self._kind, more)

    def __eq__(self, other: object) -> bool:
        """Return whether ``other`` is a mapping with the same items."""
        if type(other) is StepInfo:
            return (self._version, self._depends_on, self._kind, self._more) == (
                other._version,
                other._depends_on,
                other._kind,
                other._more,
            )
        if isinstance(other, Mapping):
            return dict(self.items()) == dict(other.items())
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]  # a mapping, like the dict it stands for

    def __repr__(self) -> str:
        """Show the fields, like a dict."""
        return repr(dict(self.items()))

    def __reduce__(self) -> tuple[Any, ...]:
        """Pickle as the fields."""
        return (StepInfo, (self._version, self._depends_on, self._kind, self._more))


class Overlaid(Mapping[str, Mapping[str, Any]]):
    """A workflow's ``step_info`` with some entries replaced: what one run's checkpoints say.

    A run's recorded outputs are described by their workflow's entries, shared
    by every run, but for the outputs whose entry says more of their own (an
    answer the deadline gave, the fingerprint of the code that made an output
    restored from an earlier run): those come from ``over``.
    """

    __slots__ = ("_base", "_over")

    def __init__(
        self, base: Mapping[str, Mapping[str, Any]], over: Mapping[str, Mapping[str, Any]]
    ) -> None:
        """``base`` with the entries of ``over`` in place of its own."""
        self._base = base
        self._over = over

    def __getitem__(self, name: str) -> Mapping[str, Any]:
        """Return the entry of step ``name``."""
        entry = self._over.get(name)
        return self._base[name] if entry is None else entry

    def __contains__(self, name: object) -> bool:
        """Return whether the workflow has a step ``name``."""
        return name in self._base

    def __iter__(self) -> Iterator[str]:
        """Yield the workflow's step names."""
        return iter(self._base)

    def __len__(self) -> int:
        """Return the number of steps."""
        return len(self._base)
