"""Matrix soak: thousands of generated cases (options, stores and faults together), a summary.

A manual run, not part of the test suite. It runs the cases of
``tests/matrix_harness.py`` (``tests/run/test_matrix.py`` runs 160 of them, and a
few against PostgreSQL, in CI) over many more seeds, in a process pool::

    python benchmarks/matrix_soak.py --cases 10000 --seed 0 --jobs 2

Each case draws a workflow, run options, a store (a list, a JSON file, a JSON
Lines file, SQLite) and a fault, runs it, resumes it to the end and checks every
promise; see ``tests/matrix_harness.py``. On top of the harness's checks, the
soak holds every cancelled run to ending within ``--cancel-bound`` seconds of
``task.cancel()`` (1 s by default; the test suite only catches hangs). Prints a
Markdown summary (cases per store, per fault and ending, the slowest
cancel-to-end, the violations) and exits with status 1 if any promise was
broken, printing the first broken cases.

With ``--processes N`` it runs N cases of the process tier instead
(``tests/matrix_processes.py``): each case's workflow runs in a process of its
own, SIGKILLed or sent SIGTERM (in turn) after a seeded number of its lines,
against SQLite and a JSON file in turn, then resumed in the soak's process::

    python benchmarks/matrix_soak.py --processes 500 --seed 0 --jobs 2
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from collections import Counter
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))  # the harness is a test helper, in tests/

from matrix_harness import FAULTS, STORES, Report, run_case_report  # noqa: E402
from matrix_processes import (  # noqa: E402
    PROCESS_STORES,
    SIGNALS,
    ProcessReport,
    profile,
    run_process_report,
)


def one(seed: int) -> Report:
    """The report of one case (run in a worker process)."""
    return run_case_report(seed)


def soak(cases: int, first: int, jobs: int) -> tuple[list[Report], float]:
    """Run ``cases`` seeds from ``first`` on ``jobs`` processes; the reports and seconds."""
    began = time.perf_counter()
    seeds = range(first, first + cases)
    if jobs <= 1:
        reports = [one(seed) for seed in seeds]
    else:
        with ProcessPoolExecutor(max_workers=jobs) as pool:
            reports = list(pool.map(one, seeds, chunksize=16))
    return reports, time.perf_counter() - began


def one_process(drawn: tuple[int, int, str]) -> ProcessReport:
    """The report of one process case (run in a worker process, in a folder of its own)."""
    seed, signal, store = drawn
    with tempfile.TemporaryDirectory(prefix="matrix-process-") as folder:
        return run_process_report(seed, signal=signal, store_kind=store, folder=Path(folder))


def soak_processes(cases: int, first: int, jobs: int) -> tuple[list[ProcessReport], float]:
    """Run ``cases`` process cases from seed ``first`` on ``jobs`` processes."""
    began = time.perf_counter()
    drawn = profile(cases, first)
    if jobs <= 1:
        reports = [one_process(case) for case in drawn]
    else:
        with ProcessPoolExecutor(max_workers=jobs) as pool:
            reports = list(pool.map(one_process, drawn, chunksize=4))
    return reports, time.perf_counter() - began


def process_summary(reports: list[ProcessReport], seconds: float) -> list[str]:
    """The Markdown summary of the process tier's reports."""
    names = [signal.name for signal in SIGNALS]
    lines = [
        "| signal | store | cases | resumed from a checkpoint | broken |",
        "|---|---|---:|---:|---:|",
    ]
    for name in names:
        for store in PROCESS_STORES:
            mine = [r for r in reports if r.signal == name and r.store == store]
            resumed = sum(r.resumed_from is not None for r in mine)
            broken = sum(1 for r in mine if r.problems)
            lines.append(f"| {name} | {store} | {len(mine)} | {resumed} | {broken} |")
    endings = Counter((r.signal, f"{r.ending} ({r.returncode})") for r in reports)
    kinds = sorted({ending for _, ending in endings})
    lines += ["", f"| signal | {' | '.join(kinds)} |", "|---|" + "---:|" * len(kinds)]
    lines += [
        f"| {name} | {' | '.join(str(endings[name, kind]) for kind in kinds)} |" for name in names
    ]
    landed = Counter(r.landed for r in reports)
    lines += ["", "| the signal was sent | cases |", "|---|---:|"]
    lines += [f"| {where} | {count} |" for where, count in sorted(landed.items())]
    lines += [
        "",
        f"- cases: {len(reports)} in {seconds:.1f} s",
        (
            f"- attempts the workers started that no ledger row records: "
            f"{sum(r.lost for r in reports)}; unknown rows: {sum(r.unknown for r in reports)}"
        ),
        f"- cases with a broken promise: {sum(1 for r in reports if r.problems)}",
    ]
    return lines


def summary(reports: list[Report], seconds: float) -> list[str]:
    """The Markdown summary of the reports."""
    lines = ["| store | cases | cases with a broken promise |", "|---|---:|---:|"]
    stores = Counter(report.store for report in reports)
    broken = Counter(report.store for report in reports if report.problems)
    lines += [f"| {store} | {stores[store]} | {broken[store]} |" for store in STORES]
    endings = Counter((report.fault, report.ending) for report in reports)
    names = sorted({ending for _, ending in endings})
    lines += ["", f"| fault | {' | '.join(names)} |", "|---|" + "---:|" * len(names)]
    lines += [
        f"| {fault} | {' | '.join(str(endings[fault, name]) for name in names)} |"
        for fault in FAULTS
    ]
    waits = [report.cancel_to_end for report in reports if report.cancel_to_end is not None]
    slowest = max(waits, default=0.0)
    lines += [
        "",
        f"- cases: {len(reports)} in {seconds:.1f} s",
        f"- cancelled runs: {len(waits)}, slowest from cancel() to the end: {slowest:.3f} s",
        f"- resumes: {sum(report.resumes for report in reports)}",
        f"- cases with a broken promise: {sum(1 for report in reports if report.problems)}",
    ]
    return lines


def main() -> int:
    """Parse the arguments, soak, print the summary; 1 if a promise broke."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", type=int, default=2000, help="how many seeds")
    parser.add_argument("--seed", type=int, default=0, help="first seed")
    parser.add_argument("--jobs", type=int, default=2, help="worker processes")
    parser.add_argument(
        "--cancel-bound", type=float, default=1.0, help="seconds from cancel() to the end"
    )
    parser.add_argument("--show", type=int, default=20, help="broken cases to print")
    parser.add_argument(
        "--processes", type=int, default=0, help="run this many process-tier cases instead"
    )
    args = parser.parse_args()
    if args.processes:
        process_reports, seconds = soak_processes(args.processes, args.seed, args.jobs)
        print("\n".join(process_summary(process_reports, seconds)))
        broken = [r for r in process_reports if r.problems]
        for process_report in broken[: args.show]:
            for problem in process_report.problems:
                print(f"- {problem}")
        return 1 if broken else 0
    reports, seconds = soak(args.cases, args.seed, args.jobs)
    for report in reports:
        if report.cancel_to_end is not None and report.cancel_to_end > args.cancel_bound:
            report.problems.append(
                f"seed {report.seed} ({report.case}): the run took {report.cancel_to_end:.3f} s "
                f"from cancel() to its end (more than {args.cancel_bound} s)"
            )
    print("\n".join(summary(reports, seconds)))
    problems = [problem for report in reports for problem in report.problems]
    shown = [report for report in reports if report.problems][: args.show]
    for report in shown:
        for problem in report.problems:
            print(f"- {problem}")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
