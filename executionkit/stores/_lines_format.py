"""The JSON Lines format of `JsonLinesStore`: packing step info, folding and listing lines."""

from __future__ import annotations

import dataclasses
import reprlib
from typing import TYPE_CHECKING, Any

from executionkit._checkpoint._fields import KEYS_BY_VERSION
from executionkit._checkpoint._value import FORMAT_VERSION, WorkflowCheckpoint, trusted_checkpoint
from executionkit._errors import CheckpointFormatError
from executionkit._types import TokenUsage
from executionkit.stores._common import rebuilt
from executionkit.stores._history import CheckpointInfo
from executionkit.stores._lines_items import fold_items, legacy_items

if TYPE_CHECKING:
    from collections.abc import Mapping

COST = ("input_tokens", "output_tokens", "llm_calls")

# The keys of `WorkflowCheckpoint.to_dict` a line writes in its own compact way: those
# of format 2, "items" (under "i", see _lines_items), "ledger" (its new rows under "l"),
# "attempts" (its new entries under "a"), "in_flight" (under "f") and the run's "trace"
# and "lineage" (in "run", like its metadata); any other key (those a later format adds;
# format 5's "waits" and "in_flight_items", a few entries each) is carried as it is under
# "x".
_WRITTEN = KEYS_BY_VERSION[2] | {"items", "ledger", "attempts", "in_flight", "trace", "lineage"}
_FIELDS = tuple(field.name for field in dataclasses.fields(WorkflowCheckpoint))
# What a copy of a checkpoint without its large fields holds instead (see extra_fields).
_LIGHT: dict[str, Any] = {
    "outputs": {},
    "step_info": {},
    "items": {},
    "new_items": {},
    "ledger": (),
    "new_ledger": (),
    "attempts": (),
    "new_attempts": (),
    "in_flight": (),
    "trace": None,
    "lineage": {},
}
# The later keys a line leaves out when empty, and the rebuild's own bookkeeping.
_LATER = tuple(sorted(KEYS_BY_VERSION[FORMAT_VERSION] - _WRITTEN))
_STATE_ONLY = ("extra", "unfinished")
# Each key of the current format as an empty checkpoint writes it.
_EMPTY = WorkflowCheckpoint(step_index=0, outputs={}, cost=TokenUsage()).to_dict()
# The append-only logs a line extends: the ledger's rows and the attempts. Each is the
# field, the key of the entries a line appends, the key of how many held ones it keeps
# (only when it does not keep them all), and what its entries are, for messages.
Log = tuple[str, str, str, str, str]
_LOGS: tuple[Log, ...] = (
    (
        "ledger",
        "l",
        "lk",
        "ledger rows",
        "[step, item, attempt, outcome, model, input, output, calls]",
    ),
    ("attempts", "a", "ak", "attempts", "[step, item, attempt, outcome, started, ended]"),
)

LogPrefix = tuple[Any, int]
"""A run's output log and a length: the outputs a file rebuilds to are its first names."""


def _log(checkpoint: WorkflowCheckpoint) -> Any:
    """The output log of the run that took ``checkpoint``, or None (built by from_dict)."""
    shared = checkpoint.__dict__.get("_shared")  # the run's SharedFields (see _checkpoint)
    return None if shared is None else shared.log


def follows(
    checkpoint: WorkflowCheckpoint, previous: WorkflowCheckpoint, prefix: LogPrefix | None
) -> LogPrefix | None:
    """The prefix after ``checkpoint`` if it is ``previous`` plus its new outputs, else None.

    Known in O(new outputs): the file rebuilds to the first ``length`` names
    of the run's output log (which only ever grows, each name once), and this
    checkpoint, taken by the same run, counts ``length`` plus its new outputs,
    which are the log's next names, in order. Anything else (a resumed run,
    whose log starts again; a checkpoint built by `WorkflowCheckpoint.from_dict`;
    a ``checkpoint_fn`` that skipped one; a checkpoint taken in the middle of a
    batch, whose outputs that landed early are not in the log yet) is compared
    output by output instead.
    """
    log = _log(checkpoint)
    if log is None or prefix is None or prefix[0] is not log:
        return None
    length = prefix[1]
    new = checkpoint.new_outputs
    end = checkpoint.step_index
    if (
        previous.step_index == length
        and checkpoint.run_id == previous.run_id
        and checkpoint.seq > previous.seq
        and end == length + len(new)
        and end <= len(log.names)
        and tuple(log.names[length:end]) == tuple(new)
    ):
        return log, end
    return None


def log_prefix(checkpoint: WorkflowCheckpoint) -> LogPrefix | None:
    """The prefix ``checkpoint`` rebuilds to, found by walking its outputs (the slow path)."""
    log = _log(checkpoint)
    end = checkpoint.step_index
    if log is None or end > len(log.names) or list(checkpoint.outputs) != log.names[:end]:
        return None
    return log, end


