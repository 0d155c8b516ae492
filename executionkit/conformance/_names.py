"""The kit's public names that every part uses: the store's types, its error, the properties."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TypeAlias

from executionkit._checkpoint._value import WorkflowCheckpoint

RUN_ID = "executionkit-conformance"
"""The ``run_id`` of every checkpoint the kit saves."""

Save: TypeAlias = Callable[[WorkflowCheckpoint], object]
"""Saves a checkpoint: any ``checkpoint_fn``. May return an awaitable (`check_store_async`)."""

Load: TypeAlias = Callable[[], "WorkflowCheckpoint | Awaitable[WorkflowCheckpoint | None] | None"]
"""Returns the latest checkpoint saved, or None (an awaitable of it for `check_store_async`)."""

StoreFactory: TypeAlias = Callable[[], tuple[Save, Load]]
"""Returns the ``(save, load)`` pair of a new store over fresh, empty storage."""

NOTHING_SAVED = "nothing saved"
ROUND_TRIP = "round trip"
LATEST_WINS = "latest wins"
STALE_WRITER = "stale writer"
SAVED_TWICE = "same checkpoint twice"
RESUMED_RUN = "resumed run"
CONSTANT_COST = "constant cost"
CONCURRENT_WRITERS = "concurrent writers"
CLAIMS = "claims"


class StoreConformanceError(AssertionError):
    """A store broke a property of the conformance kit.

    The message starts with the property's name, such as ``"stale writer: "``,
    and says what was saved and what ``load()`` returned.

    Attributes:
        property: The name of the property that failed.
    """

    def __init__(self, name: str, message: str) -> None:
        """Create the error for property ``name``."""
        super().__init__(f"{name}: {message}")
        self.property = name
