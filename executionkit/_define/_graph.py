"""The planner: a validated dependency graph and the frontier of ready steps.

Plain synchronous code with no asyncio in it, so that validation and batch order
can be tested with tables. The runner only asks "what may start now?" and says
"this finished".
"""

from __future__ import annotations

from array import array
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, cast

from executionkit._checkpoint._step_info import StepInfo
from executionkit._define._code import fingerprint
from executionkit._define._frontier import Levels
from executionkit._define._step import Step
from executionkit._define._step_checks import is_async_callable, is_workflow
from executionkit._define._step_kinds import AskStep, MapStep, WaitStep
from executionkit._errors import WorkflowDefinitionError, did_you_mean
from executionkit._paths import join_path

if TYPE_CHECKING:
    from executionkit._define._step_checks import SubWorkflow

# What a map of sub-workflows adds to each item's initial context.
ITEM_KEYS = ("item", "item_key")


class Graph:
    """Steps indexed by declaration order, with edges both ways.

    Raises `WorkflowDefinitionError` for anything that is not a step, duplicate
    names, unknown dependencies and cycles; for a sub-workflow (at any depth)
    with a step named like a key its initial context holds; and, when
    ``inputs`` are declared, for a map whose ``over`` names neither a step nor
    one of them.
    """

    __slots__ = (
        "asks",
        "conditional",
        "context_maps",
        "dependencies",
        "dependents",
        "encoded",
        "index",
        "inline",
        "inputs",
        "levels",
        "limited",
        "maps",
        "names",
        "nested",
        "on_loop",
        "plain",
        "plain_items",
        "step_info",
        "steps",
        "waits",
        "workflows",
    )

    def __init__(self, steps: Iterable[Step], inputs: object = ()) -> None:
        """Index ``steps`` and validate the graph they form, and the declared ``inputs``."""
        self.steps: tuple[Step, ...] = _with_over_dependencies(_as_steps(steps))
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
        # One tuple per one-step edge list, shared both ways: in a chain, step i
        # depends on (i - 1,), which is also what step i - 2 has as dependents.
        singles: dict[int, tuple[int]] = {}
        self.dependencies: tuple[tuple[int, ...], ...] = self._resolve_dependencies(singles)
        dependents: list[list[int]] = [[] for _ in self.steps]
        # The index's own int objects, not new ones: at 100,000 steps that is 2.7 MB.
        for position, deps in zip(self.index.values(), self.dependencies, strict=True):
            for dep in deps:
                dependents[dep].append(position)
        self.dependents: tuple[tuple[int, ...], ...] = tuple(
            (singles.get(d[0]) or singles.setdefault(d[0], (d[0],))) if len(d) == 1 else tuple(d)
            for d in dependents
        )
        del singles
        # The batches of a fresh run where every step completes, each in declaration order.
        self.levels: Levels = self._levels()
        kinds = _Kinds(self.steps)
        maps, workflows, asks = kinds.maps, kinds.workflows, kinds.asks
        plain_items, plain, encoded = kinds.plain_items, kinds.plain, kinds.encoded
        conditions, step_info = kinds.conditions, kinds.step_info
        # Map steps: their run is called once per item, by the map's own driver.
        self.maps = frozenset(maps)
        # Steps whose run is a Workflow: sub-workflows (a map's items, for a map).
        self.workflows = frozenset(workflows)
        # Ask steps: their run computes a question, and their output is the answer.
        self.asks = frozenset(asks)
        # Wait steps (`Step.wait`): their run computes the time to wait for (or nothing).
        self.waits = frozenset(kinds.waits)
        # Maps whose function is plain: their items run in the run's executor (threads).
        self.plain_items = frozenset(plain_items)
        # Plain-function steps: they run in the run's executor (threads).
        self.plain = frozenset(plain)
        # Plain steps and maps' plain items that run on the loop's thread (inline=True).
        steps = self.steps
        self.on_loop = frozenset(p for p in (*plain, *plain_items) if steps[p].inline)
        # Steps (and maps) whose attempts draw on a limit (`Step.limit`).
        self.limited = frozenset(p for p, step in enumerate(steps) if step.limit is not None)
        # Of those, the steps without retries or a limit: called where they start, without
        # a task.
        self.inline = frozenset(
            p for p in plain if steps[p].inline and steps[p].retries == 0 and p not in self.limited
        )
        # Steps whose outputs are recorded through Step.encode.
        self.encoded = frozenset(encoded)
        # What checkpoints record about each step, built once and shared by all of them.
        self.step_info = step_info
        # Steps with a `when` condition, and everything downstream of one: those a
        # condition may skip, whose skipping must be decided before they start.
        self.conditional = self.descendants(conditions, inclusive=True)
        # Initial-context keys every run must be given.
        self.inputs: tuple[str, ...] = self._checked_inputs(inputs)
        # Maps whose items come from the initial context: over names no step. Those a
        # condition may skip are left out: "run only when the items were given" is fine.
        self.context_maps = tuple(
            p
            for p in sorted(self.maps)
            if cast("MapStep", self.steps[p]).over not in self.index and p not in self.conditional
        )
        if self.inputs:
            self._check_overs()
        # Every sub-workflow below this one, at any depth.
        self.nested: tuple[Nested, ...] = self._nested()

    def __len__(self) -> int:
        """Return the number of steps."""
        return len(self.steps)

    def first_attempts(self, position: int) -> tuple[str, ...]:
        """The ledger paths of the attempts the sub-workflow at ``position`` starts first.

        Its steps with no dependencies (``<step>/<child step>``; into a
        sub-workflow among them, further down; a map of sub-workflows by its
        own path), but its questions, which spend nothing, and its maps of
        functions, whose items start only once a checkpoint of the child
        counting them was handed over. A parent lists them in flight while the
        child has not handed over a checkpoint of its own, which then lists
        what it runs.
        """
        child = graph_of(self.steps[position].run)
        prefix = join_path(self.names[position])
        paths: list[str] = []
        for root, dependencies in enumerate(child.dependencies):
            if dependencies or root in child.asks:
                continue
            if root in child.maps and root not in child.workflows:
                continue  # its items are counted in the child's checkpoint first
            if root in child.workflows and root not in child.maps:
                paths += child.first_attempts(root)
            else:
                paths.append(child.names[root])
        return tuple(f"{prefix}/{path}" for path in paths)

    def _checked_inputs(self, inputs: object) -> tuple[str, ...]:
        if isinstance(inputs, (str, bytes)) or not isinstance(inputs, Iterable):
            msg = (
                f"Workflow inputs must be a collection of initial-context key names such as "
                f"a tuple, got {type(inputs).__name__} {inputs!r}"
            )
            raise WorkflowDefinitionError(msg)
        names = tuple(inputs)
        for name in names:
            if not isinstance(name, str) or not name:
                msg = f"Workflow inputs must be non-empty str, got {type(name).__name__} {name!r}"
                raise WorkflowDefinitionError(msg)
        duplicates = sorted({name for name in names if names.count(name) > 1})
        if duplicates:
            msg = f"Workflow inputs name {', '.join(map(repr, duplicates))} more than once"
            raise WorkflowDefinitionError(msg)
        steps = [name for name in names if name in self.index]
        if steps:
            msg = (
                f"Workflow inputs {', '.join(map(repr, steps))} are step names; an input is "
                f"an initial-context key, and those cannot share a name with a step"
            )
            raise WorkflowDefinitionError(msg)
        return names

    def _check_overs(self) -> None:
        """With declared inputs, a map's items come from a step or one of the inputs."""
        for position in self.context_maps:
            over = cast("MapStep", self.steps[position]).over
            if over not in self.inputs:
                msg = (
                    f"step {self.names[position]!r}: over={over!r} names neither a step nor "
                    f"a declared input of the workflow (inputs: "
                    f"{', '.join(map(repr, self.inputs))})"
                    f"{did_you_mean(over, (*self.names, *self.inputs))}"
                )
                raise WorkflowDefinitionError(msg)

    def _nested(self) -> tuple[Nested, ...]:
        """Each sub-workflow below this one, with what its initial context holds from here.

        Raises `WorkflowDefinitionError` for one with a step named like such a key:
        the child would refuse its initial context on every run, after the steps
        before it were paid for.
        """
        found: list[Nested] = []
        for position in sorted(self.workflows):
            name = self.names[position]
            child = graph_of(self.steps[position].run)
            keys = {
                self.names[a]: f"the output of step {self.names[a]!r}, an ancestor of {name!r}"
                for a in sorted(self.ancestors(position))
            }
            keys.update((key, f"the declared input {key!r}") for key in self.inputs)
            if position in self.maps:
                keys.update(
                    (key, f"the key {key!r} a map of sub-workflows adds to each item's context")
                    for key in ITEM_KEYS
                )
            skippable = position in self.conditional
            found.append(Nested(f"step {name!r}", child, MappingProxyType(keys), skippable))
            found.extend(
                Nested(
                    f"{deeper.where} of the sub-workflow of step {name!r}",
                    deeper.graph,
                    MappingProxyType({**keys, **deeper.keys}),
                    skippable or deeper.skippable,
                )
                for deeper in child.nested
            )
        for nested in found:
            clash = nested.clash(nested.keys)
            if clash is not None:
                raise WorkflowDefinitionError(clash)
        return tuple(found)

    def _resolve_dependencies(self, singles: dict[int, tuple[int]]) -> tuple[tuple[int, ...], ...]:
        unknown = [
            f"step {step.name!r} depends on unknown step {dep!r}"
            f"{did_you_mean(dep, (n for n in self.names if n != step.name))}"
            for step in self.steps
            for dep in step.depends_on
            if dep not in self.index
        ]
        if unknown:
            raise WorkflowDefinitionError("; ".join(unknown))
        position_of = self.index.__getitem__
        result: list[tuple[int, ...]] = []
        for step in self.steps:
            deps = step.depends_on
            if len(deps) == 1:
                position = position_of(deps[0])
                single = singles.get(position)
                if single is None:
                    single = singles[position] = (position,)
                result.append(single)
            else:
                result.append(tuple(map(position_of, deps)))
        return tuple(result)

    def _levels(self) -> Levels:
        # Kahn's algorithm, a level at a time: whatever cannot be peeled off lies on or
        # behind a cycle.
        waiting = [len(deps) for deps in self.dependencies]
        level = [i for i, count in zip(self.index.values(), waiting, strict=True) if count == 0]
        order: list[int] = []
        starts = array("l", [0])
        while level:
            order.extend(level)
            starts.append(len(order))
            following: list[int] = []
            for node in level:
                for child in self.dependents[node]:
                    waiting[child] -= 1
                    if waiting[child] == 0:
                        following.append(child)
            following.sort()
            level = following
        if len(order) == len(self.steps):
            return Levels(tuple(order), starts)
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

    def descendants(self, positions: Iterable[int], *, inclusive: bool = False) -> frozenset[int]:
        """Every step that depends, transitively, on one of ``positions`` (and those, if asked)."""
        found: set[int] = set()
        stack = list(positions)
        if inclusive:
            found.update(stack)
        while stack:
            for child in self.dependents[stack.pop()]:
                if child not in found:
                    found.add(child)
                    stack.append(child)
        return frozenset(found)


