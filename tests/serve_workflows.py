"""Workflows the ``executionkit serve`` tests show and answer, with gates that hold their steps.

A gate is a `threading.Event`: a step waits on it (never on a clock), and the test
opens it once the page shows what it must while the step is held. ``started``
events tell the test that a step has begun. `release_all` opens every gate, so
that a test's end never leaves a step blocked.
"""

from __future__ import annotations

import asyncio
import os
import threading
from pathlib import Path
from typing import TYPE_CHECKING, Any, Self

from executionkit import PatternResult, Step, TokenUsage, Workflow, current_step
from executionkit._cli._location import parse_location
from executionkit._cli._serve import App, start_server
from executionkit._cli._serve._answers import Resumer, Tracker
from executionkit._cli._serve._runs import Source

if TYPE_CHECKING:
    from collections.abc import Mapping

HOSTILE = "<script>alert('output')</script>"
HOSTILE_NAME = "<img src=x onerror=alert('step')>"
HOSTILE_QUESTION = "<script>alert('question')</script> Publish it?"
GATE_WAIT = 30.0  # seconds: only a test that failed to open its gate ever waits this long

gates: dict[str, threading.Event] = {}
started: dict[str, threading.Event] = {}
calls: dict[str, int] = {}
lock = threading.Lock()
released = threading.Event()  # set by release_all: every gate, even one made later, is open


def gate(name: str) -> threading.Event:
    """The gate ``name`` (made closed on first use, open once `release_all` was called)."""
    with lock:
        made = gates.setdefault(name, threading.Event())
        if released.is_set():
            made.set()
        return made


def begun(name: str) -> threading.Event:
    """The event set when the step held by gate ``name`` has started."""
    with lock:
        return started.setdefault(name, threading.Event())


def reset() -> None:
    """Close every gate and forget every call: a fresh start for a test."""
    with lock:
        gates.clear()
        started.clear()
        calls.clear()
        released.clear()


def release_all() -> None:
    """Open every gate, those made later too, so that no step stays held once a test ends."""
    with lock:
        released.set()
        for event in gates.values():
            event.set()


def _held(name: str) -> None:
    with lock:
        calls[name] = calls.get(name, 0) + 1
    begun(name).set()
    if not gate(name).wait(GATE_WAIT):
        msg = f"gate {name!r} was never opened"
        raise TimeoutError(msg)


def _check(answer: object) -> object:
    if answer not in ("yes", "no"):
        msg = "answer yes or no"
        raise ValueError(msg)
    return answer


def _publish(ctx: Mapping[str, Any]) -> PatternResult[str]:
    _held("publish")
    return PatternResult(f"published: {ctx['approve']}", cost=TokenUsage(100, 20, 1))


def approval() -> Workflow:
    """Draft (hostile text), a step with a hostile name, a question, then a held publish."""
    return Workflow(
        [
            Step("draft", lambda ctx: PatternResult(HOSTILE, cost=TokenUsage(50, 10, 1))),
            Step(HOSTILE_NAME, lambda ctx: HOSTILE, depends_on=("draft",)),
            Step.ask(
                "approve",
                lambda ctx: HOSTILE_QUESTION,
                depends_on=("draft",),
                check=_check,
            ),
            Step("publish", _publish, depends_on=("approve", HOSTILE_NAME)),
        ]
    )


def _write(ctx: Mapping[str, Any]) -> str:
    """Streams its answer; the first attempt stops half-way (held, then fails), the second ends."""
    step = current_step()
    if step.attempt == 1:
        step.stream("first try, ")
        _held("first-try")
        msg = "the connection dropped mid-answer"
        raise ConnectionError(msg)
    step.stream("second try, ")
    _held("second-try")
    step.stream("whole answer")
    return "second try, whole answer"


def streaming() -> Workflow:
    """A question, then a step that streams its answer, retried once (the retry streams anew)."""
    return Workflow(
        [
            Step.ask("approve", lambda ctx: "write it?"),
            Step("write", _write, depends_on=("approve",), retries=1, retry_delay=0),
        ]
    )


def _write_item(item: str, ctx: Mapping[str, Any]) -> str:
    """Streams its part of the answer, held until its gate (``item-KEY``) opens."""
    step = current_step()
    step.stream(f"{item} begins, ")
    _held(f"item-{step.item_key}")
    step.stream("ends")
    return f"{item} written"


def streaming_map() -> Workflow:
    """A question, then a map whose items each stream their text while held."""
    return Workflow(
        [
            Step.ask("approve", lambda ctx: "write them?"),
            Step("parts", lambda ctx: ["intro", "outro"], depends_on=("approve",)),
            Step.map("write", _write_item, over="parts"),
        ]
    )


def _inner_write(ctx: Mapping[str, Any]) -> str:
    """A sub-workflow's step: streams, held until the gate ``inner`` opens."""
    current_step().stream(f"inner begins after {ctx['prepare']}, ")
    _held("inner")
    return "inner written"


