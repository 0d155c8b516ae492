"""Mistakes caught before paying (issue 19).

A map's ``over`` that names nothing it can read, functions that cannot take
the arguments they will be called with, and unknown keywords of `Step.ask` and
`Step.map` are refused at construction, or before the first step runs,
naming the step and what was expected.
"""

from __future__ import annotations

import functools
from collections import Counter
from typing import Any

import pytest

from executionkit import RunArgumentError, Step, Workflow, WorkflowDefinitionError

# Step, for calls a type checker rightly refuses: these check what happens at run time.
ANY_STEP: Any = Step

# --- over= -------------------------------------------------------------------------------


def test_over_naming_neither_a_step_nor_a_declared_input_is_refused_at_construction() -> None:
    """With declared inputs, the items can only come from a step or an input."""
    with pytest.raises(WorkflowDefinitionError) as caught:
        Workflow([Step.map("m", lambda item, ctx: item, over="doc")], inputs=("docs",))
    assert str(caught.value) == (
        "step 'm': over='doc' names neither a step nor a declared input of the workflow "
        "(inputs: 'docs'); did you mean 'docs'?"
    )


@pytest.mark.parametrize(
    "steps",
    [
        [Step.map("m", lambda item, ctx: item, over="docs")],
        [Step("docs", lambda ctx: [1]), Step.map("m", lambda item, ctx: item, over="docs")],
    ],
)
def test_over_naming_a_step_or_a_declared_input_is_accepted(steps: list[Step]) -> None:
    """A declared input or a step (which the map then depends on) is where items come from."""
    inputs = () if len(steps) == 2 else ("docs",)
    Workflow(steps, inputs=inputs)


def test_over_naming_nothing_the_run_has_is_refused_before_the_first_step() -> None:
    """Without declared inputs, the initial context is checked before any step runs."""
    calls: Counter[str] = Counter()

    def first(ctx: Any) -> int:
        calls["first"] += 1
        return 1

    workflow = Workflow(
        [
            Step("first", first),
            Step.map("m", lambda item, ctx: item, over="docs", depends_on=("first",)),
        ]
    )
    with pytest.raises(RunArgumentError) as caught:
        workflow.run_sync({"doc": ["a"]})
    assert str(caught.value) == (
        "step 'm': over='docs' names neither a step nor a key of initial_context "
        "(keys: 'doc'); did you mean 'doc'?"
    )
    assert not calls
    assert workflow.run_sync({"docs": ["a"]}).outputs["m"] == ["a"]


def test_over_of_a_map_inside_a_sub_workflow_is_checked_before_the_parent_pays() -> None:
    """The child's initial context is known too: the parent's ctx for the step."""
    calls: Counter[str] = Counter()

    def first(ctx: Any) -> list[str]:
        calls["first"] += 1
        return ["a"]

    child = Workflow([Step.map("each", lambda item, ctx: item, over="lines")])
    workflow = Workflow([Step("first", first), Step("sub", child, depends_on=("first",))])
    with pytest.raises(RunArgumentError) as caught:
        workflow.run_sync({})
    assert str(caught.value) == (
        "step 'each' of the sub-workflow of step 'sub': over='lines' names neither a step "
        "nor a key of its initial context (keys: 'first')"
    )
    assert not calls
    fixed = Workflow(
        [Step("lines", first), Step("sub", child, depends_on=("lines",))],
    )
    assert fixed.run_sync().outputs["sub"] == {"each": ["a"]}


def test_over_of_a_map_a_condition_may_skip_is_left_to_the_condition() -> None:
    """A map that runs only when its items were given is not refused for their absence."""
    workflow = Workflow(
        [Step.map("m", lambda item, ctx: item, over="docs", when=lambda ctx: "docs" in ctx)],
        inputs=("other",),
    )
    result = workflow.run_sync({"other": 1})
    assert "m" not in result.outputs


# --- signatures --------------------------------------------------------------------------


def no_args() -> None:
    """Takes nothing."""


def two(a: object, b: object) -> None:
    """Takes two."""


def one(a: object) -> object:
    """Takes one."""
    return a


