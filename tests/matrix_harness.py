"""The generated matrix: seeded cases that attack the run options, the stores and faults together.

One case, drawn from a seed by `draw_case`, is a workflow of 2 to 8 steps that
mixes async steps, plain steps (in worker threads, or ``inline=True``), maps
over an earlier list with async or plain items, a sub-workflow step and a map
of sub-workflows (2 to 3 child steps, some asking a question), ask steps,
``when=`` conditions, steps with ``retries=`` whose first attempt fails (decided
by ``current_step().attempt``, so every run of the chain behaves the same), a
generous ``timeout=`` that must not fire, and usage reported both through
``current_step().add_usage`` (several model names) and ``PatternResult.cost``.
It also draws the run options (``schedule``, ``checkpoint_every``, an executor,
``max_concurrency``, a budget reached or not, ``on_error``, ``stop_grace``), a
store (a list, a JSON file, a JSON Lines file, SQLite with or without history,
PostgreSQL when a database is given) and one fault: none, the store failing at
save N or at every save from N, a cancel of the run's task at event N or after
K loop turns, a step raising for good, or (PostgreSQL) a lost claim.

`run_case` runs an uninterrupted reference run, then the faulted run, then
resumes from what the store really holds until the workflow is done (answering
questions, the broken step mended, no budget), each run in an event loop of its
own in a daemon thread so that a hang fails instead of hanging the caller. It
returns the broken promises, each message starting with the seed and the case:

1. the run ends, returning or raising an allowed error, within `BOUND` seconds
   (the seconds from ``task.cancel()`` to the end are reported);
2. no task of the run is left once it ended, and ``checkpoint_fn`` is never
   called after it;
3. every checkpoint handed over reads back through JSON, equal to itself;
4. a resume runs nothing its checkpoint records (outputs, items, children's
   checkpoints, recursively), invalidates nothing, and ends with the reference
   run's outputs and ``spending.spent``;
5. the bill: across the chain, the ledger's known tokens are at most what the
   attempts reported, and the attempts whose report is missing from it are at
   most ``spending.unknown`` (no timeout fires);
6. the steps and items a run announced as finished are in the last checkpoint
   it handed over, when its last save succeeded; ``WorkflowFailed`` and
   ``BudgetExceeded`` carry that checkpoint.

`tests/run/test_matrix.py` runs a small seeded profile; ``benchmarks/matrix_soak.py``
runs thousands of seeds.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import math
import random
import tempfile
import threading
import time
import zlib
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from executionkit import (
    BudgetExceeded,
    ClaimLostError,
    PatternResult,
    Spending,
    Step,
    TokenUsage,
    Workflow,
    WorkflowCheckpoint,
    WorkflowFailed,
    WorkflowResult,
    current_step,
)
from executionkit.events import Event, ItemFinished, StepFinished, StepSkipped
from executionkit.stores import JsonFileStore, JsonLinesStore, SQLiteStore

if TYPE_CHECKING:
    from executionkit import StepContext

BOUND = 10.0  # seconds a run may take to end (once cancelled, or at all): past it, a hang
CASE_BOUND = 60.0  # seconds a whole case (reference, faulted run, resumes) may take
MAX_RESUMES = 12  # resumes answering questions before the chain is called endless
MODELS = ("large-model", "small-model", "tiny-model")
STORES = ("list", "json", "jsonl", "sqlite")
FAULTS = ("none", "store_once", "store_after", "cancel_event", "cancel_turns", "step_fails")
BODY_KINDS = ("async", "plain", "inline")
MAP_KINDS = ("map_async", "map_plain")
LISTY = (*BODY_KINDS, *MAP_KINDS)  # kinds whose output is a list a map can go over
KINDS = (*LISTY, "sub", "msub", "ask")
WEIGHTS = (4, 3, 2, 2, 2, 1, 1, 1)


class StoreFaultError(OSError):
    """The error the matrix's failing store raises (a disk gone full)."""


@dataclass(frozen=True)
class ChildPlan:
    """One step of a sub-workflow: ``c0``, ``c1``, ... each after the one before."""

    name: str
    kind: str  # async, plain, inline or ask
    flaky: bool  # its first attempt fails (it has a retry)
    pattern: bool  # reports part of its usage as PatternResult.cost
    yields: int


@dataclass(frozen=True)
class StepPlan:
    """One step of the case's workflow."""

    name: str
    kind: str
    deps: tuple[str, ...]
    over: str | None  # for a map: the step whose list it goes over
    when: bool  # has a condition (decided from its dependencies' outputs)
    retries: int
    flaky: bool  # the first attempt (of each even item, in a map) fails
    timeout: bool  # a generous timeout, which must never fire
    pattern: bool
    yields: int
    child: tuple[ChildPlan, ...] = ()


