"""The items of unfinished maps in the SQL stores: one row per item, written as it is recorded.

A checkpoint's header lists each map of its ``items`` with the map's cost only
(``{"cost": {...}}``); every finished item is a row of ``executionkit_items``
with the ``seq`` that recorded it (``added``) and, once a later checkpoint no
longer holds it (the map finished, or a resume dropped or replaced it), the
``seq`` from which it no longer counts (``dropped``). The items of the
checkpoint at ``seq`` k are, for each map its header lists, the rows of that
map with ``added <= k`` and no ``dropped <= k``, in ``ord`` order. So a save
writes one row per item recorded since the previous checkpoint, and a map that
finishes costs one update of its rows, once.
"""

from __future__ import annotations

import reprlib
from typing import TYPE_CHECKING, Any

from executionkit._errors import CheckpointFormatError
from executionkit.stores._common import dumps
from executionkit.stores._unstorable import unstorable

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable, Mapping, Sequence

    from executionkit._checkpoint._value import WorkflowCheckpoint
    from executionkit.stores._sql_schema import Database


def item_tables(bigint: str) -> tuple[str, ...]:
    """The CREATE statements of the items table, with the integer type of the dialect."""
    return (
        f"""CREATE TABLE IF NOT EXISTS executionkit_items (
            run_id TEXT NOT NULL,
            ord {bigint} NOT NULL,
            step TEXT NOT NULL,
            item TEXT NOT NULL,
            added {bigint} NOT NULL,
            dropped {bigint},
            value TEXT NOT NULL,
            PRIMARY KEY (run_id, ord)
        )""",
    )


_LIVE = """SELECT ord, step, item, value FROM executionkit_items
    WHERE run_id = ? AND dropped IS NULL ORDER BY ord"""
_DROP = "UPDATE executionkit_items SET dropped = ? WHERE run_id = ? AND ord = ?"
DROP_MAP = """UPDATE executionkit_items SET dropped = ?
    WHERE run_id = ? AND dropped IS NULL AND step = ?"""
ADD_ITEM = """INSERT INTO executionkit_items (run_id, ord, step, item, added, dropped, value)
    VALUES (?, ?, ?, ?, ?, NULL, ?)"""
_AS_OF = """SELECT step, item, value FROM executionkit_items
    WHERE run_id = ? AND added <= ? AND (dropped IS NULL OR dropped > ?) ORDER BY ord"""
_ALL_ROWS = """SELECT step, item, value, added, dropped FROM executionkit_items
    WHERE run_id = ? ORDER BY ord"""
# Rows no kept checkpoint can see: dropped at or before the oldest kept seq.
FORGET_DROPPED_ITEMS = """DELETE FROM executionkit_items WHERE run_id = ? AND dropped IS NOT NULL
    AND dropped <= (SELECT MIN(seq) FROM executionkit_headers WHERE run_id = ?)"""

ItemRow = tuple[str, str, Any]
"""A decoded item row: the map step, the item key and its stored output."""


def header_items(checkpoint: WorkflowCheckpoint) -> dict[str, dict[str, Any]]:
    """The ``items`` of ``checkpoint`` as its header holds them: each map with no items.

    What `dataclasses.replace` needs to keep the maps' step info valid: the header
    then drops the empty ``outputs`` (see `slim_header_items`).
    """
    return {
        name: {"outputs": {}, "cost": entry["cost"]} for name, entry in checkpoint.items.items()
    }


def slim_header_items(items: Mapping[str, Mapping[str, Any]]) -> dict[str, dict[str, Any]]:
    """``to_dict()["items"]`` of a header: each map's cost, the items being rows."""
    return {name: {"cost": entry["cost"]} for name, entry in items.items()}


