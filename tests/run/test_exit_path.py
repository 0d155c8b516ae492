"""Every way out of a run stops and awaits its steps, records them, then checkpoints.

Pins the breaks an adversarial review found in the paths tested least: eager mode
returning while steps still ran (cancelled during an async ``checkpoint_fn``, a
sync ``checkpoint_fn`` raising, a plain step raising `KeyboardInterrupt`), runs
hanging on the checkpoint turn after a progress save, and that the run loop has a
single exit, checked on its source. Ordering is pinned with events; hangs are
bounded with `asyncio.wait` (which does not cancel) so that a broken run fails
the test instead of hanging it.
"""

from __future__ import annotations

import ast
import asyncio
import inspect
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from executionkit import Step, Workflow, WorkflowCheckpoint, current_step
from executionkit._run import _map, _runner, _running

if TYPE_CHECKING:
    from collections.abc import Coroutine, Mapping
    from types import ModuleType

BOUND = 5.0


async def ended_within_bound(
    run: Coroutine[Any, Any, Any] | asyncio.Future[Any],
) -> asyncio.Future[Any]:
    """Await ``run`` (in a task); fail if it has not ended within the bound."""
    task = asyncio.ensure_future(run)
    done, _ = await asyncio.wait({task}, timeout=BOUND)
    assert done, "run() did not end"
    return task


class Slow:
    """A step that runs until cancelled, logging its start and its cancellation."""

    def __init__(self, log: list[str], name: str = "slow") -> None:
        self.log = log
        self.name = name
        self.started = asyncio.Event()

    def step(self) -> Step:
        async def run(ctx: Mapping[str, Any]) -> str:
            self.started.set()
            try:
                await asyncio.Event().wait()
            except asyncio.CancelledError:
                await asyncio.sleep(0)  # cleanup that takes a turn: run() must wait for it
                self.log.append(f"{self.name} cancelled")
                raise
            return self.name  # pragma: no cover - never released

        return Step(self.name, run)


async def test_eager_run_cancelled_during_an_async_checkpoint_stops_its_running_steps() -> None:
    """The step still running is cancelled and awaited before run() raises CancelledError."""
    log: list[str] = []
    slow = Slow(log)
    entered = asyncio.Event()
    release = asyncio.Event()
    saved: list[list[str]] = []

    async def save(checkpoint: WorkflowCheckpoint) -> None:
        entered.set()
        await release.wait()
        saved.append(sorted(checkpoint.outputs))
        log.append(f"saved {sorted(checkpoint.outputs)}")

    async def fast(ctx: Mapping[str, Any]) -> str:
        await slow.started.wait()
        return "fast"

    workflow = Workflow([slow.step(), Step("fast", fast)])
    task = asyncio.create_task(workflow.run(checkpoint_fn=save, schedule="eager"))
    await entered.wait()  # fast landed; its checkpoint is being written
    task.cancel()
    release.set()
    ended = await ended_within_bound(task)
    assert ended.cancelled()
    assert log == ["saved ['fast']", "slow cancelled"]
    for _ in range(5):
        await asyncio.sleep(0)
    assert log == ["saved ['fast']", "slow cancelled"]  # nothing after run() ended


@pytest.mark.parametrize("schedule", ["batch", "eager"])
async def test_a_raising_sync_checkpoint_fn_stops_and_awaits_the_running_steps(
    schedule: str,
) -> None:
    """run() raises the storage error only once the step still running was awaited."""
    log: list[str] = []
    slow = Slow(log)
    calls: list[str] = []

    def save(checkpoint: WorkflowCheckpoint) -> None:
        calls.append("save")
        msg = "disk full"
        raise OSError(msg)

    async def fast(ctx: Mapping[str, Any]) -> str:
        await slow.started.wait()
        return "fast"

    def progress_then_wait() -> Step:
        async def run(ctx: Mapping[str, Any]) -> str:
            await slow.started.wait()
            await current_step().save_progress({"half": True})  # raises the storage error
            return "never"  # pragma: no cover

        return Step("fast", run)

    second = Step("fast", fast) if schedule == "eager" else progress_then_wait()
    workflow = Workflow([slow.step(), second])
    task = await ended_within_bound(workflow.run(checkpoint_fn=save, schedule=schedule))  # type: ignore[arg-type]
    with pytest.raises(OSError, match="disk full"):
        task.result()
    assert log == ["slow cancelled"]
    assert calls == ["save"]