def streaming_child() -> Workflow:
    """A question, then a sub-workflow ``nested`` whose second step streams while held."""
    inner = Workflow(
        [
            Step("prepare", lambda ctx: "preparing"),  # its checkpoint opens the child's page
            Step("write", _inner_write, depends_on=("prepare",)),
        ]
    )
    return Workflow(
        [
            Step.ask("approve", lambda ctx: "write it?"),
            Step("nested", inner, depends_on=("approve",)),
        ]
    )


def live(held_by: str = "slow") -> Workflow:
    """Three steps; the middle one, ``slow``, is held by the gate ``held_by``."""

    def slow(ctx: Mapping[str, Any]) -> str:
        _held(held_by)
        return "slow done"

    return Workflow(
        [
            Step("first", lambda ctx: "first done"),
            Step("slow", slow, depends_on=("first",)),
            Step("last", lambda ctx: f"{ctx['slow']}, last done", depends_on=("slow",)),
        ]
    )


def gated_chain(steps: int) -> Workflow:
    """``steps`` steps in a chain, ``g0`` ...; each after ``g0`` waits for the gate of its name."""

    def make(name: str) -> Any:
        def step(ctx: Mapping[str, Any]) -> str:
            if name != "g0":  # the first is recorded at once: the run is in the store
                _held(name)
            return f"{name} done"

        return step

    return Workflow(
        [
            Step(f"g{n}", make(f"g{n}"), depends_on=(() if n == 0 else (f"g{n - 1}",)))
            for n in range(steps)
        ]
    )


def _broken(ctx: Mapping[str, Any]) -> str:
    msg = "the model answered nonsense"
    raise RuntimeError(msg)


def failing() -> Workflow:
    """A step that fails."""
    return Workflow(
        [Step("fetch", lambda ctx: "ok"), Step("parse", _broken, depends_on=("fetch",))]
    )


def big_map(count: int) -> Workflow:
    """A map over ``count`` items whose item ``count - 3`` fails, stopping the map there."""
    return Workflow(
        [
            Step("items", lambda ctx: list(range(count))),
            Step.map("double", _doubler(count), over="items"),
        ]
    )


def _doubler(count: int) -> Any:
    # Async items are saved together as they land; plain ones would be saved one by one.
    async def double(item: int, ctx: Mapping[str, Any]) -> int:
        if item == count - 3:
            current_step().add_usage(TokenUsage(5, 0, 1))  # a ledger row: the item failed
            msg = f"item {item} is unlucky"
            raise ValueError(msg)
        return item * 2

    return double


class Background:
    """A run of ``workflow`` into ``store`` in a thread of its own, with its own event loop."""

    def __init__(self, workflow: Workflow, store: Any, run_id: str) -> None:
        """Start the run."""
        self.error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, args=(workflow, store, run_id))
        self._thread.start()

    def _run(self, workflow: Workflow, store: Any, run_id: str) -> None:
        try:
            asyncio.run(workflow.run({}, checkpoint_fn=store, run_id=run_id))
        except BaseException as exc:  # noqa: BLE001 - the test reads it
            self.error = exc

    def join(self) -> None:
        """Wait for the run to end (its gates must be open)."""
        self._thread.join(GATE_WAIT)
        assert not self._thread.is_alive(), "the background run did not end"


def serving(location: str, workflow: Workflow | None = None, spec: str | None = None) -> Any:
    """A context manager: an in-process server of ``location``; gives its `App` and URL."""
    return _Serving(location, workflow, spec)


class _Serving:
    def __init__(self, location: str, workflow: Workflow | None, spec: str | None) -> None:
        source = Source(parse_location(location), workflow)
        tracker = Tracker()
        resumer = None
        if workflow is not None:
            resumer = Resumer(source, workflow, {}, tracker)
            source.resuming = resumer.busy
        self.app = App(source, resumer, spec, tracker)
        self.server = start_server(self.app, "127.0.0.1", 0)
        self.url = self.server.url
        self._thread = threading.Thread(
            target=self.server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )

    def __enter__(self) -> Self:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        release_all()
        try:
            self.server.shutdown()
            self.server.server_close()
            self._thread.join()
        finally:
            if self.app.resumer is not None:
                self.app.resumer.stop()
            self.app.close()


def _publish_after_fifo(ctx: Mapping[str, Any]) -> str:
    # Another process holds this step: it blocks until that process writes to the FIFO.
    with Path(os.environ["EXECUTIONKIT_TEST_FIFO"]).open(encoding="utf-8") as fifo:
        said = fifo.read()
    return f"published: {ctx['approve']} after {said}"


def fifo_approval() -> Workflow:
    """A question, then a step held by the FIFO ``$EXECUTIONKIT_TEST_FIFO`` (for a subprocess)."""
    return Workflow(
        [
            Step.ask("approve", lambda ctx: "Publish it?", check=_check),
            Step("publish", _publish_after_fifo, depends_on=("approve",)),
        ]
    )
