"""SIGKILL campaign over `crash_worker`: kill at seeded random moments, resume, verify.

Shared by ``tests/run/test_crash.py`` (about 30 kills) and ``benchmarks/crash_soak.py``
(hundreds). The kill moment is chosen by counting the worker's events, never by time.

A campaign is a series of episodes. An episode starts the worker on a fresh folder,
reads its stdout, sends SIGKILL after a seeded random number of events, checks the
checkpoint file it left, and starts the worker again, until a run reaches ``done``.
Once the requested number of kills is reached, the current episode runs to the end.

What is checked, from the episode's event log and the checkpoint files:

- every checkpoint file read after a kill loads with `WorkflowCheckpoint.from_dict`;
- the steps a run says it resumed from are exactly those of the file left by the kill
  before it, and none of them starts again in that run (recorded steps re-executed);
- recorded outputs never disappear or change from one kill to the next;
- every step runs exactly once plus once per kill that caught it in flight (started
  but not recorded), and each step's idempotency key is the same on every run;
- the final outputs and token usage equal those of an uninterrupted run.
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from executionkit import ExecutionKitError, TokenUsage, WorkflowCheckpoint

if TYPE_CHECKING:
    from collections.abc import Sequence

TESTS = Path(__file__).resolve().parent
WORKER = TESTS / "crash_worker.py"
ROOT = TESTS.parent
# Kill after 1..MAX_KILL_EVENT events: an uninterrupted run prints 62 (1 + 24 * 2 + 6 * 2 + 1),
# so a run usually gets through zero to two of its six batches before the kill.
MAX_KILL_EVENT = 24
WATCHDOG_SECONDS = 60.0


class WorkerError(RuntimeError):
    """The worker ended in a way a SIGKILL or a finished run cannot explain."""


@dataclass
class RunLog:
    """The events of one worker process, parsed from the event log."""

    pid: int
    resumed_from: list[str]
    started: list[str] = field(default_factory=list)
    ended: list[str] = field(default_factory=list)
    keys: dict[str, str] = field(default_factory=dict)
    done: bool = False


@dataclass
class CampaignReport:
    """Everything a campaign measured; the lists of violations must all be empty."""

    kills: int = 0
    episodes: int = 0
    runs: int = 0
    checkpoints_read: int = 0
    kills_inside_a_checkpoint_write: int = 0
    torn_temp_files: int = 0
    in_flight_per_kill: list[int] = field(default_factory=list)
    finished_unrecorded_per_kill: list[int] = field(default_factory=list)
    unreadable: list[str] = field(default_factory=list)
    recorded_reexecuted: list[str] = field(default_factory=list)
    resume_mismatches: list[str] = field(default_factory=list)
    lost_or_changed: list[str] = field(default_factory=list)
    extra_executions: list[str] = field(default_factory=list)
    key_changes: list[str] = field(default_factory=list)
    final_outputs: list[dict[str, Any]] = field(default_factory=list)
    final_costs: list[TokenUsage] = field(default_factory=list)
    reference_outputs: dict[str, Any] = field(default_factory=dict)
    reference_cost: TokenUsage = field(default_factory=TokenUsage)
    wall_seconds: float = 0.0

    @property
    def mismatched_finals(self) -> int:
        """Episodes whose final outputs or usage differ from the uninterrupted run's."""
        return sum(
            outputs != self.reference_outputs or cost != self.reference_cost
            for outputs, cost in zip(self.final_outputs, self.final_costs, strict=True)
        )

    @property
    def violations(self) -> int:
        """The number of broken guarantees found (0 when everything held)."""
        return (
            len(self.unreadable)
            + len(self.recorded_reexecuted)
            + len(self.resume_mismatches)
            + len(self.lost_or_changed)
            + len(self.extra_executions)
            + len(self.key_changes)
            + self.mismatched_finals
        )


# The worker's steps: "async", or "mixed" (every other one a plain function in a thread).
MODE = ["async"]


