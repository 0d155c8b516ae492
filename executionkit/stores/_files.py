"""Reading and durably writing the store files: identities, whole reads, fsync."""

from __future__ import annotations

import contextlib
import errno
import os
import stat
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING

from executionkit._errors import CheckpointFormatError

if TYPE_CHECKING:
    from collections.abc import Callable

FileId = tuple[int, int, int, int]
"""Device, inode, size and modification time: a file as this process last saw it."""

_DIR_FSYNC_UNSUPPORTED = frozenset({errno.EINVAL, errno.ENOTSUP, errno.EBADF})

# O_NONBLOCK lets opening a FIFO return at once instead of waiting for a writer, so that
# check_regular can refuse it; on a regular file it changes nothing.
_READ_FLAGS = os.O_RDONLY | getattr(os, "O_BINARY", 0) | getattr(os, "O_NONBLOCK", 0)
WRITE_FLAGS = os.O_WRONLY | os.O_CREAT | getattr(os, "O_BINARY", 0) | getattr(os, "O_NONBLOCK", 0)
_KINDS: tuple[tuple[Callable[[int], bool], str], ...] = (
    (stat.S_ISFIFO, "a FIFO"),
    (stat.S_ISSOCK, "a socket"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
)


def fd_id(fd: int) -> FileId:
    info = os.fstat(fd)
    return info.st_dev, info.st_ino, info.st_size, info.st_mtime_ns


def path_id(path: Path) -> FileId | None:
    try:
        info = path.stat()
    except FileNotFoundError:
        return None
    return info.st_dev, info.st_ino, info.st_size, info.st_mtime_ns


def check_regular(mode: int, path: Path, where: str) -> None:
    """Refuse a path that is not a regular file, before anything reads from it.

    A folder fails as the OS fails opening one for reading. Anything else (a
    FIFO, a device, a socket) is refused as damage: reading it could wait for a
    writer, or never end.

    Raises:
        IsADirectoryError: If ``path`` is a folder.
        CheckpointFormatError: ``where: it is a FIFO, not a regular file``.
    """
    if stat.S_ISREG(mode):
        return
    if stat.S_ISDIR(mode):
        raise IsADirectoryError(errno.EISDIR, os.strerror(errno.EISDIR), str(path))
    kind = next((kind for test, kind in _KINDS if test(mode)), "not a file")
    msg = f"{where}: it is {kind}, not a regular file"
    raise CheckpointFormatError(msg)


def read_bytes(path: Path) -> tuple[bytes, FileId] | None:
    """The file's contents and identity, read from one open file; None if it is missing.

    Raises:
        IsADirectoryError: If ``path`` is a folder.
        CheckpointFormatError: If ``path`` is a FIFO, a device or a socket.
    """
    try:
        fd = os.open(path, _READ_FLAGS)
    except FileNotFoundError:
        return None
    try:
        check_regular(os.fstat(fd).st_mode, path, f"{path}: not a checkpoint file")
        with os.fdopen(fd, "rb", closefd=False) as file:
            data = file.read()
        return data, fd_id(fd)
    finally:
        os.close(fd)


def write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        written = os.write(fd, view)
        view = view[written:]


def fsync_folder(folder: Path) -> None:
    """Make a file's creation or replacement in ``folder`` durable, where the OS allows."""
    if os.name == "nt":  # pragma: no cover - Windows cannot open a folder; NTFS journals it
        return
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:  # pragma: no cover - e.g. a folder we may write but not read
        return
    try:
        os.fsync(fd)
    except OSError as exc:  # pragma: no cover - filesystems that cannot sync a folder
        if exc.errno not in _DIR_FSYNC_UNSUPPORTED:
            raise
    finally:
        os.close(fd)


def replace_file(path: Path, data: bytes) -> None:
    """Replace ``path`` with ``data`` atomically: a temporary file, fsynced, renamed over it.

    A reader sees the old file or the new one, never a torn mix; a failure
    removes the temporary file and leaves ``path`` as it was. The folder is
    fsynced after the rename (where the OS allows).
    """
    folder = path.parent
    fd, temporary = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=folder)
    try:
        try:
            write_all(fd, data)
            os.fsync(fd)
        finally:
            os.close(fd)
        Path(temporary).replace(path)
    except BaseException:
        with contextlib.suppress(OSError):
            Path(temporary).unlink()
        raise
    fsync_folder(folder)
