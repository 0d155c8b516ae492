"""Step and Workflow validation, and the batch order of the planner and the runner."""

from __future__ import annotations

import asyncio
import dataclasses
import re
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from executionkit import (
    ExecutionKitError,
    Step,
    Workflow,
    WorkflowCheckpoint,
    WorkflowDefinitionError,
)
from executionkit._define._frontier import Frontier
from executionkit._define._graph import Graph

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping


def _noop(ctx: Mapping[str, Any]) -> None:
    return None


def _named(name: str) -> Callable[[Mapping[str, Any]], str]:
    def run(ctx: Mapping[str, Any]) -> str:
        return f"out-{name}"

    return run


def _steps(spec: Mapping[str, list[str]]) -> list[Step]:
    """Build steps from ``name -> dependencies``, in the dict's (declaration) order."""
    return [Step(name, _named(name), depends_on=tuple(deps)) for name, deps in spec.items()]


def _assert_definition_error(exc: BaseException, message: str) -> None:
    assert isinstance(exc, WorkflowDefinitionError)
    assert isinstance(exc, ExecutionKitError)
    assert isinstance(exc, ValueError)
    assert str(exc) == message


# --- Step validation ---------------------------------------------------------------------


class _Unprintable:
    def __repr__(self) -> str:
        return "<not callable>"


STEP_ERRORS: list[tuple[str, dict[str, Any], str]] = [
    ("empty name", {"name": "", "run": _noop}, "step name must be a non-empty str, got str ''"),
    ("int name", {"name": 5, "run": _noop}, "step name must be a non-empty str, got int 5"),
    (
        "None name",
        {"name": None, "run": _noop},
        "step name must be a non-empty str, got NoneType None",
    ),
    (
        "run not callable",
        {"name": "a", "run": _Unprintable()},
        (
            "step 'a': run must be callable (a function or coroutine function taking ctx) or a "
            "Workflow, "
            "got _Unprintable <not callable>"
        ),
    ),
    (
        "run is None",
        {"name": "a", "run": None},
        (
            "step 'a': run must be callable (a function or coroutine function taking ctx) or a "
            "Workflow, "
            "got NoneType None"
        ),
    ),
    (
        "depends_on a single str",
        {"name": "b", "run": _noop, "depends_on": "a"},
        (
            "step 'b': depends_on must be a collection of step names, not a single str; "
            "write depends_on=('a',)"
        ),
    ),
    (
        "depends_on not iterable",
        {"name": "b", "run": _noop, "depends_on": 5},
        "step 'b': depends_on must be a collection of step names, got int 5",
    ),
    (
        "dependency not a str",
        {"name": "b", "run": _noop, "depends_on": ["a", 5]},
        "step 'b': every dependency must be a non-empty str step name, got int 5",
    ),
    (
        "dependency is None",
        {"name": "b", "run": _noop, "depends_on": (None,)},
        "step 'b': every dependency must be a non-empty str step name, got NoneType None",
    ),
    (
        "dependency empty str",
        {"name": "b", "run": _noop, "depends_on": ("a", "")},
        "step 'b': every dependency must be a non-empty str step name, got str ''",
    ),
    (
        "self dependency",
        {"name": "b", "run": _noop, "depends_on": ("a", "b")},
        "step 'b' depends on itself",
    ),
    (
        "metadata not a mapping",
        {"name": "a", "run": _noop, "metadata": [("k", 1)]},
        "step 'a': metadata must be a mapping, got list [('k', 1)]",
    ),
    (
        "metadata None",
        {"name": "a", "run": _noop, "metadata": None},
        "step 'a': metadata must be a mapping, got NoneType None",
    ),
]


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [(kwargs, message) for _, kwargs, message in STEP_ERRORS],
    ids=[case_id for case_id, _, _ in STEP_ERRORS],
)
def test_step_validation_errors(kwargs: dict[str, Any], message: str) -> None:
    with pytest.raises(WorkflowDefinitionError, match=re.escape(message)) as info:
        Step(**kwargs)
    _assert_definition_error(info.value, message)


# --- Workflow validation -----------------------------------------------------------------


