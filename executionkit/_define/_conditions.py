"""Conditions: whether a step whose dependencies are done runs or is skipped.

Plain synchronous code with no asyncio in it. A step is decided once, when its
dependencies are done (recorded with an output, or skipped) and the run is
about to start it: first the ``join`` rule over its skipped dependencies, then,
only if that lets it run, its ``when`` predicate, called with the ``ctx`` the
step would get. The run records a skip like an output landing; this module only
says why.
"""

from __future__ import annotations

import inspect
from typing import TYPE_CHECKING, Any

from executionkit._define._context import ContextView
from executionkit._errors import preview

if TYPE_CHECKING:
    from collections.abc import Iterable, Mapping

    from executionkit._define._graph import Graph


class Conditions:
    """Decides the steps of one run that a condition may skip."""

    __slots__ = ("_context", "_graph", "_outputs", "_skipped", "deciding")

    def __init__(
        self,
        graph: Graph,
        context: Mapping[str, Any],
        outputs: Mapping[str, Any],
        skipped: Mapping[str, str],
    ) -> None:
        """Read the run's initial ``context``, recorded ``outputs`` and ``skipped`` steps."""
        self._graph = graph
        self._context = context
        self._outputs = outputs
        self._skipped = skipped
        # The steps to decide before they start: those with a condition and everything
        # downstream, plus, on resume, everything downstream of a restored skip (the
        # workflow may have lost the condition that skipped it since).
        deciding = graph.conditional
        if skipped:
            restored = (graph.index[name] for name in skipped if name in graph.index)
            deciding = deciding | graph.descendants(restored)
        self.deciding: frozenset[int] = deciding

    def reason_to_skip(self, position: int) -> str | None:
        """Why the step at ``position`` is skipped, or None if it runs.

        Raises what its ``when`` raised, with a note naming the step, and
        `TypeError` if ``when`` returned an awaitable (conditions are plain
        functions, evaluated inline).
        """
        graph = self._graph
        step = graph.steps[position]
        skipped = self._skipped
        if skipped:
            reason = _join_reason(step.join, step.depends_on, skipped)
            if reason is not None:
                return reason
        when = step.when
        if when is None:
            return None
        view = ContextView(graph, position, self._context, self._outputs)
        try:
            verdict = when(view)
            if inspect.isawaitable(verdict):
                close = getattr(verdict, "close", None)
                if callable(close):
                    close()  # never awaited: spare the "never awaited" warning
                msg = (
                    f"step {step.name!r}: when returned an awaitable; a condition must be a "
                    f"plain function returning a truth value"
                )
                raise TypeError(msg)  # noqa: TRY301 - noted below like any failure of when
            if verdict:
                return None
        except Exception as exc:
            exc.add_note(f"executionkit: the when condition of step {step.name!r} raised")
            raise
        return f"condition {condition_name(when)} returned {preview(verdict)}"


def _join_reason(join: str, depends_on: tuple[str, ...], skipped: Mapping[str, str]) -> str | None:
    if join == "all":
        for dep in depends_on:
            if dep in skipped:
                return f"dependency {dep!r} was skipped"
        return None
    if depends_on and all(dep in skipped for dep in depends_on):
        return f"every dependency was skipped ({_names(depends_on)})"
    return None


def _names(names: Iterable[str]) -> str:
    return ", ".join(map(repr, names))


def condition_name(when: object) -> str:
    """How errors, reasons and the command line name a ``when`` function."""
    name = getattr(when, "__name__", None)
    if isinstance(name, str) and name:
        return name
    func = getattr(when, "func", None)  # functools.partial
    if func is not None and func is not when:
        return condition_name(func)
    return type(when).__name__