class ItemRows:
    """Writes and reads the item rows of one SQL store (``name`` starts its messages)."""

    def __init__(self, name: str) -> None:
        """Name the store in messages."""
        self.name = name

    # --- saving ---------------------------------------------------------------------

    @staticmethod
    def follow(checkpoint: WorkflowCheckpoint, maps: Mapping[str, int]) -> bool:
        """Whether ``new_items`` accounts for every item the stored rows lack.

        Asked only of the run's next checkpoint (see `SqlCheckpoints.save`):
        each map then holds its stored rows plus its new items, O(maps) to check.
        """
        new = checkpoint.new_items
        return all(
            len(entry["outputs"]) == maps.get(name, 0) + len(new.get(name, ()))
            for name, entry in checkpoint.items.items()
        )

    def save_next(
        self,
        db: Database,
        run_id: str,
        checkpoint: WorkflowCheckpoint,
        next_ord: int,
        maps: Mapping[str, int],
    ) -> tuple[dict[str, int], int]:
        """Write the new items of the run's next checkpoint; drop finished maps' rows.

        Returns the number of live rows of each map, and the next ``ord``.
        """
        seq = checkpoint.seq
        items = checkpoint.items
        new = checkpoint.new_items
        for name in maps:
            if name not in items:
                db.execute(DROP_MAP, (seq, run_id, name))
        counts: dict[str, int] = {}
        for name, entry in items.items():
            keys = new.get(name, ())
            rows = ((name, key, entry["outputs"][key]) for key in keys)
            next_ord = self._add(db, run_id, checkpoint, rows, next_ord)
            counts[name] = maps.get(name, 0) + len(keys)
        return counts, next_ord

    def save_differences(
        self,
        db: Database,
        run_id: str,
        checkpoint: WorkflowCheckpoint,
        next_ord: int,
    ) -> tuple[dict[str, int], int]:
        """Compare with the live rows: keep each map's longest equal start, replace the rest.

        O(items); taken when the checkpoint is not the run's next one after the
        stored one (a resumed run, one read back with ``from_dict``, the first
        save of a store object).
        """
        seq = checkpoint.seq
        live: dict[str, list[tuple[int, str, object]]] = {}
        for ord_, step, item, value in db.execute(_LIVE, (run_id,)).fetchall():
            live.setdefault(self._text("map step", step), []).append(
                (ord_, self._text("item key", item), value)
            )
        items = checkpoint.items
        counts: dict[str, int] = {}
        for name, rows in live.items():
            if name not in items:
                for ord_, _, _ in rows:
                    db.execute(_DROP, (seq, run_id, ord_))
        for name, entry in items.items():
            outputs = entry["outputs"]
            wanted = list(outputs)
            rows = live.get(name, [])
            kept = 0
            for (_, item, value), key in zip(rows, wanted, strict=False):
                if item != key or value != self.value(checkpoint, outputs[key]):
                    break
                kept += 1
            for ord_, _, _ in rows[kept:]:
                db.execute(_DROP, (seq, run_id, ord_))
            added = ((name, key, outputs[key]) for key in wanted[kept:])
            next_ord = self._add(db, run_id, checkpoint, added, next_ord)
            counts[name] = len(wanted)
        return counts, next_ord

    def _add(
        self,
        db: Database,
        run_id: str,
        checkpoint: WorkflowCheckpoint,
        rows: Iterable[ItemRow],
        next_ord: int,
    ) -> int:
        seq = checkpoint.seq
        for name, key, output in rows:
            value = self.value(checkpoint, output)
            db.execute(ADD_ITEM, (run_id, next_ord, name, key, seq, value))
            next_ord += 1
        return next_ord

    def value(self, checkpoint: WorkflowCheckpoint, output: object) -> str:
        """An item's output as JSON; `CheckpointValueError` if it cannot be written."""
        try:
            text = dumps(output)
            text.encode("utf-8")  # a lone surrogate must fail here, not in the driver
        except (TypeError, ValueError, RecursionError) as exc:
            raise unstorable(checkpoint, self.name, exc) from exc
        return text

    # --- reading --------------------------------------------------------------------

    def as_of(
        self, db: Database, run_id: str, seq: int, decode: Callable[[str, object], object]
    ) -> list[ItemRow]:
        """The item rows the checkpoint at ``seq`` holds, decoded, in ``ord`` order."""
        rows = db.execute(_AS_OF, (run_id, seq, seq)).fetchall()
        return [self._row(step, item, value, decode) for step, item, value in rows]

    def every(
        self, db: Database, run_id: str, decode: Callable[[str, object], object]
    ) -> list[tuple[ItemRow, object, object]]:
        """Every item row of ``run_id``, decoded, with its raw ``added`` and ``dropped``."""
        return [
            (self._row(step, item, value, decode), added, dropped)
            for step, item, value, added, dropped in db.execute(_ALL_ROWS, (run_id,)).fetchall()
        ]

    def _row(
        self,
        step: object,
        item: object,
        value: object,
        decode: Callable[[str, object], object],
    ) -> ItemRow:
        name = self._text("map step", step)
        key = self._text("item key", item)
        return name, key, decode(f"item {key!r} of map step {name!r}", value)

    def fill(self, run_id: str, header: dict[str, Any], rows: Sequence[ItemRow]) -> dict[str, Any]:
        """``header`` with each map's items taken from ``rows``, in ``to_dict()`` shape."""
        found: dict[str, dict[str, Any]] = {}
        for name, key, output in rows:
            found.setdefault(name, {})[key] = output
        listed = header.get("items")
        if not isinstance(listed, dict) or not all(
            isinstance(entry, dict) and "outputs" not in entry for entry in listed.values()
        ):
            return header  # not what a store writes: from_dict names what is wrong
        stray = [name for name in found if name not in listed]
        if stray:
            msg = (
                f"{self.name}, run {run_id!r}: the stored items of map step "
                f"{reprlib.repr(stray[0])} belong to no map the checkpoint lists"
            )
            raise CheckpointFormatError(msg)
        filled = dict(header)
        filled["items"] = {
            name: {"outputs": found.get(name, {}), **entry} for name, entry in listed.items()
        }
        return filled

    def _text(self, what: str, value: object) -> str:
        if not isinstance(value, str):
            msg = f"{self.name}: a stored {what} is not text: {reprlib.repr(value)}"
            raise CheckpointFormatError(msg)
        return value
