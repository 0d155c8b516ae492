"""Reading the fields of a checkpoint: every check of the format, each naming its field.

`WorkflowCheckpoint.__post_init__` and `from_dict` call these; nothing else
validates a checkpoint. A reader returns the field's value in the form the
checkpoint keeps, or raises `CheckpointFormatError` with the field's path.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, NoReturn, TypeVar

from executionkit._checkpoint._step_info import StepInfo
from executionkit._errors import CheckpointFormatError, preview, safe_str
from executionkit._types import TokenUsage

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable

FORMAT_VERSION = 5
"""The checkpoint format version this library writes (and the newest it reads).

Version 1 (written by executionkit 0.1.0) lacks ``progress`` and ``step_info``;
version 2 adds both; version 3 adds ``skipped``, ``items``, ``pending`` and
``children`` (conditions, maps, questions and sub-workflows) and a ``kind`` in
``step_info`` for steps that are not plain steps; version 4 adds ``ledger`` and
``in_flight`` (the cost of every attempt), ``trace`` and ``lineage``; version 5
adds ``attempts`` (when each attempt ran), ``waits`` (durable timers),
``in_flight_items`` (how many items of each running map may be spending),
``code`` and ``answered_by`` in ``step_info`` entries and the ledger outcome
``"rate_limited"`` (decision 0016).
"""

LEGACY_VERSION = 0
"""The implicit version of ExecutionKit 0.4 dicts, which carry no ``version`` key."""

LEGACY_KEYS = frozenset({"step_index", "outputs", "cost"})
_V1_KEYS = frozenset(
    {
        "version",
        "run_id",
        "seq",
        "step_index",
        "created_at",
        "outputs",
        "cost",
        "context_keys",
        "errors",
        "metadata",
    }
)
_V2_KEYS = _V1_KEYS | {"progress", "step_info"}
KEYS_BY_VERSION = {
    1: _V1_KEYS,
    2: _V2_KEYS,
    3: _V2_KEYS | {"skipped", "items", "pending", "children"},
    4: _V2_KEYS
    | {"skipped", "items", "pending", "children", "ledger", "in_flight", "trace", "lineage"},
}
KEYS_BY_VERSION[5] = KEYS_BY_VERSION[4] | {"attempts", "waits", "in_flight_items"}
STEP_INFO_KEYS = frozenset({"version", "depends_on"})
STEP_KINDS = ("step", "map", "ask", "workflow")
"""What a step is, as ``step_info`` records it (format 3; absent means ``"step"``)."""
COST_KEYS = ("input_tokens", "output_tokens", "llm_calls")


class DefaultVersion(int):
    """The type of the ``version`` a checkpoint gets when the caller passes none.

    Equal to `FORMAT_VERSION` in every way; its distinct type lets `__post_init__`
    tell a call without ``version`` (an ExecutionKit 0.4 call passes only the
    first three fields) from an explicit ``version=2``.
    """

    __slots__ = ()


VERSION_NOT_GIVEN = DefaultVersion(FORMAT_VERSION)


_KINDS_TEXT = " or ".join(map(repr, STEP_KINDS))
_T = TypeVar("_T")


def guard(path: str, read: Callable[[], _T]) -> _T:
    """Return ``read()``; report anything it raises as a `CheckpointFormatError` at ``path``.

    Validation runs code of the caller's objects (``__hash__``, ``__eq__``, a
    mapping's ``items``) and may meet nesting deeper than Python recurses; the
    documented promise is that nothing but `CheckpointFormatError` comes out.
    """
    try:
        return read()
    except (CheckpointFormatError, MemoryError):
        raise
    except Exception as exc:
        what = f"checkpoint field {path!r}" if path else "checkpoint data"
        if isinstance(exc, RecursionError):
            msg = f"{what} is nested too deeply to read (RecursionError)"
        else:
            detail = safe_str(exc)
            reason = f"{type(exc).__name__}: {detail}" if detail else type(exc).__name__
            msg = f"{what} could not be read: reading it raised {reason}"
        raise CheckpointFormatError(msg, path=path) from exc


def int_text(value: int) -> str:
    # Python refuses to print ints past 4,300 digits; describe those instead of failing.
    if value.bit_length() > 4096:  # noqa: PLR2004 - comfortably under the digit limit
        return f"an int of {value.bit_length()} bits"
    return str(value)


def describe(value: object) -> str:
    if isinstance(value, int) and not isinstance(value, bool):
        return f"int {int_text(value)}"
    return f"{type(value).__name__} {preview(value)}"


def newer_version(version: int) -> CheckpointFormatError:
    msg = (
        f"checkpoint format version {int_text(version)} is newer than this executionkit "
        f"reads (up to {FORMAT_VERSION}); upgrade executionkit to load it"
    )
    return CheckpointFormatError(msg, path="version")


def fail(path: str, expected: str, value: object) -> NoReturn:
    msg = f"checkpoint field {path!r} must be {expected}, got {describe(value)}"
    raise CheckpointFormatError(msg, path=path)


def check_keys(data: Mapping[str, Any], expected: frozenset[str], *, where: str) -> None:
    for key in sorted(expected):
        if key not in data:
            path = f"{where}{key}"
            msg = f"checkpoint field {path!r} is missing"
            raise CheckpointFormatError(msg, path=path)
    for key in data:
        if key not in expected:
            path = f"{where}{key}"
            msg = f"checkpoint has unexpected field {path!r}"
            raise CheckpointFormatError(msg, path=path)


_STR_ONLY = frozenset({str})


MAX_COUNT = 2**63 - 1
"""The largest count a checkpoint holds: what a database's BIGINT stores, and far past use."""


