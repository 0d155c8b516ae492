"""Reading and durably writing the store files: identities, whole reads, fsync."""

from __future__ import annotations

import errno
import os
from typing import TYPE_CHECKING

from executionkit._errors import CheckpointFormatError

if TYPE_CHECKING:
    from pathlib import Path

FileId = tuple[int, int, int, int]
"""Device, inode, size and modification time: a file as this process last saw it."""

_DIR_FSYNC_UNSUPPORTED = frozenset({errno.EINVAL, errno.ENOTSUP, errno.EBADF})


def fd_id(fd: int) -> FileId:
    info = os.fstat(fd)
    return info.st_dev, info.st_ino, info.st_size, info.st_mtime_ns


def path_id(path: Path) -> FileId | None:
    try:
        info = path.stat()
    except FileNotFoundError:
        return None
    return info.st_dev, info.st_ino, info.st_size, info.st_mtime_ns


def read_bytes(path: Path) -> tuple[bytes, FileId] | None:
    """The file's contents and identity, read from one open file; None if it is missing."""
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_BINARY", 0))
    except FileNotFoundError:
        return None
    try:
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


def utf8_text(data: bytes, where: str) -> str:
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        msg = f"{where}: not a checkpoint file: not UTF-8 text ({exc.reason} at byte {exc.start})"
        raise CheckpointFormatError(msg) from None
