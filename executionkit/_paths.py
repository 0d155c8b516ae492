"""Paths into nested runs: ``step/item/step`` with each segment escaped; a child's run id.

A question, a re-run or an override deep in sub-workflows and map items is named
by a path of segments joined with ``/``. Step names and item keys may hold ``/``
themselves, so each segment is escaped first. A leaf: the shape, the record,
progress, the command line and the page all read and write these paths.
"""

from __future__ import annotations

import re

_ESCAPES = re.compile(r"%(25|2F)?")


def join_path(*segments: str) -> str:
    """The path of a question: each segment escaped, then joined with ``/``.

    ``%`` is written ``%25`` and ``/`` is written ``%2F``; a segment without
    either is unchanged. ``join_path("a/b")`` is ``"a%2Fb"``, ``join_path("a",
    "b")`` is ``"a/b"``.
    """
    return "/".join(segment.replace("%", "%25").replace("/", "%2F") for segment in segments)


def split_path(path: str) -> list[str]:
    """The unescaped segments of ``path``: `join_path` undone.

    Raises:
        ValueError: If ``path`` has a ``%`` that is not ``%25`` or ``%2F``, so that
            `join_path` never makes it.
    """

    def unescaped(found: re.Match[str]) -> str:
        if found[1] is None:
            msg = f"{path!r} is not a question path: write '%' as '%25' and '/' as '%2F'"
            raise ValueError(msg)
        return "%" if found[1] == "25" else "/"

    return [_ESCAPES.sub(unescaped, segment) for segment in path.split("/")]


def new_run_id() -> str:
    """A fresh run's id: 32 random hex digits (a run, a fork, a submitted run)."""
    import os  # noqa: PLC0415 - tiny, and only new runs need it

    return os.urandom(16).hex()


def child_run_id(parent: str, step: str, key: str | None) -> str:
    """The run_id of a child: the parent's, ``/``, then the step name and item key.

    The step name and key are escaped and joined as in a question path
    (`join_path`), so no two children of a run share a run_id.
    """
    return f"{parent}/{join_path(step) if key is None else join_path(step, key)}"
