"""The checkpoints the kit saves: real runs of small workflows, taken with a list."""

from __future__ import annotations

import contextlib
import dataclasses
import json
from dataclasses import dataclass
from typing import Any

from executionkit import (
    PatternResult,
    Step,
    TokenUsage,
    Workflow,
    WorkflowCheckpoint,
    WorkflowFailed,
    current_step,
)
from executionkit.conformance._names import RUN_ID

_CONTEXT = {"document": "never stored: only this key's name is"}
_METADATA = {"job": "conformance", "labels": ["kit", "ünïcode"]}
TRACE = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
LINEAGE = {
    "parent_run_id": f"{RUN_ID}-parent",
    "parent_seq": 12,
    "overridden": ["b", "research/draft"],
    "rerun": ["c"],
    "note": "fixed the summary by hand ✓",
}
# The cost ledger of `Samples.spending`, by checkpoint: the rows each one adds (format 4
# rows: step path, item key, attempt, outcome, model, input, output and calls), and the
# attempts running when it was taken.
_SPENT: tuple[tuple[list[list[Any]], list[list[Any]]], ...] = (
    (
        [
            ["a", None, 1, "failed", "gpt-4o-mini", 100, 0, 1],
            ["a", None, 2, "ok", "gpt-4o-mini", 120, 30, 1],
        ],
        [["b", None, 1], ["research/draft", "0", 1]],
    ),
    (
        [
            ["b", None, 1, "timeout", "claude-3-haiku", 200, 10, 1],
            ["b", None, 2, "ok", None, 200, 50, 1],
            ["research/draft", "0", 1, "unknown", None, 0, 0, 0],
            ["research/draft", "0", 2, "ok", "gpt-4o", 50, 25, 1],
            ["research/draft", "0", 2, "ok", "ünïcode-model ✓", 5, 1, 1],
        ],
        [],
    ),
    (
        [
            ["d", None, 1, "cancelled", "gpt-4o", 30, 0, 1],
            ["d", None, 2, "ok", "gpt-4o", 300, 80, 2],
            ["research/draft", "1", 1, "late", "gpt-4o", 7, 0, 1],
            ["research/draft", "2", 1, "rate_limited", "gpt-4o", 12, 0, 1],
        ],
        [["e", None, 1]],
    ),
    ([], [["research/draft", "2", 3]]),
)
# Format 5's fields of `Samples.spending`, by checkpoint: the ``attempts`` entries each
# one adds (step path, item key, attempt, outcome, started and ended in milliseconds
# since the epoch), its ``waits`` and its ``in_flight_items``.
_T = 1_764_583_200_000  # 2025-12-01T10:00:00Z
_DUE = {"due": "2026-12-01T11:00:00+00:00", "since": "2026-12-01T10:00:00+00:00"}
_TIMED: tuple[tuple[list[list[Any]], dict[str, Any], dict[str, int]], ...] = (
    (
        [["a", None, 1, "failed", _T, _T + 1250], ["a", None, 2, "ok", _T + 1300, _T + 2000]],
        {},
        {},
    ),
    (
        [
            ["b", None, 1, "timeout", _T + 2001, _T + 32001],
            ["research/draft", "0", 2, "ok", _T + 2001, _T + 2500],
            ["b", None, 2, "ok", _T + 32002, _T + 33000],
            ["c", None, 1, "ok", _T + 2001, _T + 2001],
        ],
        {"cool_down": _DUE},
        {},
    ),
    (
        [
            ["d", None, 1, "cancelled", _T + 33001, _T + 34000],
            ["research/draft", "2", 1, "rate_limited", _T + 33001, _T + 33100],
            ["d", None, 2, "ok", _T + 34001, _T + 39999],
        ],
        {"cool_down": _DUE},
        {"chunks": 2},
    ),
    ([["e", None, 1, "ok", _T + 40000, _T + 40000]], {}, {}),
)
# The fingerprint of the code that made step a's output (format 5's step_info "code").
CODE = "5f3c9a1e0b7d2c48"


