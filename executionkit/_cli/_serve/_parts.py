"""Live updates that send what changed: a page's main cut into parts, and the renders seen.

A page that follows a run polls its main part every half second. Sending the
whole of it each time costs a 1,000-step run's page 600 kB a poll; here the
server sends only the parts that changed since the render the page shows.

A *part* is an element of the main whose opening tag carries
``data-part="KEY"``: a step's row, a node of the graph, a row of the
timeline, the run's summary. `split` cuts the outermost parts out of the
main, leaving its *skeleton* (the rest, with a marker per part). `Renders`
keeps, for the last renders of every page, a digest of the skeleton and of
each part, by *version* (a digest of the whole main): asked what changed
since a version, it answers the parts whose digest differs, or the whole
main when the skeleton changed (a part came or went, a heading changed) or
the version is unknown (evicted, or the server restarted). The page's
script swaps the parts it gets in place (`serve.js`).

The main is the server's own markup (`_markup`): every name and text in it
is escaped, so a tag's ``>`` and an attribute's ``"`` never appear inside a
value, and a plain scan for tags is exact.
"""

from __future__ import annotations

import hashlib
import re
import threading
from collections import OrderedDict
from html import unescape
from typing import Any

__all__ = ["Renders", "split"]

_OPENING = re.compile(r'<([a-z][a-z0-9]*)\b[^>]*?\sdata-part="([^"]*)"[^>]*>')
_TAGS: dict[str, re.Pattern[str]] = {}
_KEEP = 256


def _tag(name: str) -> re.Pattern[str]:
    """Opening and closing tags of elements named ``name`` (not self-closed ones)."""
    pattern = _TAGS.get(name)
    if pattern is None:
        pattern = _TAGS[name] = re.compile(rf"<(/?){name}\b[^>]*?(/?)>")
    return pattern


def _end(text: str, start: int, name: str) -> int | None:
    """Where the element named ``name`` opened just before ``start`` ends, or None."""
    depth = 1
    for found in _tag(name).finditer(text, start):
        if found.group(1):
            depth -= 1
            if depth == 0:
                return found.end()
        elif not found.group(2):
            depth += 1
    return None


def split(main: str) -> tuple[str, dict[str, str]] | None:
    """The skeleton of ``main`` and its outermost parts by key, or None if it has none usable.

    None also when a part is not closed or a key appears twice: the page is
    then sent whole, as before parts existed.
    """
    parts: dict[str, str] = {}
    pieces: list[str] = []
    at = 0
    while True:
        found = _OPENING.search(main, at)
        if found is None:
            break
        end = _end(main, found.end(), found.group(1))
        key = unescape(found.group(2))
        if end is None or key in parts:
            return None
        pieces += (main[at : found.start()], "\x00", found.group(2), "\x00")
        parts[key] = main[found.start() : end]
        at = end
    if not parts:
        return None
    pieces.append(main[at:])
    return "".join(pieces), parts


def _digest(text: str) -> bytes:
    return hashlib.blake2b(text.encode("utf-8", "surrogatepass"), digest_size=12).digest()


def version_of(main: str) -> str:
    """The version of a render: a digest of its whole main, as text."""
    return _digest(main).hex()


class Renders:
    """The renders pages showed lately, to tell each page what changed since its own.

    Shared by the server's threads (a lock guards it); it keeps the last 256
    renders, each a digest of its skeleton and one per part (12 bytes each):
    a few megabytes at most for pages of 1,000 steps.
    """

    def __init__(self, keep: int = _KEEP) -> None:
        """Keep the digests of the last ``keep`` renders."""
        self._keep = keep
        self._lock = threading.Lock()
        self._seen: OrderedDict[str, _Marks | None] = OrderedDict()

    def remember(self, main: str) -> str:
        """Note a render a page is about to show; return its version."""
        version = version_of(main)
        with self._lock:
            known = version in self._seen
        if known:
            self._touch(version)
        else:
            self._keep_marks(version, _marks(split(main)))
        return version

    def since(self, main: str, known: str | None) -> dict[str, Any]:
        """What a page showing version ``known`` needs to show ``main``.

        ``{"v": version}`` alone when nothing changed, with ``"parts"`` (key to
        the part's markup) when only parts changed, else with ``"html"``, the
        whole main.
        """
        version = version_of(main)
        if known == version:
            self._touch(version)
            return {"v": version}
        cut = split(main)
        now = _marks(cut)
        self._keep_marks(version, now)
        with self._lock:
            before = self._seen.get(known) if known else None
        if cut is None or now is None or before is None or before[0] != now[0]:
            return {"v": version, "html": main}
        parts = cut[1]
        old = before[1]
        return {
            "v": version,
            "parts": {key: parts[key] for key, mark in now[1].items() if old.get(key) != mark},
        }

    def _touch(self, version: str) -> None:
        with self._lock:
            if version in self._seen:
                self._seen.move_to_end(version)

    def _keep_marks(self, version: str, marks: _Marks | None) -> None:
        with self._lock:
            self._seen[version] = marks
            self._seen.move_to_end(version)
            while len(self._seen) > self._keep:
                self._seen.popitem(last=False)


_Marks = tuple[bytes, dict[str, bytes]]


def _marks(cut: tuple[str, dict[str, str]] | None) -> _Marks | None:
    """The digests of a split main: its skeleton's, and each part's by key."""
    if cut is None:
        return None
    skeleton, parts = cut
    return _digest(skeleton), {key: _digest(part) for key, part in parts.items()}
