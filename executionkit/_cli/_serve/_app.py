"""What a server serves: the pages of its location, built for each request from the store.

Every page reads the location anew (a `Survey` of every run's latest checkpoint:
the questions waiting that the header counts, the runs' statuses, the forks of
a run) and keeps nothing of it after the request. The pages: the runs
(`App.runs_page`, filtered by status and run id), one run (`App.run_page`), the
questions waiting (`App.questions_page`), two runs compared (`App.compare_page`)
and an output (`App.output`).

Without ``--workflow`` an answer given on a page is saved in the store's inbox
(`App.save_answer`, through `RunInbox.save_answer`) once its question is found
pending in the run's latest checkpoint; nothing runs in the server: a worker
(``executionkit worker``) resumes the run with it. An answer refused either way
is kept a while under an id (`Refusals`), for the page the refusal redirects
to (``/run?id=RUN&refused=ID``) to show it, however often it is reloaded.
"""

from __future__ import annotations

import json
import secrets
import shlex
import threading
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from executionkit import _clock
from executionkit._cli._location import DatabaseLocation, _without_password
from executionkit._cli._serve._answers import RunEvents, Tracker
from executionkit._cli._serve._compare import compare
from executionkit._cli._serve._html import (
    InboxView,
    RunPage,
    RunsFilter,
    SubmittedPage,
    header,
    run_main,
    runs_main,
    submitted_main,
)
from executionkit._cli._serve._http import PER_PAGE, page_count
from executionkit._cli._serve._markup import html
from executionkit._cli._serve._money import money
from executionkit._cli._serve._pages import compare_main, lineage_box, money_box, questions_main
from executionkit._cli._serve._parts import Renders
from executionkit._cli._serve._runs import (
    KeptStore,
    Unreadable,
    bill,
    child_checkpoint,
    code_changes,
    ledger_by_step,
    step_views,
)
from executionkit._cli._serve._survey import RunsQuery, survey
from executionkit._cli._step_times import step_times
from executionkit._cli._text import invocation
from executionkit._define._questions import waiting_in
from executionkit._terminal import show

if TYPE_CHECKING:
    from executionkit._checkpoint._value import WorkflowCheckpoint
    from executionkit._cli._serve._answers import Resumer  # noqa: TC004 - dataclass annotations stay strings
    from executionkit._cli._serve._markup import Markup  # noqa: TC004 - dataclass annotations stay strings
    from executionkit._cli._serve._runs import Reader, Source  # noqa: TC004 - dataclass annotations stay strings

KEPT_REFUSALS = 256  # refusals kept for the pages they redirect to, the oldest dropped first


@dataclass(frozen=True, slots=True)
class Shown:
    """A page as `App` builds it: its main part, its title, whether it is live.

    ``waiting``: how many questions wait in the location, for the header (None: not read).
    """

    main: Markup
    title: str
    live: bool
    waiting: int | None = None


class Refusals:
    """The answers refused lately, each under an id of its own, for the page showing it.

    An answer refused is redirected to its run's page with the refusal's id
    (never its text: a link cannot make the page say anything), so that a
    reload shows it again and never posts the answer again. The last
    `KEPT_REFUSALS` are kept; an older or unknown id shows nothing.
    """

    def __init__(self, kept: int = KEPT_REFUSALS) -> None:
        """Keep the last ``kept`` refusals."""
        self._kept = kept
        self._lock = threading.Lock()
        self._refusals: OrderedDict[str, tuple[str, str]] = OrderedDict()

    def keep(self, run_id: str, text: str) -> str:
        """Keep the refusal ``text`` of an answer to ``run_id``; its id."""
        key = secrets.token_urlsafe(9)
        with self._lock:
            self._refusals[key] = (run_id, text)
            while len(self._refusals) > self._kept:
                self._refusals.popitem(last=False)
        return key

    def get(self, run_id: str, key: str | None) -> str | None:
        """The refusal ``key`` of an answer to ``run_id``; None if not kept (or another run's)."""
        if key is None:
            return None
        with self._lock:
            found = self._refusals.get(key)
        return None if found is None or found[0] != run_id else found[1]