def _workflow(*, variant: str = "", fail: bool = False) -> Workflow:
    """Four batches: a; b and c (a diamond); d; e."""

    def a(_ctx: Any) -> PatternResult[dict[str, Any]]:
        value = {"text": "Grüße, 世界 ✓", "n": 1, "ratio": 0.25, "items": [1, None, True, "x"]}
        return PatternResult(value, cost=TokenUsage(120, 30, 1))

    def b(_ctx: Any) -> PatternResult[list[Any]]:
        return PatternResult(
            ["summary", {"nested": {"deep": [1, 2.5]}}], cost=TokenUsage(200, 50, 1)
        )

    async def d(ctx: Any) -> PatternResult[str]:
        if fail:
            await current_step().save_progress({"done": 2, "of": 5})
            msg = "the model timed out"
            raise RuntimeError(msg)
        return PatternResult(f"report{variant}: {ctx['c']}", cost=TokenUsage(300, 80, 2))

    return Workflow(
        [
            Step("a", a, version="prompt-v1"),
            Step("b", b, depends_on=("a",)),
            Step("c", lambda ctx: f"{len(ctx['a']['items'])} items", depends_on=("a",)),
            Step("d", d, depends_on=("b", "c")),
            Step("e", lambda _ctx: None, depends_on=("d",)),
        ]
    )


def _never(_ctx: Any) -> bool:
    return False


def _questions(*, broken: bool = False) -> Workflow:
    """What format 3 records: a map's items, a skipped step, a question waiting for an answer.

    ``split`` gives three chunks; ``summaries`` maps over them (``c`` fails when
    ``broken``); ``shortcut`` is skipped by its condition; ``approve`` asks a person
    about the plan; ``publish`` needs the answer and the summaries.
    """

    def summarise(chunk: str, _ctx: Any) -> PatternResult[str]:
        if broken and chunk == "c":
            msg = "the model timed out on c"
            raise RuntimeError(msg)
        return PatternResult(f"summary of {chunk} ✓", cost=TokenUsage(40, 8, 1))

    return Workflow(
        [
            Step("split", lambda _ctx: ["a", "b", "c"]),
            Step.map("summaries", summarise, over="split", max_concurrency=1, version="v2"),
            Step("shortcut", lambda _ctx: "never", depends_on=("split",), when=_never),
            Step.ask(
                "approve",
                lambda ctx: {"plan": ctx["split"], "note": "Grüße, 世界"},
                depends_on=("split",),
                expires_after=7 * 24 * 3600,
            ),
            Step(
                "publish",
                lambda ctx: {"answer": ctx["approve"], "summaries": ctx["summaries"]},
                depends_on=("approve", "summaries"),
            ),
        ]
    )


def _with_children(
    checkpoint: WorkflowCheckpoint, child: WorkflowCheckpoint
) -> WorkflowCheckpoint:
    """``checkpoint`` with two sub-workflows in progress: one step's, and a map's items."""
    data = checkpoint.to_dict()
    child_data = child.to_dict()
    data["step_info"] = {
        **data["step_info"],
        "research": {"version": None, "depends_on": ["split"], "kind": "workflow"},
        "per_chunk": {"version": "v1", "depends_on": ["split"], "kind": "workflow"},
    }
    data["children"] = {
        "research": {"checkpoint": child_data},
        "per_chunk": {
            "items": {"0": child_data, "1": {**child_data, "run_id": f"{RUN_ID}/per_chunk/1"}}
        },
    }
    return WorkflowCheckpoint.from_dict(data)


def _spending(run: tuple[WorkflowCheckpoint, ...]) -> tuple[WorkflowCheckpoint, ...]:
    """``run`` with a cost ledger with waste, attempts in flight, a trace and a lineage.

    And format 5's fields: the attempts with their times, a wait, items of a map
    in flight and step a's code fingerprint. Built by hand, so that every
    outcome, a model, a sub-workflow's path and an item key appear whatever the
    workflows spend: each checkpoint keeps the run's ``new_outputs`` and
    ``new_items`` and names its new ledger rows in ``new_ledger`` and its new
    attempts in ``new_attempts``, as a run's checkpoint does.
    """
    built = []
    rows: list[list[Any]] = []
    ended: list[list[Any]] = []
    for checkpoint, (new, in_flight), (timed, waits, counts) in zip(
        run, _SPENT, _TIMED, strict=True
    ):
        rows = [*rows, *new]
        ended = [*ended, *timed]
        data = checkpoint.to_dict()
        data.update(ledger=rows, in_flight=in_flight, trace=TRACE, lineage=LINEAGE)
        data.update(attempts=ended, waits=waits, in_flight_items=counts)
        data["step_info"]["a"]["code"] = CODE
        read = WorkflowCheckpoint.from_dict(data)
        built.append(
            dataclasses.replace(
                read,
                new_outputs=checkpoint.new_outputs,
                new_items=checkpoint.new_items,
                new_ledger=read.ledger[len(read.ledger) - len(new) :],
                new_attempts=read.attempts[len(read.attempts) - len(timed) :],
            )
        )
    return tuple(built)


