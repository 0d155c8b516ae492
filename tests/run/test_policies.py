"""`Policies` and `Slots`: the run's rules for starting work, as tables.

`Policies` is plain code, like `Frontier`: given a run's ``on_error``, its
schedule, whether a step failed, whether the budget is reached, whether the run
is stopping, and its concurrency `Slots`, it says whether a batch may begin, a
step may start, a map item may start, and whether the run waits for a slot that
other work holds. The expected answers are those of the runner before the one
pool (``git show 330f0c9^:executionkit/_run/_runner.py``: ``_may_begin_batch``,
``_may_start``, ``may_start_item``; ``_map.py``: ``_Driver._may_start``), where
a limit then counted the run's own running steps, plus the rule of decision
0009 for waiting: a run that may start work but finds every slot held by other
work of the run waits for a release.
"""

from __future__ import annotations

import dataclasses
import itertools
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal, TypeVar, get_args

import pytest

from executionkit._define._options import OnError, Schedule
from executionkit._run._policies import FailureMeans, Policies, Slots

if TYPE_CHECKING:
    from collections.abc import Callable

SlotState = Literal["unlimited", "free", "full"]
T = TypeVar("T")

ON_ERRORS: tuple[OnError, ...] = get_args(OnError)
SCHEDULES: tuple[Schedule, ...] = get_args(Schedule)
SLOT_STATES: tuple[SlotState, ...] = get_args(SlotState)

