"""The pytest plugin of `executionkit.testing`: fixtures for testing your own workflows.

Registered under the ``pytest11`` entry point, so pytest loads it in any project
where executionkit is installed; nothing else imports it (it imports pytest).

- ``ek_checkpoints``: a ``checkpoint_fn`` that appends each checkpoint to itself
  (a list), after checking that it survives `WorkflowCheckpoint.to_dict`, JSON
  and `WorkflowCheckpoint.from_dict` unchanged.
- ``ek_clock``: a `VirtualClock` in use for the test: waits, deadlines, backoffs
  and ``asyncio.sleep`` in steps take no real time.
- ``ek_cassette``: a `Cassette` of the test, ``cassettes/<module>/<test>.jsonl``
  beside the test file: it replays; ``pytest --ek-record`` records it anew.
"""

from __future__ import annotations

import json
import re
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    from collections.abc import Iterator

    from executionkit import WorkflowCheckpoint
    from executionkit.testing import Cassette, VirtualClock

_UNSAFE = re.compile(r"[^\w.-]+")


def pytest_addoption(parser: pytest.Parser) -> None:
    """Add ``--ek-record``."""
    group = parser.getgroup("executionkit")
    group.addoption(
        "--ek-record",
        action="store_true",
        default=False,
        help="executionkit: record the ek_cassette of each test anew (real calls are made)",
    )


class Checkpoints(list):  # type: ignore[type-arg]
    """A list of checkpoints, and the ``checkpoint_fn`` that fills it, checking each one."""

    def __call__(self, checkpoint: WorkflowCheckpoint) -> None:
        """Check that ``checkpoint`` round-trips through a dict and JSON, then keep it.

        Raises:
            AssertionError: Naming the first field that comes back different.
        """
        from executionkit import WorkflowCheckpoint  # noqa: PLC0415

        data = checkpoint.to_dict()
        try:
            text = json.dumps(data, allow_nan=False)
        except (TypeError, ValueError) as exc:
            where = next(
                (
                    f"the output of step {name!r}: "
                    for name, value in checkpoint.outputs.items()
                    if not _is_json(value)
                ),
                "",
            )
            msg = f"checkpoint seq={checkpoint.seq} cannot be written as JSON: {where}{exc}"
            raise AssertionError(msg) from None
        plain = json.loads(text)
        back = WorkflowCheckpoint.from_dict(json.loads(text)).to_dict()
        if back != plain:
            field = next(
                (key for key in plain if back.get(key) != plain[key]),
                next(iter(set(back) ^ set(plain)), "?"),
            )
            msg = (
                f"checkpoint seq={checkpoint.seq} does not survive to_dict/JSON/from_dict: "
                f"field {field!r} comes back as {back.get(field)!r}, was {plain.get(field)!r}"
            )
            raise AssertionError(msg)
        self.append(checkpoint)

    @property
    def last(self) -> WorkflowCheckpoint:
        """The latest checkpoint kept (`IndexError` if none)."""
        latest: WorkflowCheckpoint = self[-1]
        return latest


def _is_json(value: object) -> bool:
    try:
        json.dumps(value, allow_nan=False)
    except (TypeError, ValueError):
        return False
    return True


@pytest.fixture
def ek_checkpoints() -> Checkpoints:
    """A list-appending ``checkpoint_fn`` that checks each checkpoint round-trips."""
    return Checkpoints()


@pytest.fixture
def ek_clock() -> Iterator[VirtualClock]:
    """A `VirtualClock` in use for the whole test."""
    from executionkit.testing import VirtualClock  # noqa: PLC0415

    with VirtualClock() as clock:
        yield clock


@pytest.fixture
def ek_cassette(request: pytest.FixtureRequest) -> Cassette:
    """The test's `Cassette` under ``cassettes/`` beside the test file; ``--ek-record`` records."""
    from executionkit.testing import Cassette  # noqa: PLC0415

    folder = request.path.parent / "cassettes" / request.path.stem
    name = _UNSAFE.sub("_", request.node.name).strip("_") or "test"
    record = bool(request.config.getoption("--ek-record", default=False))
    if record:
        folder.mkdir(parents=True, exist_ok=True)
        (folder / f"{name}.jsonl").unlink(missing_ok=True)
    mode: Any = "record" if record else "replay"
    return Cassette(folder / f"{name}.jsonl", mode=mode)
