"""What the pages show of a location: its runs, each one's status, and one run in full.

A run's status is one of five words, decided in this order:

- ``running``: a live process holds the run's claim (`RunOwner`, from the
  store's ``owner``), or this server is resuming it now. Every bundled store
  claims a run while it runs, so a run in progress anywhere is seen here.
- ``submitted``: the store's inbox holds the run, submitted to start
  (`Workflow.submit`), and it has no checkpoint yet: a worker starts it.
- ``failed``: no one runs it and its latest checkpoint records a failed step;
  or, when the workflow is known, it records neither every step nor a
  question: it stopped before its end (interrupted, or its process killed).
- ``waiting``: no one runs it and questions wait for an answer.
- ``finished``: none of the above. Without the workflow the page cannot tell a
  run that stopped early from one that ended, and says ``finished``.

A run a worker left alone (`RunInbox.leave_alone`) keeps its status word; its
row says it was left alone (`RunRow.left_alone`, the reason).

The store is opened anew for each request and closed after it (`Source.reading`):
a store keeps a connection per thread, and the server runs each request in a
thread of its own.
"""

from __future__ import annotations

import contextlib
import threading
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from executionkit._cli._exits import CliError
from executionkit._cli._location import (
    DatabaseLocation,
    FileLocation,
    close_store,
    open_store,
)
from executionkit._cli._maps import failed_items, recorded_steps, unfinished_maps
from executionkit._cli._text import error_text
from executionkit._define._questions import waiting_in
from executionkit._define._waits import waits_in
from executionkit._paths import split_path

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable, Iterator, Mapping  # noqa: TC004 - dataclass annotations stay strings
    from datetime import datetime

    from executionkit._checkpoint._value import WorkflowCheckpoint  # noqa: TC004 - likewise
    from executionkit._cli._location import Location  # noqa: TC004 - dataclass annotations stay strings
    from executionkit._owner import RunOwner
    from executionkit._prices import PricedSpending, Prices  # noqa: TC004 - dataclass annotations stay strings
    from executionkit._workflow import Workflow  # noqa: TC004 - dataclass annotations stay strings
    from executionkit.stores import RunInbox, Submission  # noqa: TC004 - likewise

STATUSES = ("running", "submitted", "waiting", "failed", "finished")


class Unreadable(Exception):  # noqa: N818 - a page's message, not an error of the library
    """The location could not be read: the message says why, naming it."""


@dataclass(frozen=True, slots=True)
class RunRow:
    """One run on the runs page."""

    run_id: str
    status: str
    done: int
    total: int | None
    tokens: int
    saved_at: str | None
    questions: tuple[str, ...]
    dollars: str | None = None  # with --prices: the run's bill, "$1.2345"
    left_alone: str | None = None  # why a worker left the run alone, if one did