def read_count(value: object, path: str) -> int:
    if type(value) is not int or value < 0:
        fail(path, "a non-negative int", value)
    if value > MAX_COUNT:
        fail(path, "an int below 2**63", value)
    return value


def read_version(value: object) -> int:
    if value is VERSION_NOT_GIVEN:
        return FORMAT_VERSION
    version = read_count(value, "version")
    if version > FORMAT_VERSION:
        raise newer_version(version)
    return version


def read_outputs(value: object) -> dict[str, Any]:
    outputs = read_dict(value, "outputs")
    if "" in outputs:
        msg = "checkpoint field 'outputs' must have non-empty step names as keys, got ''"
        raise CheckpointFormatError(msg, path="outputs")
    return outputs


def read_token_usage(value: object) -> None:
    if not isinstance(value, TokenUsage):
        fail("cost", "a TokenUsage", value)
    for name in COST_KEYS:
        read_count(getattr(value, name), f"cost.{name}")


def read_run_id(value: object) -> str | None:
    if value is not None and (not isinstance(value, str) or not value):
        fail("run_id", "a non-empty str or None", value)
    return value


def read_errors(value: object) -> dict[str, str]:
    errors = read_dict(value, "errors")
    for name, text in errors.items():
        if not isinstance(text, str):
            fail(f"errors.{name}", "a str", text)
    return errors


def read_new_outputs(value: object, outputs: Mapping[str, Any]) -> None:
    # isinstance first: an unhashable item cannot be looked up in outputs.
    if not isinstance(value, tuple) or not all(
        isinstance(name, str) and name in outputs for name in value
    ):
        fail("new_outputs", "a tuple of recorded step names", value)


def read_dict(value: object, path: str) -> dict[str, Any]:
    if type(value) is dict and _STR_ONLY.issuperset(map(type, value)):  # all keys exactly str
        return value.copy()
    if not isinstance(value, Mapping):
        fail(path, "a dict", value)
    result: dict[str, Any] = {}
    for key, item in value.items():
        if not isinstance(key, str):
            msg = f"checkpoint field {path!r} must have str keys, got key {describe(key)}"
            raise CheckpointFormatError(msg, path=path)
        result[key] = item
    return result


