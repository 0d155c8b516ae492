"""Questions of ask steps (`Step.ask`): the answers given to ``run``, the questions shown.

``run`` reads ``--answers-json`` and each ``--answer`` over it; ``run`` and
``inspect`` show the questions a checkpoint holds, with when they were asked and
until when they may be answered.
"""

from __future__ import annotations

import json
from datetime import datetime
from typing import TYPE_CHECKING, Any

from executionkit._cli._exits import CliError
from executionkit._cli._load import parse_json, read_json_object
from executionkit._paths import split_path
from executionkit._terminal import json_text, one_line, show

if TYPE_CHECKING:
    import argparse
    from collections.abc import Collection, Mapping

QUESTION_WIDTH = 72
"""Longest question shown as JSON on one line; a longer one is indented over several."""


class GivenAnswers:
    """The answers given on the command line, and which flag gave each."""

    def __init__(self, args: argparse.Namespace) -> None:
        """Read ``--answers-json``, then each ``--answer`` over it.

        Raises:
            CliError: For a file that is not a JSON object of answers, an ``--answer``
                that is not ``NAME=VALUE`` or names a step twice, or a value that is
                strict JSON no checkpoint could hold.
        """
        self.values: dict[str, Any] = {}
        self.sources: dict[str, str] = {}
        self._file: dict[str, Any] = {}
        self._file_source = f"--answers-json {args.answers_json}"
        if args.answers_json is not None:
            self._file = read_json_object(
                "--answers-json", args.answers_json, "step names to answers"
            )
        self._items: list[str] = list(args.answer)
        self.resolve(())

    def resolve(self, waiting: Collection[str]) -> None:
        """Read each ``--answer NAME=VALUE`` again, knowing the questions ``waiting``.

        A name may hold ``=``: the longest name before an ``=`` that is a question
        waiting is the one answered (``--answer 'a=b=yes'`` answers ``a=b`` when it
        waits); otherwise the name ends at the first ``=``.
        """
        self.values = dict(self._file)
        self.sources = dict.fromkeys(self._file, self._file_source)
        named: set[str] = set()
        for item in self._items:
            name, text = _split_answer(item, waiting)
            if name in named:
                msg = f"--answer {name!r} is given twice"
                raise CliError(msg)
            named.add(name)
            self.values[name] = flag_value("--answer", name, text)
            self.sources[name] = f"--answer {show(name)}"

    def __bool__(self) -> bool:
        """Whether any answer was given."""
        return bool(self.values)

    def refused(self, error: BaseException) -> str | None:
        """The flag whose answer a step's ``check`` refused with ``error``, if it was that."""
        notes = getattr(error, "__notes__", ())
        for path, source in self.sources.items():
            try:
                segments = split_path(path)
            except ValueError:  # refused before any check ran
                continue
            step = segments[0]  # an ask step of the run itself: its path has one segment
            if (
                len(segments) == 1
                and f"executionkit: check of step {step!r} refused the answer" in notes
            ):
                return source
        return None


def _split_answer(item: str, waiting: Collection[str]) -> tuple[str, str]:
    """``NAME=VALUE`` split at the ``=`` that ends the longest waiting name, else the first."""
    ends = [index for index, char in enumerate(item) if char == "="]
    known = [end for end in ends if item[:end] in waiting]
    if known:
        return item[: known[-1]], item[known[-1] + 1 :]
    if not ends or ends[0] == 0:
        msg = f"--answer {item!r} is not NAME=VALUE"
        raise CliError(msg)
    return item[: ends[0]], item[ends[0] + 1 :]


_GIVE = {"--answer": "answer with"}


