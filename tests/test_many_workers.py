"""Many runs on a Dask cluster of process workers, one database; a worker dies mid-run.

Runs ``examples/many_workers.py`` on a real ``LocalCluster`` with two worker
processes. One run's ``report`` step SIGKILLs its own worker the first time it
runs; the cluster hands the run to a worker again, which resumes it from the
database: every step whose output was recorded before the kill ran exactly once.
"""

from __future__ import annotations

import importlib
import sys
from collections import Counter
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    from collections.abc import Iterator

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
RUNS = ("run-a", "run-b", "run-c")


@pytest.fixture
def client(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    """A cluster of two single-threaded worker processes that import the example."""
    monkeypatch.syspath_prepend(str(EXAMPLES))
    monkeypatch.setenv("PYTHONPATH", f"{EXAMPLES}:{':'.join(sys.path)}")
    dask: Any = importlib.import_module("dask")
    distributed: Any = importlib.import_module("distributed")
    scratch = tmp_path / "dask"
    scratch.mkdir()
    with (
        dask.config.set({"temporary-directory": str(scratch)}),
        distributed.LocalCluster(
            n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None
        ) as cluster,
        distributed.Client(cluster) as client,
    ):
        yield client


def executions(log: Path) -> Counter[tuple[str, str]]:
    """How many times each (run, step) body started, from the append-only log."""
    lines = log.read_text(encoding="utf-8").splitlines()
    return Counter((run, step) for run, step, _ in (line.split() for line in lines))


def test_a_run_whose_worker_dies_is_resumed_by_another_without_paying_twice(
    client: Any, tmp_path: Path
) -> None:
    """All runs finish; the killed step ran twice, every other step exactly once."""
    many_workers: Any = importlib.import_module("many_workers")
    database = str(tmp_path / "runs.db")
    log = str(tmp_path / "executions.log")
    futures = {
        run_id: client.submit(
            many_workers.run_one,
            run_id,
            database,
            log,
            "report" if run_id == "run-b" else None,
            pure=False,
            retries=0,
        )
        for run_id in RUNS
    }
    results = {run_id: future.result(timeout=120) for run_id, future in futures.items()}
    for run_id, result in results.items():
        assert result["outputs"]["report"] == (
            "report(summary_en(fetch()),summary_fr(fetch()))"
        ), run_id
        assert result["outputs"]["fetch"] == "fetch()"
    counts = executions(Path(log))
    steps = ("fetch", "summary_en", "summary_fr", "report")
    expected = {(run_id, step): 1 for run_id in RUNS for step in steps}
    expected["run-b", "report"] = 2  # killed in flight, then run again
    assert dict(counts) == expected
    resumed = results["run-b"]
    # The worker that took over restored what was recorded before the kill.
    assert resumed["restored"] == ["fetch", "summary_en", "summary_fr"]
    assert resumed["executed"] == ["report"]
    # Token usage counts each recorded step once: four steps of 100 input tokens.
    assert {run_id: result["cost"] for run_id, result in results.items()} == dict.fromkeys(
        RUNS, 400
    )
