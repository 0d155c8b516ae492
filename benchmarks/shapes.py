"""The benchmark graphs, as plain data every implementation builds from.

A `Dag` is a list of ``(name, depends_on)`` pairs in declaration order, which is
also a topological order. Standard library only: the peer scripts import this
module inside their own virtual environments.

- ``chain``: each step depends on the previous one (n batches of one step).
- ``wide``: n independent steps (one batch of n steps).
- ``layered``: layers of `LAYER_WIDTH` steps; each step depends on every step
  of the previous layer (n / `LAYER_WIDTH` batches, `LAYER_WIDTH` ** 2 edges
  between two layers).
"""

from __future__ import annotations

from typing import TypeAlias

Dag: TypeAlias = list[tuple[str, tuple[str, ...]]]

SHAPES = ("chain", "wide", "layered")
LAYER_WIDTH = 10


def step_name(index: int) -> str:
    """The name of the step at ``index`` in every shape."""
    return f"s{index}"


def chain(n: int) -> Dag:
    """n steps, each depending on the one before."""
    return [(step_name(i), (step_name(i - 1),) if i else ()) for i in range(n)]


def wide(n: int) -> Dag:
    """n steps with no dependencies."""
    return [(step_name(i), ()) for i in range(n)]


def layers(n: int, width: int = LAYER_WIDTH) -> list[list[str]]:
    """The step names of a layered graph, layer by layer (the last may be narrower)."""
    names = [step_name(i) for i in range(n)]
    return [names[start : start + width] for start in range(0, n, width)]


def layered(n: int, width: int = LAYER_WIDTH) -> Dag:
    """Layers of ``width`` steps; each step depends on every step of the previous layer."""
    dag: Dag = []
    previous: tuple[str, ...] = ()
    for layer in layers(n, width):
        dag.extend((name, previous) for name in layer)
        previous = tuple(layer)
    return dag


def make(shape: str, n: int) -> Dag:
    """The graph of ``shape`` (one of `SHAPES`) with ``n`` steps."""
    if shape == "chain":
        return chain(n)
    if shape == "wide":
        return wide(n)
    if shape == "layered":
        return layered(n)
    msg = f"unknown shape {shape!r}; expected one of {', '.join(SHAPES)}"
    raise ValueError(msg)
