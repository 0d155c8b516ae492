"""A budget in dollars (issue 32): ``run(budget=Budget(dollars=...), prices=...)``.

Once the ledger, priced with the run's prices, reaches the limit, no new step,
item, retry or child step starts; what runs finishes and is counted; a resume
with a larger budget runs only what is left. Usage the prices cannot price
stops the run too: it cannot be proven under the limit.
"""

from __future__ import annotations

from decimal import Decimal
from typing import Any

import pytest

from executionkit import (
    Budget,
    BudgetExceeded,
    Price,
    Prices,
    RunArgumentError,
    Step,
    TokenUsage,
    Workflow,
    WorkflowCheckpoint,
    current_step,
)

PRICES = Prices({"m": Price(1, 0)})  # a million input tokens: one dollar
DOLLAR = TokenUsage(1_000_000, 0, 1)


def paid(calls: list[str], name: str, *, model: str = "m", fails_first: bool = False) -> Any:
    """A step spending one dollar of ``model`` per attempt."""

    def run(ctx: Any) -> str:
        step = current_step()
        calls.append(f"{name}{step.attempt}" if fails_first else name)
        step.add_usage(DOLLAR, model=model)
        if fails_first and step.attempt == 1:
            msg = "first attempt fails"
            raise RuntimeError(msg)
        return name

    return run


def chain(calls: list[str]) -> Workflow:
    child = Workflow(
        [Step("c1", paid(calls, "c1")), Step("c2", paid(calls, "c2"), depends_on=("c1",))]
    )
    return Workflow(
        [
            Step("a", paid(calls, "a")),
            Step("b", paid(calls, "b"), depends_on=("a",)),
            Step("sub", child, depends_on=("b",)),
            Step("z", paid(calls, "z"), depends_on=("sub",)),
        ]
    )


def test_a_dollar_budget_stops_new_steps_and_a_resume_with_more_runs_the_rest() -> None:
    """Three dollars: a, b, and the child's first step (the dollar the parent left it)."""
    calls: list[str] = []
    saved: list[WorkflowCheckpoint] = []
    workflow = chain(calls)
    with pytest.raises(BudgetExceeded) as caught:
        workflow.run_sync(budget=Budget(dollars=3), prices=PRICES, checkpoint_fn=saved.append)
    assert calls == ["a", "b", "c1"]
    error = caught.value
    assert error.dollars == Decimal(3)
    assert error.budget == Budget(dollars=3)
    assert str(error).startswith("budget reached: dollars $3 of $3; no new step or retry")
    assert error.checkpoint.spending.priced(PRICES).total == 3
    calls.clear()
    result = workflow.run_sync(resume_from=saved[-1], budget=Budget(dollars="5.00"), prices=PRICES)
    assert calls == ["c2", "z"]
    assert result.spending.priced(PRICES).total == 5


def test_a_dollar_budget_stops_the_next_retry_and_the_next_item() -> None:
    calls: list[str] = []
    retried = Workflow([Step("s", paid(calls, "s", fails_first=True), retries=3, retry_delay=0)])
    with pytest.raises(BudgetExceeded):
        retried.run_sync(budget=Budget(dollars=1), prices=PRICES)
    assert calls == ["s1"]
    calls.clear()
    items = Workflow(
        [
            Step("xs", lambda ctx: ["1", "2", "3", "4"], inline=True),
            Step.map(
                "each", lambda item, ctx: paid(calls, item)(ctx), over="xs", max_concurrency=1
            ),
        ]
    )
    with pytest.raises(BudgetExceeded) as caught:
        items.run_sync(budget=Budget(dollars="2.5"), prices=PRICES)
    assert calls == ["1", "2", "3"]  # the third crossed $2.50; the fourth never started
    assert caught.value.dollars == 3


def test_usage_the_prices_cannot_price_stops_the_run_naming_the_model() -> None:
    """Never $0: an unpriced model stops new work; a default price lets the run go on."""
    calls: list[str] = []
    workflow = Workflow(
        [
            Step("a", paid(calls, "a", model="mystery")),
            Step("b", paid(calls, "b"), depends_on=("a",)),
        ]
    )
    with pytest.raises(BudgetExceeded) as caught:
        workflow.run_sync(budget=Budget(dollars=100), prices=PRICES)
    assert calls == ["a"]
    assert "model 'mystery' has no price in the run's prices, so the dollar budget ($100)" in str(
        caught.value
    )
    calls.clear()
    with_default = Prices(dict(PRICES), default=Price(2, 0))
    result = workflow.run_sync(budget=Budget(dollars=100), prices=with_default)
    assert calls == ["a", "b"]
    assert result.spending.priced(with_default).total == 3


def test_tokens_and_dollars_together_each_stop_the_run() -> None:
    calls: list[str] = []
    budget = Budget(tokens=TokenUsage(llm_calls=1), dollars=100)
    with pytest.raises(BudgetExceeded) as caught:
        chain(calls).run_sync(budget=budget, prices=PRICES)
    assert calls == ["a"]
    assert str(caught.value).startswith("budget reached: llm_calls 1 of 1;")
    assert caught.value.budget == budget


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"budget": Budget(dollars=1)}, "budget=Budget(dollars=1) needs prices=Prices({...})"),
        ({"budget": 5}, "budget must be a TokenUsage, a Budget or None, got int 5"),
        ({"prices": {"m": Price(1, 1)}}, "prices must be a Prices or None, got dict"),
        (
            {"budget": Budget(tokens=TokenUsage(-1, 0, 0))},
            "budget fields must be non-negative (0 means no limit)",
        ),
    ],
)
def test_bad_budget_options_are_refused_before_anything_runs(
    options: dict[str, Any], message: str
) -> None:
    calls: list[str] = []
    with pytest.raises(RunArgumentError) as caught:
        chain(calls).run_sync(**options)
    assert str(caught.value).startswith(message)
    assert calls == []


def test_a_budget_checks_its_own_fields() -> None:
    assert Budget().tokens is None
    assert Budget(dollars=0.1).dollars == Decimal("0.1")
    with pytest.raises(ValueError, match="Budget dollars must be a finite, non-negative"):
        Budget(dollars=-1)
    with pytest.raises(TypeError, match="Budget tokens must be a TokenUsage or None, got 3"):
        Budget(tokens=3)  # type: ignore[arg-type]
