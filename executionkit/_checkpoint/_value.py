"""`WorkflowCheckpoint` and its plain-dict format."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

from executionkit._checkpoint._fields import (
    FORMAT_VERSION,
    KEYS_BY_VERSION,
    LEGACY_KEYS,
    LEGACY_VERSION,
    VERSION_NOT_GIVEN,
    check_keys,
    describe,
    fail,
    guard,
    info_dict,
    int_text,
    newer_version,
    read_context_keys,
    read_cost,
    read_count,
    read_dict,
    read_errors,
    read_new_outputs,
    read_outputs,
    read_progress,
    read_run_id,
    read_step_info,
    read_timestamp,
    read_token_usage,
    read_version,
    usage_dict,
)
from executionkit._checkpoint._kinds import read_kinds, read_new_items
from executionkit._checkpoint._ledger import (
    LedgerEntry,
    read_in_flight,
    read_in_flight_items,
    read_ledger,
    read_new_ledger,
)
from executionkit._checkpoint._lineage import lineage_dict, read_lineage, read_trace
from executionkit._checkpoint._times import (
    Attempt,
    read_attempts,
    read_new_attempts,
    read_waits,
)
from executionkit._errors import CheckpointFormatError, preview
from executionkit._types import TokenUsage

__all__ = [
    "FORMAT_VERSION",
    "LEGACY_VERSION",
    "SharedFields",
    "WorkflowCheckpoint",
    "trusted_checkpoint",
    "utc_timestamp",
]

if TYPE_CHECKING:
    from collections.abc import Callable

    from executionkit._checkpoint._ledger import Spending
    from executionkit._checkpoint._output_log import OutputLog


def _empty_proxy() -> MappingProxyType[str, Any]:
    return MappingProxyType({})


@dataclass(frozen=True)
class WorkflowCheckpoint:
    """A frozen snapshot of everything a run has recorded so far.

    `Workflow.run` builds one after every batch and hands it to your
    ``checkpoint_fn``; pass one back as ``resume_from`` to skip every step whose
    output it records. `to_dict` and `from_dict` convert to and from plain
    dicts, so any store works: a JSON file, a database row, a list in a test.

    Only the first three fields are required, as in ExecutionKit 0.4. Given
    only those, with a ``step_index`` other than ``len(outputs)`` (0.4 counted
    completed steps while its ``outputs`` also held the initial context), the
    checkpoint is an ExecutionKit 0.4 one: ``version`` 0, written back by
    `to_dict` in 0.4's three-key shape and resumed as 0.4 would.

    Attributes:
        step_index: Number of completed steps (``len(outputs)``, except in a
            version 0 checkpoint).
        outputs: Read-only mapping (a `types.MappingProxyType`) of step name
            to output, for every completed step.
        cost: Total token usage of the run so far, including restored usage.
        version: Checkpoint format version, `FORMAT_VERSION` (5) unless given or
            inferred; ``0`` marks an ExecutionKit 0.4 checkpoint.
        run_id: Identifier of the run, kept across resumes.
        seq: Increases by one with every checkpoint of a run, across resumes.
        context_keys: Names of the run's ``initial_context`` keys (never values).
        errors: Step name to ``"ExceptionType: message"`` for steps that failed
            in the batch this checkpoint was taken after.
        created_at: When the checkpoint was taken, UTC ISO-8601.
        metadata: The ``metadata`` passed to ``run``, stored verbatim.
        progress: Step name to the progress value that step saved through
            `StepContext.save_progress` and has not completed since (format 2).
        step_info: For every recorded step, the `Step.version` and dependency
            names it ran with: ``{"version": str | None, "depends_on": (...)}``
            (format 2). On resume a step whose version or dependencies changed
            since is run again, with its descendants. Empty in checkpoints of
            older formats, which are trusted as they are.
        skipped: Step name to the reason a condition (``when=``, or the
            ``join`` rule) skipped it; recorded so that resuming never asks
            again (format 3).
        items: For each map step that has not finished, the outputs of its
            finished items by item key and their token usage:
            ``{"outputs": {key: output}, "cost": TokenUsage}`` (format 3).
            Resuming runs only the items not recorded.
        pending: For each question asked (`Step.ask`) and not answered yet:
            ``{"question": value, "asked_at": str, "expires_at": str | None}``,
            times in UTC ISO-8601 (format 3).
        children: For each sub-workflow step in progress, its own checkpoint
            (``{"checkpoint": WorkflowCheckpoint}``), or for a map of
            sub-workflows one per item (``{"items": {key: WorkflowCheckpoint}}``)
            (format 3).
        ledger: The cost ledger: one `LedgerEntry` per model per attempt that
            spent tokens or ended in doubt, successful or not, in the order
            they ended (format 4). ``cost`` includes all of it.
        in_flight: ``(step path, item key or None, attempt)`` of each attempt
            running when the checkpoint was taken; a resume from it records
            each as ``"unknown"`` in the ledger (format 4). A map step's items
            are counted in ``in_flight_items`` instead (format 5).
        trace: The run's trace context, a W3C ``traceparent`` string, kept
            across resumes so that every invocation joins one trace (format 4;
            written by `executionkit.otel.Tracing`), or None.
        lineage: For a fork (`Workflow.fork`), where it came from:
            ``parent_run_id``, ``parent_seq``, ``overridden``, ``rerun`` and
            ``note``; empty for a run that is not a fork (format 4).
        attempts: ``(step path, item key or None, attempt, outcome, started,
            ended)`` of every attempt that ended, in the order they ended,
            whether it reported usage or not; ``started`` and ``ended`` in
            integer milliseconds since the Unix epoch (format 5).
        waits: For each `Step.wait` reached and not yet due:
            ``{"due": str, "since": str}``, UTC ISO-8601 (format 5).
        in_flight_items: Map step name to the number of its items running or
            about to start when the checkpoint was taken, counted before they
            start; a resume records that many attempts of the map as
            ``"unknown"`` (format 5).
        new_outputs: Names of the outputs recorded since the previous checkpoint
            of this run, in recording order, so an append-only store can write
            only those. Not part of the dict format (``()`` after `from_dict`)
            and not compared by ``==``.
        new_items: For each map in ``items``, the keys of the items recorded
            since the previous checkpoint of this run, in recording order, so
            an incremental store writes only those. Like ``new_outputs``, not
            part of the dict format and not compared.
        new_ledger: The rows of ``ledger`` written since the previous
            checkpoint of this run, for incremental stores; not part of the
            dict format and not compared.
        new_attempts: The entries of ``attempts`` written since the previous
            checkpoint of this run, like ``new_ledger``.

    Raises:
        CheckpointFormatError: If a field is invalid, exactly as `from_dict`
            would report it, so every checkpoint that can be built can also be
            written with `to_dict` and read back.
    """

    step_index: int
    outputs: Mapping[str, Any]
    cost: TokenUsage
    version: int = VERSION_NOT_GIVEN
    run_id: str | None = None
    seq: int = 0
    context_keys: tuple[str, ...] = ()
    errors: Mapping[str, str] = field(default_factory=_empty_proxy)
    created_at: str | None = None
    metadata: Mapping[str, Any] = field(default_factory=_empty_proxy)
    progress: Mapping[str, Any] = field(default_factory=_empty_proxy)
    step_info: Mapping[str, Mapping[str, Any]] = field(default_factory=_empty_proxy)
    skipped: Mapping[str, str] = field(default_factory=_empty_proxy)
    items: Mapping[str, Mapping[str, Any]] = field(default_factory=_empty_proxy)
    pending: Mapping[str, Mapping[str, Any]] = field(default_factory=_empty_proxy)
    children: Mapping[str, Mapping[str, Any]] = field(default_factory=_empty_proxy)
    ledger: tuple[LedgerEntry, ...] = ()
    in_flight: tuple[tuple[str, str | None, int], ...] = ()
    trace: str | None = None
    lineage: Mapping[str, Any] = field(default_factory=_empty_proxy)
    attempts: tuple[Attempt, ...] = ()
    waits: Mapping[str, Mapping[str, str]] = field(default_factory=_empty_proxy)
    in_flight_items: Mapping[str, int] = field(default_factory=_empty_proxy)
    new_outputs: tuple[str, ...] = field(default=(), compare=False)
    new_items: Mapping[str, tuple[str, ...]] = field(default_factory=_empty_proxy, compare=False)
    new_ledger: tuple[LedgerEntry, ...] = field(default=(), compare=False)
    new_attempts: tuple[Attempt, ...] = field(default=(), compare=False)

    def __post_init__(self) -> None:
        """Validate every field (the one place checkpoints are checked) and freeze them."""
        # guard turns anything but a CheckpointFormatError raised while a field is read
        # (a RecursionError, or an exception from a caller's own __hash__, __eq__ or
        # mapping methods) into a CheckpointFormatError naming the field.
        given: object = self.version
        version = guard("version", lambda: read_version(given))
        outputs = guard("outputs", lambda: read_outputs(self.outputs))
        step_index = read_count(self.step_index, "step_index")
        guard("cost", lambda: read_token_usage(self.cost))
        seq = read_count(self.seq, "seq")
        run_id = guard("run_id", lambda: read_run_id(self.run_id))
        created_at = guard("created_at", lambda: read_timestamp(self.created_at))
        errors = guard("errors", lambda: read_errors(self.errors))
        metadata = guard("metadata", lambda: read_dict(self.metadata, "metadata"))
        context_keys = guard("context_keys", lambda: read_context_keys(self.context_keys))
        progress = guard("progress", lambda: read_dict(self.progress, "progress"))
        info = guard("step_info", lambda: read_dict(self.step_info, "step_info"))
        later = {
            name: guard(name, lambda name=name: read_dict(getattr(self, name), name))  # type: ignore[misc]
            for name in _LATER_FIELDS
        }
        new: object = self.new_outputs
        later_v4 = bool(
            self.ledger
            or self.in_flight
            or self.trace
            or self.lineage
            or self.attempts
            or self.waits
            or self.in_flight_items
        )
        if step_index != len(outputs) and given is VERSION_NOT_GIVEN:
            # What ExecutionKit 0.4 code builds: only its three fields, and a step_index
            # that counts completed steps while outputs also hold the initial context.
            # Such a checkpoint is a 0.4 checkpoint, written and read back as one.
            only_04 = not (run_id or seq or context_keys or errors or created_at or metadata)
            only_04 = only_04 and not any(later.values()) and not later_v4
            if only_04 and not (progress or info) and type(new) is tuple and not new:
                version = LEGACY_VERSION
        # 0.4 kept the initial context inside `outputs`, so only newer formats must match.
        if version != LEGACY_VERSION and step_index != len(outputs):
            msg = (
                f"checkpoint field 'step_index' must equal the number of outputs "
                f"({len(outputs)}), got {int_text(step_index)}"
            )
            raise CheckpointFormatError(msg, path="step_index")
        for name in errors:
            if name in outputs:
                msg = (
                    f"checkpoint field 'errors.{name}' names a step that 'outputs' records: "
                    f"a step either failed or has an output, not both"
                )
                raise CheckpointFormatError(msg, path=f"errors.{name}")
        frozen_progress = guard("progress", lambda: read_progress(progress, version, outputs))
        skipped, items, pending, children = read_kinds(later, version, outputs, _read_child)
        others = {*skipped, *items, *pending, *children, *_named(self.waits)}
        _refuse_odd_child_ids(run_id, children)
        frozen_info = guard(
            "step_info", lambda: read_step_info(info, version, outputs, frozen_progress, others)
        )
        guard("new_outputs", lambda: read_new_outputs(new, outputs))
        new_items = guard("new_items", lambda: read_new_items(self.new_items, items))
        freeze = object.__setattr__
        freeze(self, "version", version)
        freeze(self, "outputs", MappingProxyType(outputs))
        freeze(self, "errors", MappingProxyType(errors))
        freeze(self, "metadata", MappingProxyType(metadata))
        freeze(self, "context_keys", context_keys)
        freeze(self, "progress", frozen_progress)
        freeze(self, "step_info", frozen_info)
        freeze(self, "skipped", skipped)
        freeze(self, "items", items)
        freeze(self, "pending", pending)
        freeze(self, "children", children)
        freeze(self, "new_items", new_items)
        self._check_v4(version)

    def _check_v4(self, version: int) -> None:
        """Validate and freeze the fields formats 4 and 5 added."""
        given: Any = self
        ledger = guard("ledger", lambda: read_ledger(given.ledger, version))
        in_flight = guard("in_flight", lambda: read_in_flight(given.in_flight, version))
        trace = guard("trace", lambda: read_trace(given.trace, version))
        lineage = guard("lineage", lambda: read_lineage(given.lineage, version))
        guard("new_ledger", lambda: read_new_ledger(given.new_ledger, ledger))
        counts = guard(
            "in_flight_items", lambda: read_in_flight_items(given.in_flight_items, version)
        )
        attempts = guard("attempts", lambda: read_attempts(given.attempts, version))
        guard("new_attempts", lambda: read_new_attempts(given.new_attempts, attempts))
        waits = guard("waits", lambda: read_waits(given.waits, version, self.outputs))
        for name in waits:
            if name in self.skipped:
                msg = (
                    f"checkpoint field 'waits.{name}' names step {name!r}, which 'skipped' "
                    f"records: a skipped step does not wait"
                )
                raise CheckpointFormatError(msg, path=f"waits.{name}")
        self._refuse_ended_in_flight(in_flight)
        self._refuse_odd_counts(counts, in_flight)
        freeze = object.__setattr__
        freeze(self, "in_flight_items", counts)
        freeze(self, "attempts", attempts)
        freeze(self, "waits", waits)
        freeze(self, "ledger", ledger)
        freeze(self, "in_flight", in_flight)
        freeze(self, "trace", trace)
        freeze(self, "lineage", lineage)

    def _refuse_ended_in_flight(self, in_flight: tuple[tuple[str, str | None, int], ...]) -> None:
        """An attempt in flight of a step (or item) the checkpoint records is a contradiction.

        A recorded step has ended; a resume would book an attempt of it as unknown
        and count money nobody may have spent. (Paths into sub-workflows are the
        children's to check.)
        """
        outputs = self.outputs
        items = self.items
        for index, (step, key, _attempt) in enumerate(in_flight):
            if key is None:
                ended = step in outputs
            else:
                entry = items.get(step)
                ended = step in outputs or (entry is not None and key in entry["outputs"])
            if ended:
                what = f"step {step!r}" if key is None else f"item {key!r} of step {step!r}"
                msg = (
                    f"checkpoint field 'in_flight[{index}]' names {what}, which the "
                    f"checkpoint records: a recorded attempt has ended, it cannot be in flight"
                )
                raise CheckpointFormatError(msg, path=f"in_flight[{index}]")

    def _refuse_odd_counts(
        self, counts: Mapping[str, int], in_flight: tuple[tuple[str, str | None, int], ...]
    ) -> None:
        """Items in flight belong to a map that has not ended, listed only by its count."""
        for name in counts:
            path = f"in_flight_items.{name}"
            if name in self.outputs or name in self.skipped:
                msg = (
                    f"checkpoint field {path!r} counts items of step {name!r}, which the "
                    f"checkpoint records as ended: an ended map has no items in flight"
                )
                raise CheckpointFormatError(msg, path=path)
            info = self.step_info.get(name)
            if info is not None and info.get("kind", "step") != "map":
                msg = (
                    f"checkpoint field {path!r} counts items of step {name!r}, which "
                    f"'step_info' describes as a {info.get('kind', 'step')!r} step, not a map"
                )
                raise CheckpointFormatError(msg, path=path)
        for index, (step, key, _attempt) in enumerate(in_flight):
            if key is None and step in counts:
                msg = (
                    f"checkpoint field 'in_flight[{index}]' lists map step {step!r}, "
                    f"which 'in_flight_items' counts: a map's items are counted once"
                )
                raise CheckpointFormatError(msg, path=f"in_flight[{index}]")

    def to_dict(self) -> dict[str, Any]:
        """Return the checkpoint as a plain dict.

        Keys are str; values are str, int, None, and lists and dicts of those,
        plus the step outputs exactly as your steps returned them (whether they
        survive ``json.dumps`` is up to your steps). A checkpoint read from an
        ExecutionKit 0.4 dict is written back in that format.

        The shape is documented in ``docs/reference.md``.
        """
        cost = usage_dict(self.cost)
        if self.version == LEGACY_VERSION:
            return {"step_index": self.step_index, "outputs": dict(self.outputs), "cost": cost}
        data: dict[str, Any] = {
            "version": self.version,
            "run_id": self.run_id,
            "seq": self.seq,
            "step_index": self.step_index,
            "created_at": self.created_at,
            "outputs": dict(self.outputs),
            "cost": cost,
            "context_keys": list(self.context_keys),
            "errors": dict(self.errors),
            "metadata": dict(self.metadata),
        }
        if self.version >= 2:  # noqa: PLR2004 - the version that introduced progress
            data["progress"] = dict(self.progress)
            data["step_info"] = {name: info_dict(info) for name, info in self.step_info.items()}
        if self.version >= 3:  # noqa: PLR2004 - the version that introduced these
            data["skipped"] = dict(self.skipped)
            data["items"] = {
                name: {"outputs": dict(entry["outputs"]), "cost": usage_dict(entry["cost"])}
                for name, entry in self.items.items()
            }
            data["pending"] = {name: dict(entry) for name, entry in self.pending.items()}
            data["children"] = {
                name: _children_dict(entry) for name, entry in self.children.items()
            }
        if self.version >= 4:  # noqa: PLR2004 - the version that introduced these
            data["ledger"] = [row.to_list() for row in self.ledger]
            data["in_flight"] = [list(attempt) for attempt in self.in_flight]
            data["trace"] = self.trace
            data["lineage"] = lineage_dict(self.lineage)
        if self.version >= 5:  # noqa: PLR2004 - the version that introduced these
            data["attempts"] = [list(entry) for entry in self.attempts]
            data["waits"] = {name: dict(entry) for name, entry in self.waits.items()}
            data["in_flight_items"] = dict(self.in_flight_items)
        return data

    @property
    def spending(self) -> Spending:
        """The ledger summed: spent and wasted usage, by step, model or item."""
        from executionkit._checkpoint._ledger import Spending  # noqa: PLC0415 - only readers pay

        return Spending.of(self.ledger)

    @classmethod
    def from_dict(cls, data: object) -> WorkflowCheckpoint:
        """Rebuild a checkpoint from what `to_dict` returned.

        Also accepts the dict after a ``json.dumps``/``json.loads`` round trip,
        every earlier format (1, without ``progress`` and ``step_info``; and
        ExecutionKit 0.4's, with only ``step_index``, ``outputs`` and ``cost``).
        Everything is validated; nothing is evaluated, imported or unpickled.

        Raises:
            CheckpointFormatError: If anything is malformed: not a dict, a
                missing or unexpected key, a wrong type (``bool`` is not an
                int), a negative count, a time not in UTC, fields that
                contradict one another (a skipped step with items, a pending
                question or children), or a format version newer than this
                library reads. The message and ``.path`` name the field. Also
                raised, naming the field, when reading a field fails in any
                other way: nesting deeper than Python recurses (a
                `RecursionError`), or a ``__hash__``, ``__eq__`` or mapping
                method of your own objects that raises; the original exception
                is the ``__cause__``. Values that are not checked (outputs,
                metadata and progress values) load however deeply nested.
        """
        return guard("", lambda: _read_checkpoint(cls, data))


def _read_checkpoint(cls: type[WorkflowCheckpoint], data: object) -> WorkflowCheckpoint:
    if not isinstance(data, Mapping):
        msg = f"checkpoint data must be a dict, got {describe(data)}"
        raise CheckpointFormatError(msg)
    key: object
    for key in data:
        if not isinstance(key, str):
            msg = f"checkpoint keys must be str, got {describe(key)}"
            raise CheckpointFormatError(msg)
    if "version" not in data:
        return _read_legacy(data)
    version = data["version"]
    if type(version) is not int or version < 1:
        fail("version", "a positive int", version)
    if version > FORMAT_VERSION:
        raise newer_version(version)
    check_keys(data, KEYS_BY_VERSION[version], where="")
    return cls(
        step_index=data["step_index"],
        outputs=data["outputs"],
        cost=guard("cost", lambda: read_cost(data["cost"])),
        version=version,
        run_id=data["run_id"],
        seq=data["seq"],
        context_keys=data["context_keys"],
        errors=data["errors"],
        created_at=data["created_at"],
        metadata=data["metadata"],
        progress=data.get("progress", {}),
        step_info=data.get("step_info", {}),
        skipped=data.get("skipped", {}),
        items=data.get("items", {}),
        pending=data.get("pending", {}),
        children=data.get("children", {}),
        ledger=data.get("ledger", ()),
        in_flight=data.get("in_flight", ()),
        trace=data.get("trace"),
        lineage=data.get("lineage", {}),
        attempts=data.get("attempts", ()),
        waits=data.get("waits", {}),
        in_flight_items=data.get("in_flight_items", {}),
    )


_LATER_FIELDS = ("skipped", "items", "pending", "children")


def _refuse_odd_child_ids(run_id: str | None, children: Mapping[str, Mapping[str, Any]]) -> None:
    """Refuse a sub-workflow checkpoint whose run_id no run would give it.

    A child of a run with a run_id has one of its own, derived as
    ``<run_id>/<step path>`` (`executionkit._paths.child_run_id`; a fork keeps the
    children it did not change, with their ids): never missing, never the
    parent's own.
    """
    if run_id is None:
        return
    for name, entry in children.items():
        if "checkpoint" in entry:
            nested = [(f"children.{name}.checkpoint.run_id", entry["checkpoint"])]
        else:
            nested = [
                (f"children.{name}.items.{key}.run_id", child)
                for key, child in entry["items"].items()
            ]
        for where, child in nested:
            child_id = child.run_id
            if child_id is None or "/" not in child_id or child_id == run_id:
                problem = "has none" if child_id is None else f"has {preview(child_id)}"
                msg = (
                    f"checkpoint field {where!r} must be the sub-workflow's own run_id, "
                    f"'<run_id>/<step>' as its run derives it (such as "
                    f"{preview(f'{run_id}/{name}')}), but it {problem}"
                )
                raise CheckpointFormatError(msg, path=where)


def _children_dict(entry: Mapping[str, Any]) -> dict[str, Any]:
    if "checkpoint" in entry:
        return {"checkpoint": entry["checkpoint"].to_dict()}
    return {"items": {key: child.to_dict() for key, child in entry["items"].items()}}


def _read_child(value: object, path: str) -> WorkflowCheckpoint:
    """A nested checkpoint: a `WorkflowCheckpoint` as it is, or a dict read with `from_dict`.

    Errors name the field's full path, such as ``children.research.checkpoint.seq``.
    """
    if isinstance(value, WorkflowCheckpoint):
        return value
    try:
        return WorkflowCheckpoint.from_dict(value)
    except CheckpointFormatError as exc:
        inner = f"{path}.{exc.path}" if exc.path else path
        msg = f"checkpoint field {path!r} is not a valid checkpoint: {exc}"
        raise CheckpointFormatError(msg, path=inner) from exc


def _read_legacy(data: Mapping[str, Any]) -> WorkflowCheckpoint:
    extra = sorted(set(data) - LEGACY_KEYS)
    if extra:
        msg = (
            f"checkpoint is missing key 'version' (a dict without it is read as an "
            f"ExecutionKit 0.4 checkpoint, which has only 'step_index', 'outputs' and "
            f"'cost', but this one also has {', '.join(map(preview, extra))})"
        )
        raise CheckpointFormatError(msg, path="version")
    check_keys(data, LEGACY_KEYS, where="")
    return WorkflowCheckpoint(
        step_index=data["step_index"],
        outputs=data["outputs"],
        cost=guard("cost", lambda: read_cost(data["cost"])),
        version=LEGACY_VERSION,
    )


def _named(waits: object) -> list[str]:
    """The steps ``waits`` names, read before it is checked (`_check_v4`): described too."""
    return [name for name in waits if isinstance(name, str)] if isinstance(waits, Mapping) else []


def trusted_checkpoint(fields: dict[str, Any]) -> WorkflowCheckpoint:
    """Build a checkpoint without validation, from values the runner guarantees.

    Validation walks every output, which would make each checkpoint cost
    O(workflow size); the runner's values are correct by construction.
    ``fields`` becomes the instance's ``__dict__`` as it is (not copied). It
    holds every field, except that any field `_Deferred` computes may be left
    out in favour of ``_shared`` (a `SharedFields`), ``_since`` and ``_ns``.
    """
    checkpoint = object.__new__(WorkflowCheckpoint)
    object.__setattr__(checkpoint, "__dict__", fields)
    return checkpoint


def utc_timestamp(ns: int) -> str:
    """``ns`` nanoseconds since the epoch as UTC ISO-8601 with microseconds."""
    seconds, rest = divmod(ns, 1_000_000_000)
    moment = datetime.fromtimestamp(seconds, UTC).replace(microsecond=rest // 1000)
    return moment.isoformat(timespec="microseconds")


_NO_DEFAULT: Any = object()


class _Deferred:
    """A field that a checkpoint taken by a run computes the first time it is read.

    A run takes a checkpoint after every batch, and most of them are stored or
    dropped without their ``outputs`` ever being read as a mapping. Such a
    checkpoint is built (`trusted_checkpoint`) from the few values that differ
    from one checkpoint to the next plus the run's `SharedFields` (holding the
    append-only output log it was taken from), instead of with its views, its
    timestamp and a copy of every constant field. The first read computes the
    field, stores it in the instance and returns it, so later reads are plain
    attribute reads and the value never changes. Checkpoints built by the
    constructor or `from_dict` hold every field in their ``__dict__``, which
    takes precedence over this non-data descriptor: for them it is never called.
    """

    __slots__ = ("_compute", "_default", "name")

    def __init__(
        self, name: str, compute: Callable[[dict[str, Any]], Any], default: Any = _NO_DEFAULT
    ) -> None:
        self.name = name
        self._compute = compute
        self._default = default

    def __get__(self, instance: object, owner: type | None = None) -> Any:
        if instance is None:  # the class attribute: the field's default, as dataclass set it
            if self._default is _NO_DEFAULT:
                msg = f"type object {WorkflowCheckpoint.__name__!r} has no attribute {self.name!r}"
                raise AttributeError(msg)
            return self._default
        fields = instance.__dict__
        value = self._compute(fields)
        fields[self.name] = value
        return value


class SharedFields:
    """What every checkpoint of one run shares: the run's constant fields and its output log.

    A checkpoint taken by a run holds this object, its own ``step_index``,
    ``cost``, ``seq``, where its new outputs start in the log (``_since``), how
    many ledger rows it covers (``_rows``, new since ``_rows_since``) and the
    clock (``_ns``), how many attempts ended (``_ended``, new since
    ``_ended_since``); `_Deferred` computes every other field from those.
    """

    __slots__ = (
        "attempts",
        "context_keys",
        "in_ms",
        "ledger",
        "lineage",
        "log",
        "metadata",
        "names",
        "quiet",
        "run_id",
        "step_info",
        "trace",
        "version",
    )

    def __init__(  # noqa: PLR0917 - the run's constant fields, built once
        self,
        log: OutputLog,
        step_info: Mapping[str, Mapping[str, Any]],
        run_id: str,
        context_keys: tuple[str, ...],
        metadata: Mapping[str, Any],
        ledger: list[LedgerEntry],
        lineage: Mapping[str, Any],
    ) -> None:
        self.log = log
        self.step_info = step_info
        self.version = FORMAT_VERSION
        self.run_id = run_id
        self.context_keys = context_keys
        self.metadata = metadata
        # The run's ledger rows (append-only): a checkpoint covers the first `_rows`.
        self.ledger = ledger
        # The run's attempts log (append-only): a checkpoint covers the first `_ended`;
        # its first `in_ms` entries hold milliseconds, the others may hold seconds (`in_ms`).
        self.attempts: list[Any] = []
        self.in_ms = 0
        self.lineage = lineage
        # Set once, by the first listener that traces the run (see Run).
        self.trace: str | None = None
        # The run's step names, and the positions of steps that spend nothing themselves
        # (asks, sub-workflows): a checkpoint's in_flight is computed from its `_next`.
        self.names: tuple[str, ...] = ()
        self.quiet: frozenset[int] = frozenset()


_EMPTY: Mapping[str, Any] = MappingProxyType({})


def _shared(name: str) -> Callable[[dict[str, Any]], Any]:
    def compute(fields: dict[str, Any]) -> Any:
        return getattr(fields["_shared"], name)

    return compute


def _empty(fields: dict[str, Any]) -> Any:
    del fields
    return _EMPTY


def _outputs(fields: dict[str, Any]) -> Any:
    return fields["_shared"].log.outputs(fields["step_index"])


def _step_info(fields: dict[str, Any]) -> Any:
    shared = fields["_shared"]
    return shared.log.info(fields["step_index"], shared.step_info)


def _new_outputs(fields: dict[str, Any]) -> Any:
    return fields["_shared"].log.names_between(fields["_since"], fields["step_index"])


def _ledger(fields: dict[str, Any]) -> Any:
    return tuple(fields["_shared"].ledger[: fields["_rows"]])


def _new_ledger(fields: dict[str, Any]) -> Any:
    since = fields.get("_rows_since")
    if since is None:
        return ()
    return tuple(fields["_shared"].ledger[since : fields["_rows"]])


def in_ms(shared: SharedFields, end: int) -> list[Attempt]:
    """The run's attempts log with its first ``end`` entries in integer milliseconds.

    A run appends each entry with its times as `executionkit._clock.wall` read
    them, seconds as floats (the cheapest reading, taken twice per attempt);
    the first checkpoint read that covers an entry writes it over in place, in
    whole milliseconds, the format's unit (at most once: ``shared.in_ms``).
    """
    attempts = shared.attempts
    for index in range(shared.in_ms, end):
        step, item, attempt, outcome, started, ended = attempts[index]
        if type(started) is float:
            start = int(started * 1000)
            end_ms = int(ended * 1000)
            attempts[index] = (step, item, attempt, outcome, start, max(end_ms, start))
    shared.in_ms = max(shared.in_ms, end)
    return attempts


def _attempts(fields: dict[str, Any]) -> Any:
    end = fields.get("_ended", 0)
    return tuple(in_ms(fields["_shared"], end)[:end])


def _new_attempts(fields: dict[str, Any]) -> Any:
    since = fields.get("_ended_since")
    if since is None:
        return ()
    end = fields["_ended"]
    return tuple(in_ms(fields["_shared"], end)[since:end])


def _in_flight(fields: dict[str, Any]) -> Any:
    upcoming = fields.get("_next")
    if not upcoming:
        return ()
    shared = fields["_shared"]
    names = shared.names
    quiet = shared.quiet
    return tuple((names[p], None, 1) for p in upcoming if p not in quiet)


def _created_at(fields: dict[str, Any]) -> Any:
    return utc_timestamp(fields["_ns"])


def _install_deferred_fields() -> None:
    # Set after @dataclass has read the class: __init__, its defaults and
    # dataclasses.fields() are unaffected.
    for descriptor in (
        _Deferred("outputs", _outputs),
        _Deferred("version", _shared("version"), FORMAT_VERSION),
        _Deferred("run_id", _shared("run_id"), None),
        _Deferred("context_keys", _shared("context_keys"), ()),
        _Deferred("errors", _empty),
        _Deferred("created_at", _created_at, None),
        _Deferred("metadata", _shared("metadata")),
        _Deferred("progress", _empty),
        _Deferred("step_info", _step_info),
        _Deferred("skipped", _empty),
        _Deferred("items", _empty),
        _Deferred("pending", _empty),
        _Deferred("children", _empty),
        _Deferred("new_outputs", _new_outputs, ()),
        _Deferred("new_items", _empty),
        _Deferred("ledger", _ledger, ()),
        _Deferred("new_ledger", _new_ledger, ()),
        _Deferred("in_flight", _in_flight, ()),
        _Deferred("trace", _shared("trace"), None),
        _Deferred("lineage", _shared("lineage")),
        _Deferred("attempts", _attempts, ()),
        _Deferred("new_attempts", _new_attempts, ()),
        _Deferred("waits", _empty),
        _Deferred("in_flight_items", _empty),
    ):
        setattr(WorkflowCheckpoint, descriptor.name, descriptor)


_install_deferred_fields()
