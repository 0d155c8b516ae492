"""Where a command reads and writes checkpoints: a file, or a run in a database.

A location is given as a path, or as a URL naming a database and, with
``?run_id=ID``, one run in it:

- a path ending in ``.jsonl``: a JSON Lines file (`JsonLinesStore`);
- any other path: a JSON file (`JsonFileStore`), except that a path ending in
  ``.db``, ``.sqlite`` or ``.sqlite3`` is refused, with the ``sqlite:///`` URL to
  write instead (a database holds many runs: a path alone cannot name one);
- ``sqlite:///relative/path.db`` or ``sqlite:////absolute/path.db`` (`SQLiteStore`);
- ``postgresql://user@host/dbname`` (`PostgresStore`, with the ``postgres`` extra).

Every problem becomes a `CliError` naming the location as it was given (a
password in a PostgreSQL URL is never shown). A location also says who claims
its run (``owner``), when its store reports owners (``reports_owners``). A
database's `DatabaseLocation.run_url` is the URL of one run in it, for commands
printed to be pasted. ``checkpoints`` lists the checkpoints a location keeps
and ``load_seq`` loads one of them (a JSON file keeps only its latest).
``stream_publisher`` keeps the text the runs of a location stream in its store.
"""

from __future__ import annotations

import contextlib
import re
import shlex
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol
from urllib.parse import parse_qsl, quote, unquote_plus, urlencode, urlsplit

from executionkit._cli._exits import CliError
from executionkit._cli._load import load_checkpoint, load_lines_checkpoint
from executionkit._cli._text import error_text

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator

    from executionkit._checkpoint._value import WorkflowCheckpoint
    from executionkit._owner import RunOwner
    from executionkit.stores import CheckpointInfo, JsonLinesStore

_SCHEMES = ("sqlite", "postgresql", "postgres")
_DATABASE_SUFFIXES = (".db", ".sqlite", ".sqlite3")
PASSWORD = "PASSWORD"  # noqa: S105 - a placeholder, not a password
"""What a printed command holds in place of a password: it is never printed."""


class _Database(Protocol):
    """What the commands use of `SQLiteStore` and `PostgresStore`."""

    def __call__(self, checkpoint: WorkflowCheckpoint) -> None: ...

    def load(
        self, run_id: str | None = None, *, seq: int | None = None
    ) -> WorkflowCheckpoint | None: ...

    def checkpoints(self, run_id: str | None = None) -> list[CheckpointInfo]: ...

    def run_ids(self) -> list[str]: ...