def extra_fields(checkpoint: WorkflowCheckpoint) -> dict[str, Any]:
    """The keys of ``checkpoint.to_dict()`` a line does not write otherwise (none in format 2).

    Computed from a copy without outputs, step info and items, so that it costs
    O(1) however many outputs and items the checkpoint records.
    """
    fields = {name: getattr(checkpoint, name) for name in _FIELDS if name not in _LIGHT}
    light = trusted_checkpoint({**fields, **_LIGHT})
    # An empty field of a later format is left out: a line without it reads as empty.
    return {key: value for key, value in light.to_dict().items() if key not in _WRITTEN and value}


def unfinished(checkpoint: WorkflowCheckpoint) -> list[str]:
    """The steps ``step_info`` describes besides the recorded ones.

    Steps with progress, skipped steps, unfinished maps, pending questions and
    sub-workflows in progress; a line carries their info whole (``progress_info``).
    A checkpoint's ``step_info`` describes no other step (its reader checks that),
    so only those fields are looked through, not every step: a save's cost does
    not grow with the number of outputs recorded.
    """
    outputs, info = checkpoint.outputs, checkpoint.step_info
    named = dict.fromkeys(
        [
            *checkpoint.progress,
            *checkpoint.skipped,
            *checkpoint.items,
            *checkpoint.pending,
            *checkpoint.children,
        ]
    )
    return [name for name in named if name in info and name not in outputs]


# Format 5's optional keys of a step info entry, and the short keys a line writes them
# under, in the order an entry lists them (see executionkit._checkpoint._step_info).
_LATER_INFO = (("code", "c"), ("answered_by", "a"))
_PACKED_KEYS = frozenset({"v", "d", "k", *(short for _, short in _LATER_INFO)})


def pack_info(info: Mapping[str, Any] | None) -> object:
    """A step's info, compactly: its dependencies as a list, else a dict, or null.

    The list when that is all there is (no version, a plain step); otherwise
    ``{"v": version, "d": dependencies}``, plus ``"k"`` (the kind, unless a
    plain step), ``"c"`` (the code fingerprint) and ``"a"`` (``answered_by``)
    when the entry has them.
    """
    if info is None:  # a hand-made checkpoint without step_info
        return None
    deps = list(info["depends_on"])
    if len(info) == 2 and info["version"] is None:  # noqa: PLR2004 - version and depends_on
        return deps
    packed = {"v": info["version"], "d": deps}
    kind = info.get("kind")
    if kind is not None:
        packed["k"] = kind
    for key, short in _LATER_INFO:
        if key in info:
            packed[short] = info[key]
    return packed


def unpack_info(packed: object) -> dict[str, Any] | None:
    """The step info entry `pack_info` packed (checked later, by `WorkflowCheckpoint`)."""
    if packed is None or isinstance(packed, list):
        return None if packed is None else {"version": None, "depends_on": packed}
    if isinstance(packed, dict) and {"v", "d"} <= packed.keys() <= _PACKED_KEYS:
        info = {"version": packed["v"], "depends_on": packed["d"]}
        if "k" in packed:
            info["kind"] = packed["k"]
        for key, short in _LATER_INFO:
            if short in packed:
                info[key] = packed[short]
        return info
    msg = "step info must be a list, {'v', 'd'} (with 'k', 'c', 'a' if any) or null"
    raise ValueError(msg)


