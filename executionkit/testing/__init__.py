"""Test your workflows: crash them at every checkpoint, skip days of waiting, replay calls.

Standard library only, and nothing in the core imports it:

- `crash_test`: the crash right after every checkpoint a run hands over, each
  resumed to its end and checked against the uninterrupted run (outputs,
  nothing recorded started again, every token counted once);
- `VirtualClock`: time that passes only while a run waits, so a 30-day
  `Step.wait`, a week's deadline and a hundred retry backoffs take
  milliseconds, with the clock's times in checkpoints and events;
- `Cassette`: each step's and map item's output and usage recorded once into a
  JSON Lines file, then replayed with no call made; a step whose inputs
  changed raises `CassetteMiss` naming the step and the input.
"""

from __future__ import annotations

from executionkit.testing._cassette import Cassette, CassetteMiss
from executionkit.testing._clock import VirtualClock
from executionkit.testing._crash import CrashPoint, CrashReport, crash_test

__all__ = ["Cassette", "CassetteMiss", "CrashPoint", "CrashReport", "VirtualClock", "crash_test"]
