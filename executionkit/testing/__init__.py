"""Test your workflows: crash them at every checkpoint, skip days of waiting, replay calls.

Standard library only, and nothing in the core imports it:

- `VirtualClock`: time that passes only while a run waits, so a 30-day
  `Step.wait`, a week's deadline and a hundred retry backoffs take
  milliseconds, with the clock's times in checkpoints and events.
"""

from __future__ import annotations

from executionkit.testing._clock import VirtualClock

__all__ = ["VirtualClock"]