def _step(name: str, *deps: str) -> Step:
    return Step(name, _noop, depends_on=deps)


WORKFLOW_ERRORS: list[tuple[str, Callable[[], object], str]] = [
    (
        "duplicate names",
        lambda: [_step("a"), _step("b"), _step("a", "b")],
        "duplicate step name 'a': steps #0 and #2 (0-based, in declaration order) share it",
    ),
    (
        "duplicate names later in the list",
        lambda: [_step("x"), _step("y"), _step("z"), _step("y")],
        "duplicate step name 'y': steps #1 and #3 (0-based, in declaration order) share it",
    ),
    (
        "unknown dependency",
        lambda: [_step("a"), _step("b", "a", "nope")],
        "step 'b' depends on unknown step 'nope'",
    ),
    (
        "several unknown dependencies",
        lambda: [_step("a", "x"), _step("b", "a"), _step("c", "y", "b", "z")],
        (
            "step 'a' depends on unknown step 'x'; step 'c' depends on unknown step 'y'; "
            "step 'c' depends on unknown step 'z'"
        ),
    ),
    (
        "misspelt dependency",
        lambda: [_step("fetch"), _step("summarize", "fetc")],
        "step 'summarize' depends on unknown step 'fetc'; did you mean 'fetch'?",
    ),
    (
        "misspelt dependencies, each with its suggestion",
        lambda: [
            _step("fetch_page"),
            _step("summarize", "fetch_pages"),
            _step("report", "sumarize", "nothing-like-it"),
        ],
        (
            "step 'summarize' depends on unknown step 'fetch_pages'; did you mean "
            "'fetch_page'?; step 'report' depends on unknown step 'sumarize'; did you mean "
            "'summarize'?; step 'report' depends on unknown step 'nothing-like-it'"
        ),
    ),
    (
        "a step is never suggested as its own dependency",
        lambda: [_step("fetch1", "fetch2")],
        "step 'fetch1' depends on unknown step 'fetch2'",
    ),
    (
        "non-Step item",
        lambda: [_step("a"), "b"],
        "Workflow step #1 (0-based) must be a Step, got str 'b'",
    ),
    (
        "None item",
        lambda: [None],
        "Workflow step #0 (0-based) must be a Step, got NoneType None",
    ),
    ("a str", lambda: "ab", "Workflow takes a sequence of Step objects, got str"),
    ("a single Step", lambda: _step("a"), "Workflow takes a sequence of Step objects, got Step"),
    ("not iterable", lambda: 5, "Workflow takes a sequence of Step objects, got int"),
    (
        "2-cycle",
        lambda: [_step("a", "b"), _step("b", "a")],
        "workflow has a dependency cycle: a -> b -> a (each step depends on the next)",
    ),
    (
        "3-cycle",
        lambda: [_step("a", "b"), _step("b", "c"), _step("c", "a")],
        "workflow has a dependency cycle: a -> b -> c -> a (each step depends on the next)",
    ),
    (
        "3-cycle against declaration order",
        lambda: [_step("a", "c"), _step("b", "a"), _step("c", "b")],
        "workflow has a dependency cycle: a -> c -> b -> a (each step depends on the next)",
    ),
    (
        "cycle starts at its first-declared step",
        lambda: [_step("q"), _step("c", "a"), _step("b", "c"), _step("a", "b")],
        "workflow has a dependency cycle: c -> a -> b -> c (each step depends on the next)",
    ),
    (
        "cycle entered away from its first-declared step",
        lambda: [_step("p", "c"), _step("a", "b"), _step("b", "c"), _step("c", "a")],
        "workflow has a dependency cycle: a -> b -> c -> a (each step depends on the next)",
    ),
    (
        "cycle behind an acyclic prefix",
        lambda: [
            _step("start"),
            _step("p", "start", "a"),
            _step("a", "b"),
            _step("b", "c", "start"),
            _step("c", "a"),
        ],
        "workflow has a dependency cycle: a -> b -> c -> a (each step depends on the next)",
    ),
    (
        "two cycles: the first-declared is reported",
        lambda: [_step("x", "y"), _step("a", "b"), _step("b", "a"), _step("y", "x")],
        "workflow has a dependency cycle: x -> y -> x (each step depends on the next)",
    ),
]