def run_worker(checkpoint: Path, events: Path, kill_after: int | None) -> bool:
    """Run the worker once; SIGKILL it after ``kill_after`` events. Return whether it was killed.

    Raises:
        WorkerError: If the worker exited on its own without finishing (a traceback).
    """
    env = dict(os.environ)
    env["CRASH_WORKER_MODE"] = MODE[0]
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    with subprocess.Popen(  # noqa: S603 - our own script, run by this interpreter
        [sys.executable, str(WORKER), str(checkpoint), str(events)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    ) as process:
        hung = threading.Event()

        def kill_hung_worker() -> None:  # a safety net against hangs, never a sync point
            hung.set()
            process.kill()

        watchdog = threading.Timer(WATCHDOG_SECONDS, kill_hung_worker)
        watchdog.start()
        try:
            assert process.stdout is not None
            for seen, _line in enumerate(process.stdout, start=1):
                if seen == kill_after:
                    process.send_signal(signal.SIGKILL)
                    break
            _, stderr = process.communicate()
        finally:
            watchdog.cancel()
    if hung.is_set():
        msg = f"worker did not end within {WATCHDOG_SECONDS:.0f} s and was killed:\n{stderr}"
        raise WorkerError(msg)
    if process.returncode == -signal.SIGKILL and kill_after is not None:
        return True
    if process.returncode != 0:
        msg = f"worker exited with {process.returncode}:\n{stderr}"
        raise WorkerError(msg)
    return False


def read_checkpoint(path: Path) -> WorkflowCheckpoint | None:
    """Load the checkpoint file the way a resuming process would; None if there is none.

    Raises:
        ValueError: If the file is not valid JSON or not a valid checkpoint.
    """
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return None
    return WorkflowCheckpoint.from_dict(json.loads(data))


def inspect_temp_file(temp: Path, report: CampaignReport) -> None:
    """Count a temp file the kill left behind (and whether it is torn), then remove it."""
    if not temp.exists():
        return
    report.kills_inside_a_checkpoint_write += 1
    try:
        read_checkpoint(temp)
    except (ValueError, ExecutionKitError):
        report.torn_temp_files += 1  # what the checkpoint would be without os.replace
    temp.unlink()  # so the next kill is not counted for it


def parse_events(text: str) -> list[RunLog]:
    """Split an event log into the runs of the worker processes that wrote it."""
    runs: list[RunLog] = []
    for line in text.splitlines():
        kind, _, rest = line.partition(" ")
        if kind == "run-start":
            pid, _, names = rest.partition(" ")
            runs.append(RunLog(int(pid), names.split(",") if names else []))
        elif kind == "step-start":
            name, _, key = rest.partition(" ")
            runs[-1].started.append(name)
            runs[-1].keys.setdefault(name, key)
        elif kind == "step-end":
            runs[-1].ended.append(rest)
        elif kind == "done":
            runs[-1].done = True
    return runs


def check_episode(
    label: str,
    steps: Sequence[str],
    runs: list[RunLog],
    recorded_after_kills: list[dict[str, Any]],
    report: CampaignReport,
) -> None:
    """Check one episode's runs against the checkpoints read after each of its kills.

    ``steps`` names every step of the workflow. ``recorded_after_kills[i]`` holds the
    outputs in the checkpoint file after run ``i`` was killed; the last run is the one
    that finished.
    """
    if len(runs) != len(recorded_after_kills) + 1 or not runs[-1].done:
        msg = f"{label}: {len(runs)} runs in the log for {len(recorded_after_kills)} kills"
        raise WorkerError(msg)
    expected_starts = dict.fromkeys(steps, 1)
    before: dict[str, Any] = {}
    for number, run in enumerate(runs):
        where = f"{label} run {number} (pid {run.pid})"
        if sorted(run.resumed_from) != sorted(before):
            report.resume_mismatches.append(
                f"{where} resumed from {run.resumed_from}, the file held {sorted(before)}"
            )
        report.recorded_reexecuted.extend(
            f"{where}: {name}" for name in run.started if name in set(run.resumed_from)
        )
        if number == len(recorded_after_kills):
            break
        after = recorded_after_kills[number]
        report.lost_or_changed.extend(
            f"{where}: {name}"
            for name, value in before.items()
            if name not in after or after[name] != value
        )
        in_flight = set(run.started) - set(after)
        report.in_flight_per_kill.append(len(in_flight))
        report.finished_unrecorded_per_kill.append(len(in_flight.intersection(run.ended)))
        for name in in_flight:
            expected_starts[name] += 1
        before = after
    starts: dict[str, int] = dict.fromkeys(steps, 0)
    for run in runs:
        for name in run.started:
            starts[name] += 1
    report.extra_executions.extend(
        f"{label}: {name} started {starts[name]} times, expected {expected_starts[name]}"
        for name in steps
        if starts[name] != expected_starts[name]
    )
    for name in steps:
        keys = {run.keys[name] for run in runs if name in run.keys}
        if len(keys) > 1:
            report.key_changes.append(f"{label}: {name} had idempotency keys {sorted(keys)}")


def run_episode(
    folder: Path, rng: random.Random, kills_left: int, report: CampaignReport
) -> tuple[WorkflowCheckpoint, int]:
    """Kill and restart the worker in ``folder`` until it finishes; return the final checkpoint.

    At most ``kills_left`` kills; returns how many were made.
    """
    folder.mkdir()
    checkpoint_path = folder / "checkpoint.json"
    events_path = folder / "events.log"
    recorded_after_kills: list[dict[str, Any]] = []
    kills = 0
    while True:
        kill_after = rng.randint(1, MAX_KILL_EVENT) if kills < kills_left else None
        report.runs += 1
        if not run_worker(checkpoint_path, events_path, kill_after):
            break
        kills += 1
        inspect_temp_file(checkpoint_path.with_name(checkpoint_path.name + ".tmp"), report)
        try:
            checkpoint = read_checkpoint(checkpoint_path)
        except (ValueError, ExecutionKitError) as exc:
            report.unreadable.append(f"{folder.name} kill {kills}: {exc}")
            checkpoint_path.unlink()  # start the episode over so the campaign goes on
            checkpoint = None
        if checkpoint is not None:
            report.checkpoints_read += 1
        recorded_after_kills.append({} if checkpoint is None else dict(checkpoint.outputs))
    final = read_checkpoint(checkpoint_path)
    if final is None:
        msg = f"{folder.name}: the worker finished without writing a checkpoint"
        raise WorkerError(msg)
    runs = parse_events(events_path.read_text(encoding="utf-8"))
    check_episode(folder.name, list(report.reference_outputs), runs, recorded_after_kills, report)
    return final, kills


def crash_campaign(
    tmp_path: Path, seed: int, kills: int, *, mode: str = "async"
) -> CampaignReport:
    """SIGKILL the worker ``kills`` times at seeded random moments; verify everything.

    Runs one uninterrupted reference run first, in its own folder. ``mode``:
    the worker's steps, ``"async"`` or ``"mixed"`` (plain functions in threads too).
    """
    MODE[0] = mode
    try:
        return _campaign(tmp_path, seed, kills)
    finally:
        MODE[0] = "async"


def _campaign(tmp_path: Path, seed: int, kills: int) -> CampaignReport:
    started = time.perf_counter()
    report = CampaignReport()
    reference = tmp_path / "reference"
    reference.mkdir()
    run_worker(reference / "checkpoint.json", reference / "events.log", None)
    expected = read_checkpoint(reference / "checkpoint.json")
    if expected is None:
        msg = "the reference run wrote no checkpoint"
        raise WorkerError(msg)
    report.reference_outputs = dict(expected.outputs)
    report.reference_cost = expected.cost
    runs = parse_events((reference / "events.log").read_text(encoding="utf-8"))
    check_episode("reference", list(expected.outputs), runs, [], report)
    rng = random.Random(seed)
    while True:
        final, made = run_episode(
            tmp_path / f"episode-{report.episodes:04d}", rng, kills - report.kills, report
        )
        report.episodes += 1
        report.kills += made
        report.final_outputs.append(dict(final.outputs))
        report.final_costs.append(final.cost)
        if report.kills >= kills:
            break
    report.wall_seconds = time.perf_counter() - started
    return report
