"""``run(..., executor=...)``: plain-function steps in threads, processes and on a Dask cluster.

Async steps always stay on the event loop; checkpoints are always taken in the calling
process. Thread workers run steps in a copy of the run's context, so ``current_step()``
works there; process and cluster workers get the step function and a plain dict of its
``ctx``, so the steps they run are module-level functions defined here.
"""

from __future__ import annotations

import asyncio
import importlib
import multiprocessing
import os
import threading
from concurrent.futures import Executor, Future, ProcessPoolExecutor, ThreadPoolExecutor
from typing import TYPE_CHECKING, Any

import pytest

from executionkit import (
    PatternResult,
    RunArgumentError,
    Step,
    TokenUsage,
    Workflow,
    WorkflowCheckpoint,
    WorkflowFailed,
    current_step,
)

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator, Mapping

RUN = "executor-run"
# Bounds every cross-thread wait here: a regression fails the test instead of hanging it.
WAIT = 10.0


# --- module-level steps, for process and cluster workers ----------------------------------


def square(ctx: Mapping[str, Any]) -> dict[str, Any]:
    return {"value": ctx["n"] ** 2, "pid": os.getpid(), "ctx": type(ctx).__name__}


def add_one(ctx: Mapping[str, Any]) -> int:
    return int(ctx["square"]["value"]) + 1


def priced(ctx: Mapping[str, Any]) -> PatternResult[str]:
    return PatternResult("answer", cost=TokenUsage(7, 3, 1))


def step_name_or_error(ctx: Mapping[str, Any]) -> str:
    try:
        return current_step().name
    except RuntimeError as exc:
        return str(exc)


def saves_progress_or_error(ctx: Mapping[str, Any]) -> str:
    try:
        current_step().save_progress({"done": 1})
    except RuntimeError as exc:
        return str(exc)
    return "saved"


def spends_on_a_dask_worker(ctx: Mapping[str, Any]) -> str:
    step = current_step()
    step.add_usage(TokenUsage(11, 2, 1), model="cluster-model")
    if step.attempt == 1:
        msg = "the first attempt fails on the worker"
        raise ValueError(msg)
    return "ok"


def on_a_dask_worker(ctx: Mapping[str, Any]) -> dict[str, Any]:
    import distributed  # noqa: PLC0415 - only the cluster tests need it

    return {
        "worker": distributed.get_worker().address,
        "ctx": {key: ctx[key] for key in sorted(ctx)},
        "ctx_type": type(ctx).__name__,
    }


def fails_when_told(ctx: Mapping[str, Any]) -> str:
    if ctx["fail"]:
        msg = "the cluster step failed"
        raise ValueError(msg)
    import distributed  # noqa: PLC0415

    return f"fixed on {distributed.get_worker().address}"


# --- threads --------------------------------------------------------------------------------


class CountingPool(ThreadPoolExecutor):
    """A thread pool that counts what is submitted to it."""

    def __init__(self, max_workers: int) -> None:
        super().__init__(max_workers=max_workers)
        self.submitted = 0

    def submit(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Future[Any]:
        self.submitted += 1
        return super().submit(fn, *args, **kwargs)


@pytest.mark.parametrize("schedule", ["batch", "eager"])
async def test_plain_steps_run_concurrently_in_worker_threads(schedule: str) -> None:
    """Both steps wait at one barrier: run one after the other, they would break it."""
    loop_thread = threading.current_thread()
    barrier = threading.Barrier(2, timeout=WAIT)
    seen: dict[str, tuple[threading.Thread, str, int]] = {}

    def meet(ctx: Mapping[str, Any]) -> str:
        step = current_step()
        seen[step.name] = (threading.current_thread(), step.name, step.attempt)
        barrier.wait()
        return f"{step.name} met"

    with ThreadPoolExecutor(max_workers=2) as pool:
        result = await Workflow([Step("left", meet), Step("right", meet)]).run(
            run_id=RUN, executor=pool, schedule="eager" if schedule == "eager" else "batch"
        )
    assert dict(result.outputs) == {"left": "left met", "right": "right met"}
    left, right = seen["left"][0], seen["right"][0]
    assert loop_thread not in (left, right)
    assert left is not right
    assert [seen[name][1:] for name in ("left", "right")] == [("left", 1), ("right", 1)]


async def test_current_step_follows_each_attempt_into_the_thread() -> None:
    attempts: list[tuple[str, int, int, str]] = []

    def flaky(ctx: Mapping[str, Any]) -> str:
        step = current_step()
        attempts.append((step.name, step.attempt, step.max_attempts, step.idempotency_key))
        if step.attempt == 1:
            msg = "first attempt fails"
            raise ConnectionError(msg)
        return f"ok on attempt {step.attempt} in {threading.current_thread().name}"

    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="ek-worker") as pool:
        result = await Workflow([Step("flaky", flaky, retries=2, retry_delay=0)]).run(
            run_id=RUN, executor=pool
        )
    key = attempts[0][3]
    assert attempts == [("flaky", 1, 3, key), ("flaky", 2, 3, key)]
    assert result.outputs["flaky"] == "ok on attempt 2 in ek-worker_0"


