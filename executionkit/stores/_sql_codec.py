"""How the SQL stores encode a checkpoint into rows, and decode rows back, naming damage.

A checkpoint's header is its ``to_dict()`` without the outputs, ``step_index``
and the step info of recorded steps (each rides with its output row), its
map items reduced to each map's cost (the items are rows), its ledger and its
attempts to their number of rows; an output row's value is ``[output, step
info]``, the step info as ``to_dict()`` writes it (format 5's ``code`` and
``answered_by`` included). Reading
checks every stored value's type and names the store, the run and the field
in `CheckpointFormatError`.
"""

from __future__ import annotations

import dataclasses
import json
import reprlib
from typing import TYPE_CHECKING, Any

from executionkit._checkpoint._fields import info_dict
from executionkit._checkpoint._value import WorkflowCheckpoint, trusted_checkpoint
from executionkit._errors import CheckpointFormatError
from executionkit.stores._common import attempts_length, dumps, ledger_length, loads, rebuilt
from executionkit.stores._lines_format import unfinished
from executionkit.stores._sql_items import header_items, slim_header_items
from executionkit.stores._unstorable import unstorable

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping, Sequence

# Keys of to_dict() a store derives instead of keeping in the header: the outputs
# are rows, step_index is their number, and step_info of an output rides with it.
_DERIVED = ("outputs", "step_index")
_FIELDS = tuple(field.name for field in dataclasses.fields(WorkflowCheckpoint))