@dataclass(frozen=True)
class Case:
    """Everything one seed draws: the workflow, the run options, the store and the fault."""

    seed: int
    steps: tuple[StepPlan, ...]
    schedule: str
    every: str
    executor: bool
    max_concurrency: int | None
    budget: float | None  # fraction of the reference run's llm_calls, or no budget
    on_error: str
    stop_grace: float
    store: str
    history: bool  # SQL stores: keep every checkpoint
    fault: str
    at: int  # the save or event the fault lands on, or the loop turns before a cancel
    broken: tuple[str, str | None] | None  # the unit that raises for good (step_fails)

    @property
    def run_id(self) -> str:
        """The run's id: one per seed, so PostgreSQL cases share a database."""
        return f"m{self.seed}"

    def __str__(self) -> str:
        """One line: enough to see what the case is and rebuild it from its seed."""
        steps = " ".join(
            f"{s.name}:{s.kind}"
            + (f"<{s.over}" if s.over else "")
            + (f"({','.join(s.deps)})" if s.deps else "")
            + ("?" if s.when else "")
            + ("!" if s.flaky else "")
            + ("T" if s.timeout else "")
            + (
                f"[{'.'.join(c.kind + ('!' if c.flaky else '') for c in s.child)}]"
                if s.child
                else ""
            )
            for s in self.steps
        )
        broken = "" if self.broken is None else f" broken={self.broken[0]}:{self.broken[1]}"
        return (
            f"store={self.store}{'+history' if self.history else ''} fault={self.fault}@{self.at}"
            f"{broken} schedule={self.schedule} every={self.every} executor={self.executor} "
            f"max_concurrency={self.max_concurrency} budget={self.budget} "
            f"on_error={self.on_error} grace={self.stop_grace} steps=[{steps}]"
        )


def draw_case(seed: int, *, store: str | None = None, fault: str | None = None) -> Case:
    """The case of ``seed``; ``store`` and ``fault`` override what the seed draws."""
    rng = random.Random(seed)
    plans: list[StepPlan] = []
    for position in range(rng.randint(2, 8)):
        name = f"s{position}"
        earlier = [plan.name for plan in plans]
        listy = [plan.name for plan in plans if plan.kind in LISTY]
        kind = rng.choices(KINDS, WEIGHTS)[0]
        if kind in (*MAP_KINDS, "msub") and not listy:
            kind = "async"
        deps = tuple(sorted(rng.sample(earlier, min(len(earlier), rng.randint(0, 2)))))
        over = rng.choice(listy) if kind in (*MAP_KINDS, "msub") else None
        retried = kind not in ("ask", "sub", "msub") and rng.random() < 0.25
        child: tuple[ChildPlan, ...] = ()
        if kind in ("sub", "msub"):
            size = rng.randint(2, 3)
            child = tuple(
                ChildPlan(
                    f"c{index}",
                    "ask" if index == size - 1 and rng.random() < 0.25 else rng.choice(BODY_KINDS),
                    flaky=rng.random() < 0.2,
                    pattern=rng.random() < 0.5,
                    yields=rng.randint(0, 2),
                )
                for index in range(size)
            )
        plans.append(
            StepPlan(
                name=name,
                kind=kind,
                deps=deps,
                over=over,
                when=kind != "ask" and rng.random() < 0.2,
                retries=rng.randint(1, 2) if retried else 0,
                flaky=retried,
                timeout=kind in ("async", "map_async") and rng.random() < 0.3,
                pattern=rng.random() < 0.5,
                yields=rng.randint(0, 3),
                child=child,
            )
        )
    drawn_store = rng.choice(STORES)
    drawn_fault = rng.choice(FAULTS)
    if store == "postgres" and fault is None and rng.random() < 0.3:
        drawn_fault = "claim_lost"
    case = Case(
        seed=seed,
        steps=tuple(plans),
        schedule=rng.choice(["batch", "eager"]),
        every=rng.choice(["batch", "step"]),
        executor=rng.random() < 0.25,
        max_concurrency=rng.choice([None, None, 1, 2, 3]),
        budget=rng.choice([None, None, None, 0.3, 0.7, 2.0]),
        on_error=rng.choice(["finish", "cancel", "continue"]),
        stop_grace=rng.choice([5.0, 0.0]),
        store=store or drawn_store,
        history=rng.random() < 0.5,
        fault=fault or drawn_fault,
        at=rng.randint(1, 6),
        broken=None,
    )
    fault_now = case.fault
    at = case.at
    if fault_now == "cancel_event":
        at = rng.randint(1, 40)
    elif fault_now == "cancel_turns":
        at = rng.randint(0, 60)
    elif fault_now == "claim_lost":
        at = rng.randint(1, 30)
    broken = _broken_unit(rng, plans) if fault_now == "step_fails" else None
    return dataclasses.replace(case, at=at, broken=broken)


def _broken_unit(rng: random.Random, plans: list[StepPlan]) -> tuple[str, str | None]:
    """A unit with a body to break: a step, a map's first item, a child's first step."""
    units: list[tuple[str, str | None]] = []
    for plan in plans:
        if plan.kind in BODY_KINDS:
            units.append((plan.name, None))
        elif plan.kind in MAP_KINDS:
            units.append((plan.name, "0"))
        elif plan.kind == "sub" and plan.child[0].kind != "ask":
            units.append((f"{plan.name}/c0", None))
        elif plan.kind == "msub" and plan.child[0].kind != "ask":
            units.append((f"{plan.name}/0/c0", None))
    return rng.choice(units)


# --- the steps: every body counts its attempt and reports its usage first -----------------


def _crc(text: str) -> int:
    return zlib.crc32(text.encode())


def usage_of(path: str, key: str | None) -> TokenUsage:
    """What one attempt of a unit reports with add_usage: the same on every attempt."""
    number = _crc(f"{path}[{key}]")
    return TokenUsage(10 + number % 50, 1 + number % 7, 1)


def model_of(path: str) -> str:
    """The model a unit names with add_usage (several per workflow)."""
    return MODELS[_crc(path) % len(MODELS)]


PATTERN_COST = TokenUsage(3, 2, 1)


def _digest(values: list[Any]) -> str:
    """A short fingerprint of what a step read, so a wrong ctx changes its output."""
    return format(_crc(json.dumps(values, sort_keys=True)) % 4096, "x")


