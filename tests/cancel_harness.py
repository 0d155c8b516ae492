"""Randomized cancellation trials: cancel a run at a seeded moment, resume, check the promises.

One trial builds a random DAG of small steps, starts ``Workflow.run`` in a task,
lets the event loop turn a seeded number of times, cancels the task, and then
resumes from the last checkpoint that ``checkpoint_fn`` received (through a JSON
round trip). The knobs are drawn from the seed: schedule, ``checkpoint_every``,
sync or async ``checkpoint_fn``, steps saving progress (awaited or not), plain
steps in worker threads (the default), inline on the loop or in a thread pool,
the stop's grace (5 s, or 0: plain steps still running are abandoned), failing
steps and ``on_error``.

After each trial it checks what the docs promise:

- ``run()`` ended within a bound (no hang), leaving no task of its own behind;
- no ``checkpoint_fn`` call happened after ``run()`` ended, and no step body
  completed after it but an abandoned one, listed in the last checkpoint's
  ``in_flight``;
- every step whose body completed in the first run is in its last checkpoint
  (nothing paid for is lost), unless it failed or was abandoned (listed in
  flight: a resume books it as unknown and runs it again);
- across the resume, no recorded step runs again, and the resumed run ends
  with every step's expected output.

`tests/run/test_cancel_harness.py` runs a fixed seed set in CI;
`benchmarks/cancel_soak.py` runs many more.
"""

from __future__ import annotations

import asyncio
import json
import random
import threading
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from executionkit import Step, Workflow, WorkflowCheckpoint, WorkflowFailed, current_step

if TYPE_CHECKING:
    from collections.abc import Mapping

# How long a run may take to end once cancelled; generous, since a broken run hangs forever.
BOUND = 10.0


@dataclass
class Knobs:
    """What one trial varies, all drawn from its seed."""

    schedule: str
    checkpoint_every: str
    async_save: bool
    progress: bool
    executor: bool
    inline: bool
    grace: float
    on_error: str
    failing: frozenset[str]
    turns: int

    def __str__(self) -> str:
        """Name the knobs, for failure messages."""
        return (
            f"schedule={self.schedule} every={self.checkpoint_every} "
            f"async_save={self.async_save} progress={self.progress} executor={self.executor} "
            f"inline={self.inline} grace={self.grace} "
            f"on_error={self.on_error} failing={sorted(self.failing)} turns={self.turns}"
        )


@dataclass
class Trial:
    """The book-keeping of one trial's steps and checkpoints."""

    ended: bool = False
    completed: Counter[str] = field(default_factory=Counter)
    started_after_end: list[str] = field(default_factory=list)
    saves_after_end: int = 0
    saved: list[dict[str, Any]] = field(default_factory=list)
    fail: bool = True
    running: int = 0  # plain step bodies running now (in threads, maybe abandoned)
    lock: threading.Lock = field(default_factory=threading.Lock)


def in_flight_names(trial: Trial) -> set[str]:
    """The steps the last checkpoint lists in flight."""
    if not trial.saved:
        return set()
    return {entry[0] for entry in trial.saved[-1].get("in_flight", [])}


def random_dag(rng: random.Random) -> list[tuple[str, tuple[str, ...]]]:
    """Between 3 and 9 steps, each depending on up to three earlier ones."""
    size = rng.randint(3, 9)
    names = [f"s{i}" for i in range(size)]
    return [
        (name, tuple(sorted(rng.sample(names[:i], min(i, rng.randint(0, 3))))))
        for i, name in enumerate(names)
    ]


def draw_knobs(rng: random.Random, names: list[str], schedule: str | None) -> Knobs:
    """The knobs of one trial."""
    return Knobs(
        schedule=schedule or rng.choice(["batch", "eager"]),
        checkpoint_every=rng.choice(["batch", "step"]),
        async_save=rng.random() < 0.5,
        progress=rng.random() < 0.5,
        executor=rng.random() < 0.25,
        inline=rng.random() < 0.3,
        grace=rng.choice([5.0, 0.0]),
        on_error=rng.choice(["finish", "cancel", "continue"]),
        failing=frozenset(name for name in names if rng.random() < 0.1),
        turns=rng.randint(0, 40),
    )


def build(
    dag: list[tuple[str, tuple[str, ...]]], knobs: Knobs, trial: Trial, rng: random.Random
) -> Workflow:
    """Steps that yield a seeded number of times, maybe save progress, maybe fail."""
    steps = []
    for name, deps in dag:
        yields = rng.randint(0, 3)
        if rng.random() < 0.4:
            run = plain_step(name, deps, trial, knobs)
            steps.append(Step(name, run, depends_on=deps, inline=knobs.inline))
            continue
        run = async_step(name, deps, yields, trial, knobs, sync_progress=rng.random() < 0.3)
        steps.append(Step(name, run, depends_on=deps))
    return Workflow(steps)


def expected_output(name: str, deps: tuple[str, ...], ctx: Mapping[str, Any]) -> str:
    """A step's output: its name and its dependencies' outputs, so a wrong ctx shows."""
    return f"{name}({','.join(f'{dep}={ctx[dep]}' for dep in deps)})"


def async_step(
    name: str,
    deps: tuple[str, ...],
    yields: int,
    trial: Trial,
    knobs: Knobs,
    *,
    sync_progress: bool,
) -> Any:
    async def run(ctx: Mapping[str, Any]) -> str:
        for turn in range(yields):
            await asyncio.sleep(0)
            if knobs.progress and turn == 0:
                future = current_step().save_progress({"turn": turn})
                if not sync_progress:
                    await future
        return step_body_ends(name, deps, ctx, trial, knobs)

    return run


