"""SIGKILL a process in the middle of a map, again and again: no recorded item runs twice.

`map_crash_worker.py` runs a 40-item map whose items are recorded into a
`JsonLinesStore` as they complete. It is killed at seeded random moments and
started again until it finishes. Every run must start only items the file did
not hold when it began, and the final output and token usage must be exactly
those of one uninterrupted run: items killed in flight, or finished but not yet
stored, run again and are counted once.
"""

from __future__ import annotations

import itertools
import json
import os
import random
import signal
import subprocess
import sys
from pathlib import Path

import pytest

WORKER = Path(__file__).resolve().parents[1] / "map_crash_worker.py"
ITEMS = 40
EXPECTED = {"total": sum(i * i for i in range(ITEMS)), "cost": [sum(range(ITEMS)), ITEMS]}


def run_until_killed(
    path: Path, kill_after: int | None, *options: str
) -> tuple[list[str], list[str]]:
    """Start the worker; SIGKILL it after ``kill_after`` lines (None: let it finish).

    Returns the lines read up to the kill, and the lines the worker had written
    before the kill landed that were still in the pipe (read after it): events
    that happened, which a count of started items must include.
    """
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    process = subprocess.Popen(  # noqa: S603 - our own worker script
        [sys.executable, str(WORKER), str(path), *options],
        stdout=subprocess.PIPE,
        text=True,
        env=env,
    )
    assert process.stdout is not None
    lines: list[str] = []
    tail: list[str] = []
    for line in process.stdout:
        lines.append(line.rstrip("\n"))
        if kill_after is not None and len(lines) >= kill_after:
            process.send_signal(signal.SIGKILL)
            tail = [rest.rstrip("\n") for rest in process.stdout]
            break
    process.stdout.close()
    process.wait()
    return lines, tail


def episodes_until_done(
    path: Path, rng: random.Random, first_kill: int, kills: int, *options: str
) -> list[list[str]]:
    """Run, kill at random and resume until the worker finishes; each episode's lines.

    The first ``kills`` episodes are killed after ``first_kill`` to 30 lines. A
    first episode that finished before its kill landed tested no kill: it is
    thrown away, with its file, and the test starts again.
    """
    episodes: list[list[str]] = []
    while not episodes or not episodes[-1][-1].startswith("done "):
        kill_after = rng.randint(first_kill, 30) if len(episodes) < kills else None
        lines, tail = run_until_killed(path, kill_after, *options)
        if not episodes and kill_after is not None and tail and tail[-1].startswith("done "):
            path.unlink()
            continue
        episodes.append(lines + tail)
    return episodes


@pytest.mark.parametrize("seed", range(6))
def test_kills_mid_map_never_rerun_a_recorded_item(tmp_path: Path, seed: int) -> None:
    rng = random.Random(seed)
    path = tmp_path / "run.jsonl"
    episodes = episodes_until_done(path, rng, 2, 8)
    kills = len(episodes) - 1
    assert kills >= 1
    started_total = 0
    for lines in episodes:
        assert lines[0].startswith("run-start")
        recorded = lines[0].removeprefix("run-start").strip()
        held = set(recorded.split(",")) if recorded and recorded != "*" else set()
        started = [line.split()[1] for line in lines if line.startswith("item-start ")]
        started_total += len(started)
        if recorded == "*":
            assert started == []
        assert not held & set(started), f"recorded items ran again: {held & set(started)}"
        assert len(started) == len(set(started))
    summary = json.loads(episodes[-1][-1].removeprefix("done "))
    assert summary == EXPECTED
    assert started_total >= ITEMS


@pytest.mark.parametrize("seed", range(3))
@pytest.mark.parametrize(
    ("mode", "running"), [("inline", 1), ("plain", 4)], ids=["inline", "in threads"]
)
def test_kills_mid_map_of_plain_items_lose_at_most_the_items_running(
    tmp_path: Path, seed: int, mode: str, running: int
) -> None:
    """Plain items are stored as they complete: a kill loses at most the items running.

    Inline, one runs at a time; in threads, as many as the map's max_concurrency (4).
    """
    rng = random.Random(seed)
    path = tmp_path / "run.jsonl"
    episodes = episodes_until_done(path, rng, 4, 6, mode)
    assert len(episodes) >= 2
    for killed, following in itertools.pairwise(episodes):
        started = [line.split()[1] for line in killed if line.startswith("item-start ")]
        recorded = following[0].removeprefix("run-start").strip()
        held = set(recorded.split(",")) if recorded and recorded != "*" else set()
        if recorded == "*":
            continue
        lost = [key for key in started if key not in held]
        assert len(lost) <= running, f"a kill lost {lost}: only the items running may be lost"
        if running == 1:
            assert not lost or lost == started[-1:]
    summary = json.loads(episodes[-1][-1].removeprefix("done "))
    assert summary == EXPECTED


@pytest.mark.parametrize("seed", range(2))
@pytest.mark.parametrize("mode", ["", "plain", "inline"], ids=["async", "in threads", "inline"])
def test_a_kill_leaves_the_items_that_may_have_been_paid_for_counted(
    tmp_path: Path, seed: int, mode: str
) -> None:
    """Every item that started and was not recorded is booked as unknown on resume.

    Items are counted in a checkpoint before they start (format 5's
    ``in_flight_items``), so the checkpoint a kill leaves counts at least every
    item that started since and was not recorded: never fewer (nothing paid is
    lost from the bill), and more by at most the items picked that had not
    started yet (the map's ``max_concurrency``, 4).
    """
    rng = random.Random(1000 + seed)
    path = tmp_path / "run.jsonl"
    episodes = episodes_until_done(path, rng, 3, 5, *([mode] if mode else []))
    assert len(episodes) >= 2
    for killed, following in itertools.pairwise(episodes):
        recorded = following[0].removeprefix("run-start").strip()
        if recorded == "*":
            continue
        held = set(recorded.split(",")) if recorded else set()
        started = {line.split()[1] for line in killed if line.startswith("item-start ")}
        unknown = [int(line.split()[1]) for line in following if line.startswith("resume-unknown")]
        assert len(unknown) == 1
        paid = len(started - held)
        assert paid <= unknown[0] <= paid + 4, (sorted(started - held), unknown[0])
