"""Many runs on many workers against one database: any worker runs or resumes any run.

Each run is named by its ``run_id``. A worker given a run loads that run's latest
checkpoint from the shared database and resumes it, or starts it if there is none,
saving each step as it completes. When a worker dies in the middle of a run
(killed, out of memory, its machine gone), the cluster hands the run to another
worker, which resumes it: no recorded step runs again.

With Dask (``pip install "dask[distributed]"``), one database for every worker::

    from distributed import Client

    client = Client("tcp://scheduler:8786")
    futures = [
        client.submit(run_one, run_id, "postgresql://app@db/runs", pure=False)
        for run_id in ("report-2026-11", "report-2026-12")
    ]
    print([future.result() for future in futures])

The location is a PostgreSQL connection string (``executionkit[postgres]``) or, on
one machine, the path of an SQLite database. ``tests/test_many_workers.py`` runs
this on a Dask ``LocalCluster`` and kills a worker in the middle of a run.
"""

from __future__ import annotations

import os
import signal
from pathlib import Path
from typing import Any

from executionkit import PatternResult, Step, TokenUsage, Workflow
from executionkit.stores import SQLiteStore


def open_store(location: str) -> Any:
    """The store at ``location``: a PostgreSQL connection string, else an SQLite file."""
    if location.startswith(("postgresql://", "postgres://")):
        import executionkit.stores  # noqa: PLC0415 - the postgres extra is needed only here

        postgres_store: Any = getattr(executionkit.stores, "PostgresStore")  # noqa: B009
        return postgres_store(location)
    return SQLiteStore(location)


def report_workflow(log: str | None = None, die_in: str | None = None) -> Workflow:
    """A small report: fetch, two summaries in parallel, then a combined report.

    ``log`` (a file) gets a line per step body that ran, and ``die_in`` names a step
    that kills its own worker process the first time it runs: both only for the test.
    """

    def note(run_id: str, name: str) -> None:
        if log is not None:
            fd = os.open(log, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
            try:
                os.write(fd, f"{run_id} {name} {os.getpid()}\n".encode())
            finally:
                os.close(fd)

    def step(name: str, *deps: str) -> Step:
        def run(ctx: Any) -> PatternResult[str]:
            run_id = ctx["run"]
            note(run_id, name)
            if die_in == name and log is not None:
                marker = Path(f"{log}.{run_id}.died")
                if not marker.exists():
                    marker.touch()
                    os.kill(os.getpid(), signal.SIGKILL)  # the worker dies mid-step
            parts = ",".join(str(ctx[dep]) for dep in deps)
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


def run_one(
    run_id: str, location: str, log: str | None = None, die_in: str | None = None
) -> dict[str, Any]:
    """Run or resume ``run_id`` against the store at ``location``; return its outputs."""
    store = open_store(location)
    result = report_workflow(log, die_in).run_sync(
        {"run": run_id},
        checkpoint_fn=store,
        resume_from=store.load(run_id),
        run_id=run_id,
        checkpoint_every="step",  # each paid-for step is saved as soon as it completes
    )
    return {
        "outputs": dict(result.outputs),
        "restored": list(result.restored),
        "executed": list(result.executed),
        "cost": result.cost.input_tokens,
    }


if __name__ == "__main__":
    import sys
    import tempfile

    database = sys.argv[1] if len(sys.argv) > 1 else str(Path(tempfile.mkdtemp()) / "runs.db")
    for name in ("report-2026-11", "report-2026-12"):
        print(name, run_one(name, database)["outputs"]["report"])