async def test_eager_plain_step_raising_keyboard_interrupt_awaits_the_running_steps() -> None:
    """KeyboardInterrupt propagates after the running step was cancelled and awaited."""
    log: list[str] = []
    slow = Slow(log)
    saved: list[list[str]] = []

    async def gate(ctx: Mapping[str, Any]) -> str:
        await slow.started.wait()
        return "gate"

    def interrupter(ctx: Mapping[str, Any]) -> str:
        log.append("interrupting")
        raise KeyboardInterrupt

    workflow = Workflow(
        [slow.step(), Step("gate", gate), Step("interrupter", interrupter, depends_on=("gate",))]
    )
    with pytest.raises(KeyboardInterrupt):
        await workflow.run(
            checkpoint_fn=lambda cp: saved.append(sorted(cp.outputs)), schedule="eager"
        )
    assert log == ["interrupting", "slow cancelled"]
    assert saved[-1] == ["gate"]
    for _ in range(5):
        await asyncio.sleep(0)
    assert log == ["interrupting", "slow cancelled"]


@pytest.mark.parametrize("schedule", ["batch", "eager"])
@pytest.mark.parametrize("awaited", [True, False])
async def test_cancelled_while_a_progress_checkpoint_is_written_the_run_ends(
    schedule: str, awaited: bool
) -> None:
    """The turn to call checkpoint_fn is never left to a waiter that was cancelled."""
    entered = asyncio.Event()
    release = asyncio.Event()
    saved: list[dict[str, Any]] = []

    async def save(checkpoint: WorkflowCheckpoint) -> None:
        entered.set()
        await release.wait()
        saved.append(dict(checkpoint.progress))

    async def saving(ctx: Mapping[str, Any]) -> str:
        future = current_step().save_progress({"page": 1})
        if awaited:
            await future
        await asyncio.Event().wait()
        return "never"  # pragma: no cover

    def plain_saving(ctx: Mapping[str, Any]) -> str:
        current_step().save_progress({"page": 2})  # a sync step cannot await it
        return "plain"

    workflow = Workflow([Step("saving", saving), Step("plain", plain_saving)])
    task = asyncio.create_task(workflow.run(checkpoint_fn=save, schedule=schedule))  # type: ignore[arg-type]
    await entered.wait()
    task.cancel()
    await asyncio.sleep(0)
    task.cancel()  # a second cancellation while the first is being handled
    release.set()
    ended = await ended_within_bound(task)
    assert ended.cancelled()
    assert saved[0] == {"saving": {"page": 1}, "plain": {"page": 2}} or saved[0] == {
        "saving": {"page": 1}
    }


@pytest.mark.parametrize("awaited", [True, False])
async def test_many_waiters_cancelled_while_waiting_for_the_turn_never_hold_it(
    awaited: bool,
) -> None:
    """Steps waiting to save progress are cancelled while a write runs; the run still ends."""
    entered = asyncio.Event()
    release = asyncio.Event()
    writes: list[int] = []

    async def save(checkpoint: WorkflowCheckpoint) -> None:
        entered.set()
        await release.wait()
        writes.append(checkpoint.seq)

    def saver(name: str) -> Step:
        async def run(ctx: Mapping[str, Any]) -> str:
            for page in range(3):
                future = current_step().save_progress({"page": page})
                if awaited:
                    await future
                await asyncio.sleep(0)
            await asyncio.Event().wait()
            return name  # pragma: no cover

        return Step(name, run)

    workflow = Workflow([saver(f"s{i}") for i in range(4)])
    task = asyncio.create_task(workflow.run(checkpoint_fn=save, schedule="eager"))
    await entered.wait()
    task.cancel()
    release.set()
    ended = await ended_within_bound(task)
    assert ended.cancelled()
    # Awaiting steps wait for the first write; the others saved more meanwhile.
    assert writes == ([1] if awaited else [1, 2])


