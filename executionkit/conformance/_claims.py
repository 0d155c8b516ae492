"""The **claims** property: checked for a store whose ``save`` has a ``claim`` method."""

from __future__ import annotations

import contextlib
import os
from typing import TYPE_CHECKING, Any

from executionkit._errors import RunClaimedError
from executionkit._owner import RunOwner
from executionkit.conformance._names import CLAIMS, RUN_ID, StoreConformanceError
from executionkit.conformance._report import preview

if TYPE_CHECKING:
    from collections.abc import AsyncIterator

    from executionkit.conformance._kit import Kit
    from executionkit.conformance._names import Save


@contextlib.asynccontextmanager
async def _held(save: Save, when: str) -> AsyncIterator[object]:
    """Enter ``save.claim(RUN_ID)`` as the runner does (sync or async) and give what it gave."""
    manager: Any = getattr(save, "claim")(RUN_ID)  # noqa: B009 - checked by the caller
    if hasattr(manager, "__aenter__"):
        async with manager as stored:
            yield stored
    elif hasattr(manager, "__enter__"):
        with manager as stored:
            yield stored
    else:
        msg = f"{when}: claim() returned {preview(manager)}, not a context manager"
        raise StoreConformanceError(CLAIMS, msg)


def _failed(when: str, exc: Exception) -> StoreConformanceError:
    error = StoreConformanceError(CLAIMS, f"{when}: {type(exc).__name__}: {exc}")
    error.__cause__ = exc
    return error


async def check_claims(kit: Kit) -> None:
    """A second claim is refused while one is held; the latest seq is given; leaving frees it.

    The stores of the kit are fresh storage each, so the second claimant is the
    same store object: a claim must exclude a second run of the same run in the
    same process too (two tasks, or two threads, would pay twice as surely as
    two processes).
    """
    save, _ = kit.fresh(CLAIMS)
    if not callable(getattr(save, "claim", None)):
        return
    owner = getattr(save, "owner", None)
    when = "claiming a run of empty storage"
    try:
        async with _held(save, when) as stored:
            _expect_seq(stored, None, when)
            await _refused(save, "claiming it again while the first claim is held")
            if callable(owner):
                await _owner_is(kit, owner, os.getpid(), "while the claim is held")
            for checkpoint in kit.samples.run:
                when = f"saving seq {checkpoint.seq} while claimed"
                await kit.save(CLAIMS, save, checkpoint, when)
            when = "giving the claim up"
        if callable(owner):
            await _owner_is(kit, owner, None, "after the claim was given up")
        when = "claiming it again after giving it up"
        async with _held(save, when) as stored:
            _expect_seq(stored, kit.samples.run[-1].seq, when)
    except StoreConformanceError:
        raise
    except Exception as exc:
        raise _failed(when, exc) from exc


def _expect_seq(stored: object, expected: int | None, when: str) -> None:
    if stored == expected and type(stored) is type(expected):
        return
    held = "no checkpoint stored" if expected is None else f"seq {expected} stored last"
    msg = f"{when} gave {preview(stored)}; expected {expected} ({held})"
    raise StoreConformanceError(CLAIMS, msg)


async def _refused(save: Save, when: str) -> None:
    try:
        async with _held(save, when):
            pass
    except RunClaimedError:
        return
    except StoreConformanceError:
        raise
    except Exception as exc:
        msg = f"{when}: raised {type(exc).__name__}: {exc}; expected RunClaimedError"
        raise StoreConformanceError(CLAIMS, msg) from exc
    msg = f"{when}: the second claim was granted; expected RunClaimedError"
    raise StoreConformanceError(CLAIMS, msg)


async def _owner_is(kit: Kit, owner: Any, pid: int | None, when: str) -> None:
    try:
        found = await kit.call(owner, RUN_ID)
    except Exception as exc:
        msg = f"{when}: owner({RUN_ID!r}) raised {type(exc).__name__}: {exc}"
        raise StoreConformanceError(CLAIMS, msg) from exc
    if pid is None:
        if found is not None:
            msg = f"{when}: owner({RUN_ID!r}) returned {preview(found)}; expected None"
            raise StoreConformanceError(CLAIMS, msg)
        return
    if not isinstance(found, RunOwner) or found.pid != pid or found.run_id != RUN_ID:
        msg = (
            f"{when}: owner({RUN_ID!r}) returned {preview(found)}; expected a RunOwner of "
            f"run {RUN_ID!r} with pid {pid} (this process)"
        )
        raise StoreConformanceError(CLAIMS, msg)