@dataclass(slots=True)
class Reader:
    """One request's view of the location: a store opened for it, closed after it."""

    location: Location
    store: Any
    _submitted: dict[str, Submission] | None = None
    _file_read: list[WorkflowCheckpoint | None] | None = None  # a file's one run, read once

    def run_ids(self) -> list[str]:
        """The runs the location holds, the most recently written first.

        Runs submitted and not started yet (no checkpoint) come first, the
        latest submitted first.
        """
        if isinstance(self.location, FileLocation):
            checkpoint = self._file()
            if checkpoint is not None:
                return [checkpoint.run_id or ""]
            return list(self.submissions())[:1]  # a file holds one run
        if self.location.run_id is not None:
            return [self.location.run_id]
        found: list[str] = self._call(self.store.run_ids)
        stored = set(found)
        waiting = [run_id for run_id in self.submissions() if run_id not in stored]
        return [*reversed(waiting), *found]

    def submissions(self) -> dict[str, Submission]:
        """The runs submitted to the store's inbox, by run id, the oldest first."""
        if self._submitted is None:
            inbox = self._inbox()
            found = [] if inbox is None else self._call(inbox.submissions)
            self._submitted = {submission.run_id: submission for submission in found}
        return self._submitted

    def left_alone(self) -> dict[str, str]:
        """The runs a worker left alone, each with the reason."""
        inbox = self._inbox()
        found: dict[str, str] = {} if inbox is None else self._call(inbox.left_alone)
        return found

    def submission(self, run_id: str) -> Submission | None:
        """The submission of ``run_id`` in the store's inbox, or None."""
        if self._submitted is not None:
            return self._submitted.get(run_id)
        inbox = self._inbox()
        found: Submission | None = (
            None if inbox is None else self._call(lambda: inbox.submission(run_id))
        )
        return found

    def all_answers(self) -> dict[str, dict[str, Any]]:
        """The answers saved in the inbox for every run, by run and question path."""
        inbox = self._inbox()
        found: dict[str, dict[str, Any]] = {} if inbox is None else self._call(inbox.all_answers)
        return found

    def answers(self, run_id: str) -> dict[str, Any]:
        """The answers saved in the inbox for ``run_id``'s questions, by question path."""
        inbox = self._inbox()
        found: dict[str, Any] = {} if inbox is None else self._call(lambda: inbox.answers(run_id))
        return found

    def streams(
        self, run_id: str, child: str | None = None, *, since: datetime | None = None
    ) -> dict[str, dict[str, Any]]:
        """The text the running steps of ``run_id`` streamed, as the process running it keeps it.

        What the store's inbox holds (`RunInbox.streams`, written by that
        process's `StreamPublisher`), in the shape ``/stream`` answers (see
        `Tracker.streams`): ``{step: {"attempt", "text"}}`` and a map's
        ``"items"``. The steps of the run itself, or with ``child`` (a page's
        ``child``: ``sub``, ``sub/key``, deeper by segments) those of that
        sub-workflow, whose entries the publisher keeps under its path.
        ``since``: the run's owner's claim; entries written before it are a
        process's that ran the run before (killed mid-step), not shown.
        """
        try:
            place = [] if child is None else split_path(child)
        except ValueError:  # no sub-workflow has that path: nothing streams there
            return {}
        inbox = self._inbox()
        found: dict[tuple[str, str | None], tuple[int, str]] = (
            {} if inbox is None else self._call(lambda: inbox.streams(run_id, since=since))
        )
        steps: dict[str, dict[str, Any]] = {}
        for (path, item), (attempt, text) in found.items():
            try:
                segments = split_path(path)
            except ValueError:  # no path a publisher writes: not a step of this page
                continue
            if segments[:-1] != place:
                continue  # a step of another sub-workflow, or of the run, not of this page
            entry = steps.setdefault(segments[-1], {})
            if item is None:
                entry.update(attempt=attempt, text=text)
            else:
                entry.setdefault("items", {})[item] = {"attempt": attempt, "text": text}
        return steps

    def save_answer(self, run_id: str, path: str, value: object) -> None:
        """Save ``value`` in the inbox as the answer to ``path`` of ``run_id``; nothing runs."""
        inbox = self._inbox()
        if inbox is None:  # never: every store a location opens has one
            raise Unreadable(f"{self.location.label}: its store keeps no inbox of answers")
        self._call(lambda: inbox.save_answer(run_id, path, value))

    def _inbox(self) -> RunInbox | None:
        inbox: RunInbox | None = getattr(self.store, "inbox", None)
        return inbox

    def seqs(self) -> dict[str, int] | None:
        """Each stored run's latest seq, in one query (a database's); None where not known."""
        if isinstance(self.location, FileLocation):
            return None
        run_seqs = getattr(self.store, "run_seqs", None)
        if run_seqs is None:
            return None
        found: dict[str, int] = self._call(run_seqs)
        return found

    def load(self, run_id: str) -> WorkflowCheckpoint | None:
        """The latest checkpoint of ``run_id``; None if the location holds none."""
        if isinstance(self.location, FileLocation):
            checkpoint = self._file()
            if checkpoint is None or (checkpoint.run_id or "") != run_id:
                return None
            return checkpoint
        found: WorkflowCheckpoint | None = self._call(lambda: self.store.load(run_id))
        return found

    def owner(self, run_id: str) -> RunOwner | None:
        """The live process that claims ``run_id`` now, or None."""
        owner = getattr(self.store, "owner", None)
        if owner is None:
            return None
        if isinstance(self.location, FileLocation):
            found: RunOwner | None = self._call(owner)
        else:
            found = self._call(lambda: owner(run_id))
        return found

    def _file(self) -> WorkflowCheckpoint | None:
        """The checkpoint in the location's file, None if it holds none yet."""
        assert isinstance(self.location, FileLocation)  # noqa: S101 - callers check
        if self._file_read is None:
            try:
                self._file_read = [self.location.load(missing_ok=True)]
            except CliError as exc:
                raise Unreadable(str(exc)) from None
        return self._file_read[0]

    def _call(self, read: Callable[[], Any]) -> Any:
        from executionkit._errors import ExecutionKitError  # noqa: PLC0415

        try:
            return read()
        except (ExecutionKitError, OSError, ValueError) as exc:
            raise Unreadable(f"{self.location.label}: {error_text(exc)}") from None
        except Exception as exc:  # a driver's own error: one line on the page
            if type(exc).__module__.split(".")[0] not in {"sqlite3", "psycopg"}:
                raise
            raise Unreadable(f"{self.location.label}: {error_text(exc)}") from None