class SqlCodec:
    """Encodes checkpoints into the SQL stores' rows and decodes them (``name`` in messages)."""

    def __init__(self, name: str) -> None:
        """Name the store in messages."""
        self.name = name

    def header(self, checkpoint: WorkflowCheckpoint) -> str:
        """Everything of ``to_dict()`` but the outputs and their step info, as JSON.

        Raises:
            CheckpointValueError: If part of it cannot be written as JSON.
        """
        # The info of steps without an output (progress, skipped, items, questions) rides
        # in the header; that of recorded steps rides with their outputs.
        info = checkpoint.step_info
        others = {name: info[name] for name in unfinished(checkpoint)}
        try:
            # A copy without outputs, built unchecked: every field of it comes from
            # ``checkpoint``, validated already, so that a save costs O(1), not O(outputs).
            fields: dict[str, Any] = {
                "outputs": {},
                "step_index": 0,
                "step_info": others,
                "new_outputs": (),
                "items": header_items(checkpoint),  # the items are rows
                "new_items": {},
                "ledger": (),  # the ledger too: the header holds their number
                "new_ledger": (),
                "attempts": (),  # and the attempts
                "new_attempts": (),
            }
            for name in _FIELDS:
                if name not in fields:
                    fields[name] = getattr(checkpoint, name)
            data = trusted_checkpoint(fields).to_dict()
            for key in _DERIVED:
                del data[key]
            data["items"] = slim_header_items(data["items"])
            if "ledger" in data:
                data["ledger"] = ledger_length(checkpoint)
            if "attempts" in data:
                data["attempts"] = attempts_length(checkpoint)
            text = dumps(data)
            text.encode("utf-8")  # a lone surrogate must fail here, not in the driver
        except (TypeError, ValueError, RecursionError) as exc:
            raise unstorable(checkpoint, self.name, exc) from exc
        return text

    def value(self, checkpoint: WorkflowCheckpoint, name: str) -> str:
        """One output and its step info as JSON: ``[output, info or null]``."""
        info = checkpoint.step_info.get(name)
        packed = None if info is None else info_dict(info)
        try:
            text = dumps([checkpoint.outputs[name], packed])
            text.encode("utf-8")
        except (TypeError, ValueError, RecursionError) as exc:
            raise unstorable(checkpoint, self.name, exc) from exc
        return text

    def decoder(self, run_id: str) -> Callable[[str, object], object]:
        """Decode a stored JSON text of ``run_id``: ``decode(what, text)``."""
        return lambda what, data: self.json(run_id, what, data)

    def header_row(self, run_id: str, seq: int, row: Sequence[object] | None) -> dict[str, Any]:
        """The header of checkpoint ``seq`` from its row, fetched (None if it has none)."""
        if row is None:
            msg = f"{self.name}, run {run_id!r}: the header row of checkpoint seq={seq} is missing"
            raise CheckpointFormatError(msg)
        return self.parse_header(run_id, row[0])

    def parse_header(self, run_id: str, data: object) -> dict[str, Any]:
        """A stored header text, decoded; `CheckpointFormatError` unless a JSON object."""
        parsed = self.json(run_id, "checkpoint", data)
        if not isinstance(parsed, dict):
            msg = (
                f"{self.name}, run {run_id!r}: the stored checkpoint must be a JSON object, "
                f"got {type(parsed).__name__} {reprlib.repr(parsed)}"
            )
            raise CheckpointFormatError(msg)
        return parsed

    def entry(self, run_id: str, raw_name: object, value: object) -> tuple[str, Any, Any]:
        """An output row, decoded: the step name, its output and its step info (or None)."""
        name = self.stored_text("step name", raw_name)
        entry = self.json(run_id, f"output of step {name!r}", value)
        if not (isinstance(entry, list) and len(entry) == 2):  # noqa: PLR2004
            msg = (
                f"{self.name}, run {run_id!r}: the stored output of step {name!r} must be a "
                f"JSON list [output, step info], got {reprlib.repr(entry)}"
            )
            raise CheckpointFormatError(msg)
        return name, entry[0], entry[1]

    def rebuild(
        self, run_id: str, header: Mapping[str, Any], entries: Sequence[tuple[str, Any, Any]]
    ) -> WorkflowCheckpoint:
        """The checkpoint of ``header`` and the decoded output ``entries``, validated whole."""
        where = f"{self.name}, run {run_id!r}"
        outputs = {name: output for name, output, _ in entries}
        infos = {name: info for name, _, info in entries if info is not None}
        data = dict(header)
        data["outputs"] = outputs
        data["step_index"] = len(outputs)
        if infos and isinstance(data.get("step_info"), dict):
            data["step_info"] = {**infos, **data["step_info"]}
        return rebuilt(data, where)

    def json(self, run_id: str, what: str, data: object) -> object:
        """A stored JSON text (``what`` of ``run_id``, for messages), decoded."""
        where = f"{self.name}, run {run_id!r}: the stored {what}"
        if isinstance(data, bytes):  # a BLOB, or text that is not UTF-8
            try:
                data = data.decode("utf-8")
            except UnicodeDecodeError as exc:
                msg = f"{where} is not UTF-8 text ({exc.reason} at byte {exc.start})"
                raise CheckpointFormatError(msg) from None
        if not isinstance(data, str):
            msg = f"{where} is not JSON text, got {type(data).__name__} {reprlib.repr(data)}"
            raise CheckpointFormatError(msg)
        try:
            return loads(data)
        except json.JSONDecodeError as exc:
            raise CheckpointFormatError(f"{where} is not valid JSON ({exc})") from None
        except ValueError as exc:
            raise CheckpointFormatError(f"{where} is unreadable JSON ({exc})") from None

    def stored_text(self, what: str, value: object) -> str:
        """``value`` read from the database, which must be text."""
        if not isinstance(value, str):
            msg = f"{self.name}: a stored {what} is not text: {reprlib.repr(value)}"
            raise CheckpointFormatError(msg)
        return value

    def stored_int(self, run_id: str, what: str, value: object) -> int:
        """``value`` read from the database, which must be an int (not a bool)."""
        if type(value) is not int:
            msg = (
                f"{self.name}, run {run_id!r}: the stored {what} must be an int, got "
                f"{type(value).__name__} {reprlib.repr(value)}"
            )
            raise CheckpointFormatError(msg)
        return value
