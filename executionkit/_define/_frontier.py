"""What is ready to run: a fresh run's batches, and what each step still waits for.

Pure, no asyncio: `Levels` holds the graph's batches flat, `Frontier` hands out
what became ready as steps complete (see `Graph` in ``_graph.py``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from array import array
    from collections.abc import Iterator

    from executionkit._define._graph import Graph


class Levels:
    """The batches of a fresh run where every step completes, flat: two arrays, not a tuple each.

    ``levels[k]`` is batch ``k`` (in declaration order), ``len(levels)`` their number,
    and ``levels.before(k)`` every step of the batches before batch ``k``.
    """

    __slots__ = ("_order", "_starts")

    def __init__(self, order: tuple[int, ...], starts: array[int]) -> None:
        """Batch ``k`` is ``order[starts[k]:starts[k + 1]]``."""
        self._order = order
        self._starts = starts

    def __len__(self) -> int:
        """Return the number of batches."""
        return len(self._starts) - 1

    def __getitem__(self, k: int) -> tuple[int, ...]:
        """Return batch ``k``."""
        return self._order[self._starts[k] : self._starts[k + 1]]

    def __iter__(self) -> Iterator[tuple[int, ...]]:
        """Yield the batches in order."""
        starts, order = self._starts, self._order
        return (order[starts[k] : starts[k + 1]] for k in range(len(starts) - 1))

    def before(self, k: int) -> tuple[int, ...]:
        """Return the steps of the batches before batch ``k``."""
        return self._order[: self._starts[k]]


class Frontier:
    """Tracks which steps are ready: O(batch) per batch while every step completes.

    Steps in ``done`` count as completed from the start (restored from a
    checkpoint). Batches come out in declaration order. A fresh ``planned``
    frontier hands out the graph's precomputed levels for as long as every step
    of each batch completes; the first batch that does not (a step failed, or was
    never started) switches it to counting each step's unfinished dependencies,
    which costs O(edges) once, and then O(edges of what completes).
    """

    __slots__ = ("_at", "_graph", "_waiting")

    def __init__(self, graph: Graph, done: set[int], *, planned: bool = False) -> None:
        """Start with the steps in ``done`` already complete."""
        self._graph = graph
        self._at = 0  # the level handed out last, while following the plan
        self._waiting: list[int] | None = None
        if planned and not done:
            return
        self._waiting = self._count_waiting(done)

    def _count_waiting(self, done: set[int]) -> list[int]:
        """Unfinished dependencies per step; -1 for the steps in ``done``."""
        return [
            -1 if i in done else sum(1 for dep in deps if dep not in done)
            for i, deps in enumerate(self._graph.dependencies)
        ]

    def initial(self) -> list[int]:
        """Return the steps ready before anything runs, in declaration order."""
        if self._waiting is None:
            levels = self._graph.levels
            return list(levels[0]) if levels else []
        return [i for i, count in enumerate(self._waiting) if count == 0]

    def complete(self, batch: list[int]) -> list[int]:
        """Mark ``batch`` complete; return the steps that became ready, in order.

        While following the plan, ``batch`` is what completed of the last batch
        handed out; any step of that batch not in it never counts as complete.
        """
        waiting = self._waiting
        if waiting is None:
            levels = self._graph.levels
            handed_out = levels[self._at]
            self._at += 1
            following = levels[self._at] if self._at < len(levels) else ()
            if len(batch) == len(handed_out):
                return list(following)
            waiting = self._leave_plan(batch)
            # Every step of a later level depends on a step of the level before it.
            return [i for i in following if waiting[i] == 0]
        dependents = self._graph.dependents
        ready: list[int] = []
        for node in batch:
            waiting[node] = -1
            for child in dependents[node]:
                waiting[child] -= 1
                if waiting[child] == 0:
                    ready.append(child)
        ready.sort()
        return ready

    def _leave_plan(self, completed: list[int]) -> list[int]:
        levels = self._graph.levels
        done = set(levels.before(self._at - 1))
        done.update(completed)
        waiting = self._count_waiting(done)
        # A step handed out but not completed is never counted as complete, so it
        # never comes out again, and neither does anything that depends on it.
        self._waiting = waiting
        return waiting