def step_body_ends(
    name: str, deps: tuple[str, ...], ctx: Mapping[str, Any], trial: Trial, knobs: Knobs
) -> str:
    """The end of every step's body: fail if it should, note it completed, give its output."""
    if trial.fail and name in knobs.failing:
        msg = f"{name} failed"
        raise ValueError(msg)
    if trial.ended:
        trial.started_after_end.append(name)
    trial.completed[name] += 1
    return expected_output(name, deps, ctx)


def plain_step(name: str, deps: tuple[str, ...], trial: Trial, knobs: Knobs) -> Any:
    def run(ctx: Mapping[str, Any]) -> str:
        if knobs.progress and not knobs.executor:
            current_step().save_progress({"plain": True})  # a sync step never awaits it
        with trial.lock:
            trial.running += 1
        try:
            if not knobs.inline:
                time.sleep(0.0005)  # in a thread: long enough to be running at a cancel
            return step_body_ends(name, deps, ctx, trial, knobs)
        finally:
            with trial.lock:
                trial.running -= 1

    return run


def saver(trial: Trial, knobs: Knobs) -> Any:
    def save(checkpoint: WorkflowCheckpoint) -> None:
        if trial.ended:
            trial.saves_after_end += 1
        trial.saved.append(json.loads(json.dumps(checkpoint.to_dict())))

    async def save_async(checkpoint: WorkflowCheckpoint) -> None:
        await asyncio.sleep(0)
        save(checkpoint)
        await asyncio.sleep(0)

    return save_async if knobs.async_save else save


async def run_trial(seed: int, schedule: str | None = None) -> list[str]:
    """Run one trial; return the broken promises (empty when all held)."""
    rng = random.Random(seed)
    dag = random_dag(rng)
    knobs = draw_knobs(rng, [name for name, _ in dag], schedule)
    trial = Trial()
    workflow = build(dag, knobs, trial, rng)
    problems: list[str] = []
    executor = ThreadPoolExecutor(max_workers=2) if knobs.executor else None
    before = asyncio.all_tasks()
    try:
        task = asyncio.create_task(
            workflow.run(
                checkpoint_fn=saver(trial, knobs),
                schedule=knobs.schedule,  # type: ignore[arg-type]
                checkpoint_every=knobs.checkpoint_every,  # type: ignore[arg-type]
                on_error=knobs.on_error,  # type: ignore[arg-type]
                executor=executor,
                stop_grace=knobs.grace,
            )
        )
        for _ in range(knobs.turns):
            await asyncio.sleep(0)
        task.cancel()
        done, _ = await asyncio.wait({task}, timeout=BOUND)
        if not done:
            return [f"seed {seed} ({knobs}): run() did not end within {BOUND} s of cancel()"]
        trial.ended = True
        error = None if task.cancelled() else task.exception()
        if error is not None and not isinstance(error, WorkflowFailed):
            problems.append(f"run() raised {type(error).__name__}: {error}")
        # Let anything that wrongly outlived run() show itself.
        for _ in range(10):
            await asyncio.sleep(0)
        left = {t for t in asyncio.all_tasks() - before if not t.done()}
        if left:
            problems.append(f"tasks left running after run(): {left}")
        # Abandoned threads may still complete; wait for them, then check they were listed.
        for _ in range(200):
            if not trial.running:
                break
            await asyncio.sleep(0.005)
        listed = in_flight_names(trial)
        late = [name for name in trial.started_after_end if name not in listed]
        if late:
            problems.append(f"steps completed after run() ended, not listed in flight: {late}")
        if trial.saves_after_end:
            problems.append(f"checkpoint_fn called {trial.saves_after_end} time(s) after run()")
        problems += await resume_and_check(workflow, trial, knobs, executor)
    finally:
        if executor is not None:
            executor.shutdown(wait=True)
    return [f"seed {seed} ({knobs}): {problem}" for problem in problems]


async def resume_and_check(
    workflow: Workflow, trial: Trial, knobs: Knobs, executor: ThreadPoolExecutor | None
) -> list[str]:
    """Resume from the last checkpoint and check that nothing recorded runs again."""
    problems: list[str] = []
    last = WorkflowCheckpoint.from_dict(trial.saved[-1]) if trial.saved else None
    recorded = set(last.outputs) if last is not None else set()
    abandoned = in_flight_names(trial)
    lost = [
        name
        for name in trial.completed
        if name not in recorded
        and name not in abandoned
        and not (last is not None and name in last.errors)
    ]
    if lost:
        problems.append(f"completed but missing from the last checkpoint: {sorted(lost)}")
    first_run = Counter(trial.completed)
    trial.completed.clear()
    trial.ended = False
    trial.fail = False
    async with asyncio.timeout(BOUND):
        result = await workflow.run(
            resume_from=last,
            checkpoint_fn=saver(trial, knobs),
            schedule=knobs.schedule,  # type: ignore[arg-type]
            checkpoint_every=knobs.checkpoint_every,  # type: ignore[arg-type]
            executor=executor,
        )
    again = sorted(recorded & set(trial.completed))
    if again:
        problems.append(f"recorded steps ran again on resume: {again}")
    twice = sorted(name for name, count in (first_run + trial.completed).items() if count > 1)
    if twice and not set(twice) <= set(lost) | abandoned:
        problems.append(f"steps ran twice although recorded once: {twice}")
    for step in workflow.steps:
        expected = expected_output(step.name, step.depends_on, result.outputs)
        if result.outputs[step.name] != expected:
            problems.append(f"wrong output for {step.name!r}: {result.outputs[step.name]!r}")
    return problems