class KeptStore:
    """One store a server keeps open for the request asked most often: ``/stream``.

    A PostgreSQL location's only. A page following a streaming run asks ten
    times a second; a connection each time would cost the database a backend
    process each. One connection taken in turn (two short queries a request)
    does not. Any other location opens a store per request, as every page
    does: an SQLite store's connections are per thread, and a request's thread
    ends with it.
    """

    def __init__(self) -> None:
        """Nothing open yet: the first request opens it."""
        self._lock = threading.Lock()
        self._store: Any = None

    @contextlib.contextmanager
    def reading(self, source: Source) -> Iterator[Reader]:
        """A `Reader` on the kept store (a PostgreSQL location's), else on a new one.

        A read that fails closes the kept store: the next request opens it anew.
        """
        location = source.location
        if not isinstance(location, DatabaseLocation) or location.scheme == "sqlite":
            with source.reading() as reader:
                yield reader
            return
        with self._lock:
            if self._store is None:
                try:
                    self._store = source.open_store()
                except CliError as exc:
                    raise Unreadable(str(exc)) from None
            try:
                yield Reader(location, self._store)
            except BaseException:
                self._close()
                raise

    def close(self) -> None:
        """Close the kept store, if open (the server stops)."""
        with self._lock:
            self._close()

    def _close(self) -> None:
        store, self._store = self._store, None
        if store is not None:
            close_store(store)


@dataclass
class Source:
    """The location a server shows, the workflow if given, and the runs it resumes now."""

    location: Location
    workflow: Workflow | None
    resuming: Callable[[str], bool] = field(default=lambda _run_id: False)
    prices: Prices | None = None  # --prices: the pages show dollars
    # Each run's latest checkpoint as last loaded, by run id with its seq: a page reads
    # every run's (the header, the filters, the forks), and loads again only those whose
    # seq moved since. A checkpoint of a run is never replaced under the same seq.
    _latest: dict[str, tuple[int, WorkflowCheckpoint]] = field(default_factory=dict)
    _latest_lock: threading.Lock = field(default_factory=threading.Lock)

    def latest(self, reader: Reader, run_id: str, seq: int | None) -> WorkflowCheckpoint | None:
        """The latest checkpoint of ``run_id`` at ``seq``: loaded again only if it moved.

        ``seq`` None (not known: a file, a store without ``run_seqs``) always loads.
        """
        if seq is None:
            return reader.load(run_id)
        with self._latest_lock:
            kept = self._latest.get(run_id)
        if kept is not None and kept[0] == seq:
            return kept[1]
        checkpoint = reader.load(run_id)
        if checkpoint is not None:
            with self._latest_lock:
                self._latest[run_id] = (checkpoint.seq, checkpoint)
        return checkpoint

    @contextlib.contextmanager
    def reading(self) -> Iterator[Reader]:
        """A `Reader` on a store opened for this request; the store is closed after it."""
        try:
            store = self.open_store()
        except CliError as exc:
            raise Unreadable(str(exc)) from None
        try:
            yield Reader(self.location, store)
        finally:
            close_store(store)

    def open_store(self, *, history: bool = False) -> Any:
        """A new store on the location (the resumes write through one of their own)."""
        return open_store(self.location, "serve", history=history)

    def status(self, reader: Reader, run_id: str, checkpoint: WorkflowCheckpoint | None) -> str:
        """One of `STATUSES`, as the module's docstring says (None: only submitted)."""
        if self.resuming(run_id) or reader.owner(run_id) is not None:
            return "running"
        if checkpoint is None:
            return "submitted"
        if checkpoint.errors:
            return "failed"
        if waiting_in(checkpoint) or waits_in(checkpoint):
            return "waiting"
        if (
            self.workflow is not None
            and checkpoint.version != 0
            and recorded_steps(checkpoint, self.workflow) < len(self.workflow.steps)
        ):
            return "failed"
        return "finished"

    def row(
        self,
        reader: Reader,
        run_id: str,
        checkpoint: WorkflowCheckpoint | None,
        left: Mapping[str, str],
        *,
        priced: bool = True,
    ) -> RunRow | None:
        """The `RunRow` of ``run_id`` (``checkpoint``: its latest); None if nothing holds it.

        ``priced``: with its bill, when the server has prices.
        """
        total = None if self.workflow is None else len(self.workflow.steps)
        if checkpoint is None:
            if run_id not in reader.submissions():
                return None
            status = self.status(reader, run_id, None)
            return RunRow(run_id, status, 0, total, 0, None, (), None, left.get(run_id))
        cost = checkpoint.cost
        return RunRow(
            run_id,
            self.status(reader, run_id, checkpoint),
            recorded_steps(checkpoint, self.workflow),
            total,
            cost.input_tokens + cost.output_tokens,
            checkpoint.created_at,
            tuple(waiting_in(checkpoint)),
            None if self.prices is None or not priced else bill(checkpoint, self.prices)[2],
            left.get(run_id),
        )