@dataclass
class Book:
    """What the steps of one chain of runs did, counted in their bodies (any thread)."""

    root: str
    lock: threading.Lock = field(default_factory=threading.Lock)
    calls: Counter[tuple[int, str, str | None]] = field(default_factory=Counter)
    # (phase, step path, item key, attempt number) -> bodies started; phase -> usage reported
    attempts: Counter[tuple[int, str, str | None, int]] = field(default_factory=Counter)
    reported: dict[int, TokenUsage] = field(default_factory=dict)
    running: int = 0
    idle: threading.Condition = field(default_factory=threading.Condition)
    broken: tuple[str, str | None] | None = None  # raises for good while set

    def path_of(self, step: StepContext) -> str:
        """The step's path: a sub-workflow's run id is its parent's plus ``/step[/key]``."""
        if step.run_id == self.root:
            return step.name
        return f"{step.run_id[len(self.root) + 1 :]}/{step.name}"

    def begin(self, ctx: Mapping[str, Any]) -> tuple[StepContext, str, str | None]:
        """An attempt's body starts: count it and report its usage."""
        step = current_step()
        path = self.path_of(step)
        key = step.item_key
        usage = usage_of(path, key)
        phase = ctx["phase"]
        with self.lock:
            self.calls[phase, path, key] += 1
            self.attempts[phase, path, key, step.attempt] += 1
            self.reported[phase] = self.reported.get(phase, TokenUsage()) + usage
        with self.idle:
            self.running += 1
        step.add_usage(usage, model=model_of(path))
        return step, path, key

    def end(self) -> None:
        """An attempt's body is over, however it ended."""
        with self.idle:
            self.running -= 1
            self.idle.notify_all()

    def fails(self, step: StepContext, path: str, key: str | None, *, flaky: bool) -> bool:
        """Whether this attempt raises: a flaky unit's first attempt, a broken unit's every one."""
        if flaky and step.attempt == 1 and (key is None or int(key) % 2 == 0):
            return True
        broken = self.broken
        return broken is not None and broken[0] == path and broken[1] in (None, key)

    def answer(
        self, step: StepContext, path: str, key: str | None, value: Any, phase: int, **how: bool
    ) -> Any:
        """The attempt's ending: `AttemptError` when it fails (``how["flaky"]``), else `result`."""
        if self.fails(step, path, key, flaky=how["flaky"]):
            where = path if key is None else f"{path}[{key}]"
            msg = f"{where} attempt {step.attempt} failed"
            raise AttemptError(msg)
        return self.result(value, phase, pattern=how["pattern"])

    def result(self, value: Any, phase: int, *, pattern: bool) -> Any:
        """The body's return: the value, or a PatternResult reporting part of the usage."""
        if not pattern:
            return value
        with self.lock:
            self.reported[phase] = self.reported.get(phase, TokenUsage()) + PATTERN_COST
        return PatternResult(value, cost=PATTERN_COST)


def _output(path: str, key: str | None, read: list[Any]) -> list[str]:
    """A list of one to three strings, from the unit's path and what it read."""
    size = 1 + _crc(path) % 3
    digest = _digest(read)
    return [f"{path}{'' if key is None else f'[{key}]'}.{index}.{digest}" for index in range(size)]


def _read(ctx: Mapping[str, Any], deps: tuple[str, ...], item: Any = None) -> list[Any]:
    return [ctx[dep] for dep in deps if dep in ctx] + [item, ctx.get("item")]


class AttemptError(RuntimeError):
    """What a failing attempt raises."""


def async_body(
    book: Book, deps: tuple[str, ...], yields: int, *, flaky: bool, pattern: bool
) -> Any:
    async def run(ctx: Mapping[str, Any]) -> Any:
        step, path, key = book.begin(ctx)
        try:
            for _ in range(yields):
                await asyncio.sleep(0)
            value = _output(path, key, _read(ctx, deps))
            return book.answer(step, path, key, value, ctx["phase"], flaky=flaky, pattern=pattern)
        finally:
            book.end()

    return run


def plain_body(
    book: Book, deps: tuple[str, ...], *, inline: bool, flaky: bool, pattern: bool
) -> Any:
    def run(ctx: Mapping[str, Any]) -> Any:
        step, path, key = book.begin(ctx)
        try:
            if not inline:
                time.sleep(0.0005)  # work in a thread: long enough to be running at a cancel
            value = _output(path, key, _read(ctx, deps))
            return book.answer(step, path, key, value, ctx["phase"], flaky=flaky, pattern=pattern)
        finally:
            book.end()

    return run


def async_item(book: Book, yields: int, *, flaky: bool, pattern: bool) -> Any:
    async def run(item: Any, ctx: Mapping[str, Any]) -> Any:
        step, path, key = book.begin(ctx)
        try:
            for _ in range(yields):
                await asyncio.sleep(0)
            value = f"{path}[{key}]={item}"
            return book.answer(step, path, key, value, ctx["phase"], flaky=flaky, pattern=pattern)
        finally:
            book.end()

    return run


def plain_item(book: Book, *, inline: bool, flaky: bool, pattern: bool) -> Any:
    def run(item: Any, ctx: Mapping[str, Any]) -> Any:
        step, path, key = book.begin(ctx)
        try:
            if not inline:
                time.sleep(0.0005)
            value = f"{path}[{key}]={item}"
            return book.answer(step, path, key, value, ctx["phase"], flaky=flaky, pattern=pattern)
        finally:
            book.end()

    return run


def _condition(seed: int, deps: tuple[str, ...]) -> Callable[[Mapping[str, Any]], bool]:
    def when(ctx: Mapping[str, Any]) -> bool:
        return (_crc(json.dumps(_read(ctx, deps))) + seed) % 3 != 0

    return when