# Every state of a run, once, and what `Policies` answers in it.
#
# State: ``failed``, a step of the run has failed; ``budget``, over the budget;
# ``stopping``, the run stops for good (an interrupt, or checkpoint_fn failed: the
# old ``_may_begin_batch`` read only the interrupt, but a failed checkpoint_fn
# raised from the save after the batch, before the next batch was asked for);
# ``slots``, no max_concurrency (unlimited), a limit of 2 with 1 taken (free), or
# with 2 taken (full).
# Answers: ``batch`` may_begin_batch(), ``start`` may_start(), ``item``
# may_start_item(failed_here=False), ``item!`` may_start_item(failed_here=True)
# (an item of this map has failed), ``waits`` waits_for_slot().
#
# Read as rules: a failure stops new batches and new starts except under
# "continue", and "cancel" stops even the rest of the current batch; without a
# limit, a batch starts as a whole (the failure or the budget stops the batches
# after it) while eager steps start one by one; under a limit steps start one by
# one in either schedule, and only into a free slot; items start one by one and
# leave the slot to the map. A run waits for a slot when it would start a step
# but for the slots: never without a limit, nor with one free.
POLICY_TABLE = """
# on_error schedule failed budget stopping slots     | batch start item  item! waits
  finish   batch    -      -      -        unlimited | yes   yes   yes   no    no
  finish   batch    -      -      -        free      | yes   yes   yes   no    no
  finish   batch    -      -      -        full      | yes   no    yes   no    yes
  finish   batch    -      -      stopping unlimited | no    no    no    no    no
  finish   batch    -      -      stopping free      | no    no    no    no    no
  finish   batch    -      -      stopping full      | no    no    no    no    no
  finish   batch    -      over   -        unlimited | no    yes   no    no    no
  finish   batch    -      over   -        free      | no    no    no    no    no
  finish   batch    -      over   -        full      | no    no    no    no    no
  finish   batch    -      over   stopping unlimited | no    no    no    no    no
  finish   batch    -      over   stopping free      | no    no    no    no    no
  finish   batch    -      over   stopping full      | no    no    no    no    no
  finish   batch    failed -      -        unlimited | no    yes   no    no    no
  finish   batch    failed -      -        free      | no    no    no    no    no
  finish   batch    failed -      -        full      | no    no    no    no    no
  finish   batch    failed -      stopping unlimited | no    no    no    no    no
  finish   batch    failed -      stopping free      | no    no    no    no    no
  finish   batch    failed -      stopping full      | no    no    no    no    no
  finish   batch    failed over   -        unlimited | no    yes   no    no    no
  finish   batch    failed over   -        free      | no    no    no    no    no
  finish   batch    failed over   -        full      | no    no    no    no    no
  finish   batch    failed over   stopping unlimited | no    no    no    no    no
  finish   batch    failed over   stopping free      | no    no    no    no    no
  finish   batch    failed over   stopping full      | no    no    no    no    no
  finish   eager    -      -      -        unlimited | yes   yes   yes   no    no
  finish   eager    -      -      -        free      | yes   yes   yes   no    no
  finish   eager    -      -      -        full      | yes   no    yes   no    yes
  finish   eager    -      -      stopping unlimited | no    no    no    no    no
  finish   eager    -      -      stopping free      | no    no    no    no    no
  finish   eager    -      -      stopping full      | no    no    no    no    no
  finish   eager    -      over   -        unlimited | no    no    no    no    no
  finish   eager    -      over   -        free      | no    no    no    no    no
  finish   eager    -      over   -        full      | no    no    no    no    no
  finish   eager    -      over   stopping unlimited | no    no    no    no    no
  finish   eager    -      over   stopping free      | no    no    no    no    no
  finish   eager    -      over   stopping full      | no    no    no    no    no
  finish   eager    failed -      -        unlimited | no    no    no    no    no
  finish   eager    failed -      -        free      | no    no    no    no    no
  finish   eager    failed -      -        full      | no    no    no    no    no
  finish   eager    failed -      stopping unlimited | no    no    no    no    no
  finish   eager    failed -      stopping free      | no    no    no    no    no
  finish   eager    failed -      stopping full      | no    no    no    no    no
  finish   eager    failed over   -        unlimited | no    no    no    no    no
  finish   eager    failed over   -        free      | no    no    no    no    no
  finish   eager    failed over   -        full      | no    no    no    no    no
  finish   eager    failed over   stopping unlimited | no    no    no    no    no
  finish   eager    failed over   stopping free      | no    no    no    no    no
  finish   eager    failed over   stopping full      | no    no    no    no    no
  cancel   batch    -      -      -        unlimited | yes   yes   yes   no    no
  cancel   batch    -      -      -        free      | yes   yes   yes   no    no
  cancel   batch    -      -      -        full      | yes   no    yes   no    yes
  cancel   batch    -      -      stopping unlimited | no    no    no    no    no
  cancel   batch    -      -      stopping free      | no    no    no    no    no
  cancel   batch    -      -      stopping full      | no    no    no    no    no
  cancel   batch    -      over   -        unlimited | no    yes   no    no    no
  cancel   batch    -      over   -        free      | no    no    no    no    no
  cancel   batch    -      over   -        full      | no    no    no    no    no
  cancel   batch    -      over   stopping unlimited | no    no    no    no    no
  cancel   batch    -      over   stopping free      | no    no    no    no    no
  cancel   batch    -      over   stopping full      | no    no    no    no    no
  cancel   batch    failed -      -        unlimited | no    no    no    no    no
  cancel   batch    failed -      -        free      | no    no    no    no    no
  cancel   batch    failed -      -        full      | no    no    no    no    no
  cancel   batch    failed -      stopping unlimited | no    no    no    no    no
  cancel   batch    failed -      stopping free      | no    no    no    no    no
  cancel   batch    failed -      stopping full      | no    no    no    no    no
  cancel   batch    failed over   -        unlimited | no    no    no    no    no
  cancel   batch    failed over   -        free      | no    no    no    no    no
  cancel   batch    failed over   -        full      | no    no    no    no    no
  cancel   batch    failed over   stopping unlimited | no    no    no    no    no
  cancel   batch    failed over   stopping free      | no    no    no    no    no
  cancel   batch    failed over   stopping full      | no    no    no    no    no
  cancel   eager    -      -      -        unlimited | yes   yes   yes   no    no
  cancel   eager    -      -      -        free      | yes   yes   yes   no    no
  cancel   eager    -      -      -        full      | yes   no    yes   no    yes
  cancel   eager    -      -      stopping unlimited | no    no    no    no    no
  cancel   eager    -      -      stopping free      | no    no    no    no    no
  cancel   eager    -      -      stopping full      | no    no    no    no    no
  cancel   eager    -      over   -        unlimited | no    no    no    no    no
  cancel   eager    -      over   -        free      | no    no    no    no    no
  cancel   eager    -      over   -        full      | no    no    no    no    no
  cancel   eager    -      over   stopping unlimited | no    no    no    no    no
  cancel   eager    -      over   stopping free      | no    no    no    no    no
  cancel   eager    -      over   stopping full      | no    no    no    no    no
  cancel   eager    failed -      -        unlimited | no    no    no    no    no
  cancel   eager    failed -      -        free      | no    no    no    no    no
  cancel   eager    failed -      -        full      | no    no    no    no    no
  cancel   eager    failed -      stopping unlimited | no    no    no    no    no
  cancel   eager    failed -      stopping free      | no    no    no    no    no
  cancel   eager    failed -      stopping full      | no    no    no    no    no
  cancel   eager    failed over   -        unlimited | no    no    no    no    no
  cancel   eager    failed over   -        free      | no    no    no    no    no
  cancel   eager    failed over   -        full      | no    no    no    no    no
  cancel   eager    failed over   stopping unlimited | no    no    no    no    no
  cancel   eager    failed over   stopping free      | no    no    no    no    no
  cancel   eager    failed over   stopping full      | no    no    no    no    no
  continue batch    -      -      -        unlimited | yes   yes   yes   yes   no
  continue batch    -      -      -        free      | yes   yes   yes   yes   no
  continue batch    -      -      -        full      | yes   no    yes   yes   yes
  continue batch    -      -      stopping unlimited | no    no    no    no    no
  continue batch    -      -      stopping free      | no    no    no    no    no
  continue batch    -      -      stopping full      | no    no    no    no    no
  continue batch    -      over   -        unlimited | no    yes   no    no    no
  continue batch    -      over   -        free      | no    no    no    no    no
  continue batch    -      over   -        full      | no    no    no    no    no
  continue batch    -      over   stopping unlimited | no    no    no    no    no
  continue batch    -      over   stopping free      | no    no    no    no    no
  continue batch    -      over   stopping full      | no    no    no    no    no
  continue batch    failed -      -        unlimited | yes   yes   yes   yes   no
  continue batch    failed -      -        free      | yes   yes   yes   yes   no
  continue batch    failed -      -        full      | yes   no    yes   yes   yes
  continue batch    failed -      stopping unlimited | no    no    no    no    no
  continue batch    failed -      stopping free      | no    no    no    no    no
  continue batch    failed -      stopping full      | no    no    no    no    no
  continue batch    failed over   -        unlimited | no    yes   no    no    no
  continue batch    failed over   -        free      | no    no    no    no    no
  continue batch    failed over   -        full      | no    no    no    no    no
  continue batch    failed over   stopping unlimited | no    no    no    no    no
  continue batch    failed over   stopping free      | no    no    no    no    no
  continue batch    failed over   stopping full      | no    no    no    no    no
  continue eager    -      -      -        unlimited | yes   yes   yes   yes   no
  continue eager    -      -      -        free      | yes   yes   yes   yes   no
  continue eager    -      -      -        full      | yes   no    yes   yes   yes
  continue eager    -      -      stopping unlimited | no    no    no    no    no
  continue eager    -      -      stopping free      | no    no    no    no    no
  continue eager    -      -      stopping full      | no    no    no    no    no
  continue eager    -      over   -        unlimited | no    no    no    no    no
  continue eager    -      over   -        free      | no    no    no    no    no
  continue eager    -      over   -        full      | no    no    no    no    no
  continue eager    -      over   stopping unlimited | no    no    no    no    no
  continue eager    -      over   stopping free      | no    no    no    no    no
  continue eager    -      over   stopping full      | no    no    no    no    no
  continue eager    failed -      -        unlimited | yes   yes   yes   yes   no
  continue eager    failed -      -        free      | yes   yes   yes   yes   no
  continue eager    failed -      -        full      | yes   no    yes   yes   yes
  continue eager    failed -      stopping unlimited | no    no    no    no    no
  continue eager    failed -      stopping free      | no    no    no    no    no
  continue eager    failed -      stopping full      | no    no    no    no    no
  continue eager    failed over   -        unlimited | no    no    no    no    no
  continue eager    failed over   -        free      | no    no    no    no    no
  continue eager    failed over   -        full      | no    no    no    no    no
  continue eager    failed over   stopping unlimited | no    no    no    no    no
  continue eager    failed over   stopping free      | no    no    no    no    no
  continue eager    failed over   stopping full      | no    no    no    no    no
"""


