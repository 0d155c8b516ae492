"""Where a command reads and writes checkpoints: a JSON file, or a run in a database.

A location is given as a path (a JSON file, as `JsonFileStore` writes it), or as
a URL naming a database and, with ``?run_id=ID``, one run in it:

- ``sqlite:///relative/path.db`` or ``sqlite:////absolute/path.db`` (`SQLiteStore`);
- ``postgresql://user@host/dbname`` (`PostgresStore`, with the ``postgres`` extra).

Every problem becomes a `CliError` naming the location as it was given (a
password in a PostgreSQL URL is never shown). A location also says who claims
its run (``owner``), when its store reports owners (``reports_owners``).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol
from urllib.parse import parse_qsl, urlencode, urlsplit

from executionkit._cli._exits import CliError
from executionkit._cli._load import load_checkpoint
from executionkit._cli._text import error_text

if TYPE_CHECKING:
    from collections.abc import Callable

    from executionkit._checkpoint import WorkflowCheckpoint
    from executionkit._ownership import RunOwner

_SCHEMES = ("sqlite", "postgresql", "postgres")


class _Database(Protocol):
    """What the commands use of `SQLiteStore` and `PostgresStore`."""

    def __call__(self, checkpoint: WorkflowCheckpoint) -> None: ...

    def load(self, run_id: str | None = None) -> WorkflowCheckpoint | None: ...

    def run_ids(self) -> list[str]: ...


@dataclass(frozen=True)
class FileLocation:
    """A JSON checkpoint file."""

    path: Path
    label: str
    run_id: None = None

    def load(self, *, missing_ok: bool) -> WorkflowCheckpoint | None:
        """The checkpoint in the file; None if there is none and ``missing_ok``."""
        return load_checkpoint(self.path, missing_ok=missing_ok)

    def writer(self, flag: str) -> Callable[[WorkflowCheckpoint], object]:
        """A ``checkpoint_fn`` that writes the file atomically."""
        from executionkit.stores import JsonFileStore  # noqa: PLC0415

        if not self.path.parent.is_dir():
            msg = f"{flag} {self.label}: folder {self.path.parent} does not exist"
            raise CliError(msg)
        return JsonFileStore(self.path)

    def reports_owners(self) -> bool:
        """Whether the file's store can say who claims it (`owner`)."""
        from executionkit.stores import JsonFileStore  # noqa: PLC0415

        return callable(getattr(JsonFileStore, "owner", None))

    def owner(self) -> RunOwner | None:
        """The live process that claims the file now, or None (also if no one can tell)."""
        from executionkit._errors import ExecutionKitError  # noqa: PLC0415
        from executionkit.stores import JsonFileStore  # noqa: PLC0415

        try:
            return _owner_of(JsonFileStore(self.path), None)
        except (ExecutionKitError, OSError) as exc:  # a claim file that is not one
            msg = f"{self.label}: {error_text(exc)}"
            raise CliError(msg) from None


@dataclass(frozen=True)
class DatabaseLocation:
    """A database (SQLite or PostgreSQL), and maybe one run in it."""

    label: str
    scheme: str
    target: str  # the SQLite file, or the PostgreSQL connection string without run_id
    run_id: str | None

    def store(self) -> _Database:
        """The store for this database; `CliError` if it cannot be opened."""
        if self.scheme == "sqlite":
            from executionkit.stores import SQLiteStore  # noqa: PLC0415

            path = Path(self.target)
            if not path.parent.is_dir():
                msg = f"{self.label}: folder {path.parent} does not exist"
                raise CliError(msg)
            return SQLiteStore(path)
        from executionkit import stores  # noqa: PLC0415

        postgres: Any = getattr(stores, "PostgresStore", None)
        if postgres is None:
            msg = f"{self.label}: this executionkit has no PostgreSQL store"
            raise CliError(msg)
        try:
            database: _Database = postgres(self.target)
        except ImportError as exc:
            msg = f"{self.label}: {error_text(exc)}"
            raise CliError(msg) from None
        return database

    def named_run(self, flag: str) -> str:
        """The run_id given with ``?run_id=``, or a `CliError` asking for it."""
        if self.run_id is None:
            msg = (
                f"{flag} {self.label}: name the run in the database, as in "
                f"{self.label}?run_id=NAME"
            )
            raise CliError(msg)
        return self.run_id

    def load(self, *, missing_ok: bool) -> WorkflowCheckpoint | None:
        """The latest checkpoint of the named run; None if there is none and ``missing_ok``."""
        run_id = self.run_id
        checkpoint: WorkflowCheckpoint | None = self._call(lambda store: store.load(run_id))
        if checkpoint is None and not missing_ok:
            msg = f"{self.label}: holds no checkpoint of run {run_id!r}"
            raise CliError(msg)
        return checkpoint

    def run_ids(self) -> list[str]:
        """The runs the database holds, the most recently written first."""
        run_ids: list[str] = self._call(lambda store: store.run_ids())
        return run_ids

    def writer(self, flag: str) -> Callable[[WorkflowCheckpoint], object]:
        """A ``checkpoint_fn`` saving into the database (``flag`` is for messages)."""
        del flag  # the store reports its own problems, naming the database
        return self.store()

    def reports_owners(self) -> bool:
        """Whether the database's store can say who claims a run (`owner`)."""
        return callable(getattr(self.store(), "owner", None))

    def owner(self, run_id: str) -> RunOwner | None:
        """The live process that claims ``run_id`` now, or None (also if no one can tell)."""
        found: RunOwner | None = self._call(lambda store: _owner_of(store, run_id))
        return found

    def _call(self, read: Callable[[_Database], Any]) -> Any:
        from executionkit._errors import ExecutionKitError  # noqa: PLC0415

        store = self.store()
        try:
            return read(store)
        except (ExecutionKitError, OSError) as exc:
            msg = f"{self.label}: {error_text(exc)}"
            raise CliError(msg) from None
        except Exception as exc:  # a driver's own error: one line, never a traceback
            if type(exc).__module__.split(".")[0] not in {"sqlite3", "psycopg"}:
                raise
            msg = f"{self.label}: {error_text(exc)}"
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
        return FileLocation(Path(text), text)
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
    if parts.scheme.lower() == "sqlite":
        if parts.netloc or others or not parts.path.startswith("/") or parts.path == "/":
            msg = (
                f"{_hidden(text)}: not an SQLite location; write sqlite:///relative/path.db "
                f"or sqlite:////absolute/path.db, then ?run_id=NAME to name a run"
            )
            raise CliError(msg)
        return DatabaseLocation(label, "sqlite", parts.path[1:], run_id)
    return DatabaseLocation(label, "postgresql", target, run_id)


def _hidden(text: str) -> str:
    """``text`` with the password of a URL (between ``user:`` and ``@``) shown as ``***``."""
    scheme, sep, rest = text.partition("://")
    netloc, slash, path = rest.partition("/")
    user, at, host = netloc.rpartition("@")
    if not sep or not at or ":" not in user:
        return text
    return f"{scheme}{sep}{user.split(':', 1)[0]}:***@{host}{slash}{path}"
