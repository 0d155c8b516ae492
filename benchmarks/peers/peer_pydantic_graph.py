"""pydantic-graph 2.68.0 under the benchmark protocol (see `bench_harness`).

Runs with the Python of ``benchmarks/.venvs/pydantic-graph``. The graph is
built with ``GraphBuilder``: one step node per benchmark step (an ``async
def`` no-op returning a small value, which the engine hands to the next node),
with edges following the same DAG:

- chain: ``start -> s0 -> s1 -> ... -> end``;
- wide: a broadcast fork ``start -> (s0, s1, ...)``, then a join (reducer
  ``reduce_null``) that waits for all of them, then ``end``;
- layered: per layer, a broadcast fork from the previous join (or ``start``)
  to the layer's steps and a join that waits for all of them: "each step
  depends on every step of the previous layer" needs a join node in between,
  since an edge from every step of a layer to every step of the next would run
  each step once per incoming edge.

pydantic-graph 2.68.0 has no persistence layer (its state snapshots were
removed), so there is no checkpointer to configure. The nearest equivalent of
a checkpoint after every batch, and what is timed, is iterating the run with
``Graph.iter`` and appending every event the engine yields (the next tasks, or
the end marker) to a list. Nothing is copied, so this flatters the peer.
Instrumentation stays at its default (spans are no-ops without Logfire).
"""

from __future__ import annotations

import importlib
import itertools
import sys
from typing import TYPE_CHECKING, Any

import _peer
import bench_harness

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable

    import shapes
    from bench_harness import RunFn

DISTRIBUTION = "pydantic-graph"
VERSION = "2.68.0"


async def noop(ctx: object) -> int:
    """A step that does nothing and returns a small value."""
    del ctx
    return 1


def counting(name: str, counts: dict[str, int]) -> Callable[[object], Awaitable[int]]:
    """A no-op step that also counts its calls in ``counts[name]``."""

    async def step(ctx: object) -> int:
        del ctx
        counts[name] = counts.get(name, 0) + 1
        return 1

    return step


def _graph(dag: shapes.Dag, counts: dict[str, int] | None) -> Any:
    """The built ``Graph`` for a chain, wide or layered `shapes.Dag`."""
    module = importlib.import_module("pydantic_graph")
    builder: Any = module.GraphBuilder(output_type=object)
    steps = {
        name: builder.step(noop if counts is None else counting(name, counts), node_id=name)
        for name, _ in dag
    }
    if _is_chain(dag):
        names = [name for name, _ in dag]
        builder.add(builder.edge_from(builder.start_node).to(steps[names[0]]))
        for before, after in itertools.pairwise(names):
            builder.add(builder.edge_from(steps[before]).to(steps[after]))
        builder.add(builder.edge_from(steps[names[-1]]).to(builder.end_node))
        return builder.build()
    source: Any = builder.start_node
    for index, layer in enumerate(_layers(dag)):
        join = builder.join(module.reduce_null, initial=None, node_id=f"join{index}")
        members = [steps[name] for name in layer]
        builder.add(builder.edge_from(source).to(*members))
        builder.add(builder.edge_from(*members).to(join))
        source = join
    builder.add(builder.edge_from(source).to(builder.end_node))
    return builder.build()


def _is_chain(dag: shapes.Dag) -> bool:
    """Whether every step depends on exactly the step before it."""
    return all(
        deps == ((dag[index - 1][0],) if index else ()) for index, (_, deps) in enumerate(dag)
    )


def _layers(dag: shapes.Dag) -> list[list[str]]:
    """Split a DAG into layers, each depending on all of the one before (wide: one layer)."""
    result: list[list[str]] = []
    layer_deps: frozenset[str] | None = None
    for name, deps in dag:
        if result and frozenset(deps) == layer_deps:
            result[-1].append(name)
            continue
        layer_deps = frozenset(result[-1]) if result else frozenset()
        if frozenset(deps) != layer_deps:
            msg = f"step {name!r}: only chains and full layers can be expressed, got {deps}"
            raise ValueError(msg)
        result.append([name])
    return result


def build(dag: shapes.Dag, counts: dict[str, int] | None) -> RunFn:
    """The benchmark protocol's ``build``: a built graph; each call iterates a new run."""
    graph = _graph(dag, counts)

    async def run() -> Callable[[], int]:
        saved: list[object] = []
        async with graph.iter() as graph_run:
            async for event in graph_run:
                saved.append(event)  # noqa: PERF401 - one checkpoint as each event arrives
        return saved.__len__

    return run


def version() -> str:
    """The installed version, checked against the pin."""
    module = importlib.import_module("pydantic_graph")
    return _peer.installed(DISTRIBUTION, VERSION, module.__file__)


if __name__ == "__main__":
    sys.exit(bench_harness.main(build, version()))
