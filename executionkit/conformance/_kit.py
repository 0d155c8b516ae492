"""The checks: each property of the kit, run against fresh stores from ``make_store``."""

from __future__ import annotations

import asyncio
import inspect
import json
import threading
from typing import TYPE_CHECKING, Any

from executionkit._checkpoint._value import WorkflowCheckpoint
from executionkit.conformance._claims import check_claims
from executionkit.conformance._names import (
    CONCURRENT_WRITERS,
    CONSTANT_COST,
    LATEST_WINS,
    NOTHING_SAVED,
    RESUMED_RUN,
    ROUND_TRIP,
    SAVED_TWICE,
    STALE_WRITER,
    Load,
    Save,
    StoreConformanceError,
    StoreFactory,
)
from executionkit.conformance._report import describe, find_difference, preview
from executionkit.conformance._samples import (
    CHAIN_LENGTH,
    LAST_SEQ,
    Counted,
    CountedAttempts,
    CountedRows,
    Samples,
)

if TYPE_CHECKING:
    from collections.abc import Callable, Coroutine


class _AwaitableInSyncCheckError(TypeError):
    pass


class Kit:
    def __init__(
        self,
        make_store: StoreFactory,
        stale_error: type[Exception],
        samples: Samples,
        *,
        sync: bool,
    ) -> None:
        self.make_store = make_store
        self.stale_error = stale_error
        self.samples = samples
        self.sync = sync

    async def check(self) -> None:
        await self.nothing_saved()
        await self.round_trip()
        await self.latest_wins()
        await self.stale_writer()
        await self.saved_twice()
        await self.resumed_run()
        if self.samples.chain:
            await self.constant_cost()
        if self.samples.workers:
            await self.concurrent_writers()
        await check_claims(self)

    # -- helpers --

    def fresh(self, name: str) -> tuple[Save, Load]:
        try:
            pair = self.make_store()
            save, load = pair
        except (TypeError, ValueError) as exc:
            msg = f"make_store() must return a (save, load) pair: {type(exc).__name__}: {exc}"
            raise StoreConformanceError(name, msg) from exc
        return save, load

    async def call(self, function: Callable[..., object], *args: object) -> object:
        result = function(*args)
        if inspect.isawaitable(result):
            if self.sync:
                if inspect.iscoroutine(result):
                    result.close()
                msg = (
                    f"{_name(function)} returned an awaitable; check async stores with "
                    f"'await check_store_async(...)'"
                )
                raise _AwaitableInSyncCheckError(msg)
            result = await result
        return result

    async def save(self, name: str, save: Save, checkpoint: WorkflowCheckpoint, when: str) -> None:
        try:
            await self.call(save, checkpoint)
        except _AwaitableInSyncCheckError:
            raise
        except Exception as exc:
            msg = f"{when}: save(seq={checkpoint.seq}) raised {type(exc).__name__}: {exc}"
            raise StoreConformanceError(name, msg) from exc

    async def load(self, name: str, load: Load, when: str) -> object:
        try:
            return await self.call(load)
        except _AwaitableInSyncCheckError:
            raise
        except Exception as exc:
            msg = f"{when}: load() raised {type(exc).__name__}: {exc}"
            raise StoreConformanceError(name, msg) from exc

    async def expect(
        self, name: str, load: Load, expected: WorkflowCheckpoint, when: str, hint: str = ""
    ) -> None:
        got = await self.load(name, load, when)
        if got is None:
            problem = "load() returned None"
        elif not isinstance(got, WorkflowCheckpoint):
            problem = f"load() returned {preview(got)}, not a WorkflowCheckpoint"
        else:
            difference = find_difference(expected.to_dict(), got.to_dict())
            if difference is None:
                return
            problem = difference
        raise StoreConformanceError(name, f"{when}, {problem}{hint}")

    async def save_all(
        self,
        name: str,
        save: Save,
        load: Load,
        checkpoints: tuple[WorkflowCheckpoint, ...],
        what: str,
    ) -> None:
        for checkpoint in checkpoints:
            when = f"after saving seq {checkpoint.seq} of {what}"
            await self.save(name, save, checkpoint, when)
            await self.expect(name, load, checkpoint, when)

    # -- the properties --

    async def nothing_saved(self) -> None:
        name = NOTHING_SAVED
        _, load = self.fresh(name)
        got = await self.load(name, load, "on empty storage")
        if got is not None:
            msg = f"on empty storage, load() returned {describe(got)}, expected None"
            raise StoreConformanceError(name, msg)

    async def round_trip(self) -> None:
        samples = self.samples
        cases = (
            ("the first checkpoint of a run", samples.run[0]),
            ("a finished run's checkpoint", samples.run[-1]),
            ("a failed run's checkpoint (with errors and progress)", samples.failed[-1]),
            ("a checkpoint read back with from_dict (empty new_outputs)", samples.copy),
            (
                "a checkpoint with map items, a skipped step and a question waiting for an answer",
                samples.waiting[-1],
            ),
            ("a checkpoint with sub-workflow checkpoints in children", samples.children),
            (
                (
                    "a checkpoint with a cost ledger (failed, timed-out, cancelled, unknown, "
                    "late and rate-limited attempts, models, a sub-workflow's rows), attempts "
                    "in flight, a trace, a lineage, the attempts with their times, a wait, "
                    "items of a map in flight and a step's code fingerprint"
                ),
                samples.spending[-2],
            ),
            (
                "a checkpoint whose question was answered at its deadline, with code fingerprints",
                samples.deadline,
            ),
        )
        for label, checkpoint in cases:
            save, load = self.fresh(ROUND_TRIP)
            when = f"after saving {label} (seq {checkpoint.seq}) to empty storage"
            await self.save(ROUND_TRIP, save, checkpoint, when)
            await self.expect(ROUND_TRIP, load, checkpoint, when)

    async def latest_wins(self) -> None:
        save, load = self.fresh(LATEST_WINS)
        await self.save_all(LATEST_WINS, save, load, self.samples.run, "a run")
        save, load = self.fresh(LATEST_WINS)
        what = "a run whose cost ledger grows (with attempts in flight, a trace, a lineage)"
        await self.save_all(LATEST_WINS, save, load, self.samples.spending, what)

    async def stale_writer(self) -> None:
        name = STALE_WRITER
        run = self.samples.run
        save, load = self.fresh(name)
        for checkpoint in run[:3]:
            await self.save(name, save, checkpoint, f"saving seq {checkpoint.seq}")
        stale = (
            (run[1], "then the stale seq 2 again"),
            (self.samples.sibling, "then another worker's different checkpoint with seq 3"),
        )
        for checkpoint, what in stale:
            when = f"after saving seq 1, 2, 3 {what}"
            await self.save_stale(save, checkpoint, when)
            hint = (
                "; a store must ignore or refuse (raise) a checkpoint whose seq is not newer "
                "than the stored one of its run"
            )
            await self.expect(name, load, run[2], when, hint)
        when = "after refusing stale checkpoints, then saving seq 4"
        await self.save(name, save, run[3], when)
        await self.expect(name, load, run[3], when)

    async def save_stale(self, save: Save, checkpoint: WorkflowCheckpoint, when: str) -> None:
        try:
            await self.call(save, checkpoint)
        except _AwaitableInSyncCheckError:
            raise
        except self.stale_error:
            pass
        except Exception as exc:
            msg = (
                f"{when}: save(seq={checkpoint.seq}) raised {type(exc).__name__}: {exc}; "
                f"expected it to return or raise {self.stale_error.__name__}"
            )
            raise StoreConformanceError(STALE_WRITER, msg) from exc

    async def saved_twice(self) -> None:
        name = SAVED_TWICE
        run = self.samples.run
        save, load = self.fresh(name)
        steps = (
            (run[0], "seq 1"),
            (run[0], "seq 1 again"),
            (run[1], "seq 1, seq 1 again, seq 2"),
            (run[1], "seq 1, seq 1 again, seq 2, seq 2 again"),
            (
                WorkflowCheckpoint.from_dict(json.loads(json.dumps(run[1].to_dict()))),
                "seq 1, seq 1 again, seq 2, seq 2 again, an equal copy of seq 2",
            ),
            (run[2], "seq 1, seq 1 again, seq 2, seq 2 again, an equal copy of seq 2, seq 3"),
        )
        for checkpoint, what in steps:
            when = f"after saving {what}"
            await self.save(name, save, checkpoint, when)
            await self.expect(name, load, checkpoint, when)

    async def resumed_run(self) -> None:
        name = RESUMED_RUN
        samples = self.samples
        save, load = self.fresh(name)
        await self.save_all(name, save, load, samples.failed, "a failing run")
        await self.save_all(name, save, load, samples.resumed, "that run resumed")
        save, load = self.fresh(name)
        await self.save_all(name, save, load, samples.run, "a run")
        await self.save_all(name, save, load, samples.rerun, "that run resumed with rerun=['c']")
        save, load = self.fresh(name)
        await self.save_all(name, save, load, samples.waiting, "a run waiting for an answer")
        await self.save_all(name, save, load, samples.answered, "that run resumed with the answer")

    async def constant_cost(self) -> None:
        name = CONSTANT_COST
        chain = self.samples.chain
        save, load = self.fresh(name)
        total = worst = worst_seq = 0
        # For the ledger's rows and the attempts: read in all, at most, and at which seq.
        logs = {"ledger": [0, 0, 0], "attempts": [0, 0, 0]}
        for checkpoint in chain:
            new_rows = len(checkpoint.new_ledger)  # read before counting: the store may too
            new_attempts = len(checkpoint.new_attempts)
            Counted.touched = CountedRows.touched = CountedAttempts.touched = 0
            await self.save(name, save, checkpoint, f"saving seq {checkpoint.seq} of a chain")
            touched = Counted.touched
            # The new outputs are written now: the store may look at each of them once.
            touched = max(0, touched - len(checkpoint.new_outputs))
            total += touched
            if touched > worst:
                worst, worst_seq = touched, checkpoint.seq
            # So are its new ledger rows (a failed attempt's too) and attempts: not those before.
            for log, read in (
                ("ledger", max(0, CountedRows.touched - new_rows)),
                ("attempts", max(0, CountedAttempts.touched - new_attempts)),
            ):
                counted = logs[log]
                counted[0] += read
                if read > counted[1]:
                    counted[1:] = [read, checkpoint.seq]
        when = f"after saving the {len(chain)} checkpoints of a {CHAIN_LENGTH}-step chain"
        await self.expect(name, load, chain[-1], when)
        if total > len(chain):
            msg = (
                f"{when}, the store serialised, compared or copied outputs of earlier "
                f"checkpoints {total} times (at most {worst}, at seq {worst_seq}), expected at "
                f"most {len(chain)}: each checkpoint should write only its new_outputs"
            )
            raise StoreConformanceError(name, msg)
        for log, what in (("ledger", "the ledger rows"), ("attempts", "the attempts entries")):
            read, most, at = logs[log]
            if read > len(chain):
                msg = (
                    f"{when}, the store read {what} of earlier checkpoints {read} times "
                    f"(at most {most}, at seq {at}), expected at most {len(chain)}: each "
                    f"checkpoint should write only its new_{log}"
                )
                raise StoreConformanceError(name, msg)

    async def concurrent_writers(self) -> None:
        name = CONCURRENT_WRITERS
        workers = self.samples.workers
        save, load = self.fresh(name)
        if self.sync:
            outcomes = _in_threads(save, workers)
        else:
            outcomes = await asyncio.gather(*(self.worker(save, work) for work in workers))
        accepted: list[WorkflowCheckpoint] = []
        refused: list[tuple[WorkflowCheckpoint, BaseException]] = []
        for work, outcome in zip(workers, outcomes, strict=True):
            for checkpoint, problem in zip(work, outcome, strict=True):
                if problem is None:
                    accepted.append(checkpoint)
                elif isinstance(problem, self.stale_error):
                    refused.append((checkpoint, problem))
                else:
                    raise self.not_stale(len(workers), checkpoint, problem)
        if not any(checkpoint.seq == LAST_SEQ for checkpoint in accepted):
            # The first seq 4 to arrive is newer than anything stored: it must be saved.
            checkpoint, problem = next((c, p) for c, p in refused if c.seq == LAST_SEQ)
            raise self.not_stale(len(workers), checkpoint, problem)
        when = f"after {len(workers)} writers each saved seq 1 to 4 of one run at once"
        got = await self.load(name, load, when)
        top = LAST_SEQ
        candidates = [c.to_dict() for c in accepted if c.seq == top]
        if isinstance(got, WorkflowCheckpoint) and got.to_dict() in candidates:
            return
        msg = (
            f"{when}, load() returned {describe(got)}, expected one of the {len(candidates)} "
            f"checkpoints with seq={top} whose save returned, whole"
        )
        raise StoreConformanceError(name, msg)

    def not_stale(
        self, writers: int, checkpoint: WorkflowCheckpoint, problem: BaseException
    ) -> StoreConformanceError:
        msg = (
            f"while {writers} writers saved at once, save(seq={checkpoint.seq}) raised "
            f"{type(problem).__name__}: {problem}; "
            + (
                "yet no other writer's seq 4 was saved, so it was not stale"
                if isinstance(problem, self.stale_error)
                else f"expected it to return or raise {self.stale_error.__name__}"
            )
        )
        error = StoreConformanceError(CONCURRENT_WRITERS, msg)
        error.__cause__ = problem
        return error

    async def worker(
        self, save: Save, work: tuple[WorkflowCheckpoint, ...]
    ) -> list[BaseException | None]:
        """One writer of `concurrent_writers` as a task: None when saved, else what it raised."""
        outcome: list[BaseException | None] = []
        for checkpoint in work:
            await asyncio.sleep(0)  # let the other writers' saves interleave with this one
            try:
                await self.call(save, checkpoint)
            except _AwaitableInSyncCheckError:  # pragma: no cover - only the sync kit raises it
                raise
            except Exception as exc:  # noqa: BLE001 - judged with the others' outcomes
                outcome.append(exc)
            else:
                outcome.append(None)
        return outcome


