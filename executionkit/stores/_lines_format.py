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
# "in_flight" (under "f") and the run's "trace" and "lineage" (in "run", like its
# metadata); any other key (those a later format adds) is carried as it is under "x".
_WRITTEN = KEYS_BY_VERSION[2] | {"items", "ledger", "in_flight", "trace", "lineage"}
_FIELDS = tuple(field.name for field in dataclasses.fields(WorkflowCheckpoint))
# What a copy of a checkpoint without its large fields holds instead (see extra_fields).
_LIGHT: dict[str, Any] = {
    "outputs": {},
    "step_info": {},
    "items": {},
    "new_items": {},
    "ledger": (),
    "new_ledger": (),
    "in_flight": (),
    "trace": None,
    "lineage": {},
}
# The later keys a line leaves out when empty, and the rebuild's own bookkeeping.
_LATER = tuple(sorted(KEYS_BY_VERSION[FORMAT_VERSION] - _WRITTEN))
_STATE_ONLY = ("extra", "unfinished")
# Each key of the current format as an empty checkpoint writes it.
_EMPTY = WorkflowCheckpoint(step_index=0, outputs={}, cost=TokenUsage()).to_dict()
_ROW = "a list of ledger rows [step, item, attempt, outcome, model, input, output, calls]"


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


def pack_info(info: Mapping[str, Any] | None) -> object:
    """A step's version and dependencies, compactly: a list, a dict if versioned, or null."""
    if info is None:  # a hand-made checkpoint without step_info
        return None
    deps = list(info["depends_on"])
    kind = info.get("kind")
    if kind is not None:
        return {"v": info["version"], "d": deps, "k": kind}
    return deps if info["version"] is None else {"v": info["version"], "d": deps}


def unpack_info(packed: object) -> dict[str, Any] | None:
    if packed is None or isinstance(packed, list):
        return None if packed is None else {"version": None, "depends_on": packed}
    if isinstance(packed, dict) and set(packed) == {"v", "d"}:
        return {"version": packed["v"], "depends_on": packed["d"]}
    if isinstance(packed, dict) and set(packed) == {"v", "d", "k"}:
        return {"version": packed["v"], "depends_on": packed["d"], "kind": packed["k"]}
    msg = "step info must be a list, {'v': ..., 'd': [...]}, {'v', 'd', 'k'} or null"
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
        state["ledger"] = self._ledger(line, state["ledger"], number)
        state["in_flight"] = self._in_flight(line, running, number)
        self.state = state

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

    def _ledger(self, line: dict[str, Any], ledger: list[Any], number: int) -> list[Any]:
        """The ledger rows after the line: the first ``lk`` held (all without it), then ``l``."""
        keep = line.get("lk")
        if keep is not None:
            if type(keep) is not int or not 0 <= keep <= len(ledger):
                detail = f"'lk' must count ledger rows the lines before hold (0 to {len(ledger)})"
                raise self.bad(number, detail)
            del ledger[keep:]
        rows = line.get("l", [])
        if not isinstance(rows, list) or not all(isinstance(row, list) for row in rows):
            raise self.bad(number, f"'l' must be {_ROW}")
        ledger += rows
        return ledger

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
        # The ledger is the run's: a line starting another run starts it over.
        same_run = old is not None and old["run_id"] == run_id
        return {
            "version": FORMAT_VERSION,
            "run_id": run_id,
            "ledger": old["ledger"] if same_run and old is not None else [],
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
        data["ledger"] = list(state["ledger"])  # the state keeps growing: a copy
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