@dataclass(frozen=True, slots=True)
class State:
    """One state of a run, as a row of `POLICY_TABLE` names it."""

    on_error: OnError
    schedule: Schedule
    failed: bool
    over_budget: bool
    stopping: bool
    slots: SlotState

    @property
    def name(self) -> str:
        """The row's test id: its words, without the dashes."""
        words = [
            self.on_error,
            self.schedule,
            "failed" if self.failed else "",
            "over" if self.over_budget else "",
            "stopping" if self.stopping else "",
            self.slots,
        ]
        return "-".join(word for word in words if word)

    def policies(self) -> Policies:
        """The rules of a run in this state."""
        slots = Slots(None if self.slots == "unlimited" else 2)
        if self.slots != "unlimited":
            slots.take(1 if self.slots == "free" else 2)
        policies = Policies(
            self.on_error,
            slots,
            eager=self.schedule == "eager",
            failures=["failed"] if self.failed else [],
            over_budget=lambda: self.over_budget,
        )
        policies.stopping = self.stopping
        return policies


@dataclass(frozen=True, slots=True)
class Answers:
    """What `Policies` says in one state."""

    may_begin_batch: bool
    may_start: bool
    may_start_item: bool
    may_start_item_failed_here: bool
    waits_for_slot: bool


def _flag(cell: str, word: str) -> bool:
    if cell not in {word, "-"}:
        msg = f"expected {word!r} or '-', got {cell!r}"
        raise ValueError(msg)
    return cell == word