@pytest.mark.parametrize(
    ("make", "message"),
    [(make, message) for _, make, message in WORKFLOW_ERRORS],
    ids=[case_id for case_id, _, _ in WORKFLOW_ERRORS],
)
def test_workflow_validation_errors(make: Callable[[], Any], message: str) -> None:
    steps = make()
    with pytest.raises(WorkflowDefinitionError, match=re.escape(message)) as info:
        Workflow(steps)
    _assert_definition_error(info.value, message)


def test_duplicate_names_are_reported_before_unknown_dependencies() -> None:
    with pytest.raises(WorkflowDefinitionError) as info:
        Workflow([_step("a", "ghost"), _step("a")])
    assert str(info.value) == (
        "duplicate step name 'a': steps #0 and #1 (0-based, in declaration order) share it"
    )


def test_validation_happens_once_at_construction_not_at_run() -> None:
    calls: list[str] = []

    def record(ctx: Mapping[str, Any]) -> None:
        calls.append("ran")

    with pytest.raises(WorkflowDefinitionError):
        Workflow([Step("a", record), Step("b", record, depends_on=("a", "missing"))])
    assert calls == []


# --- Step normalisation ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("depends_on", "expected"),
    [
        ([], ()),
        (["a"], ("a",)),
        (["b", "a"], ("b", "a")),
        (["b", "a", "b", "c", "a"], ("b", "a", "c")),
        (("c", "c"), ("c",)),
        (iter(["x", "y", "x"]), ("x", "y")),
        ({"k": 1, "j": 2}, ("k", "j")),
    ],
)
def test_depends_on_becomes_a_deduplicated_tuple(
    depends_on: Any, expected: tuple[str, ...]
) -> None:
    step = Step("s", _noop, depends_on=depends_on)
    assert step.depends_on == expected
    assert type(step.depends_on) is tuple


def test_metadata_is_copied_and_read_only() -> None:
    labels = {"owner": "team-a"}
    step = Step("a", _noop, metadata=labels)
    assert isinstance(step.metadata, MappingProxyType)
    assert step.metadata == {"owner": "team-a"}
    labels["owner"] = "changed"
    assert step.metadata == {"owner": "team-a"}
    proxy: Any = step.metadata
    with pytest.raises(TypeError):
        proxy["owner"] = "x"


def test_metadata_defaults_to_an_empty_read_only_mapping() -> None:
    step = Step("a", _noop)
    assert step.metadata == {}
    assert isinstance(step.metadata, MappingProxyType)
    assert step.depends_on == ()


def test_step_is_frozen() -> None:
    step = Step("a", _noop)
    mutable: Any = step
    with pytest.raises(dataclasses.FrozenInstanceError):
        mutable.name = "b"
    with pytest.raises(dataclasses.FrozenInstanceError):
        mutable.depends_on = ("x",)
    assert step.name == "a"


def test_step_is_hashable_and_compares_by_value() -> None:
    repeated: Any = ["b", "b"]
    first = Step("a", _noop, depends_on=repeated, metadata={"k": [1]})
    second = Step("a", _noop, depends_on=("b",), metadata={"k": [1]})
    assert first == second
    assert hash(first) == hash(second)
    assert len({first, second}) == 1
    assert first != Step("a", _noop, depends_on=("c",))
    assert first != Step("z", _noop, depends_on=("b",))
    assert {first: "x"}[second] == "x"


class _Run:
    def __init__(self, label: str) -> None:
        self.label = label

    def __call__(self, ctx: Mapping[str, Any]) -> str:
        return self.label

    def __repr__(self) -> str:
        return f"<run {self.label}>"


def test_step_repr() -> None:
    step = Step("b", _Run("b"), depends_on=("a", "a"), metadata={"k": 1})
    assert repr(step) == (
        "Step(name='b', run=<run b>, depends_on=('a',), metadata=mappingproxy({'k': 1}))"
    )