def _question(name: str) -> Callable[[Mapping[str, Any]], str]:
    return lambda ctx: f"{name}?"


def child_workflow(book: Book, plans: tuple[ChildPlan, ...]) -> Workflow:
    """A chain of 2 or 3 child steps."""
    steps: list[Step] = []
    for index, plan in enumerate(plans):
        deps = (plans[index - 1].name,) if index else ()
        retries = {"retries": 1, "retry_delay": 0} if plan.flaky else {}
        if plan.kind == "ask":
            steps.append(Step.ask(plan.name, _question(plan.name), depends_on=deps))
        elif plan.kind == "async":
            body = async_body(book, deps, plan.yields, flaky=plan.flaky, pattern=plan.pattern)
            steps.append(Step(plan.name, body, depends_on=deps, **retries))  # type: ignore[arg-type]
        else:
            inline = plan.kind == "inline"
            body = plain_body(book, deps, inline=inline, flaky=plan.flaky, pattern=plan.pattern)
            steps.append(Step(plan.name, body, depends_on=deps, inline=inline, **retries))  # type: ignore[arg-type]
    return Workflow(steps)


def build(case: Case, book: Book) -> Workflow:
    """The case's workflow, its bodies counting into ``book``."""
    steps: list[Step] = []
    for plan in case.steps:
        options: dict[str, Any] = {}
        if plan.retries:
            options.update(retries=plan.retries, retry_delay=0)
        if plan.timeout:
            options["timeout"] = 30.0
        if plan.when:
            options["when"] = _condition(case.seed, plan.deps)
        kind = plan.kind
        if kind == "ask":
            steps.append(Step.ask(plan.name, _question(plan.name), depends_on=plan.deps))
        elif kind == "async":
            body = async_body(book, plan.deps, plan.yields, flaky=plan.flaky, pattern=plan.pattern)
            steps.append(Step(plan.name, body, depends_on=plan.deps, **options))
        elif kind in ("plain", "inline"):
            inline = kind == "inline"
            body = plain_body(
                book, plan.deps, inline=inline, flaky=plan.flaky, pattern=plan.pattern
            )
            steps.append(Step(plan.name, body, depends_on=plan.deps, inline=inline, **options))
        elif kind == "map_async":
            item = async_item(book, plan.yields, flaky=plan.flaky, pattern=plan.pattern)
            assert plan.over is not None
            steps.append(
                Step.map(plan.name, item, over=plan.over, depends_on=plan.deps, **options)
            )
        elif kind == "map_plain":
            inline = plan.yields == 0  # a quarter of the plain maps run their items inline
            item = plain_item(book, inline=inline, flaky=plan.flaky, pattern=plan.pattern)
            assert plan.over is not None
            steps.append(
                Step.map(
                    plan.name, item, over=plan.over, depends_on=plan.deps, inline=inline, **options
                )
            )
        elif kind == "sub":
            steps.append(
                Step(plan.name, child_workflow(book, plan.child), depends_on=plan.deps, **options)
            )
        else:
            assert plan.over is not None
            steps.append(
                Step.map(
                    plan.name,
                    child_workflow(book, plan.child),
                    over=plan.over,
                    depends_on=plan.deps,
                    **options,
                )
            )
    return Workflow(steps)


# --- the stores and their faults --------------------------------------------------------


@dataclass
class Saves:
    """What ``checkpoint_fn`` was handed in one run, and how each save went."""

    handed: list[WorkflowCheckpoint] = field(default_factory=list)
    last_ok: bool | None = None  # None: nothing handed yet
    ok: int = 0  # saves that succeeded
    after_end: int = 0
    ended: bool = False
    fail_at: int | None = None  # the save (1-based) that fails
    fail_on: bool = False  # and every save after it too


class Saver:
    """The ``checkpoint_fn`` of a list: appends, unless the fault says this save fails."""

    def __init__(self, target: list[WorkflowCheckpoint], saves: Saves) -> None:
        self.target = target
        self.saves = saves

    def __call__(self, checkpoint: WorkflowCheckpoint) -> None:
        saves = self.saves
        if saves.ended:
            saves.after_end += 1
        saves.handed.append(checkpoint)
        number = len(saves.handed)
        if saves.fail_at is not None and (
            number == saves.fail_at or (saves.fail_on and number > saves.fail_at)
        ):
            saves.last_ok = False
            msg = f"disk full (injected at save {number})"
            raise StoreFaultError(msg)
        try:
            self.save(checkpoint)
        except BaseException:
            saves.last_ok = False
            raise
        saves.last_ok = True
        saves.ok += 1

    def save(self, checkpoint: WorkflowCheckpoint) -> None:
        self.target.append(checkpoint)


class StoreSaver(Saver):
    """The same in front of a store of `executionkit.stores`: its claims pass through."""

    def __init__(self, store: Any, saves: Saves) -> None:
        super().__init__([], saves)
        self.store = store

    def save(self, checkpoint: WorkflowCheckpoint) -> None:
        self.store(checkpoint)

    def claim(self, run_id: str) -> Any:
        return self.store.claim(run_id)

    def __repr__(self) -> str:
        return f"StoreSaver({self.store!r})"