def _at_deadline(checkpoint: WorkflowCheckpoint) -> WorkflowCheckpoint:
    """``checkpoint`` with its question answered at its deadline, and each step's code.

    Format 5's ``answered_by`` (of the ask step ``approve``) and ``code`` (of
    every recorded step) in ``step_info``.
    """
    data = checkpoint.to_dict()
    for number, (name, info) in enumerate(data["step_info"].items()):
        info["code"] = f"{number:x}" * 8
        if name == "approve":
            info["answered_by"] = "deadline"
    return WorkflowCheckpoint.from_dict(data)


async def _run(
    workflow: Workflow, resume_from: WorkflowCheckpoint | None = None, **options: Any
) -> tuple[WorkflowCheckpoint, ...]:
    taken: list[WorkflowCheckpoint] = []
    with contextlib.suppress(WorkflowFailed):  # the failing run's checkpoints are the point
        await workflow.run(
            _CONTEXT,
            checkpoint_fn=taken.append,
            resume_from=resume_from,
            run_id=RUN_ID,
            metadata=_METADATA,
            **options,
        )
    return tuple(taken)


# No repr: asyncio.run may show the task that built the samples (Python 3.11 formats its
# SIGINT handler, which names the task, with %r), and a repr would compute every field
# of every checkpoint a run took.
@dataclass(frozen=True, repr=False)
class Samples:
    run: tuple[WorkflowCheckpoint, ...]  # seq 1-4 of a run that finishes
    sibling: WorkflowCheckpoint  # another worker's seq 3, resumed from run[1]
    failed: tuple[WorkflowCheckpoint, ...]  # a run whose step d saves progress, then fails
    resumed: tuple[WorkflowCheckpoint, ...]  # resumed from failed[-1], finishes
    rerun: tuple[WorkflowCheckpoint, ...]  # resumed from run[-1] with rerun=["c"]
    copy: WorkflowCheckpoint  # run[-1] after to_dict, json and from_dict
    waiting: tuple[WorkflowCheckpoint, ...]  # format 3: items, a skip, a question; then fails
    answered: tuple[WorkflowCheckpoint, ...]  # resumed from waiting[-1] with the answer
    deadline: WorkflowCheckpoint  # answered[-1], answered at its deadline, with code
    children: WorkflowCheckpoint  # waiting[-1] with sub-workflow checkpoints in ``children``
    chain: tuple[WorkflowCheckpoint, ...]  # a long chain of Counted outputs (incremental)
    spending: tuple[WorkflowCheckpoint, ...]  # run, with a ledger, in_flight, trace... attempts
    workers: tuple[tuple[WorkflowCheckpoint, ...], ...]  # each writer's seq 1-4 (writers)

    @classmethod
    async def build(cls, *, incremental: bool = False, writers: int = 0) -> Samples:
        run = await _run(_workflow())
        sibling = (await _run(_workflow(variant=" (another worker)"), run[1]))[0]
        failed = await _run(_workflow(fail=True))
        resumed = await _run(_workflow(), failed[-1])
        rerun = await _run(_workflow(variant=" (rerun)"), run[-1], rerun=["c"])
        copy = WorkflowCheckpoint.from_dict(json.loads(json.dumps(run[-1].to_dict())))
        waiting = await _run(_questions(broken=True), on_error="continue")
        answered = await _run(_questions(), waiting[-1], answers={"approve": {"ok": True}})
        research: list[WorkflowCheckpoint] = []
        await Workflow([Step("search", lambda _ctx: ["a", "b"])]).run(
            checkpoint_fn=research.append, run_id=f"{RUN_ID}/research"
        )
        children = _with_children(waiting[-1], research[-1])
        chain = await _run(_chain(CHAIN_LENGTH)) if incremental else ()
        count_ledger_rows(chain)
        count_attempts(chain)
        workers = [run]
        for number in range(1, writers):
            fork = await _run(_workflow(variant=f" (worker {number})"), run[1])
            workers.append((*run[:2], *fork[:2]))
        return cls(
            run,
            sibling,
            failed,
            resumed,
            rerun,
            copy,
            waiting,
            answered,
            _at_deadline(answered[-1]),
            children,
            chain,
            _spending(run),
            tuple(workers[:writers]),
        )