def bill(
    checkpoint: WorkflowCheckpoint, prices: Prices, priced: PricedSpending | None = None
) -> tuple[str, dict[str, str], str]:
    """The run's bill as the pages show it, each top-level step's dollars, and the total.

    ``$0.0142 ($0.0138 spent, $0.0004 wasted)``, then what the prices do not
    price (never $0) and how many attempts are of unknown usage. A
    sub-workflow step's dollars are its steps'. ``priced``: the checkpoint's
    ``spending.priced(prices)``, if the caller has it already.
    """
    from executionkit._prices import dollars_text  # noqa: PLC0415 - with --prices only

    if priced is None:
        priced = checkpoint.spending.priced(prices)
    text = (
        f"{dollars_text(priced.total)} ({dollars_text(priced.spent)} spent, "
        f"{dollars_text(priced.wasted)} wasted)"
    )
    for model, usage in priced.unpriced.items():
        text += f"; not priced: {usage.total_tokens:,} tokens of {model or 'no model'}"
    if priced.unknown:
        text += f"; {priced.unknown} attempt(s) of unknown usage"
    steps: dict[str, Any] = {}
    for path, amount in priced.by_step.items():
        top = split_path(path)[0] if "/" in path else path
        steps[top] = steps.get(top, 0) + amount
    steps_text = {name: dollars_text(amount) for name, amount in steps.items()}
    return text, steps_text, dollars_text(priced.total)


@dataclass(frozen=True, slots=True)
class CodeChange:
    """A recorded step whose code changed since its output was recorded."""

    step: str
    recorded: str  # the fingerprint of the code that made the output
    current: str  # the fingerprint of the step's code now
    tokens: int  # what running it again would cost: its recorded attempts' tokens


def code_changes(
    workflow: Workflow, checkpoint: WorkflowCheckpoint, inputs: Mapping[str, Any]
) -> list[CodeChange]:
    """The steps a resume of ``checkpoint`` keeps though their code changed (`Workflow.plan`).

    ``inputs`` are the run's (its submission's), if known: the plan needs the
    initial context's keys only, and runs nothing. Empty when the plan refuses
    the checkpoint (another workflow's run, say): the page then says nothing.
    """
    from executionkit._cli._inspect import code_changed  # noqa: PLC0415

    context = {**dict.fromkeys(checkpoint.context_keys), **inputs}
    try:
        plan = workflow.plan(context, resume_from=checkpoint)
    except Exception:  # noqa: BLE001 - whatever the plan refuses, the page shows no box
        return []
    if not plan.code_changed:
        return []
    prints = code_changed(checkpoint, workflow) or {}
    return [
        CodeChange(
            name,
            prints.get(name, {}).get("recorded", "?"),
            prints.get(name, {}).get("current", "?"),
            cost.input_tokens + cost.output_tokens,
        )
        for name, cost in plan.code_changed.items()
    ]


