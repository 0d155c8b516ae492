"""What a server serves: the pages of its location, built for each request from the store.

Without ``--workflow`` an answer given on a page is saved in the store's inbox
(`App.save_answer`, through `RunInbox.save_answer`) once its question is found
pending in the run's latest checkpoint; nothing runs in the server: a worker
(``executionkit worker``) resumes the run with it.
"""

from __future__ import annotations

import json
import secrets
import shlex
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from executionkit._cli._location import DatabaseLocation, _without_password
from executionkit._cli._serve._answers import RunEvents, Tracker
from executionkit._cli._serve._html import (
    InboxView,
    RunPage,
    SubmittedPage,
    header,
    run_main,
    runs_main,
    submitted_main,
)
from executionkit._cli._serve._http import PER_PAGE, page_count
from executionkit._cli._serve._runs import (
    Unreadable,
    bill,
    child_checkpoint,
    code_changes,
    ledger_by_step,
    step_views,
)
from executionkit._cli._text import invocation
from executionkit._define._questions import waiting_in
from executionkit._terminal import show

if TYPE_CHECKING:
    from executionkit._checkpoint._value import WorkflowCheckpoint
    from executionkit._cli._serve._answers import Resumer  # noqa: TC004 - dataclass annotations stay strings
    from executionkit._cli._serve._markup import Markup
    from executionkit._cli._serve._runs import Reader, Source  # noqa: TC004 - dataclass annotations stay strings


@dataclass
class App:
    """The pages of ``source``; answers go to ``resumer`` (None: saved in the inbox)."""

    source: Source
    resumer: Resumer | None
    workflow_spec: str | None
    tracker: Tracker = field(default_factory=Tracker)
    token: str = field(default_factory=lambda: secrets.token_urlsafe(32))
    hosts: frozenset[str] = frozenset()

    @property
    def header(self) -> Markup:
        """The bar at the top of every page, as markup."""
        return header(self.source.location.label, self.workflow_spec)

    def runs_page(self, page: int) -> tuple[Markup, str, bool]:
        """The runs page ``page``: its main part (markup), its title (text), whether it is live."""
        with self.source.reading() as reader:
            run_ids = reader.run_ids()
            pages = page_count(len(run_ids))
            page = min(page, pages)
            shown = run_ids[(page - 1) * PER_PAGE : page * PER_PAGE]
            rows = self.source.rows(reader, shown)
        main = runs_main(rows, page=page, pages=pages, count=len(run_ids))
        live = any(row.status == "running" for row in rows)
        return main, "executionkit runs", live

    def run_page(
        self,
        page_id: str,
        child: str | None,
        *,
        message: str | None = None,
        saved: str | None = None,
    ) -> tuple[Markup, str, bool]:
        """One run's page (``child``: a sub-workflow of it in progress), as `runs_page` gives.

        ``saved``: the question whose answer this page's form has just saved.
        """
        with self.source.reading() as reader:
            root = reader.load(page_id)
            if root is None:
                return self._submitted_page(reader, page_id, child, message)
            status = self.source.status(reader, page_id, root)
            owner = reader.owner(page_id)
            left = reader.left_alone().get(page_id) if child is None else None
            answers = reader.answers(page_id) if child is None else {}
            known = child is None and self.source.workflow is not None
            submission = reader.submission(page_id) if known else None  # its inputs
        checkpoint = root if child is None else self._child(root, child)
        events = self.tracker.of(page_id) if child is None else RunEvents()
        running = {name for name, seen in events.steps.items() if seen.running}
        workflow = self.source.workflow if child is None else None
        steps = step_views(checkpoint, workflow, dict.fromkeys(running), events.failed_items)
        prices = self.source.prices
        text, dollars = (None, {}) if prices is None else bill(checkpoint, prices)[:2]
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
        )
        title = f"run {page_id}" if child is None else f"run {page_id} / {child}"
        return run_main(page), title, status == "running"

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
    ) -> tuple[Markup, str, bool]:
        """The page of a run submitted and not started (no checkpoint); else `LookupError`."""
        submission = reader.submission(page_id)
        if submission is None:
            raise LookupError(f"no run {page_id!r} here")
        if child is not None:
            raise LookupError(f"no sub-workflow {child!r} in progress in this run")
        status = self.source.status(reader, page_id, None)
        owner = reader.owner(page_id)
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
        )
        return submitted_main(page), f"run {page_id}", status == "running"

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