def test_workflow_steps_in_declaration_order_and_repr() -> None:
    steps = [_step("c", "a"), _step("b"), _step("a")]
    workflow = Workflow(steps)
    assert workflow.steps == tuple(steps)
    assert all(got is want for got, want in zip(workflow.steps, steps, strict=True))
    assert repr(workflow) == "Workflow(['c', 'b', 'a'])"
    assert repr(Workflow([])) == "Workflow([])"


def test_workflow_accepts_any_iterable_of_steps() -> None:
    workflow = Workflow(step for step in [_step("a"), _step("b", "a")])
    assert [step.name for step in workflow.steps] == ["a", "b"]
    assert Workflow((_step("x"),)).steps[0].name == "x"


# --- Batch order -------------------------------------------------------------------------


def _run_batches(spec: Mapping[str, list[str]]) -> list[list[str]]:
    """Run the workflow; each batch is what the next checkpoint newly records."""
    checkpoints: list[WorkflowCheckpoint] = []
    result = Workflow(_steps(spec)).run_sync(checkpoint_fn=checkpoints.append)
    batches: list[list[str]] = []
    seen: list[str] = []
    for checkpoint in checkpoints:
        recorded = list(checkpoint.outputs)
        assert recorded[: len(seen)] == seen  # earlier outputs stay, in their order
        batches.append(recorded[len(seen) :])
        seen = recorded
    assert list(result.outputs) == list(spec)
    assert dict(result.outputs) == {name: f"out-{name}" for name in spec}
    assert list(result.executed) == [name for batch in batches for name in batch]
    return batches


def _planner_batches(
    spec: Mapping[str, list[str]], done: set[str] | None = None
) -> list[list[str]]:
    """Ask the planner directly: initial(), then complete(batch) until nothing is ready."""
    graph = Graph(_steps(spec))
    frontier = Frontier(graph, {graph.index[name] for name in done or set()})
    batches: list[list[str]] = []
    ready = frontier.initial()
    while ready:
        batches.append([graph.names[position] for position in ready])
        ready = frontier.complete(ready)
    return batches


BATCH_CASES: list[tuple[str, dict[str, list[str]], list[list[str]]]] = [
    ("empty", {}, []),
    ("single", {"a": []}, [["a"]]),
    ("chain", {"a": [], "b": ["a"], "c": ["b"]}, [["a"], ["b"], ["c"]]),
    ("reversed chain", {"c": ["b"], "b": ["a"], "a": []}, [["a"], ["b"], ["c"]]),
    (
        "diamond",
        {"a": [], "b": ["a"], "c": ["a"], "d": ["b", "c"]},
        [["a"], ["b", "c"], ["d"]],
    ),
    (
        "diamond declared sink first",
        {"d": ["c", "b"], "c": ["a"], "b": ["a"], "a": []},
        [["a"], ["c", "b"], ["d"]],
    ),
    ("wide", {"e": [], "b": [], "a": [], "d": [], "c": []}, [["e", "b", "a", "d", "c"]]),
    (
        "dependent declared before its dependency",
        {"c": ["a"], "b": [], "a": []},
        [["b", "a"], ["c"]],
    ),
    (
        "two independent chains of different lengths",
        {"a1": [], "a2": ["a1"], "a3": ["a2"], "a4": ["a3"], "b1": [], "b2": ["b1"]},
        [["a1", "b1"], ["a2", "b2"], ["a3"], ["a4"]],
    ),
    (
        "depends on steps from different levels",
        {"a": [], "b": ["a"], "c": ["b"], "x": [], "z": ["a", "c"], "y": ["x"]},
        [["a", "x"], ["b", "y"], ["c"], ["z"]],
    ),
    (
        "fan out and join",
        {"r": [], "m3": ["r"], "m1": ["r"], "m2": ["r"], "j": ["m1", "m3"], "k": ["m2"]},
        [["r"], ["m3", "m1", "m2"], ["j", "k"]],
    ),
    (
        "redundant transitive edge",
        {"a": [], "b": ["a"], "c": ["a", "b"]},
        [["a"], ["b"], ["c"]],
    ),
]


