"""Two runs side by side (``GET /compare?a=RUN&b=RUN``): which outputs differ, step by step.

Made for a fork and its parent (a fork's page links "compare with parent"),
it takes any two runs: their latest checkpoints, the steps either recorded
(its output, its error or its skip) in the order the first run, then the
second, recorded them; for each, whether both recorded the same output, each
its own, or only one of them; and each run's and each step's tokens (from the
ledgers) and, with ``--prices``, dollars. Outputs are compared as the plain
JSON data a checkpoint holds.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from executionkit._cli._serve._runs import bill, ledger_by_step

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence  # noqa: TC004 - dataclass annotations stay strings

    from executionkit._checkpoint._value import WorkflowCheckpoint
    from executionkit._cli._serve._runs import StepLedger
    from executionkit._prices import Prices

SAME = "same"
DIFFERS = "differs"
ONLY_A = "only in a"
ONLY_B = "only in b"
NEITHER = "no output"


@dataclass(frozen=True, slots=True)
class Side:
    """What one run recorded of one step: its output (if any), its state, tokens, dollars."""

    has_output: bool
    output: object
    state: str  # "done", "failed", "skipped" or "-" (not recorded)
    tokens: int | None  # None: no ledger row of the step
    dollars: str | None  # with --prices


@dataclass(frozen=True, slots=True)
class StepComparison:
    """One step of the two runs: how their outputs compare (`SAME`, `DIFFERS`, ...)."""

    name: str
    difference: str
    a: Side
    b: Side


@dataclass(frozen=True, slots=True)
class RunTotals:
    """One run's totals on the comparison: its tokens and, with ``--prices``, its bill."""

    run_id: str
    status: str
    seq: int
    tokens: int
    dollars: str | None


@dataclass(frozen=True, slots=True)
class Comparison:
    """Two runs compared: their totals and their steps; ``lineage``: if b is a's fork."""

    a: RunTotals
    b: RunTotals
    steps: Sequence[StepComparison]
    lineage: Mapping[str, object]  # b's lineage when b was forked from a; else a's from b
    forked: str | None  # "b" if b is a fork of a, "a" if a is one of b, else None

    def count(self, difference: str) -> int:
        """How many steps compare as ``difference``."""
        return sum(step.difference == difference for step in self.steps)


def compare(
    a: tuple[str, str, WorkflowCheckpoint],
    b: tuple[str, str, WorkflowCheckpoint],
    prices: Prices | None,
) -> Comparison:
    """Compare run ``a`` with run ``b``, each given as (run id, status, latest checkpoint)."""
    (a_id, a_status, first), (b_id, b_status, second) = a, b
    names = list(dict.fromkeys([*_recorded(first), *_recorded(second)]))
    a_ledger, b_ledger = ledger_by_step(first, names), ledger_by_step(second, names)
    a_dollars = {} if prices is None else bill(first, prices)[1]
    b_dollars = {} if prices is None else bill(second, prices)[1]
    steps = []
    for name in names:
        left = _side(first, name, a_ledger, a_dollars)
        right = _side(second, name, b_ledger, b_dollars)
        if left.has_output and right.has_output:
            difference = SAME if left.output == right.output else DIFFERS
        elif left.has_output:
            difference = ONLY_A
        elif right.has_output:
            difference = ONLY_B
        else:
            difference = NEITHER
        steps.append(StepComparison(name, difference, left, right))
    forked = None
    lineage: Mapping[str, object] = {}
    if second.lineage.get("parent_run_id") == a_id:
        forked, lineage = "b", second.lineage
    elif first.lineage.get("parent_run_id") == b_id:
        forked, lineage = "a", first.lineage
    return Comparison(
        _totals(a_id, a_status, first, prices),
        _totals(b_id, b_status, second, prices),
        steps,
        lineage,
        forked,
    )


def _recorded(checkpoint: WorkflowCheckpoint) -> list[str]:
    """The steps ``checkpoint`` recorded: outputs, then failures and skips."""
    return list(dict.fromkeys([*checkpoint.outputs, *checkpoint.errors, *checkpoint.skipped]))


def _side(
    checkpoint: WorkflowCheckpoint,
    name: str,
    ledger: Mapping[str, StepLedger],
    dollars: Mapping[str, str],
) -> Side:
    if name in checkpoint.outputs:
        state = "done"
    elif name in checkpoint.errors:
        state = "failed"
    elif name in checkpoint.skipped:
        state = "skipped"
    else:
        state = "-"
    recorded = ledger.get(name)
    return Side(
        name in checkpoint.outputs,
        checkpoint.outputs.get(name),
        state,
        None if recorded is None else recorded.tokens,
        dollars.get(name),
    )


def _totals(
    run_id: str, status: str, checkpoint: WorkflowCheckpoint, prices: Prices | None
) -> RunTotals:
    cost = checkpoint.cost
    return RunTotals(
        run_id,
        status,
        checkpoint.seq,
        cost.input_tokens + cost.output_tokens,
        None if prices is None else bill(checkpoint, prices)[2],
    )