@dataclass(slots=True)
class StepLedger:
    """What a checkpoint's ledger holds of one step: its tokens, those wasted, its attempts.

    ``attempts`` is 0 when no row is the step's own (a sub-workflow's rows are its steps').
    ``unknown``: its attempts of unknown usage (``"unknown"`` rows: running when a
    process stopped), its sub-workflow's included.
    """

    tokens: int = 0
    wasted: int = 0
    attempts: int = 0
    unknown: int = 0


def ledger_by_step(checkpoint: WorkflowCheckpoint, names: Iterable[str]) -> dict[str, StepLedger]:
    """The ledger's rows summed by step of ``names``, in one pass (a map has a row per item).

    A sub-workflow's rows (``research/search``) count for its step (``research``).
    """
    from executionkit._checkpoint._ledger import WASTED  # noqa: PLC0415

    steps = set(names)
    found: dict[str, StepLedger] = {}
    unknown: set[tuple[str, str | None, int]] = set()  # an attempt may have a row per model
    for row in checkpoint.ledger:
        step = row.step if row.step in steps else row.step.split("/", 1)[0]
        entry = found.get(step)
        if entry is None:
            entry = found[step] = StepLedger()
        tokens = row.usage.input_tokens + row.usage.output_tokens
        entry.tokens += tokens
        if row.outcome in WASTED:
            entry.wasted += tokens
        if row.step == step:  # a sub-workflow's rows count the attempts of its own steps
            entry.attempts = max(entry.attempts, row.attempt)
        if row.outcome == "unknown" and (row.step, row.item, row.attempt) not in unknown:
            unknown.add((row.step, row.item, row.attempt))
            entry.unknown += 1
    return found


@dataclass(frozen=True, slots=True)
class MapView:
    """How far one map has come: items recorded of the total, and the failed keys."""

    recorded: int
    total: int | None
    failed: tuple[str, ...]
    finished: bool = False  # the map's output is recorded: ``recorded`` of ``total`` items


@dataclass(frozen=True, slots=True)
class StepView:
    """One step on a run's page."""

    name: str
    status: str
    kind: str  # "step", "map", "ask" or "workflow"
    depends_on: tuple[str, ...]
    has_output: bool
    output: object
    error: str | None
    items: MapView | None
    child: bool  # a sub-workflow in progress, with a view of its own
    child_items: tuple[str, ...] = ()  # the keys of a map's sub-workflows in progress


def step_views(
    checkpoint: WorkflowCheckpoint,
    workflow: Workflow | None,
    running: Mapping[str, object],
    failed_keys: Mapping[str, list[str]],
    *,
    run_running: bool = False,
) -> list[StepView]:
    """Each step of the run: the workflow's, in its order, else those the checkpoint names.

    ``running`` names steps this server sees started and not ended (or that
    stream from the process running them: without the workflow, those of them
    the checkpoint does not name yet come last);
    ``failed_keys`` the failed items of maps it saw fail. The checkpoint adds the
    failed items of maps of sub-workflows, and those its ledger saw fail (items
    that reported usage) and that are not recorded since. While the run runs
    (``run_running``: a process claims it), a step the checkpoint saw under way
    (a map with items recorded or in flight, an attempt in flight, a
    sub-workflow in progress) is running, not pending. Without the workflow,
    each step's kind is the one its ``step_info`` records.
    """
    from executionkit._cli._graph import step_statuses  # noqa: PLC0415

    kinds: dict[str, str] = {}
    depends: dict[str, tuple[str, ...]] = {}
    if workflow is not None:
        names = [step.name for step in workflow.steps]
        statuses = step_statuses(workflow, checkpoint)
        for step in workflow.steps:
            kinds[step.name] = _kind(step)
            depends[step.name] = tuple(step.depends_on)
    else:
        waiting = {
            split_path(path)[0] for path in (*waiting_in(checkpoint), *waits_in(checkpoint))
        }
        names = list(
            dict.fromkeys(
                [
                    *checkpoint.outputs,
                    *checkpoint.skipped,
                    *checkpoint.errors,
                    *waiting,
                    *checkpoint.items,
                    *checkpoint.children,  # sub-workflows in progress
                    *running,  # not recorded yet, streaming from another process
                ]
            )
        )
        statuses = {name: _status_without(name, checkpoint, waiting) for name in names}
        for name, info in checkpoint.step_info.items():
            depends[name] = tuple(info.get("depends_on", ()))
            kinds[name] = info.get("kind", "step")
    under_way = _under_way(checkpoint) if run_running else set()
    maps = unfinished_maps(checkpoint, workflow)
    child_failures = failed_items(checkpoint)
    ledger_failures = _failed_in_ledger(checkpoint)
    views = []
    for name in names:
        status = statuses[name]
        if status == "pending" and (name in running or name in under_way):
            status = "running"
        kind = kinds.get(name) or _kind_without(name, checkpoint)
        entry = maps.get(name)
        failed = [
            *failed_keys.get(name, []),
            *child_failures.get(name, {}),
            *ledger_failures.get(name, ()),
        ]
        items = None
        if entry is not None or failed:
            items = MapView(
                0 if entry is None else entry.recorded,
                None if entry is None else entry.total,
                tuple(dict.fromkeys(failed)),
            )
        elif kind == "map" and name in checkpoint.outputs:
            output = checkpoint.outputs[name]
            if isinstance(output, (list, tuple, dict)):
                items = MapView(len(output), len(output), (), finished=True)
        views.append(
            StepView(
                name,
                status,
                kind,
                depends.get(name, ()),
                name in checkpoint.outputs,
                checkpoint.outputs.get(name),
                checkpoint.errors.get(name),
                items,
                "checkpoint" in checkpoint.children.get(name, {}),
                tuple(checkpoint.children.get(name, {}).get("items", {})),
            )
        )
    return views


