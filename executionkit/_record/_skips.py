"""The record's room for skips: the steps a condition skipped, no asyncio.

A skip is decided just before its step would start and lands like an output:
held until the next merge (``decided``), then recorded (``skipped``, by name,
with the reason), and described in every checkpoint with its ``step_info``.
Skips only grow within a run, so checkpoints share one frozen copy of them
until the next skip: O(1) per checkpoint, like the outputs.
"""

from __future__ import annotations

from types import MappingProxyType
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from collections.abc import Mapping


class Skips:
    """The skips of one run: recorded, and decided since the last merge."""

    __slots__ = ("_fields", "_names", "decided", "skipped")

    def __init__(self, names: tuple[str, ...], restored: dict[str, str]) -> None:
        """Start from the skips restored from a checkpoint (step name -> reason)."""
        self._names = names
        self.skipped = restored
        self.decided: dict[int, str] = {}
        self._fields: tuple[Mapping[str, str], Mapping[str, Any]] | None = None

    def __bool__(self) -> bool:
        """Whether any step is skipped (recorded or decided)."""
        return bool(self.skipped or self.decided)

    def decide(self, position: int, reason: str) -> None:
        """Hold the skip of the step at ``position`` until the next merge, like an output."""
        self.decided[position] = reason
        self._fields = None

    def merge(self, completed: list[int]) -> list[int]:
        """Record the skips decided since the last merge; return every position completed."""
        names = self._names
        decided = self.decided
        for position in sorted(decided):
            self.skipped[names[position]] = decided[position]
        completed = sorted([*completed, *decided])
        decided.clear()
        self._fields = None
        return completed

    def in_order(self) -> Mapping[str, str]:
        """The recorded skips, in declaration order."""
        skipped = self.skipped
        return MappingProxyType({name: skipped[name] for name in self._names if name in skipped})

    def describe(self, fields: dict[str, Any], info: Mapping[str, Any]) -> Mapping[str, Any]:
        """Add ``skipped`` to a checkpoint's fields; return the ``step_info`` of those steps."""
        if self._fields is None:
            skipped = dict(self.skipped)
            if self.decided:
                names = self._names
                skipped.update((names[p], self.decided[p]) for p in sorted(self.decided))
            self._fields = (
                MappingProxyType(skipped),
                MappingProxyType({name: info[name] for name in skipped}),
            )
        fields["skipped"], described = self._fields
        return described