class Stores:
    """The case's store: opened once in a folder (or database) of its own."""

    def __init__(self, case: Case, folder: Path, pg_uri: str | None) -> None:
        self.case = case
        self.kind = case.store
        self.folder = folder
        self.pg_uri = pg_uri
        self.saved: list[WorkflowCheckpoint] = []
        self.store: Any = self.open()

    def open(self) -> Any:
        case = self.case
        if self.kind == "list":
            return None
        if self.kind == "json":
            return JsonFileStore(self.folder / "run.json")
        if self.kind == "jsonl":
            return JsonLinesStore(self.folder / "run.jsonl")
        if self.kind == "sqlite":
            synchronous = "NORMAL" if case.seed % 2 else "FULL"
            return SQLiteStore(
                self.folder / "runs.db", history=case.history, synchronous=synchronous
            )
        from executionkit.stores import PostgresStore  # noqa: PLC0415 - needs psycopg

        return PostgresStore(self.pg_uri, history=case.history)

    def reopen(self) -> None:
        """A store of its own for the resumes (as another process would open one)."""
        self.close()
        self.store = self.open()

    def saver(self, saves: Saves) -> Saver:
        if self.store is None:
            return Saver(self.saved, saves)
        return StoreSaver(self.store, saves)

    def load(self) -> WorkflowCheckpoint | None:
        """The last checkpoint the store really holds."""
        if self.store is None:
            return self.saved[-1] if self.saved else None
        if self.kind in ("json", "jsonl"):
            return self.store.load()  # type: ignore[no-any-return]
        return self.store.load(self.case.run_id)  # type: ignore[no-any-return]

    def close(self) -> None:
        close = getattr(self.store, "close", None)
        if close is not None:
            with contextlib.suppress(Exception):
                close()


# --- one run, watched -------------------------------------------------------------------


@dataclass
class Ending:
    """How one run ended and what it said on the way."""

    result: WorkflowResult | None = None
    error: BaseException | None = None
    cancelled_at: float | None = None
    ended_at: float | None = None
    hung: bool = False
    events: list[Event] = field(default_factory=list)
    left: int = 0  # tasks left running after it ended

    @property
    def name(self) -> str:
        if self.hung:
            return "hang"
        if self.error is None:
            assert self.result is not None
            return "suspended" if self.result.pending else "finished"
        return type(self.error).__name__


@dataclass
class Options:
    """The arguments of one run that the chain varies."""

    phase: int
    resume_from: WorkflowCheckpoint | None = None
    answers: Mapping[str, Any] | None = None
    budget: TokenUsage | None = None
    cancel_event: int | None = None
    cancel_turns: int | None = None
    on_event_extra: Callable[[int], None] | None = None  # called with each event's number


async def watch_run(
    case: Case,
    workflow: Workflow,
    saver: Saver,
    options: Options,
    executor: ThreadPoolExecutor | None,
) -> Ending:
    """Run once in a task; cancel it if asked; wait at most `BOUND` for its end."""
    ending = Ending()
    holder: list[asyncio.Task[WorkflowResult]] = []

    def cancel() -> None:
        if holder and not holder[0].done() and ending.cancelled_at is None:
            ending.cancelled_at = time.perf_counter()
            holder[0].cancel()

    def on_event(event: Event) -> None:
        ending.events.append(event)
        number = len(ending.events)
        if options.cancel_event is not None and number == options.cancel_event:
            cancel()
        if options.on_event_extra is not None:
            options.on_event_extra(number)

    before = asyncio.all_tasks()
    task = asyncio.ensure_future(
        workflow.run(
            {"phase": options.phase},
            checkpoint_fn=saver,
            resume_from=options.resume_from,
            answers=options.answers,
            run_id=case.run_id,
            on_error=case.on_error,  # type: ignore[arg-type]
            budget=options.budget,
            schedule=case.schedule,  # type: ignore[arg-type]
            max_concurrency=case.max_concurrency,
            on_event=on_event,
            executor=executor,
            checkpoint_every=case.every,  # type: ignore[arg-type]
            stop_grace=case.stop_grace,
        )
    )
    holder.append(task)

    def ended(_: object) -> None:
        ending.ended_at = time.perf_counter()
        saver.saves.ended = True

    task.add_done_callback(ended)
    if options.cancel_turns is not None:
        for _ in range(options.cancel_turns):
            if task.done():
                break
            await asyncio.sleep(0)
        cancel()
    done, _ = await asyncio.wait({task}, timeout=BOUND)
    if not done:
        ending.hung = True
        return ending
    if task.cancelled():
        ending.error = asyncio.CancelledError()
    elif task.exception() is not None:
        ending.error = task.exception()
    else:
        ending.result = task.result()
    for _ in range(10):  # let anything that wrongly outlived run() show itself
        await asyncio.sleep(0)
    ending.left = len({t for t in asyncio.all_tasks() - before if not t.done()})
    return ending


# --- the checks -------------------------------------------------------------------------


def round_trip(checkpoint: WorkflowCheckpoint) -> WorkflowCheckpoint:
    return WorkflowCheckpoint.from_dict(json.loads(json.dumps(checkpoint.to_dict())))


def recorded(
    checkpoint: WorkflowCheckpoint, prefix: str = ""
) -> tuple[set[str], set[tuple[str, str]]]:
    """The step paths and (map path, item key) a checkpoint records, children included."""
    outputs = {prefix + name for name in checkpoint.outputs}
    items = {
        (prefix + name, key)
        for name, entry in checkpoint.items.items()
        for key in entry["outputs"]
    }
    for name, entry in checkpoint.children.items():
        nested: list[tuple[str, WorkflowCheckpoint]] = []
        if "checkpoint" in entry:
            nested.append((f"{prefix}{name}/", entry["checkpoint"]))
        for key, child in entry.get("items", {}).items():
            nested.append((f"{prefix}{name}/{key}/", child))
        for inner, child in nested:
            more_outputs, more_items = recorded(child, inner)
            outputs |= more_outputs
            items |= more_items
    return outputs, items


