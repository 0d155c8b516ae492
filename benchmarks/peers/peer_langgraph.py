"""LangGraph 1.2.22 with its in-memory checkpointer under the benchmark protocol.

Runs with the Python of ``benchmarks/.venvs/langgraph`` (see `bench_harness`
for the protocol). The graph is a ``StateGraph`` with one node per step, each an
``async def`` no-op returning no state update (the cheapest node LangGraph
has), and edges that follow the same DAG:

- a step without dependencies gets an edge from ``START``;
- a step with one dependency gets ``add_edge(dep, step)``;
- a step with several gets ``add_edge([deps...], step)``, LangGraph's fan-in
  edge, which waits for all of them (the layered shape);
- a step nothing depends on gets an edge to ``END``.

It is compiled with ``InMemorySaver`` as the checkpointer, which stores a
checkpoint after every super-step (LangGraph's batch). One run is
``await graph.ainvoke({}, config)`` with a new ``thread_id`` (a fresh run, not
a resume) and a ``recursion_limit`` above the number of super-steps (the
default of 25 would stop a long chain). The checkpoint count reported is the
number of checkpoints the saver holds for the thread afterwards. The saver
keeps the threads of earlier runs, as a long-lived application's would.
"""

from __future__ import annotations

import importlib
import itertools
import sys
from typing import TYPE_CHECKING, Any, TypedDict

import _peer
import bench_harness

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable

    import shapes
    from bench_harness import RunFn

DISTRIBUTION = "langgraph"
VERSION = "1.2.22"


class State(TypedDict, total=False):
    """The graph state: no-op nodes never write to it."""

    unused: int


async def noop(state: State) -> dict[str, Any]:
    """A node that does nothing and updates nothing."""
    del state
    return {}


def counting(name: str, counts: dict[str, int]) -> Callable[[State], Awaitable[dict[str, Any]]]:
    """A no-op node that also counts its calls in ``counts[name]``."""

    async def node(state: State) -> dict[str, Any]:
        del state
        counts[name] = counts.get(name, 0) + 1
        return {}

    return node


def build(dag: shapes.Dag, counts: dict[str, int] | None) -> RunFn:
    """The benchmark protocol's ``build``: a compiled graph; each call is a new thread."""
    graph_module = importlib.import_module("langgraph.graph")
    memory = importlib.import_module("langgraph.checkpoint.memory")
    start: str = graph_module.START
    end: str = graph_module.END
    builder: Any = graph_module.StateGraph(State)
    depended_on = {dep for _, deps in dag for dep in deps}
    for name, deps in dag:
        builder.add_node(name, noop if counts is None else counting(name, counts))
        if not deps:
            builder.add_edge(start, name)
        elif len(deps) == 1:
            builder.add_edge(deps[0], name)
        else:
            builder.add_edge(list(deps), name)
        if name not in depended_on:
            builder.add_edge(name, end)
    saver: Any = memory.InMemorySaver()
    graph: Any = builder.compile(checkpointer=saver)
    threads = itertools.count()
    recursion_limit = len(dag) + 10

    async def run() -> Callable[[], int]:
        config = {
            "configurable": {"thread_id": f"run-{next(threads)}"},
            "recursion_limit": recursion_limit,
        }
        await graph.ainvoke({}, config)
        return lambda: sum(1 for _ in saver.list(config))

    return run


def version() -> str:
    """The installed version, checked against the pin."""
    module = importlib.import_module("langgraph")
    return _peer.installed(DISTRIBUTION, VERSION, module.__path__[0])


if __name__ == "__main__":
    sys.exit(bench_harness.main(build, version()))
