"""What claiming a run costs: at its start, and per step (nothing, by design).

For each store that grants claims (`JsonFileStore`, `JsonLinesStore`,
`SQLiteStore`, and `PostgresStore` with ``--postgres auto`` or a connection
string), two measurements, each as a ratio or a difference within one round,
rounds interleaved, medians with [min-max]:

- **claim + release**: the store's ``claim(run_id)`` entered and left, in
  microseconds, against the same store's ``load`` of the run (the read every
  resume makes anyway) as the baseline in the same round. The target is at most
  1,000 µs.
- **per step**: a chain of ``--steps`` no-op steps checkpointed after every step
  (``checkpoint_every="step"``) into the store, run once through the store
  itself (it claims) and once through a wrapper that hides ``claim`` (it does
  not), in microseconds per step and as the ratio claimed / unclaimed. The
  target is the claim adding nothing per step: a ratio of 1 within noise.

::

    python benchmarks/claims.py [--rounds 5] [--steps 200] [--postgres auto|URI]
"""

from __future__ import annotations

import argparse
import contextlib
import statistics
import tempfile
import time
import uuid
from pathlib import Path
from typing import TYPE_CHECKING, Any

import source

source.put_on_path()

from executionkit import Step, Workflow, WorkflowCheckpoint  # noqa: E402
from executionkit.stores import JsonFileStore, JsonLinesStore, SQLiteStore  # noqa: E402

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator

CLAIMS = 200  # claim + release pairs per round


class Unclaimed:
    """The store as a plain checkpoint_fn: no ``claim`` for the run to find."""

    def __init__(self, store: Any) -> None:
        self.store = store

    def __call__(self, checkpoint: WorkflowCheckpoint) -> None:
        self.store(checkpoint)


def chain(steps: int) -> Workflow:
    def step(ctx: Any) -> int:
        del ctx
        return 1

    names = [f"s{n}" for n in range(steps)]
    return Workflow(
        Step(name, step, depends_on=() if n == 0 else (names[n - 1],))
        for n, name in enumerate(names)
    )


def makers(folder: Path, postgres: str | None) -> dict[str, Callable[[str], Any]]:
    found: dict[str, Callable[[str], Any]] = {
        "JsonFileStore": lambda tag: JsonFileStore(folder / f"{tag}.json"),
        "JsonLinesStore": lambda tag: JsonLinesStore(folder / f"{tag}.jsonl"),
        "SQLiteStore": lambda _tag: SQLiteStore(folder / "runs.db"),
    }
    if postgres is not None:
        from executionkit.stores import PostgresStore  # noqa: PLC0415

        found["PostgresStore"] = lambda _tag: PostgresStore(postgres)
    return found


def load(store: Any, run_id: str) -> Any:
    if isinstance(store, JsonFileStore | JsonLinesStore):
        return store.load()
    return store.load(run_id)


def claim_cost(make: Callable[[str], Any]) -> tuple[float, float]:
    """Microseconds per claim + release, and per load of the run (the baseline)."""
    tag = uuid.uuid4().hex
    store = make(tag)
    chain(3).run_sync(checkpoint_fn=store, run_id=tag)
    with store.claim(tag):  # first use: tables, folders, connections
        pass
    began = time.perf_counter()
    for _ in range(CLAIMS):
        with store.claim(tag):
            pass
    claimed = (time.perf_counter() - began) / CLAIMS * 1e6
    began = time.perf_counter()
    for _ in range(CLAIMS):
        load(store, tag)
    loaded = (time.perf_counter() - began) / CLAIMS * 1e6
    getattr(store, "close", lambda: None)()
    return claimed, loaded


def per_step(make: Callable[[str], Any], steps: int, *, claimed: bool) -> float:
    tag = uuid.uuid4().hex
    store = make(tag)
    fn = store if claimed else Unclaimed(store)
    workflow = chain(steps)
    began = time.perf_counter()
    workflow.run_sync(checkpoint_fn=fn, run_id=tag, checkpoint_every="step")
    took = (time.perf_counter() - began) / steps * 1e6
    getattr(store, "close", lambda: None)()
    return took


def spread(values: list[float], digits: int = 0) -> str:
    median = statistics.median(values)
    return f"{median:,.{digits}f} [{min(values):,.{digits}f}-{max(values):,.{digits}f}]"


@contextlib.contextmanager
def postgres_target(option: str | None) -> Iterator[str | None]:
    if option is None:
        yield None
    elif option == "auto":
        import pg_server  # noqa: PLC0415

        with pg_server.throwaway_server() as uri:
            yield uri
    else:
        yield option


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--postgres", default=None, help="'auto' or a connection string")
    args = parser.parse_args()
    with postgres_target(args.postgres) as uri, tempfile.TemporaryDirectory() as temp:
        found = makers(Path(temp), uri)
        claims: dict[str, list[float]] = {name: [] for name in found}
        loads: dict[str, list[float]] = {name: [] for name in found}
        steps: dict[str, list[float]] = {name: [] for name in found}
        plain: dict[str, list[float]] = {name: [] for name in found}
        ratios: dict[str, list[float]] = {name: [] for name in found}
        for round_ in range(args.rounds):
            for name, make in found.items():
                claimed, loaded = claim_cost(make)
                claims[name].append(claimed)
                loads[name].append(loaded)
                order = (True, False) if round_ % 2 == 0 else (False, True)
                took = {flag: per_step(make, args.steps, claimed=flag) for flag in order}
                steps[name].append(took[True])
                plain[name].append(took[False])
                ratios[name].append(took[True] / took[False])
    print(
        f"| store | claim + release, µs | load of the run, µs | per step claimed, µs "
        f"({args.steps} steps) | per step unclaimed, µs | claimed ÷ unclaimed |"
    )
    print("|---|---:|---:|---:|---:|---:|")
    for name in found:
        print(
            f"| {name} | {spread(claims[name])} | {spread(loads[name])} | "
            f"{spread(steps[name])} | {spread(plain[name])} | {spread(ratios[name], 2)} |"
        )


if __name__ == "__main__":
    main()