def covered(path: str, key: str | None, outputs: set[str], items: set[tuple[str, str]]) -> bool:
    """Whether a unit is recorded: itself, its item, or a step or item it runs inside."""
    if key is not None and (path, key) in items:
        return True
    segments = path.split("/")
    for length in range(1, len(segments) + 1):
        if "/".join(segments[:length]) in outputs:
            return True
        if length < len(segments) and ("/".join(segments[:length]), segments[length]) in items:
            return True
    return False


def check_run(ending: Ending, saves: Saves, root: str) -> list[str]:
    """Invariants 2, 3 and 6 for one run."""
    problems: list[str] = []
    if ending.left:
        problems.append(f"{ending.left} task(s) left running after run() ended")
    if saves.after_end:
        problems.append(f"checkpoint_fn called {saves.after_end} time(s) after run() ended")
    for checkpoint in saves.handed:
        try:
            again = round_trip(checkpoint)
        except Exception as exc:  # noqa: BLE001 - any refusal is the broken promise
            problems.append(f"checkpoint seq={checkpoint.seq} does not read back: {exc!r}")
            continue
        if again.to_dict() != checkpoint.to_dict():
            problems.append(f"checkpoint seq={checkpoint.seq} reads back different")
    if saves.handed and saves.last_ok:
        problems += events_agree(ending, saves.handed[-1], root)
    return problems


def events_agree(ending: Ending, last: WorkflowCheckpoint, root: str) -> list[str]:
    """Invariant 6: what the run announced is in its last checkpoint, which its error carries."""
    problems: list[str] = []
    carried = getattr(ending.error, "checkpoint", None)
    if isinstance(ending.error, (WorkflowFailed, BudgetExceeded)) and (
        carried is None or carried.to_dict() != last.to_dict()
    ):
        problems.append(
            f"{type(ending.error).__name__}.checkpoint (seq={getattr(carried, 'seq', None)}) "
            f"is not the last checkpoint handed over (seq={last.seq})"
        )
    for event in ending.events:
        if event.run_id != root:
            continue
        if isinstance(event, StepFinished) and event.step not in last.outputs:
            problems.append(f"StepFinished({event.step}) but the last checkpoint lacks it")
        elif isinstance(event, ItemFinished) and not (
            event.step in last.outputs
            or event.item in last.items.get(event.step, {"outputs": {}})["outputs"]
        ):
            problems.append(
                f"ItemFinished({event.step}[{event.item}]) but the last checkpoint lacks it"
            )
        elif isinstance(event, StepSkipped) and event.step not in last.skipped:
            problems.append(f"StepSkipped({event.step}) but the last checkpoint lacks it")
    return problems


# The errors a faulted run may end with, and the faults that allow each.
ALLOWED: tuple[tuple[type[BaseException], Callable[[Case], bool]], ...] = (
    (StoreFaultError, lambda case: case.fault in ("store_once", "store_after")),
    (ClaimLostError, lambda case: case.fault == "claim_lost"),
    (WorkflowFailed, lambda case: case.fault == "step_fails"),
    (BudgetExceeded, lambda case: case.budget is not None),
)


def allowed(case: Case, ending: Ending) -> bool:
    """Whether the faulted run ended in a way its case allows."""
    error = ending.error
    if error is None:
        return True
    if isinstance(error, asyncio.CancelledError):
        return ending.cancelled_at is not None
    return any(isinstance(error, kind) and fits(case) for kind, fits in ALLOWED)


def bill(book: Book, spending: Spending, unsaved: frozenset[int]) -> list[str]:
    """Invariant 5: nothing counted twice, every lost report counted as unknown.

    ``unsaved``: phases that never got a checkpoint into the store (their first
    save failed): what they spent reached no checkpoint, which the ledger
    documents it cannot count, so their attempts are left out.
    """
    problems: list[str] = []
    rows: Counter[tuple[str, str | None, int]] = Counter()
    known = TokenUsage()
    for row in spending.entries:
        if row.outcome == "timeout":
            problems.append(f"a timeout fired: {row}")
        if row.outcome == "unknown":
            continue
        known += row.usage
        if row.model is not None:  # the add_usage report: one row per attempt
            rows[row.step, row.item, row.attempt] += 1
    started: Counter[tuple[str, str | None, int]] = Counter()
    for (phase, path, key, attempt), count in book.attempts.items():
        if phase not in unsaved:
            started[path, key, attempt] += count
    reported = TokenUsage()
    for phase, usage in book.reported.items():
        if phase not in unsaved:
            reported += usage
    twice = sorted(
        (unit, count, started[unit]) for unit, count in rows.items() if count > started[unit]
    )
    if twice:
        problems.append(f"attempts with more report rows than bodies started: {twice}")
    missing = {unit: count - rows[unit] for unit, count in started.items() if count > rows[unit]}
    # A map listed in flight by its name stands for every item of it that was running
    # (docs/how-to/count-what-you-pay.md): its one unknown row covers their attempts, a
    # map of sub-workflows' child steps included. Every other lost attempt has its own.
    unknown = [(r.step, r.item, r.attempt) for r in spending.entries if r.outcome == "unknown"]
    maps = {step for step, item, _ in unknown if item is None}

    def under(unit: tuple[str, str | None, int], name: str) -> bool:
        return (unit[0] == name and unit[1] is not None) or unit[0].startswith(f"{name}/")

    by_map = {unit for unit in missing if any(under(unit, name) for name in maps)}
    standing = {name for name in maps if any(under(unit, name) for unit in by_map)}
    lost = sum(count for unit, count in missing.items() if unit not in by_map)
    if lost > spending.unknown - len(standing):
        problems.append(
            f"{lost} attempt(s) whose report is missing from the ledger, "
            f"{spending.unknown} counted unknown ({len(standing)} of them maps by name): "
            f"missing {sorted(missing.items(), key=str)}, unknown {unknown}"
        )
    if (
        known.input_tokens > reported.input_tokens
        or known.output_tokens > reported.output_tokens
        or known.llm_calls > reported.llm_calls
    ):
        problems.append(f"the ledger knows {known}, more than the attempts reported ({reported})")
    return problems


