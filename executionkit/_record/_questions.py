"""The record's room for questions: the ask steps waiting for an answer, no asyncio.

A question is recorded as pending when its ask step asks it, described in every
checkpoint (``pending``) until a resume answers it: the answers, checked before
anything runs, become the ask steps' outputs. Questions of sub-workflows wait
in the children's checkpoints, named by path (``step/question``).
"""

from __future__ import annotations

from types import MappingProxyType
from typing import TYPE_CHECKING, Any

from executionkit._define import _questions
from executionkit._define._questions import (
    Answers,
    asked,
    nested_pending,
    overdue,
    route_answers,
)
from executionkit._paths import join_path

if TYPE_CHECKING:
    from collections.abc import Iterable, Mapping

    from executionkit._define._graph import Graph
    from executionkit._record._children import Children


class Questions:
    """The questions of one run waiting for an answer, and the answers it was given."""

    __slots__ = ("_graph", "answered", "by_deadline", "pending")

    def __init__(self, graph: Graph, restored: dict[str, Mapping[str, Any]]) -> None:
        """Start from the questions pending in a checkpoint: ask step -> its entry."""
        self._graph = graph
        self.pending = restored
        self.answered: tuple[str, ...] = ()
        # The ask steps whose answer this run took from their default: the deadline passed.
        self.by_deadline: tuple[str, ...] = ()

    def __bool__(self) -> bool:
        """Whether a question of this run waits for an answer."""
        return bool(self.pending)

    def answer(
        self, answers: Mapping[str, Any], recorded: Mapping[str, Any], children: Children
    ) -> Answers:
        """Check the run's answers and take them out of ``pending``; return them.

        Answers to questions of sub-workflows (``step/question``) are kept for
        the child (`Children.take_answers`). Nothing changes if one is refused.
        """
        graph = self._graph
        nested = nested_pending(graph, children.latest) if children else {}
        answers, children.answers = route_answers(graph, self.pending, nested, answers)
        checked = Answers(graph, self.pending, recorded, answers, nested)
        for name in checked.stored:
            del self.pending[name]
        self.answered = tuple(n for n in graph.names if n in checked.stored)
        return checked

    def overdue(self, answered_late: Iterable[str]) -> tuple[dict[str, Any], dict[str, Exception]]:
        """The questions whose deadline passed: their defaults (taken out), or why they fail.

        Called once the run's own answers were applied (`answer`): a question
        answered in time is no longer pending, and one ``answered_late`` has
        failed already. A question that fails stays pending, as one answered
        late does (``rerun`` asks it again).
        """
        late = set(answered_late)
        pending = {name: entry for name, entry in self.pending.items() if name not in late}
        if not pending:
            return {}, {}
        taken, failed = overdue(self._graph, pending, _questions.utc_now())
        for name in taken:
            del self.pending[name]
        if taken:
            self.by_deadline = tuple(taken)
            self.answered = tuple(n for n in self._graph.names if n in taken or n in self.answered)
        return taken, failed

    def ask(self, position: int, question: object) -> Mapping[str, Any]:
        """Record the question the ask step at ``position`` asks; return its pending entry."""
        step: Any = self._graph.steps[position]
        entry = asked(step, question)
        self.pending[step.name] = entry
        return entry

    def waiting(self, children: Children) -> dict[str, Any]:
        """Every question waiting for an answer by path (`join_path`), nested ones after."""
        pending = self.pending
        found = (
            {
                join_path(name): pending[name]["question"]
                for name in self._graph.names
                if name in pending
            }
            if pending
            else {}
        )
        if children:
            nested = nested_pending(self._graph, children.latest)
            found.update((name, entry["question"]) for name, entry in nested.items())
        return found

    def describe(self, fields: dict[str, Any]) -> tuple[str, ...]:
        """Add ``pending`` to a checkpoint's fields; return the steps it names."""
        fields["pending"] = MappingProxyType(dict(self.pending))
        return tuple(self.pending)