def flag_value(flag: str, name: str, text: str) -> object:
    """``text`` of ``flag NAME=TEXT`` read as JSON; any text that is not JSON is the string itself.

    Raises:
        CliError: For strict JSON no checkpoint could hold (``NaN``, an integer too
            long, a lone surrogate), or text that is not Unicode.
    """
    try:
        value = parse_json(text)
    except json.JSONDecodeError:
        value = text
    except ValueError as exc:  # NaN, an integer too long, a lone surrogate: JSON, not plain
        msg = (
            f"{flag} {show(name)}: {exc}; to {_GIVE.get(flag, 'give')} the text itself, quote it "
            f"as a JSON string"
        )
        raise CliError(msg) from None
    if isinstance(value, str):
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:  # bytes that are not UTF-8, in the shell's argument
            msg = f"{flag} {show(name)}: the value is not Unicode text"
            raise CliError(msg) from None
    return value


def question_lines(question: object) -> list[str]:
    """The question as a person reads it, in lines that are safe on a terminal.

    A text question is shown as its own lines. Other data is JSON, pretty but
    compact: each list or object that fits in `QUESTION_WIDTH` characters stays on
    one line, a longer one has an item a line, indented by two spaces.
    """
    if isinstance(question, str) and question.strip():
        return [one_line(line) for line in question.splitlines()]
    try:
        return _pretty(question, "", "")
    except RecursionError:  # nested deeper than Python recurses: one line, as far as it goes
        return [one_line(json_text(question))]


def _pretty(value: object, indent: str, label: str) -> list[str]:
    """``label`` then ``value`` as JSON at ``indent``, on one line if it fits there."""
    compact = one_line(json_text(value))
    if len(indent) + len(label) + len(compact) <= QUESTION_WIDTH or not value:
        return [f"{indent}{label}{compact}"]
    inner = f"{indent}  "
    if isinstance(value, dict):
        entries = [
            _pretty(item, inner, f"{one_line(json_text(key))}: ") for key, item in value.items()
        ]
        brackets = "{}"
    elif isinstance(value, list):
        entries = [_pretty(item, inner, "") for item in value]
        brackets = "[]"
    else:  # a long string or number: it stays on its line
        return [f"{indent}{label}{compact}"]
    lines = [f"{indent}{label}{brackets[0]}"]
    for number, entry in enumerate(entries):
        if number < len(entries) - 1:
            entry[-1] += ","
        lines.extend(entry)
    lines.append(f"{indent}{brackets[1]}")
    return lines


def asked_text(entry: Mapping[str, Any], *, past_deadline: bool) -> str:
    """``asked 2026-12-01T10:00:01+00:00, expires 2026-12-02T10:00:01+00:00``.

    ``expired`` instead of ``expires`` once the deadline has passed, and ``never
    expires`` without one.
    """
    text = f"asked {one_line(entry['asked_at'])}"
    deadline = entry["expires_at"]
    if deadline is None:
        return f"{text}, never expires"
    return f"{text}, {'expired' if past_deadline else 'expires'} {one_line(deadline)}"


def expired(entry: Mapping[str, Any], now: datetime) -> bool:
    """Whether the question's deadline (a checked ISO 8601 time with an offset) is past."""
    deadline = entry["expires_at"]
    return deadline is not None and now > datetime.fromisoformat(deadline)


def question_block(name: str, entry: Mapping[str, Any], *, past_deadline: bool) -> list[str]:
    """``name (asked ..., expires ...)``, then the question, indented by two spaces."""
    lines = [f"{show(name)} ({asked_text(entry, past_deadline=past_deadline)})"]
    lines.extend(f"  {line}" for line in question_lines(entry["question"]))
    return lines


def pending_lines(pending: Mapping[str, Mapping[str, Any]], now: datetime) -> list[str]:
    """`question_block` of each question in ``pending``, expired as of ``now`` or not."""
    lines: list[str] = []
    for name, entry in pending.items():
        lines.extend(question_block(name, entry, past_deadline=expired(entry, now)))
    return lines


def now() -> datetime:
    """The time questions are said to have expired at: the library's own clock."""
    from executionkit._define._questions import utc_now  # noqa: PLC0415

    return utc_now()
