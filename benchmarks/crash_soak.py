"""Crash soak: SIGKILL the crash-test worker hundreds of times and print a Markdown summary.

A manual run, not part of the test suite (pytest collects only ``tests/test_*.py``).
It uses the same harness as ``tests/run/test_crash.py``, just with more kills::

    python benchmarks/crash_soak.py --kills 300 --seed 1

Exits with status 1 if any guarantee was broken (see ``docs/reliability.md``).
POSIX only (SIGKILL).
"""

from __future__ import annotations

import argparse
import os
import platform
import shlex
import statistics
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))  # the harness is a test helper, in tests/

from crash_harness import CampaignReport, crash_campaign  # noqa: E402


def summary(report: CampaignReport, command: str) -> str:
    """The report as a Markdown table, with the figures docs/reliability.md quotes."""
    in_flight = report.in_flight_per_kill
    finished = report.finished_unrecorded_per_kill
    episodes = report.episodes
    rows = [
        ("kills (SIGKILL)", str(report.kills)),
        ("worker runs (killed + finished)", str(report.runs)),
        ("episodes run to completion", str(episodes)),
        ("recorded steps re-executed", str(len(report.recorded_reexecuted))),
        ("unreadable checkpoints", f"{len(report.unreadable)} of {report.checkpoints_read}"),
        ("recorded outputs lost or changed", str(len(report.lost_or_changed))),
        ("resumes from a different checkpoint than the file", str(len(report.resume_mismatches))),
        (
            "steps started more often than once + once per kill in flight",
            str(len(report.extra_executions)),
        ),
        ("idempotency keys that changed", str(len(report.key_changes))),
        (
            "final outputs and usage equal to an uninterrupted run",
            f"{episodes - report.mismatched_finals} of {episodes}",
        ),
        (
            "in-flight steps re-run per kill (mean / max)",
            f"{statistics.fmean(in_flight):.2f} / {max(in_flight)}" if in_flight else "n/a",
        ),
        (
            "... of which had finished, batch not yet checkpointed (mean)",
            f"{statistics.fmean(finished):.2f}" if finished else "n/a",
        ),
        (
            "kills that landed inside a checkpoint write",
            str(report.kills_inside_a_checkpoint_write),
        ),
        ("... of which left a torn temp file", str(report.torn_temp_files)),
        ("wall time", f"{report.wall_seconds:.1f} s"),
    ]
    lines = [
        f"Command: `{command}`",
        "",
        (
            f"Machine: {os.cpu_count()} cores, Python {platform.python_version()}, "
            f"{platform.system()} {platform.release()}"
        ),
        "",
        "| measure | value |",
        "|---|---|",
        *(f"| {name} | {value} |" for name, value in rows),
    ]
    details = (
        report.unreadable
        + report.recorded_reexecuted
        + report.lost_or_changed
        + report.resume_mismatches
        + report.extra_executions
        + report.key_changes
    )
    if details:
        lines += ["", "Violations:", *(f"- {line}" for line in details)]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--kills", type=int, default=300, help="SIGKILLs to send (default 300)")
    parser.add_argument("--seed", type=int, default=1, help="seed of the kill moments")
    args = parser.parse_args(argv)
    arguments = sys.argv[1:] if argv is None else argv
    command = shlex.join(["python", "benchmarks/crash_soak.py", *arguments])
    with tempfile.TemporaryDirectory(prefix="crash-soak-") as folder:
        report = crash_campaign(Path(folder), seed=args.seed, kills=args.kills)
    print(summary(report, command))
    return 1 if report.violations else 0


if __name__ == "__main__":
    sys.exit(main())