CHAIN_LENGTH = 60
_FAIL_EVERY, _FAIL_AT = 7, 3  # the chain's steps 3, 10, 17... fail once (wasted usage)
LAST_SEQ = 4  # every writer of the concurrency check saves seq 1 to 4


class Counted(dict[str, Any]):
    """An output that counts what a store does with it, other than hold a reference."""

    touched = 0  # reset and read by the kit around each save; saves run one at a time

    def _touch(self) -> None:
        Counted.touched += 1

    def items(self) -> Any:  # what json.dumps asks a dict subclass for
        self._touch()
        return super().items()

    def keys(self) -> Any:
        self._touch()
        return super().keys()

    def values(self) -> Any:
        self._touch()
        return super().values()

    def __iter__(self) -> Any:
        self._touch()
        return super().__iter__()

    def __eq__(self, other: object) -> bool:
        self._touch()
        return super().__eq__(other)

    __hash__ = None  # as a dict's

    def copy(self) -> dict[str, Any]:
        self._touch()
        return dict(super().items())

    def __reduce_ex__(self, protocol: Any) -> Any:  # pickle and copy.deepcopy
        self._touch()
        return (dict, (dict(super().items()),))


class CountedRows(list[Any]):
    """A run's ledger rows that count how many a store reads, other than by holding them.

    A checkpoint a run took reads its ``ledger`` and ``new_ledger`` as slices of
    the run's rows (see ``executionkit._checkpoint._value``), so each slice counts the
    rows it copies: reading ``ledger`` copies them all, ``new_ledger`` the new ones.
    """

    touched = 0  # reset and read by the kit around each save, as Counted.touched

    def __getitem__(self, index: Any) -> Any:
        found = super().__getitem__(index)
        type(self).touched += len(found) if isinstance(index, slice) else 1
        return found

    def __iter__(self) -> Any:
        type(self).touched += len(self)
        return super().__iter__()


class CountedAttempts(CountedRows):
    """A run's ``attempts`` entries that count how many a store reads, as `CountedRows`."""

    touched = 0  # its own count: reset and read by the kit around each save


def count_ledger_rows(chain: tuple[WorkflowCheckpoint, ...]) -> None:
    """Make the checkpoints of ``chain`` read their ledger rows from a `CountedRows`.

    Their ``ledger`` and ``new_ledger`` are computed again, from it, when first
    read (anything that showed a checkpoint, such as its ``repr``, computed them).
    """
    shared = vars(chain[0]).get("_shared") if chain else None  # the run's SharedFields
    rows = getattr(shared, "ledger", None)
    if not isinstance(rows, list):
        return
    shared.ledger = CountedRows(rows)  # type: ignore[union-attr]
    for checkpoint in chain:
        fields = vars(checkpoint)
        if fields.get("_shared") is shared and "_rows" in fields and "_rows_since" in fields:
            fields.pop("ledger", None)
            fields.pop("new_ledger", None)


def count_attempts(chain: tuple[WorkflowCheckpoint, ...]) -> None:
    """Make the checkpoints of ``chain`` read their ``attempts`` from a `CountedAttempts`.

    As `count_ledger_rows`: ``attempts`` and ``new_attempts`` are computed
    again, from it, when first read.
    """
    shared = vars(chain[0]).get("_shared") if chain else None  # the run's SharedFields
    entries = getattr(shared, "attempts", None)
    if not isinstance(entries, list):
        return
    shared.attempts = CountedAttempts(entries)  # type: ignore[union-attr]
    for checkpoint in chain:
        fields = vars(checkpoint)
        if fields.get("_shared") is shared and "_ended" in fields:
            fields.pop("attempts", None)
            fields.pop("new_attempts", None)


def _chain(length: int) -> Workflow:
    """Each step reports usage with a model; every seventh fails once (wasted), then succeeds."""
    failed: set[int] = set()

    def make(number: int) -> Step:
        def run(_ctx: Any) -> Counted:
            current_step().add_usage(TokenUsage(10 + number, 2, 1), model="gpt-4o-mini")
            if number % _FAIL_EVERY == _FAIL_AT and number not in failed:
                failed.add(number)
                msg = f"step {number} failed once"
                raise RuntimeError(msg)
            return Counted(step=number, text=f"output {number} of the chain")

        depends_on = (f"s{number - 1}",) if number else ()
        return Step(f"s{number}", run, depends_on=depends_on, retries=1, retry_delay=0)

    return Workflow([make(number) for number in range(length)])