async def async_two(a: object, b: object) -> None:
    """Takes two."""


def needs_keyword(ctx: object, *, client: object) -> None:
    """Takes a keyword the run never passes."""


@pytest.mark.parametrize(
    ("build", "message"),
    [
        (
            lambda: ANY_STEP("s", no_args),
            (
                "step 's': run is called as run(ctx), but no_args takes () and cannot be "
                "called with 1 argument"
            ),
        ),
        (
            lambda: ANY_STEP("s", async_two),
            (
                "step 's': run is called as run(ctx), but async_two takes (a, b) and cannot "
                "be called with 1 argument"
            ),
        ),
        (
            lambda: ANY_STEP("s", one, when=two),
            (
                "step 's': when is called as when(ctx), but two takes (a, b) and cannot be "
                "called with 1 argument"
            ),
        ),
        (
            lambda: ANY_STEP.map("m", one, over="xs"),
            (
                "step 'm': the map function is called as fn(item, ctx), but one takes (a) and "
                "cannot be called with 2 arguments"
            ),
        ),
        (
            lambda: ANY_STEP.map("m", two, over="xs", key=two),
            (
                "step 'm': key is called as key(item), but two takes (a, b) and cannot be "
                "called with 1 argument"
            ),
        ),
        (
            lambda: ANY_STEP.ask("q", two),
            (
                "step 'q': the question is called as question(ctx), but two takes (a, b) and "
                "cannot be called with 1 argument"
            ),
        ),
        (
            lambda: ANY_STEP.ask("q", one, check=no_args),
            (
                "step 'q': check is called as check(answer), but no_args takes () and cannot "
                "be called with 1 argument"
            ),
        ),
        (
            lambda: ANY_STEP("s", one, encode=two, decode=one),
            (
                "step 's': encode is called as encode(output), but two takes (a, b) and cannot "
                "be called with 1 argument"
            ),
        ),
        (
            lambda: ANY_STEP("s", needs_keyword),
            (
                "step 's': run is called as run(ctx), but needs_keyword takes (ctx, *, client) "
                "and cannot be called with 1 argument"
            ),
        ),
    ],
)
def test_a_function_that_cannot_take_its_arguments_is_refused_at_construction(
    build: Any, message: str
) -> None:
    """Each callable is checked against how the run will call it."""
    with pytest.raises(WorkflowDefinitionError) as caught:
        build()
    assert str(caught.value) == message


class Callable1:
    """An object whose __call__ takes one argument."""

    def __call__(self, ctx: object) -> int:
        return 1

    def method(self, ctx: object) -> int:
        return 2

    def item_method(self, item: object, ctx: object) -> int:
        return 3


def decorated(fn: Any) -> Any:
    """A decorator whose wrapper supplies an argument the wrapped function needs."""

    @functools.wraps(fn)
    def wrapper(ctx: object) -> object:
        return fn(ctx, "client")

    return wrapper


@decorated
def needs_client(ctx: object, client: str) -> str:
    return client


ACCEPTED: list[Any] = [
    lambda ctx: 1,
    lambda ctx, extra=None: 1,
    lambda *args: 1,
    lambda *args, **kwargs: 1,
    lambda ctx, *, option=1: 1,
    functools.partial(two, 1),
    Callable1(),
    Callable1().method,
    needs_client,
    len,
    print,
    dict,
]


@pytest.mark.parametrize("fn", ACCEPTED)
def test_functions_that_can_take_their_arguments_are_accepted(fn: Any) -> None:
    """Defaults, *args, partials, bound methods, __call__, wrappers and builtins pass."""
    Step("s", fn, when=fn)
    Step.ask("q", fn, check=fn)
    Step.map("m", lambda item, ctx: item, over="xs", key=fn)


@pytest.mark.parametrize(
    "fn",
    [
        lambda item, ctx: 1,
        lambda *args: 1,
        functools.partial(lambda a, item, ctx: 1, 0),
        Callable1().item_method,
        max,
    ],
)
def test_map_functions_that_can_take_item_and_ctx_are_accepted(fn: Any) -> None:
    """The map function's own forms pass as well."""
    Step.map("m", fn, over="xs")