@dataclass(frozen=True)
class FileLocation:
    """A checkpoint file: JSON Lines when its name ends in ``.jsonl``, else JSON."""

    path: Path
    label: str
    run_id: None = None

    @property
    def lines(self) -> bool:
        """Whether the file is JSON Lines (`JsonLinesStore`), by its name."""
        return self.path.suffix.lower() == ".jsonl"

    def load(self, *, missing_ok: bool) -> WorkflowCheckpoint | None:
        """The checkpoint in the file; None if there is none and ``missing_ok``."""
        if self.lines:
            return load_lines_checkpoint(self.path, missing_ok=missing_ok)
        return load_checkpoint(self.path, missing_ok=missing_ok)

    def checkpoints(self) -> list[CheckpointInfo]:
        """The checkpoints the file keeps: each line of a JSON Lines file's run, else one."""
        from executionkit.stores import CheckpointInfo  # noqa: PLC0415

        latest = self.load(missing_ok=False)  # the file checked as inspect checks it
        assert latest is not None  # noqa: S101 - missing_ok=False never returns None
        if not self.lines:
            return [CheckpointInfo.of(latest)]
        found: list[CheckpointInfo] = self._read_lines(lambda store: store.checkpoints())
        return found

    def load_seq(self, seq: int) -> WorkflowCheckpoint:
        """The checkpoint ``seq`` the file keeps; a `CliError` naming those kept if none."""
        latest = self.load(missing_ok=False)
        assert latest is not None  # noqa: S101 - missing_ok=False never returns None
        if latest.seq == seq:
            return latest
        if not self.lines:
            msg = (
                f"{self.label}: a JSON file keeps only its latest checkpoint, seq={latest.seq}; "
                f"it has no seq={seq}"
            )
            raise CliError(msg)
        found: WorkflowCheckpoint = self._read_lines(lambda store: store.load(seq=seq))
        return found

    def _read_lines(self, read: Callable[[JsonLinesStore], Any]) -> Any:
        """``read(store)`` of the file's `JsonLinesStore`, its errors as a `CliError`."""
        from executionkit._errors import ExecutionKitError  # noqa: PLC0415
        from executionkit.stores import JsonLinesStore  # noqa: PLC0415

        try:
            return read(JsonLinesStore(self.path))
        except (ExecutionKitError, ValueError, OSError, RecursionError) as exc:
            msg = f"{self.label}: {error_text(exc)}"
            raise CliError(msg) from None

    def writer(
        self, flag: str, *, history: bool = False
    ) -> Callable[[WorkflowCheckpoint], object]:
        """A ``checkpoint_fn`` that writes the file (atomically, or by appending lines).

        ``history`` (keep every checkpoint) is what a JSON Lines file does anyway;
        a JSON file keeps only the latest, so it is refused there.
        """
        if history and not self.lines:
            msg = (
                f"--history: {self.label} is a JSON file, which keeps only the latest "
                f"checkpoint; a JSON Lines file (.jsonl) or a database keeps every one"
            )
            raise CliError(msg)
        if not self.path.parent.is_dir():
            msg = f"{flag} {self.label}: folder {self.path.parent} does not exist"
            raise CliError(msg)
        return self._store()

    def reports_owners(self) -> bool:
        """Whether the file's store can say who claims it (`owner`)."""
        return callable(getattr(self._store(), "owner", None))

    def owner(self) -> RunOwner | None:
        """The live process that claims the file now, or None (also if no one can tell)."""
        from executionkit._errors import ExecutionKitError  # noqa: PLC0415

        try:
            return _owner_of(self._store(), None)
        except (ExecutionKitError, OSError) as exc:  # a claim file that is not one
            msg = f"{self.label}: {error_text(exc)}"
            raise CliError(msg) from None

    def _store(self) -> Callable[[WorkflowCheckpoint], object]:
        from executionkit.stores import JsonFileStore, JsonLinesStore  # noqa: PLC0415

        return JsonLinesStore(self.path) if self.lines else JsonFileStore(self.path)


@dataclass(frozen=True)
class DatabaseLocation:
    """A database (SQLite or PostgreSQL), and maybe one run in it."""

    label: str
    scheme: str
    target: str  # the SQLite file, or the PostgreSQL connection string without run_id
    run_id: str | None
    # The URL as given, without its run_id (and its password: never shown, never compared).
    given: str = field(default="", compare=False, repr=False)

    def store(self, *, history: bool = False) -> _Database:
        """The store for this database (keeping every checkpoint if ``history``).

        `CliError` if it cannot be opened.
        """
        if self.scheme == "sqlite":
            from executionkit.stores import SQLiteStore  # noqa: PLC0415

            path = Path(self.target)
            if not path.parent.is_dir():
                msg = f"{self.label}: folder {path.parent} does not exist"
                raise CliError(msg)
            return SQLiteStore(path, history=history)
        from executionkit import stores  # noqa: PLC0415

        postgres: Any = getattr(stores, "PostgresStore", None)
        if postgres is None:
            msg = f"{self.label}: this executionkit has no PostgreSQL store"
            raise CliError(msg)
        try:
            database: _Database = postgres(self.target, history=history)
        except ImportError as exc:
            msg = f"{self.label}: {error_text(exc)}"
            raise CliError(msg) from None
        return database

    def named_run(self, flag: str) -> str:
        """The run_id given with ``?run_id=``, or a `CliError` asking for it."""
        if self.run_id is None:
            url, hidden = self.run_url("NAME")
            msg = (
                f"{flag} {self.label}: name the run in the database, as in {shlex.quote(url)}"
                + (f" (with the password in place of {PASSWORD})" if hidden else "")
            )
            raise CliError(msg)
        return self.run_id

    def run_url(self, run_id: str) -> tuple[str, bool]:
        """The URL of run ``run_id`` in this database, and whether a password was left out.

        It is the URL as given, its query kept and ``run_id`` added to it (escaped),
        so that a command holding it works when pasted. A password is never printed:
        `PASSWORD` stands in its place, and the second value says so.
        """
        url = self.given or self.label
        url, hidden = _without_password(url)
        separator = "&" if "?" in url else "?"
        return f"{url}{separator}run_id={quote(run_id, safe='')}", hidden

    def load(self, *, missing_ok: bool) -> WorkflowCheckpoint | None:
        """The latest checkpoint of the named run; None if there is none and ``missing_ok``."""
        run_id = self.run_id
        checkpoint: WorkflowCheckpoint | None = self._call(lambda store: store.load(run_id))
        if checkpoint is None and not missing_ok:
            msg = f"{self.label}: holds no checkpoint of run {run_id!r}"
            raise CliError(msg)
        return checkpoint

    def checkpoints(self, flag: str) -> list[CheckpointInfo]:
        """The checkpoints kept of the named run, oldest first (``flag`` is for messages)."""
        run_id = self.named_run(flag)
        found: list[CheckpointInfo] = self._call(lambda store: store.checkpoints(run_id))
        if not found:
            msg = f"{self.label}: holds no checkpoint of run {run_id!r}"
            raise CliError(msg)
        return found

    def load_seq(self, seq: int, flag: str) -> WorkflowCheckpoint:
        """The named run's checkpoint ``seq``; a `CliError` naming the seqs kept if none."""
        run_id = self.named_run(flag)
        found: WorkflowCheckpoint | None = self._call(lambda store: store.load(run_id, seq=seq))
        if found is None:
            msg = f"{self.label}: holds no checkpoint of run {run_id!r}"
            raise CliError(msg)
        return found

    def run_ids(self) -> list[str]:
        """The runs the database holds, the most recently written first."""
        run_ids: list[str] = self._call(lambda store: store.run_ids())
        return run_ids

    def writer(
        self, flag: str, *, history: bool = False
    ) -> Callable[[WorkflowCheckpoint], object]:
        """A ``checkpoint_fn`` saving into the database (``flag`` is for messages).

        ``history``: keep every checkpoint, not only the latest.
        """
        del flag  # the store reports its own problems, naming the database
        return self.store(history=history)

    def reports_owners(self) -> bool:
        """Whether the database's store can say who claims a run (`owner`)."""
        return callable(getattr(self.store(), "owner", None))

    def owner(self, run_id: str) -> RunOwner | None:
        """The live process that claims ``run_id`` now, or None (also if no one can tell)."""
        found: RunOwner | None = self._call(lambda store: _owner_of(store, run_id))
        return found

    def _call(self, read: Callable[[_Database], Any]) -> Any:
        store = self.store()
        with cli_errors(self.label):
            return read(store)


