"""Proof by SIGKILL: a worker process killed at random moments loses nothing recorded.

The harness lives in ``crash_harness.py`` (shared with ``benchmarks/crash_soak.py``) and
the killed process in ``crash_worker.py``; see their docstrings.
"""

from __future__ import annotations

import json
import re
from typing import TYPE_CHECKING, Any

import pytest
from crash_harness import (
    CampaignReport,
    RunLog,
    check_episode,
    crash_campaign,
    parse_events,
    read_checkpoint,
    run_worker,
)
from crash_worker import (
    LAYERS,
    STEP_NAMES,
    WIDTH,
    build_workflow,
    dependencies,
    step_cost,
    write_json_atomically,
)

from executionkit import CheckpointFormatError, TokenUsage, WorkflowCheckpoint

if TYPE_CHECKING:
    from pathlib import Path

KILLS = 32
SEED = 20250601


@pytest.mark.parametrize("mode", ["async", "mixed"], ids=["async steps", "plain steps too"])
def test_sigkill_at_seeded_random_moments_loses_nothing_recorded(
    tmp_path: Path, mode: str
) -> None:
    """32 SIGKILLs: no recorded step reruns, no torn checkpoint, final state exact.

    "plain steps too": every other step is a plain function blocking in a worker thread.
    """
    report = crash_campaign(tmp_path, seed=SEED, kills=KILLS, mode=mode)
    assert report.kills == KILLS
    assert report.unreadable == []
    assert report.recorded_reexecuted == []
    assert report.resume_mismatches == []
    assert report.lost_or_changed == []
    assert report.extra_executions == []
    assert report.key_changes == []
    assert report.violations == 0
    # The kills exercised resumes: most left a checkpoint behind, some caught steps mid-flight.
    assert report.checkpoints_read > KILLS // 2
    assert len(report.in_flight_per_kill) == KILLS
    assert sum(report.in_flight_per_kill) > 0
    assert max(report.in_flight_per_kill) <= WIDTH  # only the running batch can be lost
    assert all(
        0 <= finished <= in_flight
        for finished, in_flight in zip(
            report.finished_unrecorded_per_kill, report.in_flight_per_kill, strict=True
        )
    )
    # Every episode ended with exactly the outputs and token usage of an uninterrupted run.
    assert report.episodes == len(report.final_outputs) >= 1
    assert report.runs == KILLS + report.episodes
    assert list(report.reference_outputs) == sorted(STEP_NAMES)
    assert report.reference_cost == sum(map(step_cost, range(len(STEP_NAMES))), TokenUsage())
    for outputs, cost in zip(report.final_outputs, report.final_costs, strict=True):
        assert outputs == report.reference_outputs
        assert cost == report.reference_cost
    print(
        f"\n{report.kills} kills in {report.episodes} episodes, "
        f"{report.checkpoints_read} checkpoints read back, "
        f"{report.kills_inside_a_checkpoint_write} kills inside a checkpoint write, "
        f"{sum(report.in_flight_per_kill) / KILLS:.2f} in-flight steps re-run per kill "
        f"({sum(report.finished_unrecorded_per_kill) / KILLS:.2f} of them had finished), "
        f"{report.wall_seconds:.1f} s"
    )


def test_uninterrupted_worker_matches_an_in_process_run(tmp_path: Path) -> None:
    """The worker's own run is the plain workflow: 6 batches of 4, each step once."""
    checkpoint, events = tmp_path / "checkpoint.json", tmp_path / "events.log"
    assert run_worker(checkpoint, events, kill_after=None) is False
    saved = read_checkpoint(checkpoint)
    assert saved is not None
    in_process = build_workflow(lambda _line: None).run_sync()
    assert dict(saved.outputs) == json.loads(json.dumps(dict(in_process.outputs)))
    assert saved.cost == in_process.cost
    assert saved.seq == LAYERS
    lines = events.read_text(encoding="utf-8").splitlines()
    assert len(lines) == 1 + 2 * len(STEP_NAMES) + 2 * LAYERS + 1
    assert re.fullmatch(r"run-start \d+ ", lines[0])
    assert [line for line in lines if line.startswith("checkpoint")] == [
        line
        for seq in range(1, LAYERS + 1)
        for line in (f"checkpoint-write {seq}", f"checkpoint {seq}")
    ]
    assert lines[-1] == "done"
    # Each batch is one layer: its four steps all start before any of them is recorded.
    layer_of_line = [
        int(line.split()[1][1]) for line in lines if line.startswith(("step-start", "step-end"))
    ]
    assert layer_of_line == sorted(layer_of_line)
    (run,) = parse_events("\n".join(lines))
    assert sorted(run.started) == sorted(STEP_NAMES)
    assert run.done