# --- a case ------------------------------------------------------------------------------


@dataclass
class Report:
    """What a case found: its broken promises and what the soak counts."""

    seed: int
    case: str
    store: str
    fault: str
    ending: str = "?"
    resumes: int = 0
    cancel_to_end: float | None = None
    problems: list[str] = field(default_factory=list)


@dataclass
class Leg:
    """One run of a chain: how it ended, what it handed over, what it resumed from."""

    ending: Ending
    saves: Saves
    start: WorkflowCheckpoint | None
    phase: int


@dataclass
class Chain:
    """One case at work: its workflow, book, store and executor."""

    case: Case
    book: Book
    workflow: Workflow
    stores: Stores
    executor: ThreadPoolExecutor | None
    report: Report


async def run_to_the_end(
    chain: Chain,
    workflow: Workflow,
    saver_of: Callable[[], Saver],
    load: Callable[[], WorkflowCheckpoint | None],
    first: Options,
) -> list[Leg]:
    """Run, then resume from what the store holds, answering every question, until done."""
    legs: list[Leg] = []
    options = first
    while True:
        saver = saver_of()
        ending = await watch_run(chain.case, workflow, saver, options, chain.executor)
        legs.append(Leg(ending, saver.saves, options.resume_from, options.phase))
        result = ending.result
        if ending.hung or result is None or not result.pending or len(legs) > MAX_RESUMES:
            return legs
        options = Options(
            phase=options.phase + 1,
            resume_from=load(),
            answers={path: f"answer to {path}" for path in result.pending},
        )


async def reference_run(chain: Chain) -> WorkflowResult | str:
    """The uninterrupted run, questions answered as asked: its result, or what went wrong."""
    saved: list[WorkflowCheckpoint] = []
    legs = await run_to_the_end(
        chain,
        build(chain.case, Book(chain.case.run_id)),
        lambda: Saver(saved, Saves()),
        lambda: saved[-1] if saved else None,
        Options(phase=0),
    )
    result = legs[-1].ending.result
    if result is None or result.pending:
        last = legs[-1].ending
        return f"the reference run did not finish: {last.name} {last.error!r}"
    return result


async def faulted_run(chain: Chain, expected: WorkflowResult) -> tuple[Ending, Saves]:
    """The run the case's fault lands on."""
    case = chain.case
    saves = Saves()
    if case.fault in ("store_once", "store_after"):
        saves.fail_at = case.at
        saves.fail_on = case.fault == "store_after"
    options = Options(phase=0)
    if case.budget is not None:
        options.budget = TokenUsage(
            llm_calls=max(1, math.ceil(expected.cost.llm_calls * case.budget))
        )
    if case.fault == "cancel_event":
        options.cancel_event = case.at
    elif case.fault == "cancel_turns":
        options.cancel_turns = case.at
    elif case.fault == "claim_lost":
        options.on_event_extra = _claim_killer(case, chain.stores.pg_uri)
    ending = await watch_run(
        case, chain.workflow, chain.stores.saver(saves), options, chain.executor
    )
    report = chain.report
    report.ending = ending.name
    if ending.cancelled_at is not None and ending.ended_at is not None:
        report.cancel_to_end = ending.ended_at - ending.cancelled_at
    return ending, saves


async def resume(chain: Chain, ending: Ending, saves: Saves) -> WorkflowResult | None:
    """Resume from what the store holds until done; check each run; the final result."""
    problems = chain.report.problems
    stores = chain.stores
    if chain.case.fault == "claim_lost":
        stores.reopen()
    start = stores.load()
    last = saves.handed[-1] if saves.handed and saves.last_ok else None
    if last is not None and (start is None or start.to_dict() != last.to_dict()):
        problems.append(
            f"the store holds seq={getattr(start, 'seq', None)}, not the last checkpoint "
            f"saved (seq={last.seq})"
        )
    if ending.result is not None and not ending.result.pending:
        return ending.result
    pending = {} if ending.result is None else ending.result.pending
    legs = await resume_legs(chain, start, pending)
    return check_legs(chain, legs)


def check_legs(chain: Chain, legs: list[Leg]) -> WorkflowResult | None:
    """Invariants 2, 3 and 4 for each resume of a chain; the last one's result, if it ran."""
    problems = chain.report.problems
    chain.report.resumes = len(legs)
    for number, leg in enumerate(legs, start=1):
        where = f"resume {number}"
        if leg.ending.hung or leg.ending.error is not None:
            problems.append(f"{where} ended with {leg.ending.name} {leg.ending.error!r}")
            return None
        problems.extend(
            f"{where}: {p}" for p in check_run(leg.ending, leg.saves, chain.case.run_id)
        )
        problems.extend(f"{where}: {p}" for p in _nothing_again(chain.book, leg))
        invalidated = leg.ending.result.invalidated if leg.ending.result else {}
        if invalidated:
            problems.append(f"{where} invalidated {dict(invalidated)}")
    return legs[-1].ending.result