@dataclass(frozen=True, slots=True)
class Nested:
    """A sub-workflow below a workflow, and the keys its initial context gets from above.

    Its initial context is the run's initial context plus ``keys``: the outputs
    of the ancestors of each sub-workflow step on the way down, the declared
    inputs, and ``item`` and ``item_key`` below a map of sub-workflows.
    """

    where: str  # "step 'sub'", "step 'inner' of the sub-workflow of step 'sub'"
    graph: Graph
    keys: Mapping[str, str]  # key -> where it comes from, for messages
    skippable: bool  # a condition may skip it, or a sub-workflow step above it

    def clash(self, keys: Mapping[str, str]) -> str | None:
        """The message for the first step of the sub-workflow named like one of ``keys``."""
        for name in self.graph.names:
            if name in keys:
                return (
                    f"{self.where} runs a sub-workflow whose step {name!r} has the name of "
                    f"{keys[name]}, which the sub-workflow's initial context holds; rename one "
                    f"of them"
                )
        return None


def graph_of(workflow: SubWorkflow | object) -> Graph:
    """The validated graph of a workflow (a sub-workflow's, for its parent).

    Takes a step's ``run`` as it is typed (a function or a workflow): call it
    only where `is_workflow` holds.
    """
    return cast("SubWorkflow", workflow)._graph  # noqa: SLF001 - the child's, read by its parent


