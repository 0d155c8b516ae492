"""The read-only ``ctx`` a step receives."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, Any

from executionkit._errors import ContextKeyError, did_you_mean

if TYPE_CHECKING:
    from executionkit._define._graph import Graph

_PREVIEW = 8


class ContextView(Mapping[str, Any]):
    """The initial context plus the outputs of one step's ancestors, read-only.

    A view, not a copy: it reads the run's output table directly and filters by
    ancestry, so building one costs O(1) whatever the size of the workflow. The
    ancestor set is only computed if the step reads a key that is not a direct
    dependency, or iterates the mapping.
    """

    __slots__ = ("_ancestors", "_graph", "_initial", "_length", "_outputs", "_position")

    def __init__(
        self,
        graph: Graph,
        position: int,
        initial: Mapping[str, Any],
        outputs: Mapping[str, Any],
    ) -> None:
        """Create the view for the step at ``position``."""
        self._graph = graph
        self._position = position
        self._initial = initial
        self._outputs = outputs
        self._ancestors: set[int] | None = None
        self._length: int | None = None

    @property
    def _step_name(self) -> str:
        return self._graph.names[self._position]

    def _ancestor_set(self) -> set[int]:
        if self._ancestors is None:
            self._ancestors = self._graph.ancestors(self._position)
        return self._ancestors

    def _visible(self, position: int) -> bool:
        return position in self._graph.dependencies[self._position] or (
            position in self._ancestor_set()
        )

    def __getitem__(self, key: str) -> Any:
        """Return the initial-context value or ancestor output named ``key``."""
        if key in self._initial:
            return self._initial[key]
        position = self._graph.index.get(key)
        if position is not None and self._visible(position):
            try:
                return self._outputs[key]
            except KeyError:
                raise self._skipped(key) from None
        raise self._missing(key, position)

    def __contains__(self, key: object) -> bool:
        """Return whether ``key`` is readable, without raising."""
        if key in self._initial:
            return True
        position = self._graph.index.get(key) if isinstance(key, str) else None
        return position is not None and self._visible(position) and key in self._outputs

    def __iter__(self) -> Iterator[str]:
        """Yield the initial-context keys, then ancestor names in declaration order.

        Ancestors a condition skipped have no output and are left out.
        """
        yield from self._initial
        names = self._graph.names
        outputs = self._outputs
        for position in sorted(self._ancestor_set()):
            name = names[position]
            if name in outputs:
                yield name

    def __len__(self) -> int:
        """Return the number of readable keys."""
        if self._length is None:
            # Counted once: every ancestor is recorded (or skipped) before the step starts.
            names = self._graph.names
            outputs = self._outputs
            self._length = sum(1 for p in self._ancestor_set() if names[p] in outputs)
        return len(self._initial) + self._length

    def __setitem__(self, key: str, value: object) -> None:
        """Refuse: ``ctx`` is read-only."""
        msg = (
            f"ctx of step {self._step_name!r} is read-only; return the value from the "
            f"step instead of storing {key!r} in ctx"
        )
        raise TypeError(msg)

    def __delitem__(self, key: str) -> None:
        """Refuse: ``ctx`` is read-only."""
        msg = f"ctx of step {self._step_name!r} is read-only; {key!r} cannot be deleted"
        raise TypeError(msg)

    def __repr__(self) -> str:
        """Show the step and the readable keys, never the values."""
        return f"<ctx of step {self._step_name!r}: {list(self)!r}>"

    def _skipped(self, key: str) -> ContextKeyError:
        step = self._step_name
        msg = (
            f"step {step!r} cannot read {key!r} from ctx: a condition skipped step {key!r}, "
            f"so it has no output; test for it with {key!r} in ctx or ctx.get({key!r})"
        )
        return ContextKeyError(msg, step=step, key=key)

    def _missing(self, key: object, position: int | None) -> ContextKeyError:
        step = self._step_name
        if position is not None:
            msg = (
                f"step {step!r} cannot read {key!r} from ctx: {key!r} is a step but not "
                f"one {step!r} depends on; add {key!r} to depends_on of step {step!r}"
            )
            return ContextKeyError(msg, step=step, key=key)
        initial = _preview(list(self._initial))
        deps = _preview([self._graph.names[p] for p in sorted(self._ancestor_set())])
        hint = ""
        if isinstance(key, str):
            # Any step may be meant: reading it then says to add it to depends_on.
            hint = did_you_mean(
                key, [*self._initial, *(n for n in self._graph.names if n != step)]
            )
        msg = (
            f"step {step!r} has no {key!r} in ctx; ctx holds the initial context keys "
            f"{initial} and the outputs of the steps it depends on {deps}{hint}"
        )
        return ContextKeyError(msg, step=step, key=key)


def _preview(names: list[str]) -> str:
    if len(names) <= _PREVIEW:
        return repr(names)
    shown = ", ".join(map(repr, names[:_PREVIEW]))
    return f"[{shown}, ... {len(names) - _PREVIEW} more]"