@dataclass
class App:
    """The pages of ``source``; answers go to ``resumer`` (None: saved in the inbox)."""

    source: Source
    resumer: Resumer | None
    workflow_spec: str | None
    tracker: Tracker = field(default_factory=Tracker)
    token: str = field(default_factory=lambda: secrets.token_urlsafe(32))
    hosts: frozenset[str] = frozenset()
    refusals: Refusals = field(default_factory=Refusals)
    # The renders live pages show, so that a poll gets only the parts that changed.
    renders: Renders = field(default_factory=Renders)
    # The store ``/stream`` reads, kept open for a PostgreSQL location.
    kept: KeptStore = field(default_factory=KeptStore)

    def close(self) -> None:
        """Close what the server kept open (the server has stopped)."""
        self.kept.close()

    @property
    def header(self) -> Markup:
        """The bar at the top of a page that read nothing (an error): no count of questions."""
        return self.header_of(None)

    def header_of(self, waiting: int | None) -> Markup:
        """The bar at the top of a page, with how many questions wait (None: not known)."""
        return header(self.source.location.label, self.workflow_spec, waiting)

    def runs_page(self, query: RunsQuery) -> Shown:
        """The runs page: the runs of ``query``'s status and search, a page, newest first."""
        with self.source.reading() as reader:
            found = survey(self.source, reader, priced=True)
        searched = found.searched(query.search)
        counts = found.counts(searched)
        chosen = [
            summary
            for summary in searched
            if query.status is None or summary.row.status == query.status
        ]
        pages = page_count(len(chosen))
        page = min(query.page, pages)
        rows = [summary.row for summary in chosen[(page - 1) * PER_PAGE : page * PER_PAGE]]
        shown = RunsFilter(query.status, query.search, counts, len(found.runs))
        main = runs_main(rows, page=page, pages=pages, count=len(chosen), shown=shown)
        live = any(row.status == "running" for row in rows)
        return Shown(main, "executionkit runs", live, found.waiting)

    def questions_page(self) -> Shown:
        """Every question waiting in the location, the oldest asked first, with its form."""
        with self.source.reading() as reader:
            found = survey(self.source, reader)
            answers = reader.all_answers() if self.resumer is None else {}
        questions = found.questions()
        main = questions_main(questions, self.token, answers, saves=self.resumer is None)
        live = bool(questions) or any(summary.row.status == "running" for summary in found.runs)
        return Shown(main, "questions waiting", live, found.waiting)

    def compare_page(self, first: str, second: str) -> Shown:
        """Runs ``first`` and ``second`` side by side, step by step."""
        with self.source.reading() as reader:
            a = self._load(reader, first)
            b = self._load(reader, second)
            found = survey(self.source, reader, {first: a, second: b})
        statuses = {summary.run_id: summary.row.status for summary in found.runs}
        comparison = compare(
            (first, statuses.get(first, "finished"), a),
            (second, statuses.get(second, "finished"), b),
            self.source.prices,
        )
        live = "running" in (statuses.get(first), statuses.get(second))
        return Shown(
            compare_main(comparison), f"compare {first} with {second}", live, found.waiting
        )

    def run_page(
        self,
        page_id: str,
        child: str | None,
        *,
        message: str | None = None,
        saved: str | None = None,
        refused: str | None = None,
    ) -> Shown:
        """One run's page (``child``: a sub-workflow of it in progress).

        ``saved``: the question whose answer this page's form has just saved;
        ``refused``: the id of the refusal of an answer to the run, to show.
        """
        message = self.refusals.get(page_id, refused) or message
        with self.source.reading() as reader:
            root = self.source.latest(reader, page_id, (reader.seqs() or {}).get(page_id))
            found = survey(self.source, reader, {page_id: root})
            if root is None:
                shown = self._submitted_page(reader, page_id, child, message)
                return Shown(shown.main, shown.title, shown.live, found.waiting)
            status = self.source.status(reader, page_id, root)
            owner = reader.owner(page_id)
            left = reader.left_alone().get(page_id) if child is None else None
            answers = reader.answers(page_id) if child is None else {}
            known = child is None and self.source.workflow is not None
            submission = reader.submission(page_id) if known else None  # its inputs
            # The text its steps stream, as the process running it keeps it (a run this
            # server resumes: its events say it, but not a sub-workflow's).
            kept = child is not None or not self.source.resuming(page_id)
            streamed = (
                reader.streams(page_id, child, since=None if owner is None else owner.since)
                if kept and status == "running"
                else {}
            )
        checkpoint = root if child is None else self._child(root, child)
        events = self.tracker.of(page_id) if child is None else RunEvents()
        events.stream_from(streamed)
        running = {name for name, seen in events.steps.items() if seen.running}
        workflow = self.source.workflow if child is None else None
        steps = step_views(
            checkpoint,
            workflow,
            dict.fromkeys(running),
            events.failed_items,
            run_running=status == "running",
        )
        prices = self.source.prices
        text: str | None = None
        dollars: dict[str, str] = {}
        bills = html("")
        if prices is not None:
            priced = checkpoint.spending.priced(prices)
            text, dollars = bill(checkpoint, prices, priced)[:2]
            bills = money_box(money(checkpoint, prices, priced))
        lineage = lineage_box(
            page_id,
            root.lineage if child is None else {},
            found.forks_of(page_id) if child is None else [],
            parent_here=root.lineage.get("parent_run_id") in found.run_ids(),
        )
        questions = waiting_in(checkpoint)
        saved_answers = {path: value for path, value in answers.items() if path in questions}
        inbox = None
        if child is None and (self.resumer is None or saved_answers or left is not None):
            inbox = InboxView(
                self._worker_command(root),
                saved_answers,
                left,
                None if saved not in saved_answers else self._saved_notice(saved, root),
                saves=self.resumer is None,
            )
        changes = []
        if workflow is not None:
            inputs = {} if submission is None else submission.inputs
            changes = code_changes(workflow, checkpoint, inputs)
        page = RunPage(
            page_id,
            child,
            checkpoint,
            status,
            None if owner is None else owner.describe(),
            steps,
            events,
            questions,
            self.token,
            self._answer_command(page_id, root),
            message,
            ledger_by_step(checkpoint, (step.name for step in steps)),
            text,
            dollars,
            inbox,
            changes,
            lineage,
            bills,
            step_times(checkpoint, {step.name: None for step in steps}),
            _clock.wall_ms(),
        )
        title = f"run {page_id}" if child is None else f"run {page_id} / {child}"
        return Shown(run_main(page), title, status == "running", found.waiting)

    def streams(self, page_id: str, child: str | None = None) -> dict[str, Any]:
        """What ``/stream`` answers for ``page_id``: ``{"live": bool, "steps": {...}}``.

        A run this server resumes: from its events, no store read. Any other
        run a live process claims (a worker's, an ``executionkit run``'s, another
        server's), and a sub-workflow's page (``child``) of any: from the
        store's inbox, where the process running it keeps its steps' text
        (`Reader.streams`). A run no process claims streams nothing, whatever a
        process killed mid-step left in the inbox.

        Raises:
            Unreadable: If the location cannot be read.
        """
        if child is None and self.resumer is not None and self.resumer.busy(page_id):
            return {"live": True, "steps": self.tracker.streams(page_id)}
        with self.kept.reading(self.source) as reader:
            owner = reader.owner(page_id)
            if owner is None:
                return {"live": False, "steps": {}}
            return {"live": True, "steps": reader.streams(page_id, child, since=owner.since)}

    def save_answer(self, page_id: str, path: str, value: object) -> str | None:
        """Save ``value`` in the inbox as the answer to ``path`` of run ``page_id``; run nothing.

        Returns None once it is saved, or the message saying why it was not: the
        run has no checkpoint here, or no question ``path`` pending in its latest one.
        """
        try:
            with self.source.reading() as reader:
                checkpoint = reader.load(page_id)
                if checkpoint is None:
                    return (
                        f"the location holds no checkpoint of run {show(page_id)}, so no "
                        f"question of it waits for an answer; nothing was saved"
                    )
                waiting = waiting_in(checkpoint)
                if path not in waiting:
                    listed = ", ".join(map(show, waiting)) or "none"
                    return (
                        f"run {show(page_id)} has no question {show(path)} waiting for an "
                        f"answer (waiting: {listed}); nothing was saved"
                    )
                reader.save_answer(page_id, path, value)
        except Unreadable as exc:
            return f"{exc}; nothing was saved"
        return None

    def _submitted_page(
        self, reader: Reader, page_id: str, child: str | None, message: str | None
    ) -> Shown:
        """The page of a run submitted and not started (no checkpoint); else `LookupError`."""
        submission = reader.submission(page_id)
        if submission is None:
            raise LookupError(f"no run {page_id!r} here")
        if child is not None:
            raise LookupError(f"no sub-workflow {child!r} in progress in this run")
        status = self.source.status(reader, page_id, None)
        owner = reader.owner(page_id)
        streamed = RunEvents()
        if status == "running" and owner is not None:
            streamed.stream_from(reader.streams(page_id, since=owner.since))
        spec = self.workflow_spec or submission.metadata.get("workflow")
        inbox = InboxView(
            self._worker_command(None, spec),
            left_alone=reader.left_alone().get(page_id),
            saves=self.resumer is None,
        )
        page = SubmittedPage(
            page_id,
            submission.submitted_at,
            sorted(submission.inputs),  # as a checkpoint lists them
            status,
            None if owner is None else owner.describe(),
            inbox,
            message,
            streamed,
        )
        return Shown(submitted_main(page), f"run {page_id}", status == "running")

    def output(self, page_id: str, step: str, child: str | None) -> str:
        """The output of ``step`` of the run, whole, as indented JSON text."""
        with self.source.reading() as reader:
            checkpoint = self._load(reader, page_id)
        if child is not None:
            checkpoint = self._child(checkpoint, child)
        if step not in checkpoint.outputs:
            raise LookupError(f"run {page_id!r} records no output of step {step!r}")
        return json.dumps(checkpoint.outputs[step], indent=2, ensure_ascii=False, default=repr)

    @staticmethod
    def _load(reader: Reader, page_id: str) -> WorkflowCheckpoint:
        checkpoint = reader.load(page_id)
        if checkpoint is None:
            raise LookupError(f"no run {page_id!r} here")
        return checkpoint

    @staticmethod
    def _child(checkpoint: WorkflowCheckpoint, child: str) -> WorkflowCheckpoint:
        try:
            found = child_checkpoint(checkpoint, child)
        except ValueError:
            found = None
        if found is None:
            raise LookupError(f"no sub-workflow {child!r} in progress in this run")
        return found

    def _saved_notice(self, path: str, checkpoint: WorkflowCheckpoint) -> str:
        """What the page says once an answer to ``path`` is saved for a worker."""
        return (
            f"Saved the answer to {path}. Nothing runs in this server: a worker resumes the run "
            f"with it ({self._worker_command(checkpoint)}). Another answer to {path} given "
            f"before a worker takes this one replaces it."
        )

    def _worker_command(self, checkpoint: WorkflowCheckpoint | None, spec: object = None) -> str:
        """The command that runs a worker over this location (a password left out)."""
        if spec is None and checkpoint is not None:
            spec = checkpoint.metadata.get("workflow")
        spec = self.workflow_spec or spec
        location = self.source.location
        if isinstance(location, DatabaseLocation):
            where, _ = _without_password(location.given or location.label)
        else:
            where = location.label
        workflow = shlex.quote(spec) if isinstance(spec, str) else "MODULE:ATTR"
        return f"{invocation()} worker {shlex.quote(where)} --workflow {workflow}"

    def _answer_command(self, page_id: str, checkpoint: WorkflowCheckpoint) -> str:
        """The command that answers a question of the run, up to its ``--answer``."""
        spec = self.workflow_spec or checkpoint.metadata.get("workflow")
        location = self.source.location
        if isinstance(location, DatabaseLocation):
            where, _ = location.run_url(page_id)
        else:
            where = location.label
        inputs = "".join(f" --input {shlex.quote(key)}=..." for key in checkpoint.context_keys)
        workflow = shlex.quote(spec) if isinstance(spec, str) else "MODULE:ATTR"
        return f"{invocation()} run {workflow} --checkpoint {shlex.quote(where)}{inputs}"
