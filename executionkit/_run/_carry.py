"""Usage reported in another process (a process pool, a Dask worker) travels back.

A plain step sent to a process or cluster executor runs wrapped in `Carried`:
there ``current_step()`` gives the step's name, attempt and item key, and
`StepContext.add_usage` collects usage locally. The usage comes back with the
result (`Returned`) or the exception (`CarriedError`), and `unwrap` books it in
the run's ledger before anything else sees the outcome. When nothing comes back
(the worker died: a broken pool), the attempt is booked as ``"unknown"``.
"""

from __future__ import annotations

from concurrent.futures import BrokenExecutor
from typing import TYPE_CHECKING, Any

from executionkit._checkpoint._ledger import ZERO, LedgerEntry
from executionkit._run._step_context import CURRENT_STEP, StepContext

if TYPE_CHECKING:
    import asyncio

    from executionkit._record._ledger import Ledger
    from executionkit._types import TokenUsage

Identity = tuple[str, str, int, int, "str | None"]
"""(step name, run_id, attempt, max attempts, item key)."""


class _Collect:
    """The host of a step context in another process: it only collects usage."""

    __slots__ = ("spent",)

    def __init__(self) -> None:
        self.spent: list[tuple[str | None, TokenUsage]] = []

    def progress_of(self, name: str) -> Any:
        del name

    def save_progress(self, name: str, value: object) -> asyncio.Future[None]:
        del value
        msg = (
            f"step {name!r}: save_progress() is not available in a process or cluster "
            f"executor; use a thread executor or an async step to save progress"
        )
        raise RuntimeError(msg)

    def add_usage(
        self, name: str, key: str | None, attempt: int, usage: TokenUsage, model: str | None
    ) -> None:
        del name, key, attempt
        self.spent.append((model, usage))

    def stream(self, name: str, key: str | None, attempt: int, text: str) -> None:
        """Streamed text cannot reach the run from another process: dropped."""
        del name, key, attempt, text


class Returned:
    """A result that comes back with the usage reported while computing it."""

    __slots__ = ("spent", "value")

    def __init__(self, value: Any, spent: list[tuple[str | None, TokenUsage]]) -> None:
        self.value = value
        self.spent = spent

    def __reduce__(self) -> tuple[Any, ...]:
        return (Returned, (self.value, self.spent))


class CarriedError(Exception):
    """An exception that comes back with the usage reported before it was raised."""


class Carried:
    """A step's function, called in another process with ``current_step()`` set."""

    __slots__ = ("identity", "run")

    def __init__(self, run: Any, identity: Identity) -> None:
        self.run = run
        self.identity = identity

    def __reduce__(self) -> tuple[Any, ...]:
        return (Carried, (self.run, self.identity))

    def __call__(self, *args: Any) -> Any:
        name, run_id, attempt, max_attempts, key = self.identity
        collect = _Collect()
        token = CURRENT_STEP.set(StepContext(collect, name, run_id, attempt, max_attempts, key))
        try:
            value = self.run(*args)
        except Exception as exc:
            if not collect.spent:
                raise
            raise CarriedError(exc, collect.spent) from exc
        finally:
            CURRENT_STEP.reset(token)
        return Returned(value, collect.spent) if collect.spent else value


def identity_now() -> Identity | None:
    """The identity of the attempt running in this context, or None outside one."""
    current = CURRENT_STEP.get(None)
    if current is None:
        return None
    if isinstance(current, StepContext):
        return (
            current.name,
            current.run_id,
            current.attempt,
            current.max_attempts,
            current.item_key,
        )
    _host, name, run_id, attempt, max_attempts, *key = current
    return (name, run_id, attempt, max_attempts, key[0] if key else None)


def unwrap(work: asyncio.Future[Any], ledger: Ledger, identity: Identity) -> Any:
    """The outcome of carried work, its usage booked first; raises what the step raised."""
    name, _run_id, attempt, _max, key = identity
    try:
        result = work.result()
    except CarriedError as carried:
        original, spent = carried.args
        for model, usage in spent:
            ledger.add(name, key, attempt, usage, model)
        raise original from carried.__cause__
    except BrokenExecutor:
        # The worker died: whatever it spent never came back.
        ledger.entries.append(LedgerEntry(name, key, attempt, "unknown", None, ZERO))
        raise
    if type(result) is Returned:
        for model, usage in result.spent:
            ledger.add(name, key, attempt, usage, model)
        return result.value
    return result