def _one_of(cell: str, choices: tuple[T, ...]) -> T:
    for choice in choices:
        if choice == cell:
            return choice
    msg = f"expected one of {choices!r}, got {cell!r}"
    raise ValueError(msg)


def _yes(cell: str) -> bool:
    if cell not in {"yes", "no"}:
        msg = f"expected 'yes' or 'no', got {cell!r}"
        raise ValueError(msg)
    return cell == "yes"


def _parse(table: str) -> list[tuple[State, Answers]]:
    """The rows of ``table``: six state cells, ``|``, five answers; ``#`` starts a comment."""
    rows = []
    for line in table.splitlines():
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        state_cells, answer_cells = (part.split() for part in line.split("|"))
        on_error, schedule, failed, budget, stopping, slots = state_cells
        state = State(
            _one_of(on_error, ON_ERRORS),
            _one_of(schedule, SCHEDULES),
            _flag(failed, "failed"),
            _flag(budget, "over"),
            _flag(stopping, "stopping"),
            _one_of(slots, SLOT_STATES),
        )
        rows.append((state, Answers(*map(_yes, answer_cells))))
    return rows


ROWS = _parse(POLICY_TABLE)


def _answers(policies: Policies) -> Answers:
    return Answers(
        policies.may_begin_batch(),
        policies.may_start(),
        policies.may_start_item(failed_here=False),
        policies.may_start_item(failed_here=True),
        policies.waits_for_slot(),
    )


def test_the_table_names_every_state_once() -> None:
    """Every combination of the six state columns has exactly one row."""
    states = [state for state, _ in ROWS]
    every = [
        State(*combination)
        for combination in itertools.product(
            ON_ERRORS, SCHEDULES, (False, True), (False, True), (False, True), SLOT_STATES
        )
    ]
    assert len(states) == len(set(states)) == 144
    assert set(states) == set(every)


@pytest.mark.parametrize(("state", "expected"), ROWS, ids=[state.name for state, _ in ROWS])
def test_policies_answer_as_the_table(state: State, expected: Answers) -> None:
    """In each state of a run, `Policies` answers as its row says."""
    assert _answers(state.policies()) == expected


def test_the_table_waits_for_a_slot_exactly_where_a_free_one_would_start_a_step() -> None:
    """The waits column: with every slot held, a run waits where one free slot would start."""
    table = dict(ROWS)
    for state, answers in ROWS:
        if state.slots == "full":
            one_free = table[dataclasses.replace(state, slots="free")]
            assert answers.waits_for_slot == one_free.may_start, state.name
        else:
            assert not answers.waits_for_slot, state.name


AFTER_FAILURE: list[tuple[OnError, FailureMeans]] = [
    ("finish", "start nothing new"),
    ("cancel", "cancel"),
    ("continue", "keep going"),
]


@pytest.mark.parametrize(("on_error", "means"), AFTER_FAILURE)
def test_what_a_failure_means_follows_on_error_alone(
    on_error: OnError, means: FailureMeans
) -> None:
    """after_failure() is the run's on_error, whatever the rest of the state."""
    for state, _ in ROWS:
        if state.on_error == on_error:
            assert state.policies().after_failure() == means, state.name


def test_policies_read_the_record_each_time_they_are_asked() -> None:
    """A failure or the budget reached after the rules were built changes the next answer."""
    record = {"over": False}
    failures: list[str] = []
    policies = Policies(
        "finish",
        Slots(None),
        eager=True,
        failures=failures,
        over_budget=lambda: record["over"],
    )
    assert policies.may_start()
    record["over"] = True
    assert not policies.may_start()
    record["over"] = False
    assert policies.may_start()
    failures.append("a")
    assert not policies.may_start()
    assert not policies.may_begin_batch()


