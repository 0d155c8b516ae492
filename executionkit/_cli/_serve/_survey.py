"""Every run of a location at a glance, read once for one request: `survey`.

The runs page filters and counts runs by status and run id, the header counts
the questions waiting, the inbox lists them, and a run's page lists the forks
made of it: all of that needs each run's latest checkpoint, and only that. A
`Survey` is read for one request and dropped after it; a page always shows the
location as it is. The checkpoints are read through `Source.latest`, which
loads again only the runs whose latest seq moved since a page last read them
(one query gives every run's seq), so a location of 1,000 runs that did not
move costs a query, not 1,000 loads.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from executionkit._cli._serve._runs import STATUSES
from executionkit._define._questions import waiting_in

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence  # noqa: TC004 - dataclass annotations stay strings

    from executionkit._checkpoint._value import WorkflowCheckpoint
    from executionkit._cli._serve._runs import Reader, RunRow, Source  # noqa: TC004 - likewise

MAX_SEARCH = 200  # characters of a run id search that are used


@dataclass(frozen=True, slots=True)
class RunsQuery:
    """What the runs page is asked for: a page, a status (None: all), a run id substring."""

    page: int = 1
    status: str | None = None
    search: str = ""

    @classmethod
    def of(cls, page: int, status: str | None, search: str | None) -> RunsQuery:
        """The query, with a status that is not one of `STATUSES` and blanks dropped."""
        return cls(
            page,
            status if status in STATUSES else None,
            (search or "").strip()[:MAX_SEARCH],
        )


@dataclass(frozen=True, slots=True)
class RunSummary:
    """One run as the survey keeps it: its row of the runs page, its questions, its lineage."""

    row: RunRow
    questions: Mapping[str, Mapping[str, Any]]  # waiting for an answer, by path
    lineage: Mapping[str, Any]  # where a fork came from; empty for a run that is not one

    @property
    def run_id(self) -> str:
        """The run's id."""
        return self.row.run_id


@dataclass(frozen=True, slots=True)
class WaitingQuestion:
    """A question waiting for an answer, with its run: a line of the inbox."""

    run_id: str
    path: str
    entry: Mapping[str, Any]  # ``question``, ``asked_at``, ``expires_at``


@dataclass(frozen=True, slots=True)
class Survey:
    """Every run of a location, newest first (runs submitted and not started first)."""

    runs: Sequence[RunSummary]

    @property
    def waiting(self) -> int:
        """How many questions wait for an answer, in every run."""
        return sum(len(summary.questions) for summary in self.runs)

    def run_ids(self) -> set[str]:
        """The runs the location holds."""
        return {summary.run_id for summary in self.runs}

    def searched(self, search: str) -> list[RunSummary]:
        """The runs whose id holds ``search`` (case ignored); every run for ``""``."""
        if not search:
            return list(self.runs)
        needle = search.casefold()
        return [summary for summary in self.runs if needle in summary.run_id.casefold()]

    @staticmethod
    def counts(runs: Sequence[RunSummary]) -> dict[str, int]:
        """How many of ``runs`` have each status, in the order of `STATUSES`."""
        found = dict.fromkeys(STATUSES, 0)
        for summary in runs:
            found[summary.row.status] = found.get(summary.row.status, 0) + 1
        return found

    def questions(self) -> list[WaitingQuestion]:
        """Every question waiting, the oldest asked first."""
        found = [
            WaitingQuestion(summary.run_id, path, entry)
            for summary in self.runs
            for path, entry in summary.questions.items()
        ]
        found.sort(key=lambda question: _asked(question.entry))
        return found

    def forks_of(self, run_id: str) -> list[RunSummary]:
        """The runs forked from ``run_id`` (their lineage names it), newest first."""
        return [summary for summary in self.runs if summary.lineage.get("parent_run_id") == run_id]


def survey(
    source: Source,
    reader: Reader,
    known: Mapping[str, WorkflowCheckpoint | None] | None = None,
    *,
    priced: bool = False,
) -> Survey:
    """A `RunSummary` of every run of the location, from its latest checkpoint.

    ``known``: checkpoints this request has loaded already, by run id, read
    again from them rather than from the store. ``priced``: each row with its
    bill, when the server has prices (the runs page shows them; no other page).
    """
    known = known or {}
    left = reader.left_alone()
    seqs = reader.seqs() or {}
    runs = []
    for run_id in reader.run_ids():
        checkpoint = (
            known[run_id] if run_id in known else source.latest(reader, run_id, seqs.get(run_id))
        )
        row = source.row(reader, run_id, checkpoint, left, priced=priced)
        if row is None:
            continue
        if checkpoint is None:
            runs.append(RunSummary(row, {}, {}))
        else:
            runs.append(RunSummary(row, waiting_in(checkpoint), checkpoint.lineage))
    return Survey(runs)


_NEVER = datetime.max.replace(tzinfo=UTC)


def _asked(entry: Mapping[str, Any]) -> datetime:
    """When a question was asked, to sort by (one that does not say: last)."""
    try:
        asked = datetime.fromisoformat(str(entry.get("asked_at")))
    except ValueError:
        return _NEVER
    return asked if asked.tzinfo is not None else asked.replace(tzinfo=UTC)
