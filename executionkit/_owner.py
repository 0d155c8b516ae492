"""Who owns a run: `RunOwner`, as claims report it and stores write it down.

A leaf: the errors name the owner (`RunClaimedError`), the stores keep it beside
their claims, and the command line and the page show it, none of them needing
the runner that takes claims (``executionkit._run._ownership``).
"""

from __future__ import annotations

import os
import socket
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any


@dataclass(frozen=True, slots=True)
class RunOwner:
    """The process that owns a run: what `RunClaimedError` and ``inspect`` report.

    Attributes:
        run_id: The run owned.
        pid: The owner's process id, on ``host``.
        host: The name of the owner's machine (`socket.gethostname`).
        since: When the claim was taken (UTC).
    """

    run_id: str
    pid: int
    host: str
    since: datetime

    @classmethod
    def this_process(cls, run_id: str) -> RunOwner:
        """This process, owning ``run_id`` from now on."""
        return cls(run_id, os.getpid(), socket.gethostname(), datetime.now(UTC))

    def describe(self) -> str:
        """``process 1234 on host 'worker-1' since 2026-12-01T15:00:00Z``."""
        since = self.since.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        return f"process {self.pid} on host {self.host!r} since {since}"

    def to_dict(self) -> dict[str, Any]:
        """The owner as plain JSON data (how the stores write it down)."""
        since = self.since.astimezone(UTC).isoformat().replace("+00:00", "Z")
        return {"run_id": self.run_id, "pid": self.pid, "host": self.host, "since": since}

    @classmethod
    def from_dict(cls, data: object) -> RunOwner | None:
        """Read what `to_dict` wrote; None if ``data`` is not that (torn, or foreign)."""
        if not isinstance(data, dict):
            return None
        run_id, pid, host, since = (data.get(k) for k in ("run_id", "pid", "host", "since"))
        if not (
            isinstance(run_id, str)
            and type(pid) is int
            and isinstance(host, str)
            and isinstance(since, str)
        ):
            return None
        try:
            when = datetime.fromisoformat(since)  # 3.11 reads a trailing Z
        except ValueError:
            return None
        if when.tzinfo is None:
            return None
        return cls(run_id, pid, host, when.astimezone(UTC))