# --- checkpoint_every ----------------------------------------------------------------------


@pytest.mark.parametrize("every", ["batch", "step"])
async def test_checkpoint_every_step_saves_finished_siblings_before_the_batch_ends(
    every: str,
) -> None:
    """With "step", each of a batch's finished steps is checkpointed while the rest still run."""
    gates = {f"call{i}": asyncio.Event() for i in range(8)}
    saved: list[list[str]] = []

    def call(name: str) -> Step:
        async def run(ctx: Mapping[str, Any]) -> str:
            await gates[name].wait()
            return name

        return Step(name, run)

    def after(ctx: Mapping[str, Any]) -> int:
        return len(ctx)

    steps = [call(name) for name in gates]
    workflow = Workflow([*steps, Step("after", after, depends_on=tuple(gates))])
    task = asyncio.create_task(
        workflow.run(
            checkpoint_fn=lambda cp: saved.append(sorted(cp.outputs)),
            checkpoint_every=every,  # type: ignore[arg-type]
        )
    )
    for name in ["call0", "call3", "call5", "call6"]:
        gates[name].set()
        for _ in range(3):
            await asyncio.sleep(0)
    if every == "step":
        assert saved == [
            ["call0"],
            ["call0", "call3"],
            ["call0", "call3", "call5"],
            ["call0", "call3", "call5", "call6"],
        ]
    else:
        assert saved == []
    for gate in gates.values():
        gate.set()
    result = await asyncio.wait_for(task, BOUND)
    assert result.outputs["after"] == 8
    assert saved[-1] == sorted([*gates, "after"])
    # The four released together landed in one turn of the loop: one checkpoint each time.
    assert len(saved) == (6 if every == "step" else 2)


async def test_checkpoint_every_step_keeps_batch_order() -> None:
    """The next batch still starts only after the whole batch was recorded."""
    order: list[str] = []
    gate = asyncio.Event()

    async def first(ctx: Mapping[str, Any]) -> str:
        order.append("first")
        return "first"

    async def held(ctx: Mapping[str, Any]) -> str:
        await gate.wait()
        order.append("held")
        return "held"

    async def second(ctx: Mapping[str, Any]) -> str:
        order.append("second")
        return "second"

    workflow = Workflow(
        [Step("first", first), Step("held", held), Step("second", second, depends_on=("first",))]
    )
    saved: list[list[str]] = []
    task = asyncio.create_task(
        workflow.run(
            checkpoint_fn=lambda cp: saved.append(sorted(cp.outputs)), checkpoint_every="step"
        )
    )
    for _ in range(5):
        await asyncio.sleep(0)
    assert order == ["first"]
    assert saved == [["first"]]
    gate.set()
    await asyncio.wait_for(task, BOUND)
    assert order == ["first", "held", "second"]


async def test_checkpoint_every_is_checked() -> None:
    """Anything but "batch" or "step" is refused before any step runs."""
    from executionkit import RunArgumentError  # noqa: PLC0415

    with pytest.raises(
        RunArgumentError, match=r"checkpoint_every must be one of 'batch', 'step', got 'each'"
    ):
        await Workflow([Step("a", lambda ctx: 1)]).run(checkpoint_every="each")  # type: ignore[arg-type]


# --- the one way out, on the source --------------------------------------------------------


Function = ast.FunctionDef | ast.AsyncFunctionDef


def module_tree(module: ModuleType) -> ast.Module:
    return ast.parse(Path(inspect.getfile(module)).read_text(encoding="utf-8"))


def methods_of(module: ModuleType, name: str) -> dict[str, Function]:
    """The methods of class ``name`` of ``module``, by name, from its source."""
    (cls,) = [
        node
        for node in module_tree(module).body
        if isinstance(node, ast.ClassDef) and node.name == name
    ]
    return {
        node.name: node
        for node in cls.body
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
    }


def run_methods() -> dict[str, Function]:
    return methods_of(_runner, "Run")


def raises_in(node: ast.AST) -> list[ast.Raise]:
    return [inner for inner in ast.walk(node) if isinstance(inner, ast.Raise)]


