"""Ready-made checkpoint stores: each is a ``checkpoint_fn`` that can also ``load()``.

Optional and standard library only; the core never imports this module:

```python
from executionkit.stores import JsonFileStore

store = JsonFileStore("run.json")
result = workflow.run_sync(checkpoint_fn=store, resume_from=store.load())
```

- `JsonFileStore`: the latest checkpoint as one JSON file, replaced atomically.
- `JsonLinesStore`: an append-only JSON Lines file that writes only each
  checkpoint's new outputs.
- `SQLiteStore`: any number of runs in an SQLite database, written
  incrementally, safe for several threads and processes, with history and
  retention.
- `PostgresStore`: the same in PostgreSQL, for workers on several machines;
  needs ``pip install 'executionkit[postgres]'`` (psycopg 3), imported on first use.

What every store here guarantees:

- ``load()`` returns ``None`` when nothing was saved, and otherwise a checkpoint
  equal to the latest one saved. Checkpoints are written as JSON through
  `WorkflowCheckpoint.to_dict`, so outputs come back as JSON gives them
  (tuples as lists); an output UTF-8 JSON cannot hold (a set, NaN, a str
  with a lone surrogate, an int past the 4,300-digit limit) fails the save
  with `CheckpointValueError` naming the store, the step and the path inside
  it, and leaves the stored checkpoint as it was.
- Within a run (the same ``run_id``) only a newer ``seq`` replaces the stored
  checkpoint. An older one, or a different one with the same ``seq``, is a
  stale writer (a second worker on the same run, or a run resumed from an old
  copy) and is refused with `StaleCheckpointError`; the run then stops, as with
  any ``checkpoint_fn`` failure, and the stored checkpoint is untouched. Saving
  the very same checkpoint again is harmless and writes nothing.
- Stored data that is damaged raises `CheckpointFormatError` naming the file
  (and line, or run) at fault, however it is damaged. It is never silently
  discarded or overwritten. A path that is a FIFO or a device is refused
  rather than read.

Going back through a run: `JsonLinesStore`, `SQLiteStore` and `PostgresStore`
list the checkpoints they keep of a run with ``checkpoints()``, one
`CheckpointInfo` each (``seq``, time, outputs recorded and newly recorded,
failed steps), without rebuilding any, and ``load(..., seq=N)`` rebuilds one
exactly as it was saved, or raises `CheckpointNotKeptError` naming the seqs
kept. The SQL stores keep every checkpoint with ``history=True``, only the
latest without; a JSON Lines file keeps those of its current run until
``compact()``.

Runs that go on with nobody watching: every store here has an ``inbox``
(`RunInbox`) holding what ``executionkit worker`` acts on besides checkpoints:
runs submitted to start (`Workflow.submit`, with their inputs), answers saved
for waiting questions, and the runs a worker left alone, with the reason.
While a run runs, the inbox also keeps the text its steps stream
(`RunInbox.streams`), for a page in another process: `StreamPublisher` is the
``on_event`` listener that writes it (``executionkit run`` and ``executionkit
worker`` attach one for their location).

Each of them passes `executionkit.conformance.check_store`.
"""

from __future__ import annotations

from executionkit._errors import ClaimLostError, RunClaimedError, StaleCheckpointError
from executionkit._owner import RunOwner
from executionkit.stores._history import CheckpointInfo, CheckpointNotKeptError
from executionkit.stores._inbox import RunInbox, Submission
from executionkit.stores._json_file import JsonFileStore
from executionkit.stores._json_lines import JsonLinesStore
from executionkit.stores._sqlite import SQLiteStore

TYPE_CHECKING = False
if TYPE_CHECKING:
    from executionkit.stores._postgres import PostgresStore
    from executionkit.stores._streams import StreamPublisher

__all__ = [
    "CheckpointInfo",
    "CheckpointNotKeptError",
    "ClaimLostError",
    "JsonFileStore",
    "JsonLinesStore",
    "PostgresStore",
    "RunClaimedError",
    "RunInbox",
    "RunOwner",
    "SQLiteStore",
    "StaleCheckpointError",
    "StreamPublisher",
    "Submission",
]


def __getattr__(name: str) -> object:
    """Load `PostgresStore` and `StreamPublisher` on first access.

    `PostgresStore` never imports psycopg before its first call; `StreamPublisher`
    (its thread, the event types) costs nothing to a program that only stores.
    """
    if name == "PostgresStore":
        from executionkit.stores._postgres import PostgresStore  # noqa: PLC0415

        return PostgresStore
    if name == "StreamPublisher":
        from executionkit.stores._streams import StreamPublisher  # noqa: PLC0415

        return StreamPublisher
    msg = f"module {__name__!r} has no attribute {name!r}"
    raise AttributeError(msg)