def open_store(location: Location, flag: str, *, history: bool = False) -> Any:
    """A new store on ``location``: a database's, or the file's (``flag`` names it in errors)."""
    if isinstance(location, DatabaseLocation):
        return location.store(history=history)
    return location.writer(flag, history=history)


def stream_publisher(location: Location, flag: str) -> Any:
    """A `StreamPublisher` keeping the text the runs on ``location`` stream in its store.

    For the page of ``executionkit serve`` in another process. Its thread
    opens a store of its own (``flag`` names the location in its errors); a
    SQLite database's with ``synchronous="NORMAL"``: streamed text is never
    precious, so its writes skip the fsync each checkpoint's commit takes.
    """
    from executionkit.stores import SQLiteStore, StreamPublisher  # noqa: PLC0415

    def opened() -> object:
        if isinstance(location, DatabaseLocation) and location.scheme == "sqlite":
            return SQLiteStore(Path(location.target), synchronous="NORMAL")
        return open_store(location, flag)

    return StreamPublisher(opened)


def close_store(store: object) -> None:
    """Close what ``store`` holds open (connections, a file), if it holds anything."""
    close = getattr(store, "close", None)
    if callable(close):
        close()


@contextlib.contextmanager
def cli_errors(label: str) -> Iterator[None]:
    """Turn what reading the location ``label`` raised into one `CliError` naming it.

    Ours (`ExecutionKitError`), the OS's, a bad value's, and a database driver's
    own errors (sqlite3, psycopg): one line, never a traceback. Anything else
    is a bug, and propagates.
    """
    from executionkit._errors import ExecutionKitError  # noqa: PLC0415

    try:
        yield
    except (ExecutionKitError, OSError, ValueError) as exc:
        msg = f"{label}: {error_text(exc)}"
        raise CliError(msg) from None
    except Exception as exc:
        if type(exc).__module__.split(".")[0] not in {"sqlite3", "psycopg"}:
            raise
        msg = f"{label}: {error_text(exc)}"
        raise CliError(msg) from None


Location = FileLocation | DatabaseLocation