class Rebuild:
    """Folds JSON Lines into the checkpoint they describe."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.state: dict[str, Any] | None = None

    def bad(self, number: int, detail: str) -> CheckpointFormatError:
        """The error for line ``number`` (1-based), which is not a checkpoint line."""
        return CheckpointFormatError(f"{self.path}:{number}: not a checkpoint line ({detail})")

    def fold(self, line: object, number: int) -> None:
        """Apply line ``number`` (1-based) to the state."""
        new, cost, progress_info = self._check(line, number)
        assert isinstance(line, dict)  # noqa: S101 - _check made sure

        def bad(detail: str) -> CheckpointFormatError:
            return self.bad(number, detail)

        state = self.state
        held_items: dict[str, Any] = {} if state is None else state["items"]
        running: list[Any] = [] if state is None else state["in_flight"]
        run = line.get("run")
        if state is None or run is not None:
            state = self._start(run, number, new, state)
        else:
            state["outputs"].update((name, entry[0]) for name, entry in new.items())
        step_info = state["step_info"]
        for name in state.get("unfinished", ()):
            if name not in progress_info:
                step_info.pop(name, None)  # described by the line before only
        state["unfinished"] = list(progress_info)
        for name, packed in [*((n, entry[1]) for n, entry in new.items()), *progress_info.items()]:
            try:
                info = unpack_info(packed)
            except ValueError as exc:
                raise self.bad(number, f"step {name!r}: {exc}") from None
            if info is None:
                step_info.pop(name, None)
            else:
                step_info[name] = info
        state["seq"] = line["s"]
        state["created_at"] = line.get("t")
        state["cost"] = dict(zip(COST, cost, strict=True))
        state["errors"] = line.get("errors", {})
        state["progress"] = line.get("progress", {})
        extra = dict(line.get("x", {}))
        if "i" in line:
            state["items"] = fold_items(held_items, line["i"], bad)
        elif "items" in extra:  # written before items had "i": every item, whole
            state["items"] = legacy_items(extra.pop("items"), bad)
        else:
            state["items"] = {}  # a map the line does not name has no items
        state["extra"] = extra
        self._fold_lists(line, state, running, number)
        self.state = state

    def _fold_lists(
        self, line: dict[str, Any], state: dict[str, Any], running: list[Any], number: int
    ) -> None:
        """Apply the line's ledger rows, attempts and attempts in flight to ``state``."""
        for log in _LOGS:
            state[log[0]] = self._appended(line, state[log[0]], number, log)
        state["in_flight"] = self._in_flight(line, running, number)

    def _in_flight(self, line: dict[str, Any], held: list[Any], number: int) -> Any:
        """The attempts in flight after the line: ``f``, or ``fd`` applied to ``held``, or none."""
        if "fd" not in line:
            return line.get("f", [])  # from_dict names what is wrong with it
        change = line["fd"]
        if not (
            isinstance(change, list)
            and len(change) == 2  # noqa: PLR2004 - [ended, started]
            and all(isinstance(part, list) for part in change)
            and isinstance(held, list)
        ):
            raise self.bad(number, "'fd' must be [ended, started], two lists of attempts")
        ended, started = change
        return [attempt for attempt in held if attempt not in ended] + started

    def _appended(self, line: dict[str, Any], held: list[Any], number: int, log: Log) -> list[Any]:
        """A log after the line: its first ``keep`` entries held (all without), then ``key``'s.

        ``log`` is one of `_LOGS`: ``l`` and ``lk`` for the ledger's rows, ``a``
        and ``ak`` for the attempts.
        """
        _, key, keep_key, noun, shape = log
        keep = line.get(keep_key)
        if keep is not None:
            if type(keep) is not int or not 0 <= keep <= len(held):
                detail = f"{keep_key!r} must count {noun} the lines before hold (0 to {len(held)})"
                raise self.bad(number, detail)
            del held[keep:]
        entries = line.get(key, [])
        if not isinstance(entries, list) or not all(isinstance(entry, list) for entry in entries):
            raise self.bad(number, f"{key!r} must be a list of {noun} {shape}")
        held += entries
        return held

    def _check(
        self, line: object, number: int
    ) -> tuple[dict[str, list[Any]], list[Any], dict[str, Any]]:
        """The new outputs, cost and progress info of a line, checked for shape."""
        if not isinstance(line, dict):
            raise self.bad(number, "not a JSON object")
        for key, kind, expected in (
            ("s", int, "an int"),
            ("n", dict, "an object"),
            ("c", list, "a list"),
        ):
            if not isinstance(line.get(key), kind) or isinstance(line.get(key), bool):
                raise self.bad(number, f"{key!r} must be {expected}")
        new: dict[str, object] = line["n"]
        for name, entry in new.items():
            if not isinstance(entry, list) or len(entry) != 2:  # noqa: PLR2004 - [output, info]
                raise self.bad(number, f"step {name!r} must be [output, info]")
        cost: list[Any] = line["c"]
        if len(cost) != len(COST):
            raise self.bad(number, "'c' must hold three counts")
        progress_info = line.get("progress_info", {})
        if not isinstance(progress_info, dict):
            raise self.bad(number, "'progress_info' must be a dict")
        extra = line.get("x", {})
        # "items" went under "x" before it had "i"; a line holds one or the other.
        legacy = ("items",) if "i" not in line else ()
        if not isinstance(extra, dict) or any(
            key in _WRITTEN and key not in legacy for key in extra
        ):
            raise self.bad(number, "'x' must be a dict of the fields a line has no key for")
        return line["n"], cost, progress_info

    def _start(
        self,
        run: object,
        number: int,
        new: dict[str, Any],
        old: dict[str, Any] | None,
    ) -> dict[str, Any]:
        """The state after a line that says what the file holds from now on."""
        if run is None:
            run = {}  # a first line without a header (older recipe files)
        if not isinstance(run, dict):
            raise self.bad(number, "'run' must be a dict")
        keep = run.get("keep", list(new))
        if not isinstance(keep, list):
            raise self.bad(number, "'run.keep' must be a list")
        for name in keep:
            if not isinstance(name, str):
                detail = f"'run.keep' must be a list of step names, got {reprlib.repr(name)}"
                raise self.bad(number, detail)
        outputs_before: dict[str, Any] = old["outputs"] if old else {}
        info_before: dict[str, Any] = old["step_info"] if old else {}
        outputs: dict[str, Any] = {}
        for name in keep:
            if name in new:
                outputs[name] = new[name][0]
            elif name in outputs_before:
                outputs[name] = outputs_before[name]
            else:
                raise self.bad(number, f"'run.keep' names {name!r}, which no line recorded")
        for name, entry in new.items():
            outputs.setdefault(name, entry[0])
        run_id = run.get("run_id")
        # The ledger and the attempts are the run's: a line starting another run starts
        # them over.
        same_run = old is not None and old["run_id"] == run_id
        return {
            "version": FORMAT_VERSION,
            "run_id": run_id,
            "ledger": old["ledger"] if same_run and old is not None else [],
            "attempts": old["attempts"] if same_run and old is not None else [],
            "context_keys": run.get("context_keys", []),
            "metadata": run.get("metadata", {}),
            "trace": run.get("trace"),
            "lineage": run.get("lineage", {}),
            "outputs": outputs,
            "step_info": {name: info for name, info in info_before.items() if name in outputs},
        }

    def checkpoint(self) -> WorkflowCheckpoint | None:
        state = self.state
        if state is None:
            return None
        progress = state["progress"]
        if not isinstance(progress, dict):
            progress = {}  # from_dict names the field below
        # In the order a run's checkpoints list them: the outputs', then progress-only steps'.
        info = state["step_info"]
        described = {**dict.fromkeys(state["outputs"]), **dict.fromkeys(state["unfinished"])}
        state["step_info"] = {name: info[name] for name in described if name in info}
        state["step_index"] = len(state["outputs"])
        data = {key: value for key, value in state.items() if key not in _STATE_ONLY}
        for key in _LATER:
            data[key] = _EMPTY[key].copy()  # left out of a line when empty
        data.update(state["extra"])
        for field, *_ in _LOGS:
            data[field] = list(state[field])  # the state keeps growing: a copy
        where = f"{self.path}: the lines do not rebuild into a valid checkpoint"
        return rebuilt(data, where)


