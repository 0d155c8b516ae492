"""What a server serves: the pages of its location, built for each request from the store."""

from __future__ import annotations

import json
import secrets
import shlex
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from executionkit._cli._location import DatabaseLocation
from executionkit._cli._serve._answers import RunEvents, Tracker
from executionkit._cli._serve._html import RunPage, header, run_main, runs_main
from executionkit._cli._serve._http import PER_PAGE, page_count
from executionkit._cli._serve._runs import bill, child_checkpoint, ledger_by_step, step_views
from executionkit._cli._text import invocation
from executionkit._define._questions import waiting_in

if TYPE_CHECKING:
    from executionkit._checkpoint._value import WorkflowCheckpoint
    from executionkit._cli._serve._answers import Resumer  # noqa: TC004 - dataclass annotations stay strings
    from executionkit._cli._serve._markup import Markup
    from executionkit._cli._serve._runs import Reader, Source  # noqa: TC004 - dataclass annotations stay strings


@dataclass
class App:
    """The pages of ``source``; answers go to ``resumer`` (None: read-only)."""

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
        self, page_id: str, child: str | None, *, message: str | None = None
    ) -> tuple[Markup, str, bool]:
        """One run's page (``child``: a sub-workflow of it in progress), as `runs_page` gives."""
        with self.source.reading() as reader:
            root = self._load(reader, page_id)
            status = self.source.status(reader, page_id, root)
            owner = reader.owner(page_id)
        checkpoint = root if child is None else self._child(root, child)
        events = self.tracker.of(page_id) if child is None else RunEvents()
        running = {name for name, seen in events.steps.items() if seen.running}
        workflow = self.source.workflow if child is None else None
        steps = step_views(checkpoint, workflow, dict.fromkeys(running), events.failed_items)
        prices = self.source.prices
        text, dollars = (None, {}) if prices is None else bill(checkpoint, prices)[:2]
        page = RunPage(
            page_id,
            child,
            checkpoint,
            status,
            None if owner is None else owner.describe(),
            steps,
            events,
            waiting_in(checkpoint),
            None if self.resumer is None else self.token,
            self._answer_command(page_id, root),
            message,
            ledger_by_step(checkpoint, (step.name for step in steps)),
            text,
            dollars,
        )
        title = f"run {page_id}" if child is None else f"run {page_id} / {child}"
        return run_main(page), title, status == "running"

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
