"""The planner: a validated dependency graph and the frontier of ready steps.

Plain synchronous code with no asyncio in it, so that validation and batch order
can be tested with tables. The runner only asks "what may start now?" and says
"this finished".
"""

from __future__ import annotations

from types import MappingProxyType
from typing import TYPE_CHECKING, Any

from executionkit._errors import WorkflowDefinitionError
from executionkit._step import Step, is_async_callable

if TYPE_CHECKING:
    from collections.abc import Iterable, Mapping


class Graph:
    """Steps indexed by declaration order, with edges both ways.

    Raises `WorkflowDefinitionError` for anything that is not a step, duplicate
    names, unknown dependencies and cycles.
    """

    __slots__ = (
        "dependencies",
        "dependents",
        "index",
        "inline",
        "names",
        "plain",
        "step_info",
        "steps",
    )

    def __init__(self, steps: Iterable[Step]) -> None:
        """Index ``steps`` and validate the graph they form."""
        self.steps: tuple[Step, ...] = _as_steps(steps)
        self.names: tuple[str, ...] = tuple(step.name for step in self.steps)
        self.index: dict[str, int] = {}
        for position, name in enumerate(self.names):
            if name in self.index:
                msg = (
                    f"duplicate step name {name!r}: steps #{self.index[name]} and "
                    f"#{position} (0-based, in declaration order) share it"
                )
                raise WorkflowDefinitionError(msg)
            self.index[name] = position
        self.dependencies: tuple[tuple[int, ...], ...] = self._resolve_dependencies()
        dependents: list[list[int]] = [[] for _ in self.steps]
        for position, deps in enumerate(self.dependencies):
            for dep in deps:
                dependents[dep].append(position)
        self.dependents: tuple[tuple[int, ...], ...] = tuple(map(tuple, dependents))
        self._check_acyclic()
        # Plain-function steps; those without retries run inline, without a task.
        self.plain = frozenset(
            position for position, step in enumerate(self.steps) if not is_async_callable(step.run)
        )
        self.inline = frozenset(p for p in self.plain if self.steps[p].retries == 0)
        # What checkpoints record about each step, built once and shared by all of them.
        self.step_info: dict[str, Mapping[str, Any]] = {
            step.name: MappingProxyType({"version": step.version, "depends_on": step.depends_on})
            for step in self.steps
        }

    def __len__(self) -> int:
        """Return the number of steps."""
        return len(self.steps)

    def _resolve_dependencies(self) -> tuple[tuple[int, ...], ...]:
        unknown = [
            f"step {step.name!r} depends on unknown step {dep!r}"
            for step in self.steps
            for dep in step.depends_on
            if dep not in self.index
        ]
        if unknown:
            raise WorkflowDefinitionError("; ".join(unknown))
        return tuple(tuple(self.index[dep] for dep in step.depends_on) for step in self.steps)

    def _check_acyclic(self) -> None:
        # Kahn's algorithm: whatever cannot be peeled off lies on or behind a cycle.
        waiting = [len(deps) for deps in self.dependencies]
        stack = [i for i, count in enumerate(waiting) if count == 0]
        peeled = 0
        while stack:
            node = stack.pop()
            peeled += 1
            for child in self.dependents[node]:
                waiting[child] -= 1
                if waiting[child] == 0:
                    stack.append(child)
        if peeled == len(self.steps):
            return
        cycle = self._find_cycle({i for i, count in enumerate(waiting) if count > 0})
        path = " -> ".join(self.names[i] for i in [*cycle, cycle[0]])
        msg = f"workflow has a dependency cycle: {path} (each step depends on the next)"
        raise WorkflowDefinitionError(msg)

    def _find_cycle(self, stuck: set[int]) -> list[int]:
        # Every stuck step has a stuck dependency, so walking "first stuck dependency"
        # from any stuck step must come back to a step already seen. Starting from the
        # first-declared one and rotating makes the reported cycle deterministic.
        walk: list[int] = []
        seen_at: dict[int, int] = {}
        node = min(stuck)
        while node not in seen_at:
            seen_at[node] = len(walk)
            walk.append(node)
            node = min(dep for dep in self.dependencies[node] if dep in stuck)
        cycle = walk[seen_at[node] :]
        start = cycle.index(min(cycle))
        return cycle[start:] + cycle[:start]

    def ancestors(self, position: int) -> set[int]:
        """Return the positions of every step ``position`` transitively depends on."""
        found: set[int] = set()
        stack = list(self.dependencies[position])
        while stack:
            node = stack.pop()
            if node not in found:
                found.add(node)
                stack.extend(self.dependencies[node])
        return found


def _as_steps(steps: Iterable[Step]) -> tuple[Step, ...]:
    items: tuple[object, ...]
    if isinstance(steps, (str, bytes, Step)):
        msg = f"Workflow takes a sequence of Step objects, got {type(steps).__name__}"
        raise WorkflowDefinitionError(msg)
    try:
        items = tuple(steps)
    except TypeError:
        msg = f"Workflow takes a sequence of Step objects, got {type(steps).__name__}"
        raise WorkflowDefinitionError(msg) from None
    result: list[Step] = []
    for position, step in enumerate(items):
        if not isinstance(step, Step):
            msg = (
                f"Workflow step #{position} (0-based) must be a Step, "
                f"got {type(step).__name__} {step!r}"
            )
            raise WorkflowDefinitionError(msg)
        result.append(step)
    return tuple(result)


class Frontier:
    """Tracks which steps are ready, in O(edges) over a whole run.

    Steps in ``done`` count as completed from the start (restored from a
    checkpoint). Batches come out in declaration order.
    """

    __slots__ = ("_graph", "_waiting")

    def __init__(self, graph: Graph, done: set[int]) -> None:
        """Start with the steps in ``done`` already complete."""
        self._graph = graph
        if not done:  # a fresh run: every dependency is still to come
            self._waiting = [len(deps) for deps in graph.dependencies]
            return
        self._waiting = [
            -1 if i in done else sum(1 for dep in deps if dep not in done)
            for i, deps in enumerate(graph.dependencies)
        ]

    def initial(self) -> list[int]:
        """Return the steps ready before anything runs, in declaration order."""
        return [i for i, count in enumerate(self._waiting) if count == 0]

    def complete(self, batch: Iterable[int]) -> list[int]:
        """Mark ``batch`` complete; return the steps that became ready, in order."""
        waiting = self._waiting
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