async def resume_legs(
    chain: Chain, start: WorkflowCheckpoint | None, pending: Iterable[str]
) -> list[Leg]:
    """Resume from ``start`` against the chain's store, answering ``pending``, until done."""
    stores = chain.stores
    return await run_to_the_end(
        chain,
        chain.workflow,
        lambda: stores.saver(Saves()),
        stores.load,
        Options(
            phase=1,
            resume_from=start,
            answers={path: f"answer to {path}" for path in pending} or None,
        ),
    )


def compare(
    chain: Chain, final: WorkflowResult, expected: WorkflowResult, unsaved: frozenset[int]
) -> list[str]:
    """Invariants 4 and 5 at the end of the chain: the reference's outputs and spend, the bill."""
    problems: list[str] = []
    if dict(final.outputs) != dict(expected.outputs):
        wrong = sorted(
            name for name in expected.outputs if final.outputs.get(name) != expected.outputs[name]
        )
        problems.append(f"final outputs differ from the reference run's at {wrong}")
    if final.spending.spent != expected.spending.spent:
        problems.append(
            f"spending.spent {final.spending.spent} differs from the reference run's "
            f"{expected.spending.spent}"
        )
    return problems + bill(chain.book, final.spending, unsaved)


async def run_chain(chain: Chain) -> None:
    """Reference run, faulted run, resumes; every check; problems into the report."""
    problems = chain.report.problems
    expected = await reference_run(chain)
    if isinstance(expected, str):
        problems.append(expected)
        return
    ending, saves = await faulted_run(chain, expected)
    if ending.hung:
        problems.append(f"the faulted run did not end within {BOUND} s")
        return
    if not allowed(chain.case, ending):
        problems.append(f"the faulted run ended with {ending.error!r}")
    problems.extend(f"faulted run: {p}" for p in check_run(ending, saves, chain.case.run_id))
    if not await _threads_done(chain.book):
        problems.append(f"step bodies still running {BOUND} s after the faulted run")
        return
    chain.book.broken = None
    final = await resume(chain, ending, saves)
    if final is None or final.pending:
        problems.append("the chain never finished")
        return
    if not await _threads_done(chain.book):
        problems.append(f"step bodies still running {BOUND} s after the resumes")
        return
    problems.extend(compare(chain, final, expected, frozenset() if saves.ok else frozenset({0})))


def _nothing_again(book: Book, leg: Leg) -> list[str]:
    """Invariant 4: no unit recorded in the checkpoint a run resumed from ran in it."""
    if leg.start is None:
        return []
    phase = leg.phase
    outputs, items = recorded(leg.start)
    again = sorted(
        f"{path}[{key}]" if key is not None else path
        for (run, path, key), count in book.calls.items()
        if run == phase and count and covered(path, key, outputs, items)
    )
    return [f"recorded units ran again: {again}"] if again else []


async def _threads_done(book: Book) -> bool:
    """Wait (in a thread, by condition) until no step body runs: abandoned threads end."""

    def wait() -> bool:
        with book.idle:
            return book.idle.wait_for(lambda: book.running == 0, timeout=BOUND)

    return await asyncio.to_thread(wait)


def _claim_killer(case: Case, pg_uri: str | None) -> Callable[[int], None]:
    """At event ``case.at``, end the database session holding the run's claim."""

    def kill(number: int) -> None:
        if number != case.at or pg_uri is None:
            return
        import psycopg  # noqa: PLC0415 - PostgreSQL cases only

        with psycopg.connect(pg_uri, autocommit=True) as connection:
            row = connection.execute(
                "SELECT backend_pid FROM executionkit_claims WHERE run_id = %s", (case.run_id,)
            ).fetchone()
            if row is not None:
                connection.execute("SELECT pg_terminate_backend(%s, 10000)", (row[0],))

    return kill


def run_case_report(
    seed: int,
    *,
    store: str | None = None,
    fault: str | None = None,
    pg_uri: str | None = None,
) -> Report:
    """Run the case of ``seed`` in a loop of its own, in a daemon thread; report what broke."""
    case = draw_case(seed, store=store, fault=fault)
    report = Report(seed, str(case), case.store, case.fault)

    async def main(folder: Path) -> None:
        book = Book(case.run_id, broken=case.broken)
        executor = ThreadPoolExecutor(max_workers=2) if case.executor else None
        stores = Stores(case, folder, pg_uri)
        try:
            await run_chain(Chain(case, book, build(case, book), stores, executor, report))
        finally:
            if executor is not None:
                executor.shutdown(wait=True)
            stores.close()

    def target() -> None:
        with tempfile.TemporaryDirectory(prefix="matrix-") as folder:
            try:
                asyncio.run(main(Path(folder)))
            except BaseException as exc:  # noqa: BLE001 - reported, never lost in the thread
                report.problems.append(f"the harness raised {exc!r}")

    thread = threading.Thread(target=target, daemon=True, name=f"matrix-{seed}")
    thread.start()
    thread.join(CASE_BOUND)
    if thread.is_alive():
        report.problems.append(f"the case did not end within {CASE_BOUND} s (a hang)")
    report.problems = [f"seed {seed} ({case}): {problem}" for problem in report.problems]
    return report


def run_case(
    seed: int, *, store: str | None = None, fault: str | None = None, pg_uri: str | None = None
) -> list[str]:
    """The broken promises of the case of ``seed`` (empty when all held)."""
    return run_case_report(seed, store=store, fault=fault, pg_uri=pg_uri).problems
