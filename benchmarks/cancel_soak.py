"""Cancellation soak: thousands of seeded cancellation trials, a Markdown summary.

A manual run, not part of the test suite. It uses the harness of
``tests/run/test_cancel_harness.py`` (which runs 300 seeds per schedule in CI), just
with more seeds::

    python benchmarks/cancel_soak.py --trials 5000 --seed 1000

Each trial cancels a run at a seeded moment and resumes it; see
``tests/cancel_harness.py`` for what is varied and what is checked. Exits with
status 1 if any promise was broken, printing the first broken trials.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))  # the harness is a test helper, in tests/

from cancel_harness import run_trial  # noqa: E402


async def soak(trials: int, first: int) -> tuple[dict[str, int], list[str], float]:
    """Run ``trials`` seeds per schedule from ``first``; return counts, problems, seconds."""
    began = time.perf_counter()
    broken: dict[str, int] = {}
    problems: list[str] = []
    for schedule in ("batch", "eager"):
        broken[schedule] = 0
        for seed in range(first, first + trials):
            found = await run_trial(seed, schedule)
            if found:
                broken[schedule] += 1
                problems += found
    return broken, problems, time.perf_counter() - began


def main() -> int:
    """Parse the arguments, soak, print the summary; 1 if a promise broke."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=2000, help="seeds per schedule")
    parser.add_argument("--seed", type=int, default=1000, help="first seed")
    args = parser.parse_args()
    broken, problems, seconds = asyncio.run(soak(args.trials, args.seed))
    print("| schedule | trials | trials with a broken promise |")
    print("|---|---:|---:|")
    for schedule, count in broken.items():
        print(f"| {schedule} | {args.trials} | {count} |")
    print(f"\n{2 * args.trials} trials in {seconds:.1f} s")
    for problem in problems[:20]:
        print(f"- {problem}")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
