"""Many runs on many workers against one database: any worker runs or resumes any run.

Each run is named by its ``run_id``. A worker given a run loads that run's latest
checkpoint from the shared database and resumes it, or starts it if there is none,
saving each step as it completes. When a worker dies in the middle of a run
(killed, out of memory, its machine gone), the cluster hands the run to another
worker, which resumes it: no recorded step runs again.

The store claims the run for the worker before any step starts, so a run handed
to two workers at once runs on one of them: the other is refused before anything
runs, and `run_one` reports who owns the run instead of failing. The claim dies
with its owner, so a killed worker's run can be resumed elsewhere at once.

With Dask (``pip install "dask[distributed]"``), one database for every worker::

    from distributed import Client

    client = Client("tcp://scheduler:8786")
    futures = [
        client.submit(run_one, run_id, "postgresql://app@db/runs", pure=False)
        for run_id in ("report-2026-11", "report-2026-12")
    ]
    print([future.result()["status"] for future in futures])

The location is a PostgreSQL connection string (``executionkit[postgres]``) or, on
one machine, the path of an SQLite database. ``tests/run/test_many_workers.py`` runs
this on a Dask ``LocalCluster``, hands one run to both workers at once and kills
the worker that owns it in the middle of the run.
"""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path
from typing import Any

from executionkit import (
    PatternResult,
    RunClaimedError,
    StaleCheckpointError,
    Step,
    TokenUsage,
    Workflow,
)
from executionkit.stores import SQLiteStore

STALE_ATTEMPTS = 3
"""How many times `run_one` loads a run again when other workers keep getting ahead."""


def open_store(location: str) -> Any:
    """The store at ``location``: a PostgreSQL connection string, else an SQLite file."""
    if location.startswith(("postgresql://", "postgres://")):
        import executionkit.stores  # noqa: PLC0415 - the postgres extra is needed only here

        postgres_store: Any = getattr(executionkit.stores, "PostgresStore")  # noqa: B009
        return postgres_store(location)
    return SQLiteStore(location)


def report_workflow(
    log: str | None = None, die_in: str | None = None, gate: str | None = None
) -> Workflow:
    """A small report: fetch, two summaries in parallel, then a combined report.

    For the test only: ``log`` (a file) gets a ``run_id step pid start`` line when a
    step body starts and an ``... end`` line when it ends; ``die_in`` names a step
    that kills its own worker process the first time it runs (after logging
    ``... killed``); and ``fetch`` waits until the file ``gate`` exists.
    """

    def note(run_id: str, name: str, event: str) -> None:
        if log is not None:
            fd = os.open(log, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
            try:
                os.write(fd, f"{run_id} {name} {os.getpid()} {event}\n".encode())
            finally:
                os.close(fd)

    def step(name: str, *deps: str) -> Step:
        def run(ctx: Any) -> PatternResult[str]:
            run_id = ctx["run"]
            note(run_id, name, "start")
            if gate is not None and name == "fetch":
                wait_for(Path(gate))
            if die_in == name and log is not None:
                marker = Path(f"{log}.{run_id}.died")
                if not marker.exists():
                    marker.touch()
                    note(run_id, name, "killed")
                    os.kill(os.getpid(), signal.SIGKILL)  # the worker dies mid-step
            parts = ",".join(str(ctx[dep]) for dep in deps)
            note(run_id, name, "end")
            return PatternResult(f"{name}({parts})", cost=TokenUsage(100, 10, 1))

        return Step(name, run, depends_on=deps)

    return Workflow(
        [
            step("fetch"),
            step("summary_en", "fetch"),
            step("summary_fr", "fetch"),
            step("report", "summary_en", "summary_fr"),
        ],
        inputs=("run",),
    )


def wait_for(path: Path, timeout: float = 60.0) -> None:
    """Return once ``path`` exists; raise `TimeoutError` after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while not path.exists():
        if time.monotonic() > deadline:
            msg = f"{path} did not appear within {timeout} s"
            raise TimeoutError(msg)
        time.sleep(0.005)


def run_one(
    run_id: str,
    location: str,
    log: str | None = None,
    die_in: str | None = None,
    gate: str | None = None,
) -> dict[str, Any]:
    """Run or resume ``run_id`` against the store at ``location``; say what happened.

    The returned dict's ``status`` is one of:

    - ``"finished"``: the run is complete, with its ``outputs``, the steps
      ``restored`` from the store and ``executed`` here, the input tokens of its
      ``cost``, and ``stale_starts``: how many times another worker saved the run
      between this worker's load and its claim (each time, it loaded again).
    - ``"owned"``: another live worker owns the run (``owner_pid`` on
      ``owner_host``, None when its details could not be read); nothing ran here.
    - ``"behind"``: other workers got ahead ``STALE_ATTEMPTS`` times in a row.

    Non-finished statuses carry a one-line ``message``.
    """
    store = open_store(location)
    workflow = report_workflow(log, die_in, gate)
    for stale_starts in range(STALE_ATTEMPTS):
        try:
            result = workflow.run_sync(
                {"run": run_id},
                checkpoint_fn=store,  # claims the run before any step starts
                resume_from=store.load(run_id),
                run_id=run_id,
                checkpoint_every="step",  # each paid-for step is saved as soon as it completes
            )
        except RunClaimedError as error:
            owner = error.owner
            who = "another process" if owner is None else f"pid {owner.pid} on host {owner.host}"
            return {
                "status": "owned",
                "owner_pid": None if owner is None else owner.pid,
                "owner_host": None if owner is None else owner.host,
                "message": f"run {run_id!r} is owned by {who}; nothing ran",
            }
        except StaleCheckpointError:
            continue  # another worker saved the run after our load: load it again
        return {
            "status": "finished",
            "outputs": dict(result.outputs),
            "restored": list(result.restored),
            "executed": list(result.executed),
            "cost": result.cost.input_tokens,
            "stale_starts": stale_starts,
        }
    return {
        "status": "behind",
        "message": (
            f"run {run_id!r}: other workers saved it ahead of this one {STALE_ATTEMPTS} "
            f"times; try again later"
        ),
    }


if __name__ == "__main__":
    import sys
    import tempfile

    database = sys.argv[1] if len(sys.argv) > 1 else str(Path(tempfile.mkdtemp()) / "runs.db")
    for name in ("report-2026-11", "report-2026-12"):
        outcome = run_one(name, database)
        print(name, outcome["outputs"]["report"] if "outputs" in outcome else outcome["message"])