def test_only_the_exit_raises_and_execute_always_reaches_it() -> None:
    """No method of Run but _exit raises; execute catches everything and returns _exit's value."""
    methods = run_methods()
    raising = sorted(
        name
        for name, node in methods.items()
        if any(isinstance(inner, ast.Raise) for inner in ast.walk(node))
    )
    assert raising == ["_exit"]
    execute = methods["execute"]
    handlers = [
        handler
        for node in ast.walk(execute)
        if isinstance(node, ast.Try)
        for handler in node.handlers
    ]
    assert [ast.unparse(h.type) for h in handlers if h.type is not None] == ["BaseException"]
    last = execute.body[-1]
    assert isinstance(last, ast.Return)
    assert ast.unparse(last) == "return await self._exit(began)"


def test_running_never_raises() -> None:
    """No method of Running (which starts, cancels and awaits the steps) has a raise statement."""
    raising = sorted(
        name for name, node in methods_of(_running, "Running").items() if raises_in(node)
    )
    assert raising == []


def test_the_map_driver_raises_only_a_cancellation_once_every_item_was_awaited() -> None:
    """_Driver re-raises a cancellation of its map only after awaiting every item's task.

    Its only raise statement is a bare ``raise`` ending ``run``'s ``except
    asyncio.CancelledError`` handler, after a loop that awaits until ``tasks``
    (the driver's item tasks) is empty, with no way out of that loop but its test.
    """
    methods = methods_of(_map, "_Driver")
    raising = sorted(name for name, node in methods.items() if raises_in(node))
    assert raising == ["run"]
    run = methods["run"]
    handlers = [
        handler
        for node in ast.walk(run)
        if isinstance(node, ast.Try)
        for handler in node.handlers
        if raises_in(handler)
    ]
    assert [ast.unparse(h.type) for h in handlers if h.type is not None] == [
        "asyncio.CancelledError"
    ]
    (handler,) = handlers
    assert raises_in(run) == raises_in(handler)
    (bare,) = raises_in(handler)
    assert bare.exc is None  # the cancellation itself, unchanged
    assert handler.body[-1] is bare
    waits = [node for node in handler.body if isinstance(node, ast.While)]
    assert [ast.unparse(node.test) for node in waits] == ["tasks"]
    (wait,) = waits
    assert handler.body.index(wait) < handler.body.index(bare)
    assert any(isinstance(node, ast.Await) for node in ast.walk(wait))
    assert not any(isinstance(node, (ast.Break, ast.Return)) for node in ast.walk(wait))
    assert not any(isinstance(node, ast.Return) for node in ast.walk(handler))
    assignments = [ast.unparse(node) for node in run.body if isinstance(node, ast.Assign)]
    assert "tasks = self.tasks" in assignments
    # What empties `tasks`: `_done`, called at the end of each item's own body (the
    # finally of `_one`), and, for an item cancelled before its body began, by the done
    # callback `_cancel` gives it.
    assert "del self.tasks[key]" in ast.unparse(methods["_done"])
    finals = [
        ast.unparse(stmt)
        for node in ast.walk(methods["_one"])
        if isinstance(node, ast.Try)
        for stmt in node.finalbody
    ]
    assert any("self._done(key)" in text for text in finals)
    assert "self._done_unstarted" in ast.unparse(methods["_cancel"])
    assert "self._done(key)" in ast.unparse(methods["_done_unstarted"])


def test_drive_raises_only_the_items_errors() -> None:
    """drive's only raise statement raises the ExceptionGroup _Driver.failed builds.

    (`_items` refusing a map's keys raises too, before any item starts.)
    """
    (drive,) = [
        node
        for node in module_tree(_map).body
        if isinstance(node, ast.AsyncFunctionDef) and node.name == "drive"
    ]
    assert [ast.unparse(node) for node in raises_in(drive)] == ["raise driver.failed(pairs)"]
    failed = methods_of(_map, "_Driver")["failed"]
    assert failed.returns is not None
    assert ast.unparse(failed.returns) == "ExceptionGroup[Exception]"
    assert [
        ast.unparse(node.value)
        for node in ast.walk(failed)
        if isinstance(node, ast.Return) and node.value
    ] == ["ExceptionGroup(msg, errors)"]