def _in_threads(
    save: Save, workers: tuple[tuple[WorkflowCheckpoint, ...], ...]
) -> list[list[BaseException | None]]:
    """Run each worker's saves in its own thread, all released at once by a barrier."""
    outcomes: list[list[BaseException | None]] = [[] for _ in workers]
    start = threading.Barrier(len(workers))

    def work(number: int) -> None:
        start.wait()
        for checkpoint in workers[number]:
            try:
                result = save(checkpoint)
            except Exception as exc:  # noqa: BLE001 - judged with the others' outcomes
                outcomes[number].append(exc)
                continue
            if inspect.isawaitable(result):
                if inspect.iscoroutine(result):
                    result.close()
                msg = "save returned an awaitable; use 'await check_store_async(...)'"
                outcomes[number].append(TypeError(msg))
            else:
                outcomes[number].append(None)

    threads = [threading.Thread(target=work, args=(number,)) for number in range(len(workers))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return outcomes


def _name(function: Callable[..., object]) -> str:
    return f"{getattr(function, '__qualname__', type(function).__name__)}()"


def drive(coroutine: Coroutine[Any, Any, None]) -> None:
    """Run a coroutine that never suspends (its stores are all synchronous)."""
    try:
        coroutine.send(None)
    except StopIteration:
        return
    coroutine.close()  # pragma: no cover - call() refuses awaitables when sync
    msg = "internal error: the synchronous check suspended"  # pragma: no cover
    raise RuntimeError(msg)  # pragma: no cover