async def test_current_step_is_not_left_behind_in_a_reused_worker_thread() -> None:
    def first(ctx: Mapping[str, Any]) -> str:
        return current_step().name

    with ThreadPoolExecutor(max_workers=1) as pool:
        result = await Workflow([Step("first", first)]).run(run_id=RUN, executor=pool)
        assert result.outputs["first"] == "first"
        # The same (only) worker thread, now running something that is not a step.
        outside = pool.submit(step_name_or_error, {}).result(timeout=WAIT)
    assert outside == (
        "executionkit.current_step() was called outside a running step; call it from "
        "inside a step's run function"
    )


async def test_saving_progress_from_an_executor_thread_is_recorded() -> None:
    """A plain step in a thread-pool executor saves progress as in a worker thread of ours."""

    def saves(ctx: Mapping[str, Any]) -> str:
        current_step().save_progress({"done": 1})
        msg = "stop, so the progress stays in the checkpoint"
        raise ValueError(msg)

    with ThreadPoolExecutor(max_workers=1) as pool, pytest.raises(WorkflowFailed) as caught:
        await Workflow([Step("saves", saves)]).run(
            run_id=RUN, executor=pool, checkpoint_fn=lambda checkpoint: None
        )
    assert dict(caught.value.checkpoint.progress) == {"saves": {"done": 1}}


async def test_async_steps_stay_on_the_event_loop() -> None:
    loop_thread = threading.current_thread()
    threads: dict[str, threading.Thread] = {}

    async def on_loop(ctx: Mapping[str, Any]) -> str:
        threads["on_loop"] = threading.current_thread()
        await asyncio.sleep(0)
        return "loop"

    def in_pool(ctx: Mapping[str, Any]) -> str:
        threads["in_pool"] = threading.current_thread()
        return "pool"

    with CountingPool(max_workers=2) as pool:
        await Workflow([Step("on_loop", on_loop), Step("in_pool", in_pool)]).run(
            run_id=RUN, executor=pool
        )
    assert pool.submitted == 1
    assert threads["on_loop"] is loop_thread
    assert threads["in_pool"] is not loop_thread


async def test_a_failing_step_in_a_thread_fails_the_run_and_keeps_the_rest() -> None:
    def bad(ctx: Mapping[str, Any]) -> str:
        msg = "bad input"
        raise ValueError(msg)

    def good(ctx: Mapping[str, Any]) -> str:
        return "good"

    checkpoints: list[WorkflowCheckpoint] = []
    with ThreadPoolExecutor(max_workers=2) as pool, pytest.raises(WorkflowFailed) as caught:
        await Workflow([Step("bad", bad), Step("good", good)]).run(
            run_id=RUN, executor=pool, checkpoint_fn=checkpoints.append
        )
    assert list(caught.value.errors) == ["bad"]
    assert str(caught.value.errors["bad"]) == "bad input"
    assert [(dict(cp.outputs), dict(cp.errors)) for cp in checkpoints] == [
        ({"good": "good"}, {"bad": "ValueError: bad input"})
    ]


