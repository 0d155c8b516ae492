"""The record's room for waits (`Step.wait`): the waits reached and not yet due, no asyncio.

A dict of wait step name to its entry ``{"due": ..., "since": ...}``, fixed when
the wait was first reached (`executionkit._define._waits.reached`), described in
every checkpoint (``waits``) until the wait is due and its output (None) lands.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import Any


class Waits(dict[str, Mapping[str, str]]):
    """The waits of one run not due yet: wait step name -> its entry, in the order reached."""

    __slots__ = ()

    def describe(self, fields: dict[str, Any]) -> tuple[str, ...]:
        """Add ``waits`` to a checkpoint's fields; return the steps it names."""
        fields["waits"] = MappingProxyType(dict(self))
        return tuple(self)