def kind_of(step: Step) -> str:
    """What a step is, as ``step_info`` records it: step, map, ask or workflow."""
    if type(step) is Step and not is_workflow(step.run):
        return "step"
    if isinstance(step, MapStep):
        return "map"
    if isinstance(step, AskStep):
        return "ask"
    return "workflow" if is_workflow(step.run) else "step"


def _info(step: Step) -> StepInfo:
    kind = kind_of(step)
    # A function's output is made by its code; a wait's is a time that passed, whatever
    # computes it; a sub-workflow's steps carry their own fingerprints.
    fingerprinted = kind in {"step", "map"} and not isinstance(step, WaitStep)
    more = code_of(step.run) if fingerprinted and not is_workflow(step.run) else ()
    return StepInfo(step.version, step.depends_on, None if kind == "step" else kind, more)


def code_of(run: object) -> tuple[tuple[str, str], ...]:
    """``(("code", fingerprint),)`` for a step's ``run`` (`StepInfo`'s ``more``); () for none."""
    code = fingerprint(run)
    return () if code is None else (("code", code),)


def _with_over_dependencies(steps: tuple[Step, ...]) -> tuple[Step, ...]:
    """Each map step depends on the step its ``over`` names, if it names one."""
    if not any(issubclass(kind, MapStep) for kind in set(map(type, steps))):
        return steps
    names = {step.name for step in steps}
    return tuple(
        replace(step, depends_on=(*step.depends_on, step.over))
        if isinstance(step, MapStep)
        and step.over in names
        and step.over not in step.depends_on
        and step.over != step.name
        else step
        for step in steps
    )


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
    # The types present, found at C speed: a workflow has a handful of them.
    if all(issubclass(kind, Step) for kind in set(map(type, items))):
        return cast("tuple[Step, ...]", items)
    position, step = next((i, s) for i, s in enumerate(items) if not isinstance(s, Step))
    msg = f"Workflow step #{position} (0-based) must be a Step, got {type(step).__name__} {step!r}"
    raise WorkflowDefinitionError(msg)