class ThreadStep:
    """A plain step that blocks its worker thread until released, and says when it ends."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self.started = asyncio.Event()
        self.release = threading.Event()
        self.ended = threading.Event()

    def __call__(self, ctx: Mapping[str, Any]) -> str:
        self.loop.call_soon_threadsafe(self.started.set)
        try:
            self.release.wait(WAIT)
            return "late"
        finally:
            self.ended.set()


async def spin(iterations: int) -> None:
    """Let the event loop run ``iterations`` times (no wall-clock waiting)."""
    for _ in range(iterations):
        await asyncio.sleep(0)


@pytest.mark.parametrize("how", ["cancel the run", "on_error=cancel"])
async def test_run_does_not_return_while_a_thread_step_still_runs(how: str) -> None:
    """A thread cannot be interrupted, so stopping a run must wait for it.

    Otherwise the step goes on in the background after ``run()`` raised: its work (a paid
    call, a write) outlives the run and its output is lost.
    """
    blocked = ThreadStep(asyncio.get_running_loop())

    async def fails_once_blocked(ctx: Mapping[str, Any]) -> str:
        await blocked.started.wait()
        msg = "sibling failed"
        raise RuntimeError(msg)

    steps = [Step("blocked", blocked)]
    if how == "on_error=cancel":
        steps.append(Step("sibling", fails_once_blocked))
    with ThreadPoolExecutor(max_workers=1) as pool:
        run = asyncio.ensure_future(
            Workflow(steps).run(run_id=RUN, executor=pool, on_error="cancel")
        )
        try:
            await blocked.started.wait()
            if how == "cancel the run":
                run.cancel()
            await spin(100)  # far more than a run needs to wind down
            stopped_early = run.done()
        finally:
            blocked.release.set()
        expected = asyncio.CancelledError if how == "cancel the run" else WorkflowFailed
        with pytest.raises(expected):
            await run
        assert not stopped_early
        assert blocked.ended.is_set()


# --- processes ------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def process_pool() -> Iterator[ProcessPoolExecutor]:
    # "spawn" on every platform: forking a process that runs threads is unsafe (and
    # warned about from Python 3.12 on).
    context = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(max_workers=2, mp_context=context) as pool:
        yield pool


async def test_plain_steps_run_in_other_processes_with_ctx_as_a_plain_dict(
    process_pool: ProcessPoolExecutor,
) -> None:
    checkpoints: list[WorkflowCheckpoint] = []
    workflow = Workflow([Step("square", square), Step("add_one", add_one, ("square",))])
    result = await workflow.run(
        {"n": 7}, run_id=RUN, executor=process_pool, checkpoint_fn=checkpoints.append
    )
    assert result.outputs["square"]["value"] == 49
    assert result.outputs["square"]["ctx"] == "dict"
    assert result.outputs["square"]["pid"] != os.getpid()
    assert result.outputs["add_one"] == 50
    assert [dict(cp.outputs) for cp in checkpoints] == [
        {"square": result.outputs["square"]},
        {"square": result.outputs["square"], "add_one": 50},
    ]


async def test_a_step_in_another_process_can_report_token_usage(
    process_pool: ProcessPoolExecutor,
) -> None:
    """The result travels back pickled, so `PatternResult` must survive pickling."""
    result = await Workflow([Step("priced", priced)]).run(run_id=RUN, executor=process_pool)
    assert result.outputs["priced"] == "answer"
    assert result.cost == TokenUsage(7, 3, 1)


async def test_current_step_names_the_step_in_another_process(
    process_pool: ProcessPoolExecutor,
) -> None:
    """There it knows its name and attempt, and collects usage to send back (issue 21)."""
    result = await Workflow([Step("where", step_name_or_error)]).run(
        run_id=RUN, executor=process_pool
    )
    assert result.outputs["where"] == "where"


async def test_save_progress_in_another_process_says_what_to_use_instead(
    process_pool: ProcessPoolExecutor,
) -> None:
    result = await Workflow([Step("saves", saves_progress_or_error)]).run(
        run_id=RUN, executor=process_pool
    )
    assert result.outputs["saves"] == (
        "step 'saves': save_progress() is not available in a process or cluster executor; "
        "use a thread executor or an async step to save progress"
    )


# --- a Dask cluster -------------------------------------------------------------------------


@pytest.fixture(scope="module")
def dask_executor(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Executor]:
    """One in-process cluster for the module: a worker with two threads, no dashboard."""
    # Imported here so that process workers, which import this module, never load them;
    # untyped, so held as Any.
    dask: Any = importlib.import_module("dask")
    distributed: Any = importlib.import_module("distributed")
    scratch = str(tmp_path_factory.mktemp("dask"))  # instead of a folder in the system temp
    with (
        dask.config.set({"temporary-directory": scratch}),
        distributed.LocalCluster(
            n_workers=1, threads_per_worker=2, processes=False, dashboard_address=None
        ) as cluster,
        distributed.Client(cluster) as client,
    ):
        yield client.get_executor()


def test_steps_run_on_the_cluster_and_checkpoints_stay_here(dask_executor: Executor) -> None:
    import distributed  # noqa: PLC0415

    where: list[tuple[str, str]] = []

    def save(checkpoint: WorkflowCheckpoint) -> None:
        try:
            distributed.get_worker()
        except ValueError as exc:  # not on a worker: the calling process's own thread
            where.append((str(exc), threading.current_thread().name))
        checkpoints.append(checkpoint)

    checkpoints: list[WorkflowCheckpoint] = []
    workflow = Workflow(
        [Step("remote", on_a_dask_worker), Step("after", on_a_dask_worker, ("remote",))]
    )
    result = workflow.run_sync(
        {"topic": "tides"}, run_id=RUN, executor=dask_executor, checkpoint_fn=save
    )
    remote = result.outputs["remote"]
    assert remote["worker"].startswith("inproc://")
    assert remote["ctx"] == {"topic": "tides"}
    assert remote["ctx_type"] == "dict"
    assert result.outputs["after"]["ctx"] == {"remote": remote, "topic": "tides"}
    assert where == [("No worker found", threading.current_thread().name)] * 2
    assert [list(cp.outputs) for cp in checkpoints] == [["remote"], ["remote", "after"]]


def test_a_run_on_the_cluster_resumes_after_a_failure(dask_executor: Executor) -> None:
    workflow = Workflow(
        [Step("remote", on_a_dask_worker), Step("flaky", fails_when_told, ("remote",))]
    )
    checkpoints: list[WorkflowCheckpoint] = []
    with pytest.raises(WorkflowFailed) as caught:
        workflow.run_sync(
            {"fail": True}, run_id=RUN, executor=dask_executor, checkpoint_fn=checkpoints.append
        )
    assert str(caught.value.errors["flaky"]) == "the cluster step failed"
    saved = WorkflowCheckpoint.from_dict(checkpoints[-1].to_dict())
    assert list(saved.outputs) == ["remote"]
    assert dict(saved.errors) == {"flaky": "ValueError: the cluster step failed"}

    result = workflow.run_sync(
        {"fail": False},
        resume_from=saved,
        executor=dask_executor,
        checkpoint_fn=checkpoints.append,
    )
    assert result.restored == ("remote",)
    assert result.executed == ("flaky",)
    assert result.outputs["remote"] == saved.outputs["remote"]
    assert result.outputs["flaky"] == f"fixed on {saved.outputs['remote']['worker']}"
    assert list(checkpoints[-1].outputs) == ["remote", "flaky"]


async def test_an_executor_is_checked_before_anything_runs() -> None:
    ran: list[str] = []

    def step(ctx: Mapping[str, Any]) -> str:
        ran.append("step")
        return "x"

    not_an_executor: Any = object()
    with pytest.raises(RunArgumentError) as caught:
        await Workflow([Step("step", step)]).run(executor=not_an_executor)
    assert str(caught.value) == (
        "executor must be a concurrent.futures.Executor (something with submit()) or None, "
        "got object"
    )
    assert ran == []


def test_usage_on_a_dask_worker_comes_back_with_the_result_and_the_exception(
    dask_executor: Executor,
) -> None:
    """Issue 21: a failed attempt's usage travels back with its exception, too."""
    workflow = Workflow([Step("spend", spends_on_a_dask_worker, retries=1, retry_delay=0)])
    result = workflow.run_sync(run_id=RUN, executor=dask_executor)
    assert result.outputs["spend"] == "ok"
    assert [(r.attempt, r.outcome, r.model) for r in result.spending.entries] == [
        (1, "failed", "cluster-model"),
        (2, "ok", "cluster-model"),
    ]
    assert result.cost == TokenUsage(22, 4, 2)