def test_a_second_worker_resumes_and_runs_nothing_recorded(tmp_path: Path) -> None:
    """Restarting on a finished checkpoint reports every step recorded and runs none."""
    checkpoint, events = tmp_path / "checkpoint.json", tmp_path / "events.log"
    run_worker(checkpoint, events, kill_after=None)
    first = read_checkpoint(checkpoint)
    assert run_worker(checkpoint, events, kill_after=None) is False
    runs = parse_events(events.read_text(encoding="utf-8"))
    assert len(runs) == 2
    assert sorted(runs[1].resumed_from) == sorted(STEP_NAMES)
    assert runs[1].started == []
    assert read_checkpoint(checkpoint) == first


def test_a_kill_on_the_first_event_is_counted_and_resumed(tmp_path: Path) -> None:
    """Killing right after run-start is a kill; the next run completes the workflow."""
    checkpoint, events = tmp_path / "checkpoint.json", tmp_path / "events.log"
    assert run_worker(checkpoint, events, kill_after=1) is True
    assert run_worker(checkpoint, events, kill_after=None) is False
    final = read_checkpoint(checkpoint)
    assert final is not None
    assert sorted(final.outputs) == sorted(STEP_NAMES)


def test_a_kill_during_the_first_checkpoint_write_leaves_old_or_new_never_torn(
    tmp_path: Path,
) -> None:
    """Killed right after 'checkpoint-write 1': the file is absent or holds batch 1 whole."""
    checkpoint, events = tmp_path / "checkpoint.json", tmp_path / "events.log"
    # run-start, 4 x step-start, 4 x step-end, then checkpoint-write 1 is the 10th event.
    assert run_worker(checkpoint, events, kill_after=10) is True
    lines = events.read_text(encoding="utf-8").splitlines()
    assert lines[9] == "checkpoint-write 1"
    saved = read_checkpoint(checkpoint)
    assert saved is None or sorted(saved.outputs) == sorted(STEP_NAMES[:WIDTH])
    assert run_worker(checkpoint, events, kill_after=None) is False
    final = read_checkpoint(checkpoint)
    assert final is not None
    assert final.cost == sum(map(step_cost, range(len(STEP_NAMES))), TokenUsage())


def test_workflow_shape_has_parallel_layers_and_one_to_three_dependencies() -> None:
    """At least 20 steps; every later step depends on 1-3 steps of earlier layers."""
    assert len(STEP_NAMES) >= 20
    workflow = build_workflow(lambda _line: None)
    assert [step.name for step in workflow.steps] == list(STEP_NAMES)
    for layer in range(1, LAYERS):
        for index in range(WIDTH):
            deps = dependencies(layer, index)
            assert 1 <= len(deps) <= 3
            assert f"s{layer - 1}_{index}" in deps
            assert all(int(dep[1]) < layer for dep in deps)
    sizes = {
        len(dependencies(layer, index)) for layer in range(1, LAYERS) for index in range(WIDTH)
    }
    assert sizes == {1, 2, 3}


def test_atomic_writer_replaces_the_file_and_leaves_no_temp_file(tmp_path: Path) -> None:
    path = tmp_path / "checkpoint.json"
    write_json_atomically(path, {"a": 1})
    write_json_atomically(path, {"b": [1, 2]})
    assert json.loads(path.read_text(encoding="utf-8")) == {"b": [1, 2]}
    assert sorted(child.name for child in tmp_path.iterdir()) == ["checkpoint.json"]


