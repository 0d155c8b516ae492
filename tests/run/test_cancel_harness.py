"""Randomized cancellation: hundreds of seeded trials per schedule, every promise checked.

Each trial (see `cancel_harness`) cancels a run at a seeded moment, with a seeded
mix of sync or async ``checkpoint_fn``, progress saves, a thread pool, failing
steps and ``on_error`` modes, then resumes. A fixed seed set runs here;
``benchmarks/cancel_soak.py`` runs many more.
"""

from __future__ import annotations

import pytest
from cancel_harness import run_trial

TRIALS = 300


@pytest.mark.parametrize("schedule", ["batch", "eager"])
async def test_cancelling_at_any_moment_keeps_every_promise(schedule: str) -> None:
    """No hang, no task left, nothing lost, nothing recorded ever runs twice."""
    problems: list[str] = []
    for seed in range(TRIALS):
        problems += await run_trial(seed, schedule)
    assert problems == []