def read_cost(value: object) -> TokenUsage:
    cost = read_dict(value, "cost")
    check_keys(cost, frozenset(COST_KEYS), where="cost.")
    return TokenUsage(*(read_count(cost[key], f"cost.{key}") for key in COST_KEYS))


def read_timestamp(value: object) -> str | None:
    if value is None:
        return None
    if isinstance(value, str):
        try:
            datetime.fromisoformat(value)
        except ValueError:
            pass
        else:
            return value
    fail("created_at", "an ISO-8601 timestamp str or None", value)


def read_progress(
    value: object, version: int, outputs: Mapping[str, Any]
) -> MappingProxyType[str, Any]:
    progress = read_dict(value, "progress")
    if progress and version < 2:  # noqa: PLR2004 - the version that introduced it
        msg = f"checkpoint field 'progress' needs format version 2, got version {version}"
        raise CheckpointFormatError(msg, path="progress")
    done = [name for name in progress if name in outputs]
    if done:
        msg = (
            f"checkpoint field 'progress' names completed steps {done!r}; progress is "
            f"dropped when a step completes"
        )
        raise CheckpointFormatError(msg, path="progress")
    return MappingProxyType(progress)


def read_step_info(
    raw: dict[str, Any],
    version: int,
    outputs: Mapping[str, Any],
    progress: Mapping[str, Any],
    others: Iterable[str] = (),
) -> MappingProxyType[str, Mapping[str, Any]]:
    """Check ``step_info``, already read with `read_dict`, and freeze it."""
    if raw and version < 2:  # noqa: PLR2004 - the version that introduced it
        msg = f"checkpoint field 'step_info' needs format version 2, got version {version}"
        raise CheckpointFormatError(msg, path="step_info")
    # Without copying either side: a checkpoint of 100,000 outputs describes 100,000 steps.
    missing = sorted(name for name in outputs if name not in raw)
    described = set(others)
    extra = sorted(
        name
        for name in raw
        if name not in outputs and name not in progress and name not in described
    )
    if raw and (missing or extra):
        msg = (
            f"checkpoint field 'step_info' must describe the recorded steps and the steps "
            f"with progress, skipped, items, pending questions, waits or children; missing "
            f"{missing!r}, none of those {extra!r}"
        )
        raise CheckpointFormatError(msg, path="step_info")
    info: dict[str, Mapping[str, Any]] = {}
    fingerprints = version >= 5  # noqa: PLR2004 - the format that added code
    codes: set[str] = set()  # those checked: steps mostly share a few functions
    for name, entry in raw.items():
        size = len(entry) if type(entry) is dict else 0
        if (
            # The commonest: a plain step's two fields, and format 5's fingerprint.
            (size == 2 or (size == 3 and fingerprints and _known_code(entry.get("code"), codes)))  # noqa: PLR2004
            and "version" in entry
            and "depends_on" in entry
        ):
            kind = "step"
            more: tuple[tuple[str, str], ...] = () if size == 2 else (("code", entry["code"]),)  # noqa: PLR2004
            step_version = entry["version"]
            deps = entry["depends_on"]
        else:
            fields = read_dict(entry, f"step_info.{name}")
            kind = fields.pop("kind", "step")
            more = _read_later_info(fields, name, kind, version)
            check_keys(fields, STEP_INFO_KEYS, where=f"step_info.{name}.")
            if kind != "step" and (version < 3 or kind not in STEP_KINDS):  # noqa: PLR2004
                expected = "absent (format 2 has no kinds)" if version < 3 else _KINDS_TEXT  # noqa: PLR2004
                fail(f"step_info.{name}.kind", expected, kind)
            step_version = fields["version"]
            deps = fields["depends_on"]
        if step_version is not None and (type(step_version) is not str or not step_version):
            fail(f"step_info.{name}.version", "a non-empty str or None", step_version)
        if not isinstance(deps, (list, tuple)) or not (
            _STR_ONLY.issuperset(map(type, deps)) and all(deps)
        ):
            fail(f"step_info.{name}.depends_on", "a list of step names", deps)
        info[name] = StepInfo(step_version, tuple(deps), None if kind == "step" else kind, more)
    return MappingProxyType(info)