class LineHistory:
    """The checkpoints of a file's current run, one per line, described as the lines fold.

    Every line is folded (`Rebuild`), so a damaged one is reported as `load`
    reports it, but no checkpoint is built: a line's `CheckpointInfo` comes
    from the line itself (its ``s``, ``t``, ``n`` and ``errors``) and counts
    kept by the fold, O(maps) each. A line that starts another run (its ``run``
    names another ``run_id``, or it is the file's first) starts the list over.
    """

    def __init__(self, path: str) -> None:
        """Describe the lines of the file at ``path`` (named in messages)."""
        self.rebuild = Rebuild(path)
        self.listed: list[CheckpointInfo] = []
        self.positions: list[int] = []  # the position of each listed line among those added

    def add(self, position: int, line: object, number: int) -> None:
        """Fold line ``number`` (the ``position``-th line with a checkpoint) and describe it."""
        before = self.rebuild.state
        run_before = None if before is None else before["run_id"]
        self.rebuild.fold(line, number)
        state = self.rebuild.state
        assert state is not None  # noqa: S101 - fold always leaves a state
        assert isinstance(line, dict)  # noqa: S101 - fold made sure
        if before is None or state["run_id"] != run_before:
            self.listed, self.positions = [], []
        created_at = line.get("t")
        errors = line.get("errors", {})
        pending = state["extra"].get("pending", {})
        for problem, bad in (
            ("'t' must be a string or null", not isinstance(created_at, (str, type(None)))),
            ("'errors' must be an object", not isinstance(errors, dict)),
            ("'x.pending' must be an object", not isinstance(pending, dict)),
        ):
            if bad:
                raise self.rebuild.bad(number, problem)
        items = state["items"]
        self.listed.append(
            CheckpointInfo(
                run_id=state["run_id"],
                seq=line["s"],
                created_at=created_at,
                step_index=len(state["outputs"]),
                new_outputs=tuple(line["n"]),
                errors=tuple(errors),
                pending=len(pending),
                items=sum(len(entry["outputs"]) for entry in items.values()),
            )
        )
        self.positions.append(position)

    def position_of(self, seq: int) -> int | None:
        """The position of the current run's line of ``seq``, or None if it has none."""
        for info, position in zip(self.listed, self.positions, strict=True):
            if info.seq == seq:
                return position
        return None