def _owner_of(store: object, run_id: str | None) -> RunOwner | None:
    """``store.owner(run_id)`` (the file stores take no run_id), if the store has it."""
    owner = getattr(store, "owner", None)
    if owner is None:
        return None
    found: RunOwner | None = owner() if run_id is None else owner(run_id)
    return found


def parse_location(text: str) -> Location:
    """What ``text`` names: a database URL (by its scheme) or else a file path."""
    scheme, colon, _ = text.partition(":")
    if not colon or scheme.lower() not in _SCHEMES:
        return _file(text)
    try:
        parts = urlsplit(text)
        parts.port  # noqa: B018 - raises ValueError for a port that is not a number
    except ValueError as exc:
        msg = f"{_hidden(text)}: not a database URL ({exc})"
        raise CliError(msg) from None
    query = parse_qsl(parts.query, keep_blank_values=True)
    run_ids = [value for key, value in query if key == "run_id"]
    others = [(key, value) for key, value in query if key != "run_id"]
    if len(run_ids) > 1:
        msg = f"{_hidden(text)}: run_id is given {len(run_ids)} times"
        raise CliError(msg)
    if run_ids and not run_ids[0]:
        msg = f"{_hidden(text)}: run_id is empty"
        raise CliError(msg)
    run_id = run_ids[0] if run_ids else None
    # Rebuilt by hand: urlunsplit would turn sqlite:///x.db into sqlite:/x.db.
    rest = text.split("?", 1)[0].split("#", 1)[0]
    target = f"{rest}?{urlencode(others)}" if others else rest
    label = _hidden(target)
    given = _without_run_id(text)
    if parts.scheme.lower() == "sqlite":
        if parts.netloc or others or not parts.path.startswith("/") or parts.path == "/":
            msg = (
                f"{_hidden(text)}: not an SQLite location; write sqlite:///relative/path.db "
                f"or sqlite:////absolute/path.db, then ?run_id=NAME to name a run"
            )
            raise CliError(msg)
        return DatabaseLocation(label, "sqlite", parts.path[1:], run_id, given)
    return DatabaseLocation(label, "postgresql", target, run_id, given)


def _file(text: str) -> FileLocation:
    """The file ``text`` names; a database file by its name is refused with the URL to write."""
    path = Path(text)
    if path.suffix.lower() in _DATABASE_SUFFIXES:
        url = f"sqlite:///{text}"  # an absolute path makes the four slashes SQLite URLs want
        msg = (
            f"{text}: an SQLite database, by its extension; name a run in it as "
            f"{shlex.quote(f'{url}?run_id=NAME')} (inspect {shlex.quote(url)} lists its runs)"
        )
        raise CliError(msg)
    return FileLocation(path, text)


def _without_run_id(text: str) -> str:
    """The URL ``text`` as given, without its ``run_id`` parameter and fragment."""
    base, _, query = text.split("#", 1)[0].partition("?")
    kept = [pair for pair in query.split("&") if pair and not _is_run_id(pair)]
    return f"{base}?{'&'.join(kept)}" if kept else base


def _is_run_id(pair: str) -> bool:
    return unquote_plus(pair.partition("=")[0]) == "run_id"


_QUERY_PASSWORD = re.compile(r"(?<=[?&])(password=)[^&#]+")


def _without_password(url: str) -> tuple[str, bool]:
    """``url`` with a password (after ``user:``, or ``password=``) replaced by `PASSWORD`."""
    scheme, sep, rest = url.partition("://")
    netloc, slash, path = rest.partition("/")
    user, at, host = netloc.rpartition("@")
    name, colon, password = user.partition(":")
    hidden = False
    if sep and at and colon and password:
        url = f"{scheme}{sep}{name}:{PASSWORD}@{host}{slash}{path}"
        hidden = True
    url, count = _QUERY_PASSWORD.subn(rf"\g<1>{PASSWORD}", url)
    return url, hidden or count > 0


def _hidden(text: str) -> str:
    """``text`` with the password of a URL (``user:...@``, ``password=...``) shown as ``***``.

    An empty password (``user:@``) is shown as it is: there is nothing to hide.
    """
    text = _QUERY_PASSWORD.sub(r"\g<1>***", text)
    scheme, sep, rest = text.partition("://")
    netloc, slash, path = rest.partition("/")
    user, at, host = netloc.rpartition("@")
    name, colon, password = user.partition(":")
    if not sep or not at or not colon or not password:
        return text
    return f"{scheme}{sep}{name}:***@{host}{slash}{path}"