_HEX = frozenset("0123456789abcdef")


def _known_code(code: object, checked: set[str]) -> bool:
    """`_is_code`, remembering the fingerprints ``checked`` already."""
    if type(code) is str and code in checked:  # a list or dict would not hash
        return True
    if _is_code(code):
        checked.add(code)  # type: ignore[arg-type]  # a str: _is_code says so
        return True
    return False


def _is_code(code: object) -> bool:
    """Whether ``code`` is a fingerprint as ``step_info.<step>.code`` holds one."""
    return type(code) is str and 8 <= len(code) <= 64 and _HEX.issuperset(code)  # noqa: PLR2004


ANSWERED_BY = ("deadline",)
"""What ``step_info.<step>.answered_by`` may say (format 5): who answered an ask step."""


def _read_later_info(
    fields: dict[str, Any], name: str, kind: str, version: int
) -> tuple[tuple[str, str], ...]:
    """Take format 5's optional keys of a ``step_info`` entry out of ``fields``; check them."""
    more: list[tuple[str, str]] = []
    code = fields.pop("code", None)
    if code is not None:
        path = f"step_info.{name}.code"
        needs_version(path, code, version, 5)
        if not _is_code(code):
            fail(path, "a fingerprint (8 to 64 lowercase hex digits)", code)
        more.append(("code", code))
    answered_by = fields.pop("answered_by", None)
    if answered_by is not None:
        path = f"step_info.{name}.answered_by"
        needs_version(path, answered_by, version, 5)
        if answered_by not in ANSWERED_BY or type(answered_by) is not str:
            fail(path, " or ".join(map(repr, ANSWERED_BY)), answered_by)
        if kind != "ask":
            msg = (
                f"checkpoint field {path!r} says who answered step {name!r}, which is "
                f"a {kind!r} step: only an ask step is answered"
            )
            raise CheckpointFormatError(msg, path=path)
        more.append(("answered_by", answered_by))
    return tuple(more)


def read_context_keys(value: object) -> tuple[str, ...]:
    if not isinstance(value, (list, tuple)):
        fail("context_keys", "a list of str", value)
    for position, key in enumerate(value):
        if not isinstance(key, str):
            fail(f"context_keys[{position}]", "a str", key)
    if len(set(value)) != len(value):
        fail("context_keys", "a list of distinct str", value)
    return tuple(value)


def usage_dict(usage: TokenUsage) -> dict[str, int]:
    """A `TokenUsage` as the dict the format writes."""
    return {
        "input_tokens": usage.input_tokens,
        "output_tokens": usage.output_tokens,
        "llm_calls": usage.llm_calls,
    }


def info_dict(info: Mapping[str, Any]) -> dict[str, Any]:
    """A ``step_info`` entry as the dict the format writes (``kind`` only when not a step)."""
    entry = {"version": info["version"], "depends_on": list(info["depends_on"])}
    if len(info) > 2:  # noqa: PLR2004 - version and depends_on
        for key in ("kind", "code", "answered_by"):
            if key in info:
                entry[key] = info[key]
    return entry


def needs_version_4(path: str, value: object, version: int) -> None:
    """Raise for a format 4 field given (non-empty) in a checkpoint of an older version."""
    needs_version(path, value, version, 4)


def needs_version(path: str, value: object, version: int, introduced: int) -> None:
    """Raise for a field (or value) given in a checkpoint older than the version introducing it."""
    if value and version < introduced:
        msg = f"checkpoint field {path!r} needs format version {introduced}, got version {version}"
        raise CheckpointFormatError(msg, path=path)


def optional_str(value: object, path: str) -> str | None:
    """``value`` if it is a non-empty str or None; else raise naming ``path``."""
    if value is not None and (type(value) is not str or not value):
        fail(path, "a non-empty str or None", value)
    return value