def test_policies_read_the_slots_each_time_they_are_asked() -> None:
    """A slot taken or released after the rules were built changes the next answer."""
    slots = Slots(1)
    policies = Policies("finish", slots, eager=False, failures=[], over_budget=lambda: False)
    assert policies.may_start()
    assert not policies.waits_for_slot()
    slots.take()
    assert not policies.may_start()
    assert policies.waits_for_slot()
    slots.release()
    assert policies.may_start()
    assert not policies.waits_for_slot()


# --- Slots ---------------------------------------------------------------------------------

SLOT_COUNTS: list[tuple[str, int, list[tuple[str, int]], list[int]]] = [
    # (id, limit, operations: ("take", count) or ("release", 0), free after each)
    ("all free", 3, [], []),
    ("take one", 3, [("take", 1)], [2]),
    ("take all at once", 3, [("take", 3)], [0]),
    ("take one by one", 2, [("take", 1), ("take", 1)], [1, 0]),
    ("release one", 2, [("take", 2), ("release", 0)], [0, 1]),
    (
        "take and release in turns",
        3,
        [("take", 2), ("release", 0), ("take", 1), ("take", 1), ("release", 0), ("release", 0)],
        [1, 2, 1, 0, 1, 2],
    ),
    ("a limit of one", 1, [("take", 1), ("release", 0), ("take", 1)], [0, 1, 0]),
]


@pytest.mark.parametrize(
    ("limit", "operations", "free_after"),
    [(limit, operations, free_after) for _, limit, operations, free_after in SLOT_COUNTS],
    ids=[case_id for case_id, _, _, _ in SLOT_COUNTS],
)
def test_slots_count_what_is_taken_and_released(
    limit: int, operations: list[tuple[str, int]], free_after: list[int]
) -> None:
    """free() is the limit less what was taken and not released yet."""
    slots = Slots(limit)
    assert slots.free() == limit
    seen = []
    for operation, count in operations:
        if operation == "take":
            slots.take(count)
        else:
            slots.release()
        seen.append(slots.free())
    assert seen == free_after
    assert slots.taken == limit - (free_after[-1] if free_after else limit)


def test_slots_without_a_limit_have_no_free_count() -> None:
    """With no limit, free() is None however many slots are taken."""
    slots = Slots(None)
    assert slots.limit is None
    assert slots.free() is None
    slots.take(5)
    assert slots.free() is None
    slots.release()
    assert slots.free() is None


def _listener(heard: list[str], name: str) -> Callable[[], None]:
    def listener() -> None:
        heard.append(name)

    return listener


def test_each_release_calls_every_listener_in_the_order_they_listened() -> None:
    """Listeners hear each release, not takes, in the order they started listening."""
    heard: list[str] = []
    slots = Slots(2)
    slots.listen(_listener(heard, "a"))
    slots.listen(_listener(heard, "b"))
    slots.take(2)
    assert heard == []
    slots.release()
    assert heard == ["a", "b"]
    slots.release()
    assert heard == ["a", "b", "a", "b"]


def test_a_forgotten_listener_hears_no_more_releases() -> None:
    """forget() stops one listener; the others still hear every release."""
    heard: list[str] = []
    slots = Slots(2)
    first = _listener(heard, "a")
    slots.listen(first)
    slots.listen(_listener(heard, "b"))
    slots.take(2)
    slots.release()
    slots.forget(first)
    slots.release()
    assert heard == ["a", "b", "b"]


def test_a_listener_may_forget_itself_while_it_hears_a_release() -> None:
    """A listener that forgets itself during a release: the others hear it, it hears no more."""
    heard: list[str] = []
    slots = Slots(3)

    def once() -> None:
        heard.append("once")
        slots.forget(once)

    slots.listen(once)
    slots.listen(_listener(heard, "b"))
    slots.take(3)
    slots.release()
    assert heard == ["once", "b"]
    slots.release()
    assert heard == ["once", "b", "b"]


def test_a_release_with_no_listener_only_counts() -> None:
    """Releasing with nobody listening frees the slot and calls nothing."""
    slots = Slots(1)
    slots.take()
    slots.release()
    assert slots.free() == 1