def _under_way(checkpoint: WorkflowCheckpoint) -> set[str]:
    """The steps ``checkpoint`` saw under way: maps with items, attempts in flight, children."""
    found = {*checkpoint.items, *checkpoint.in_flight_items, *checkpoint.children}
    found.update(split_path(path)[0] for path, _, _ in checkpoint.in_flight)
    return found


def _kind_without(name: str, checkpoint: WorkflowCheckpoint) -> str:
    """A step's kind from what the checkpoint holds of it, when ``step_info`` does not say."""
    if name in checkpoint.items:
        return "map"
    if name in checkpoint.pending:
        return "ask"
    if name in checkpoint.children:
        return "workflow"
    return "step"


def _failed_in_ledger(checkpoint: WorkflowCheckpoint) -> dict[str, dict[str, None]]:
    """Each unfinished map's items whose last attempt in the ledger failed or timed out."""
    found: dict[str, dict[str, None]] = {}
    for row in checkpoint.ledger:
        if row.item is None or row.step not in checkpoint.items:
            continue
        keys = found.setdefault(row.step, {})
        if row.outcome in {"failed", "timeout"}:
            keys[row.item] = None
        else:
            keys.pop(row.item, None)  # a later attempt of the item did better
    for step, keys in found.items():
        recorded = checkpoint.items[step].get("outputs", {})
        for key in [key for key in keys if key in recorded]:
            del keys[key]
    return found


def _kind(step: object) -> str:
    from executionkit._define._step_checks import is_workflow  # noqa: PLC0415
    from executionkit._define._step_kinds import AskStep, MapStep  # noqa: PLC0415

    if isinstance(step, MapStep):
        return "map"
    if isinstance(step, AskStep):
        return "ask"
    if is_workflow(getattr(step, "run", None)):
        return "workflow"
    return "step"


def _status_without(name: str, checkpoint: WorkflowCheckpoint, waiting: set[str]) -> str:
    """A step's state from the checkpoint alone, as `step_statuses` decides it."""
    if name in checkpoint.errors:
        return "failed"
    if name in waiting:
        return "waiting"
    if name in checkpoint.outputs:
        return "done"
    if name in checkpoint.skipped:
        return "skipped"
    return "pending"


def child_checkpoint(checkpoint: WorkflowCheckpoint, path: str) -> WorkflowCheckpoint | None:
    """The checkpoint of the sub-workflow in progress at ``path`` (``step`` or ``step/key``).

    Deeper sub-workflows add segments the same way; None if there is none there now.
    """
    segments = split_path(path)
    current: WorkflowCheckpoint | None = checkpoint
    while segments and current is not None:
        entry = current.children.get(segments.pop(0))
        if entry is None:
            return None
        if "checkpoint" in entry:
            current = entry["checkpoint"]
        elif segments:
            current = entry.get("items", {}).get(segments.pop(0))
        else:
            return None
    return current