def test_read_checkpoint_counts_a_torn_file_as_unreadable(tmp_path: Path) -> None:
    """The check the campaign makes after each kill does catch a torn or foreign file."""
    path = tmp_path / "checkpoint.json"
    assert read_checkpoint(path) is None
    checkpoint = WorkflowCheckpoint(step_index=1, outputs={"s0_0": 1}, cost=TokenUsage())
    text = json.dumps(checkpoint.to_dict())
    path.write_text(text, encoding="utf-8")
    assert read_checkpoint(path) == checkpoint
    path.write_text(text[: len(text) // 2], encoding="utf-8")
    with pytest.raises(json.JSONDecodeError):
        read_checkpoint(path)
    path.write_text('{"version": 2}', encoding="utf-8")
    with pytest.raises(CheckpointFormatError, match=re.escape("'context_keys' is missing")):
        read_checkpoint(path)


def _log(
    pid: int,
    resumed: list[str],
    started: list[str],
    ended: list[str] | None = None,
    *,
    done: bool = False,
) -> RunLog:
    keys = {name: f"key-{name}" for name in started}
    ended = started if ended is None else ended
    return RunLog(pid, resumed, started=started, ended=ended, keys=keys, done=done)


def _outputs(names: list[str]) -> dict[str, Any]:
    return {name: {"digest": name} for name in names}


ALL = list(STEP_NAMES)
FIRST_BATCH = ALL[:4]


def test_check_episode_accepts_an_honest_episode() -> None:
    """Killed mid batch 2 (two steps in flight, one finished), resumed: no violation."""
    report = CampaignReport()
    runs = [
        _log(1, [], [*FIRST_BATCH, "s1_0", "s1_1"], [*FIRST_BATCH, "s1_1"]),
        _log(2, FIRST_BATCH, ALL[4:], done=True),
    ]
    check_episode("e", STEP_NAMES, runs, [_outputs(FIRST_BATCH)], report)
    assert report.violations == 0
    assert report.in_flight_per_kill == [2]
    assert report.finished_unrecorded_per_kill == [1]


@pytest.mark.parametrize(
    ("runs", "after_kills", "field", "expected"),
    [
        pytest.param(
            [_log(1, [], FIRST_BATCH), _log(2, FIRST_BATCH, ["s0_0", *ALL[4:]], done=True)],
            [_outputs(FIRST_BATCH)],
            "recorded_reexecuted",
            ["e run 1 (pid 2): s0_0"],
            id="recorded-step-started-again",
        ),
        pytest.param(
            [_log(1, [], FIRST_BATCH), _log(2, [], ALL, done=True)],
            [_outputs(FIRST_BATCH)],
            "resume_mismatches",
            [f"e run 1 (pid 2) resumed from [], the file held {FIRST_BATCH}"],
            id="resumed-from-something-else",
        ),
        pytest.param(
            [
                _log(1, [], FIRST_BATCH),
                _log(2, FIRST_BATCH, []),
                _log(3, ALL[1:4], ["s0_0", *ALL[4:]], done=True),
            ],
            [_outputs(FIRST_BATCH), _outputs(ALL[1:4])],
            "lost_or_changed",
            ["e run 1 (pid 2): s0_0"],
            id="recorded-output-lost",
        ),
        pytest.param(
            [_log(1, [], [*ALL, "s5_3"], done=True)],
            [],
            "extra_executions",
            ["e: s5_3 started 2 times, expected 1"],
            id="step-run-twice-without-a-kill",
        ),
    ],
)
def test_check_episode_reports_each_broken_guarantee(
    runs: list[RunLog], after_kills: list[dict[str, Any]], field: str, expected: list[str]
) -> None:
    """The checker is not vacuous: each kind of violation is found and named."""
    report = CampaignReport()
    check_episode("e", STEP_NAMES, runs, after_kills, report)
    assert getattr(report, field) == expected
    assert report.violations >= 1


def test_check_episode_reports_a_changed_idempotency_key() -> None:
    report = CampaignReport()
    first = _log(1, [], ["s0_0"])
    first.keys["s0_0"] = "other"
    check_episode("e", STEP_NAMES, [first, _log(2, [], ALL, done=True)], [{}], report)
    assert report.key_changes == ["e: s0_0 had idempotency keys ['key-s0_0', 'other']"]
    assert report.in_flight_per_kill == [1]
    assert report.extra_executions == []


def test_mismatched_final_outputs_count_as_violations() -> None:
    report = CampaignReport(reference_outputs={"a": 1}, reference_cost=TokenUsage(llm_calls=1))
    report.final_outputs = [{"a": 1}, {"a": 2}, {"a": 1}]
    report.final_costs = [TokenUsage(llm_calls=1), TokenUsage(llm_calls=1), TokenUsage()]
    assert report.mismatched_finals == 2
    assert report.violations == 2
