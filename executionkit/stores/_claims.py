"""Claims on runs for the file stores: an OS lock on a lock file that dies with its owner.

A claim is ``flock(LOCK_EX | LOCK_NB)`` on a lock file of its own, held through one
open file description for as long as the claim lasts. flock locks belong to the
open file description, not to the process, so two claims in one process conflict
as two processes do; and the kernel drops the lock when its owner dies, even by
SIGKILL, so no lease and no clock are needed. The database or checkpoint file is
never locked itself: it is replaced, reopened and locked by SQLite, and a lock
file of its own keeps the claim apart from all of that. The descriptor is not
inherited by programs a step starts; a child made by a bare ``fork`` shares it,
and the claim then lasts until that child has ended too.

The owner writes who it is (`RunOwner.to_dict`, as JSON) into the lock file once
it holds the lock, for a refused claimant and `lock_owner` to report; the
content is advisory, the lock is the truth. Lock files are never deleted:
deleting one races with a claimant that has just opened it, which would then lock
a file no one else can see. Where ``fcntl`` is missing (Windows) no lock is
taken and `lock_owner` reports no one.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import sys
import time
from typing import TYPE_CHECKING, NoReturn

from executionkit._errors import RunClaimedError
from executionkit._owner import RunOwner
from executionkit.stores._files import check_regular

if sys.platform != "win32":
    import fcntl

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator
    from pathlib import Path

# A claimant that finds the lock taken tries again for this long before it is refused,
# because `lock_owner` probes with a shared lock held for microseconds: a probe (an
# `inspect`, say) must never make a real claim fail. A live owner holds the lock far
# longer than this, so the wait only ever delays a refusal that is due anyway.
_RETRY_SECONDS = 0.05
_RETRY_PAUSE = 0.001
# At least this many attempts, however slowly a busy process gets to make them.
_RETRY_ATTEMPTS = 20
_OWNER_BYTES = 65536  # far more than any RunOwner written takes
_OPEN_FLAGS = getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0)

CLAIMS_WORK = sys.platform != "win32"
"""Whether this platform has the locks claims need (every POSIX system)."""


def run_lock_name(run_id: str) -> str:
    """The lock file of ``run_id`` in a folder of claims: a hash, safe as any file name."""
    digest = hashlib.sha256(run_id.encode("utf-8", "surrogatepass")).hexdigest()
    return f"{digest[:32]}.lock"


@contextlib.contextmanager
def claimed(
    store: str,
    lock: Path,
    run_id: str,
    latest: Callable[[], int | None],
    *,
    one_run: bool = False,
    in_own_folder: bool = False,
) -> Iterator[int | None]:
    """Hold the claim on ``lock`` for ``run_id``; give ``latest()``, read once it is held.

    Args:
        store: The store's repr, for the error.
        lock: The lock file, created if missing.
        run_id: The run claimed, written into the lock file.
        latest: The seq of the run's latest stored checkpoint, or None.
        one_run: The lock guards a file that holds one run: a refusal names the
            run that owns the file, whichever run was asked for.
        in_own_folder: The folder of ``lock`` holds lock files only, and is
            created if missing (not its parents).

    Raises:
        RunClaimedError: If another claim holds the lock (in this process or
            another); nothing was written.
        CheckpointFormatError: If ``lock`` is a FIFO, a device or a socket.
    """
    if not CLAIMS_WORK:  # pragma: no cover - Windows
        yield latest()
        return
    fd = _take(store, lock, run_id, one_run=one_run, in_own_folder=in_own_folder)
    try:
        yield latest()
    finally:
        _release(fd)


def lock_owner(lock: Path) -> RunOwner | None:
    """Who holds the claim on ``lock`` now, or None when no one does.

    Tests the lock without taking it for long: a shared lock that is granted
    means no claim holds it, and is given back at once. None too where claims do
    not work, and when the owner's details cannot be read (it is writing them).

    Raises:
        CheckpointFormatError: If ``lock`` is a FIFO, a device or a socket.
    """
    if not CLAIMS_WORK:  # pragma: no cover - Windows
        return None
    try:
        fd = os.open(lock, os.O_RDONLY | _OPEN_FLAGS)
    except FileNotFoundError:
        return None
    try:
        check_regular(os.fstat(fd).st_mode, lock, f"{lock}: not a claim's lock file")
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            return _read_owner(fd)
        fcntl.flock(fd, fcntl.LOCK_UN)
        return None
    finally:
        os.close(fd)


def _take(store: str, lock: Path, run_id: str, *, one_run: bool, in_own_folder: bool) -> int:
    """Open ``lock`` and lock it exclusively, or raise `RunClaimedError`; return the fd."""
    try:
        fd = os.open(lock, os.O_RDWR | os.O_CREAT | _OPEN_FLAGS, 0o666)
    except FileNotFoundError:
        if not in_own_folder:
            raise
        lock.parent.mkdir(exist_ok=True)
        fd = os.open(lock, os.O_RDWR | os.O_CREAT | _OPEN_FLAGS, 0o666)
    try:
        check_regular(os.fstat(fd).st_mode, lock, f"{lock}: not a claim's lock file")
        if not _lock(fd):
            _refuse(store, run_id, _read_owner(fd), one_run=one_run)
        data = json.dumps(RunOwner.this_process(run_id).to_dict()).encode("utf-8")
        os.pwrite(fd, data, 0)
        os.ftruncate(fd, len(data))
    except BaseException:
        os.close(fd)  # gives the lock up too, if it was taken
        raise
    return fd


def _refuse(store: str, run_id: str, owner: RunOwner | None, *, one_run: bool) -> NoReturn:
    if one_run and owner is not None and owner.run_id != run_id:
        # The file holds the owner's run: starting another would destroy it.
        store = f"{store} holds one run at a time and refused run {run_id!r}"
        run_id = owner.run_id
    raise RunClaimedError(store, run_id, owner)


def _lock(fd: int) -> bool:
    """Lock ``fd`` exclusively, trying again for a short while; whether it was locked."""
    deadline = time.monotonic() + _RETRY_SECONDS
    attempts = 0
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            attempts += 1
            if attempts >= _RETRY_ATTEMPTS and time.monotonic() >= deadline:
                return False
            time.sleep(_RETRY_PAUSE)
        else:
            return True


def _release(fd: int) -> None:
    """Give the claim up; never raises (a lock already gone is gone)."""
    # Emptied first, so that no one reads the details of an owner who left cleanly.
    with contextlib.suppress(OSError):
        os.ftruncate(fd, 0)
    with contextlib.suppress(OSError):
        os.close(fd)


def _read_owner(fd: int) -> RunOwner | None:
    try:
        data = os.pread(fd, _OWNER_BYTES, 0)
        return RunOwner.from_dict(json.loads(data))
    except (OSError, ValueError, RecursionError):
        return None  # empty, torn, or not ours: the owner is writing or was killed writing