@pytest.mark.parametrize(
    ("spec", "expected"),
    [(spec, expected) for _, spec, expected in BATCH_CASES],
    ids=[case_id for case_id, _, _ in BATCH_CASES],
)
def test_batch_order(spec: dict[str, list[str]], expected: list[list[str]]) -> None:
    declared = list(spec)
    for batch in expected:  # the table itself keeps declaration order within a batch
        assert batch == sorted(batch, key=declared.index)
    assert _planner_batches(spec) == expected
    assert _run_batches(spec) == expected


@pytest.mark.parametrize(
    ("spec", "done", "expected"),
    [
        ({"a": [], "b": ["a"], "c": ["a"], "d": ["b", "c"]}, {"a"}, [["b", "c"], ["d"]]),
        ({"a": [], "b": ["a"], "c": ["a"], "d": ["b", "c"]}, {"a", "c"}, [["b"], ["d"]]),
        ({"a": [], "b": ["a"], "c": ["b"]}, {"a", "b", "c"}, []),
        ({"c": ["a"], "b": [], "a": []}, {"b"}, [["a"], ["c"]]),
    ],
)
def test_frontier_starts_from_completed_steps(
    spec: dict[str, list[str]], done: set[str], expected: list[list[str]]
) -> None:
    assert _planner_batches(spec, done) == expected


def _handed_out(frontier: Frontier, failing: set[int]) -> list[list[int]]:
    """Batches ``frontier`` hands out when the steps in ``failing`` never complete."""
    batches: list[list[int]] = []
    ready = frontier.initial()
    while ready:
        batches.append(ready)
        ready = frontier.complete([position for position in ready if position not in failing])
    return batches


@settings(max_examples=300, deadline=None)
@given(st.data())
def test_the_planned_frontier_hands_out_what_counting_would(data: st.DataObject) -> None:
    """Following the precomputed levels, and leaving them at the first incomplete batch,
    gives exactly the batches that counting unfinished dependencies gives."""
    n = data.draw(st.integers(0, 14), label="steps")
    deps = [
        sorted(data.draw(st.sets(st.integers(0, i - 1), max_size=3))) if i else []
        for i in range(n)
    ]
    order = data.draw(st.permutations(range(n)), label="declaration order")
    graph = Graph(_steps({f"s{i}": [f"s{j}" for j in deps[i]] for i in order}))
    failing = set(data.draw(st.sets(st.integers(0, n - 1)), label="failing")) if n else set()
    planned = _handed_out(Frontier(graph, set(), planned=True), failing)
    assert planned == _handed_out(Frontier(graph, set()), failing)
    handed = [position for batch in planned for position in batch]
    assert len(handed) == len(set(handed))
    for position in range(n):
        # Handed out exactly when no step it (transitively) depends on failed.
        assert (position in handed) == (not graph.ancestors(position) & failing)
    if not failing:
        assert planned == [list(level) for level in graph.levels]


def test_the_planned_frontier_leaves_the_plan_when_a_batch_is_incomplete() -> None:
    spec = {"a": [], "b": [], "c": ["a"], "d": ["b"], "e": ["c", "d"], "f": ["c"]}
    graph = Graph(_steps(spec))
    frontier = Frontier(graph, set(), planned=True)
    a, b, c, f = (graph.index[name] for name in "abcf")
    assert frontier.initial() == [a, b]
    assert frontier.complete([a]) == [c]  # b failed: d never becomes ready
    assert frontier.complete([c]) == [f]  # e waits for d, which never runs
    assert frontier.complete([f]) == []


def test_empty_workflow_takes_no_checkpoint() -> None:
    checkpoints: list[WorkflowCheckpoint] = []
    result = Workflow([]).run_sync(checkpoint_fn=checkpoints.append)
    assert checkpoints == []
    assert dict(result.outputs) == {}
    assert result.executed == ()
    assert result.restored == ()


def test_graph_ancestors_are_transitive() -> None:
    graph = Graph(_steps({"a": [], "b": ["a"], "x": [], "c": ["b"], "d": ["c", "x"]}))
    names = graph.names
    assert {names[p] for p in graph.ancestors(graph.index["d"])} == {"a", "b", "c", "x"}
    assert {names[p] for p in graph.ancestors(graph.index["c"])} == {"a", "b"}
    assert graph.ancestors(graph.index["a"]) == set()
    assert len(graph) == 5


