"""Days of waiting in milliseconds: the real seconds a month-long workflow takes on a clock.

Issue 34 asks that a workflow with a 30-day wait, a question with a 7-day deadline and
a default, and a map of 50 items each retried twice with a 60-second backoff run to
its end in under a second of real time. This runs it ``--repeat`` times (the first
run to the question, then, the clock moved past the deadline, the resume to the end)
and prints the median and the worst real seconds, and the time that passed on the
clock::

    python benchmarks/virtual_clock.py [--repeat 7]
"""

from __future__ import annotations

import argparse
import math
import statistics
import time
from collections import Counter
from datetime import timedelta
from typing import Any

import source

source.put_on_path()

from executionkit import Step, Workflow  # noqa: E402
from executionkit.testing import VirtualClock  # noqa: E402


def month() -> Workflow:
    """The workflow of the issue; each item fails twice, then returns."""
    tries: Counter[int] = Counter()

    def flaky(item: int, _ctx: Any) -> int:
        tries[item] += 1
        if tries[item] <= 2:
            msg = f"try {tries[item]}"
            raise RuntimeError(msg)
        return item

    return Workflow(
        [
            Step("items", lambda _ctx: list(range(50))),
            Step.map("each", flaky, over="items", retries=2, retry_delay=60),
            Step.wait("month", seconds=timedelta(days=30), depends_on=("each",)),
            Step.ask(
                "ok",
                lambda _ctx: "still ok?",
                depends_on=("month",),
                expires_after=timedelta(days=7),
                default="fine",
            ),
            Step("end", lambda ctx: ctx["ok"], depends_on=("ok",)),
        ]
    )


def once() -> tuple[float, timedelta]:
    """Real seconds of one run to the end, and the time that passed on the clock."""
    began = time.perf_counter()
    saved: list[Any] = []
    flow = month()
    with VirtualClock() as clock:
        first = flow.run_sync(checkpoint_fn=saved.append, sleep_up_to=math.inf)
        assert list(first.pending) == ["ok"]  # noqa: S101 - the scenario as the issue gives it
        clock.advance(days=7, seconds=1)
        done = flow.run_sync(resume_from=saved[-1])
        assert done.outputs["end"] == "fine"  # noqa: S101
    return time.perf_counter() - began, clock.passed


def main() -> None:
    """Run it and print one Markdown table."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=7)
    args = parser.parse_args()
    runs = [once() for _ in range(args.repeat)]
    seconds = [real for real, _ in runs]
    print("| real seconds, median | real seconds, worst | time passed on the clock |")
    print("| ---: | ---: | ---: |")
    print(f"| {statistics.median(seconds):.3f} | {max(seconds):.3f} | {runs[-1][1]} |")


if __name__ == "__main__":
    main()
