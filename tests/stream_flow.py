"""The workflow the streaming process tests run: a step streams, then waits for a file.

Not a test module. Step ``talk`` streams ``attempt N: hello`` and `` world``, then
waits until the file ``go-N`` appears in the folder ``EK_STREAM_DIR`` names
(polling it, a minute at most), so that the test reads the text from the store
while the step is still running. Its first attempt then fails and is retried at
once; the second returns ``"spoken"``. `paged` runs step ``prepare`` first, so that
a checkpoint (and so a run page) exists while ``talk`` streams.
"""

from __future__ import annotations

import os
import threading
from pathlib import Path
from typing import Any

from executionkit import Step, Workflow, current_step

WAIT = 60.0  # seconds a step waits for its go-file before giving up


def _wait_for(path: Path) -> None:
    """Poll for ``path`` every 10 ms until it exists; `TimeoutError` after `WAIT` seconds."""
    pause = threading.Event()
    for _ in range(int(WAIT / 0.01)):
        if path.exists():
            return
        pause.wait(0.01)
    msg = f"{path} did not appear within {WAIT:g} s"
    raise TimeoutError(msg)


def talk(_ctx: Any) -> str:
    """Stream two pieces, wait for the test's go-file, fail the first attempt."""
    step = current_step()
    step.stream(f"attempt {step.attempt}: hello")
    step.stream(" world")
    _wait_for(Path(os.environ["EK_STREAM_DIR"]) / f"go-{step.attempt}")
    if step.attempt == 1:
        msg = "the first attempt fails"
        raise RuntimeError(msg)
    return "spoken"


def prepare(_ctx: Any) -> str:
    """A step with nothing to stream: its checkpoint gives the run a page before ``talk``."""
    return "ready"


workflow = Workflow([Step("talk", talk, retries=1, retry_delay=0)])
paged = Workflow(
    [
        Step("prepare", prepare),
        Step("talk", talk, depends_on=("prepare",), retries=1, retry_delay=0),
    ]
)