# --- Concurrency within a batch ----------------------------------------------------------


async def test_async_steps_of_a_batch_run_concurrently() -> None:
    a_started = asyncio.Event()
    b_started = asyncio.Event()

    async def step_a(ctx: Mapping[str, Any]) -> str:
        a_started.set()
        await b_started.wait()
        return "a"

    async def step_b(ctx: Mapping[str, Any]) -> str:
        b_started.set()
        await a_started.wait()
        return "b"

    checkpoints: list[WorkflowCheckpoint] = []
    async with asyncio.timeout(5):
        result = await Workflow([Step("a", step_a), Step("b", step_b)]).run(
            checkpoint_fn=checkpoints.append
        )
    assert dict(result.outputs) == {"a": "a", "b": "b"}
    assert [list(cp.outputs) for cp in checkpoints] == [["a", "b"]]


async def test_next_batch_waits_for_the_whole_batch_and_its_checkpoint() -> None:
    log: list[str] = []
    a_done = asyncio.Event()

    async def step_a(ctx: Mapping[str, Any]) -> str:
        log.append("a")
        a_done.set()
        return "a"

    async def step_b(ctx: Mapping[str, Any]) -> str:
        await a_done.wait()  # b finishes strictly after a
        log.append("b")
        return "b"

    def step_c(ctx: Mapping[str, Any]) -> str:  # depends on a only
        log.append("c")
        return "c"

    async def save(checkpoint: WorkflowCheckpoint) -> None:
        log.append(f"checkpoint {checkpoint.seq}")

    workflow = Workflow([Step("a", step_a), Step("b", step_b), Step("c", step_c, ("a",))])
    async with asyncio.timeout(5):
        await workflow.run(checkpoint_fn=save)
    assert log == ["a", "b", "checkpoint 1", "c", "checkpoint 2"]


async def test_sync_and_async_steps_share_a_batch() -> None:
    released = asyncio.Event()
    order: list[str] = []

    def sync_one(ctx: Mapping[str, Any]) -> int:
        order.append("sync_one")
        return 1

    async def waiter(ctx: Mapping[str, Any]) -> int:
        await released.wait()
        order.append("waiter")
        return 2

    def sync_two(ctx: Mapping[str, Any]) -> int:
        order.append("sync_two")
        return 3

    async def releaser(ctx: Mapping[str, Any]) -> int:
        released.set()
        order.append("releaser")
        return 4

    def join(ctx: Mapping[str, Any]) -> int:
        return int(sum(ctx[name] for name in ("sync_one", "waiter", "sync_two", "releaser")))

    checkpoints: list[WorkflowCheckpoint] = []
    workflow = Workflow(
        [
            Step("sync_one", sync_one),
            Step("waiter", waiter),
            Step("sync_two", sync_two),
            Step("releaser", releaser),
            Step("join", join, ("sync_one", "waiter", "sync_two", "releaser")),
        ]
    )
    async with asyncio.timeout(5):
        result = await workflow.run(checkpoint_fn=checkpoints.append)
    assert order.index("waiter") > order.index("releaser")
    assert set(order) == {"sync_one", "waiter", "sync_two", "releaser"}
    assert dict(result.outputs) == {
        "sync_one": 1,
        "waiter": 2,
        "sync_two": 3,
        "releaser": 4,
        "join": 10,
    }
    assert [list(cp.outputs) for cp in checkpoints] == [
        ["sync_one", "waiter", "sync_two", "releaser"],
        ["sync_one", "waiter", "sync_two", "releaser", "join"],
    ]


def test_sync_steps_in_a_batch_without_an_event_loop() -> None:
    checkpoints: list[WorkflowCheckpoint] = []
    workflow = Workflow([Step(name, _named(name)) for name in ("p", "q", "r")])
    result = workflow.run_sync(checkpoint_fn=checkpoints.append)
    assert dict(result.outputs) == {"p": "out-p", "q": "out-q", "r": "out-r"}
    assert len(checkpoints) == 1
    assert list(checkpoints[0].outputs) == ["p", "q", "r"]