class _Kinds:
    """The positions of each kind of step, and what checkpoints record of each, in one pass."""

    def __init__(self, steps: tuple[Step, ...]) -> None:
        """Sort ``steps`` by kind (`Graph.__init__` says what each list holds)."""
        self.maps: list[int] = []
        self.workflows: list[int] = []
        self.asks: list[int] = []
        self.waits: list[int] = []
        self.plain_items: list[int] = []
        self.plain: list[int] = []
        self.encoded: list[int] = []
        self.conditions: list[int] = []
        self.step_info: dict[str, Mapping[str, Any]] = {}
        # Consecutive steps mostly share their function: ask inspect once for each run, and
        # fingerprint its code once (`_code.fingerprint`).
        last_run: object = None
        last_async = False
        last_code: tuple[tuple[str, str], ...] = ()
        step_info, plain = self.step_info, self.plain
        for position, step in enumerate(steps):
            run = step.run
            # A plain step (its run, when the last plain step's, known not to be a workflow).
            if type(step) is Step and (run is last_run or not is_workflow(run)):
                if run is not last_run:
                    last_run = run
                    last_async = is_async_callable(run)
                    last_code = code_of(run)
                if not last_async:
                    plain.append(position)
                step_info[step.name] = StepInfo(step.version, step.depends_on, None, last_code)
            else:
                self._other(position, step, kind_of(step))
            if step.encode is not None:
                self.encoded.append(position)
            if step.when is not None:
                self.conditions.append(position)

    def _other(self, position: int, step: Step, kind: str) -> None:
        """Sort a step that is not a plain step: a map, an ask or a sub-workflow."""
        if kind == "map":
            self.maps.append(position)
            if not is_workflow(step.run) and not is_async_callable(step.run):
                self.plain_items.append(position)
        elif kind == "ask":
            self.asks.append(position)
        elif isinstance(step, WaitStep):
            self.waits.append(position)
        if is_workflow(step.run):
            self.workflows.append(position)
        self.step_info[step.name] = _info(step)