def test_the_checked_functions_run_as_they_were_checked() -> None:
    """What passes the check runs: a partial, a bound method and a wrapper."""
    workflow = Workflow(
        [
            Step("a", functools.partial(lambda prefix, ctx: prefix + "a", ">")),
            Step("b", Callable1().method, when=Callable1()),
            Step("c", needs_client),
            Step.map("d", Callable1().item_method, over="xs", key=str),
        ]
    )
    assert workflow.run_sync({"xs": [1]}).outputs == {
        "a": ">a",
        "b": 2,
        "c": "client",
        "d": [3],
    }


# --- unknown keywords --------------------------------------------------------------------


def test_step_ask_refuses_when_with_a_definition_error_and_the_way_out() -> None:
    """Step.ask takes no when: condition a step it depends on instead."""
    with pytest.raises(WorkflowDefinitionError) as caught:
        ANY_STEP.ask("q", one, when=lambda ctx: True)
    assert str(caught.value) == (
        "step 'q': Step.ask got unknown option(s) 'when' (it takes depends_on, check, "
        "expires_after, default, version and metadata); an ask step has no condition of its own: "
        "give the when to a step it depends on, whose skip skips the question too"
    )


def test_a_question_behind_a_skipped_dependency_is_skipped() -> None:
    """The way out the error gives works."""
    workflow = Workflow(
        [
            Step("gate", lambda ctx: True, when=lambda ctx: ctx["ask"]),
            Step.ask("q", lambda ctx: "ok?", depends_on=("gate",)),
        ]
    )
    assert dict(workflow.run_sync({"ask": False}).pending) == {}
    assert dict(workflow.run_sync({"ask": True}).pending) == {"q": "ok?"}


@pytest.mark.parametrize(
    ("build", "message"),
    [
        (
            lambda: ANY_STEP.map("m", two, over="xs", retry=3),
            (
                "step 'm': Step.map got unknown option(s) 'retry' (it takes the keywords of "
                "Step); did you mean 'retries'?"
            ),
        ),
        (
            lambda: ANY_STEP.map("m", two, over="xs", max_retries=3),
            (
                "step 'm': Step.map got unknown option(s) 'max_retries' (it takes the keywords "
                "of Step); did you mean 'retries'?"
            ),
        ),
        (
            lambda: ANY_STEP.map("m", two, over="xs", retry_delays=3),
            (
                "step 'm': Step.map got unknown option(s) 'retry_delays' (it takes the keywords "
                "of Step); did you mean 'retry_delay'?"
            ),
        ),
        (
            lambda: ANY_STEP.ask("q", one, checks=one),
            (
                "step 'q': Step.ask got unknown option(s) 'checks' (it takes depends_on, check, "
                "expires_after, default, version and metadata); did you mean 'check'?"
            ),
        ),
    ],
)
def test_unknown_options_suggest_the_likely_intent(build: Any, message: str) -> None:
    """retry= means retries, not retry_on."""
    with pytest.raises(WorkflowDefinitionError) as caught:
        build()
    assert str(caught.value) == message


def test_one_function_serving_many_steps_is_inspected_once(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Building 500 steps of one function reads its signature once (building stays cheap)."""
    import inspect as inspect_module  # noqa: PLC0415

    calls: list[object] = []
    real = inspect_module.signature

    def counting(fn: Any, **kwargs: Any) -> inspect_module.Signature:
        calls.append(fn)
        return real(fn, **kwargs)

    def shared(ctx: Any) -> int:
        return 1

    monkeypatch.setattr(inspect_module, "signature", counting)
    Workflow([Step(f"s{n}", shared) for n in range(500)])
    assert calls.count(shared) == 1

    def wrong() -> int:
        return 1

    with pytest.raises(WorkflowDefinitionError, match="cannot be called with 1 argument"):
        Step("again", wrong)  # type: ignore[arg-type]
    with pytest.raises(WorkflowDefinitionError, match="cannot be called with 1 argument"):
        Step("and again", wrong)  # type: ignore[arg-type]
