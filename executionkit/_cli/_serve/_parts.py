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

A *list* is an element whose opening tag carries ``data-list="KEY"`` and
whose content is elements only (the rows of the steps table, the graph's
edges and nodes, the timeline's rows), parts or not. Its children may come,
go or move without the whole main being sent: `Renders` keeps each list's
children in order (a part by its key, any other child by a digest of its
markup) and its opening tag, and answers the list's change as operations on
its children as the page shows them: keep ``n``, delete ``n``, insert this
markup (``difflib``'s matching blocks), with the attributes of its opening
tag when they changed (the graph growing taller). A page served without the
workflow gains a step's row, node and timeline row each time a step is
recorded: that is a few kilobytes, not the page again.

The main is the server's own markup (`_markup`): every name and text in it
is escaped, so a tag's ``>`` and an attribute's ``"`` never appear inside a
value, and a plain scan for tags is exact.
"""

from __future__ import annotations

import difflib
import hashlib
import re
import sys
import threading
from collections import OrderedDict
from dataclasses import dataclass
from html import unescape
from typing import Any

__all__ = ["Renders", "split"]

_OPENING = re.compile(r'<([a-z][a-z0-9]*)\b[^>]*?\sdata-part="([^"]*)"[^>]*>')
_LIST = re.compile(r'<([a-z][a-z0-9]*)\b[^>]*?\sdata-list="([^"]*)"[^>]*>')
# A list's next child in a skeleton: a part's marker, or an element's opening tag.
_CHILD = re.compile(r"\s*(?:\x00([^\x00]*)\x00|<([a-zA-Z][a-zA-Z0-9]*)\b[^>]*?(/?)>)")
_MARKER = re.compile("\x00([^\x00]*)\x00")  # a part's place in a skeleton
_ATTRIBUTE = re.compile(r'\s([a-zA-Z_:][-a-zA-Z0-9_:.]*)="([^"]*)"')
_TAGS: dict[str, re.Pattern[str]] = {}
_Element = tuple[re.Match[str], int, int]  # an opening tag's match; its closing tag's start, end
_KEEP = 256
_ID = 8  # bytes of a part's and a list child's digest
_KEY_SETS = 64  # part key tuples kept to share


def _tag(name: str) -> re.Pattern[str]:
    """Opening and closing tags of elements named ``name`` (not self-closed ones)."""
    pattern = _TAGS.get(name)
    if pattern is None:
        pattern = _TAGS[name] = re.compile(rf"<(/?){name}\b[^>]*?(/?)>")
    return pattern


def _closing(text: str, start: int, name: str) -> tuple[int, int] | None:
    """Where the closing tag of the element ``name`` opened just before ``start`` is, or None."""
    depth = 1
    for found in _tag(name).finditer(text, start):
        if found.group(1):
            depth -= 1
            if depth == 0:
                return found.start(), found.end()
        elif not found.group(2):
            depth += 1
    return None


def _end(text: str, start: int, name: str) -> int | None:
    """Where the element named ``name`` opened just before ``start`` ends, or None."""
    closing = _closing(text, start, name)
    return None if closing is None else closing[1]


def _outermost(text: str, opening: re.Pattern[str]) -> list[_Element] | None:
    """The outermost elements whose opening tag ``opening`` matches, in order.

    Each as the opening tag's match and where its closing tag starts and ends;
    None if one of them is not closed.
    """
    elements: list[_Element] = []
    at = 0
    while (found := opening.search(text, at)) is not None:
        closing = _closing(text, found.end(), found.group(1))
        if closing is None:
            return None
        elements.append((found, *closing))
        at = closing[1]
    return elements


def _marked(text: str, elements: list[_Element], marker: str) -> str:
    """``text`` with each of ``elements`` replaced by its key (as written) between markers."""
    pieces: list[str] = []
    at = 0
    for found, _start, end in elements:
        pieces += (text[at : found.start()], marker, found.group(2), marker)
        at = end
    pieces.append(text[at:])
    return "".join(pieces)


def split(main: str) -> tuple[str, dict[str, str]] | None:
    """The skeleton of ``main`` and its outermost parts by key, or None if it has none usable.

    None also when a part is not closed or a key appears twice: the page is
    then sent whole, as before parts existed.
    """
    elements = _outermost(main, _OPENING)
    if not elements:
        return None
    parts: dict[str, str] = {}
    for found, _start, end in elements:
        key = unescape(found.group(2))
        if key in parts:
            return None
        parts[key] = main[found.start() : end]
    return _marked(main, elements, "\x00"), parts


_Child = tuple[str | None, str]  # (a part's key as written, "") or (None, an element's markup)


def _children(content: str) -> list[_Child] | None:
    """The children of a list's content in a skeleton, in order; None if it holds text."""
    children: list[_Child] = []
    at = 0
    while True:
        found = _CHILD.match(content, at)
        if found is None:
            return None if content[at:].strip() else children
        if found.group(1) is not None:
            children.append((found.group(1), ""))
            at = found.end()
            continue
        start = found.start(2) - 1
        end = found.end() if found.group(3) else _end(content, found.end(), found.group(2))
        if end is None:
            return None
        children.append((None, content[start:end]))
        at = end


_Lists = dict[str, tuple[str, list[_Child]]]  # by key: the opening tag, the children
_Cut = tuple[str, dict[str, str], _Lists]


def _cut(main: str) -> _Cut | None:
    """The outline of ``main`` (its skeleton without the lists' content), its parts, its lists.

    None when it has no part usable, or a list is not closed, holds text, or
    its key appears twice: the page is then sent whole.
    """
    cut = split(main)
    if cut is None:
        return None
    skeleton, parts = cut
    elements = _outermost(skeleton, _LIST)
    if elements is None:
        return None
    lists: _Lists = {}
    for found, start, _end in elements:
        key = unescape(found.group(2))
        children = _children(skeleton[found.end() : start])
        if children is None or key in lists:
            return None
        lists[key] = (found.group(0), children)
    return _marked(skeleton, elements, "\x01"), parts, lists


def _child_id(child: _Child) -> bytes:
    """Who a list's child is: a part by its key (its content may change), else its markup."""
    key, markup = child
    text = "p" + key if key is not None else "e" + markup
    return hashlib.blake2b(text.encode("utf-8", "surrogatepass"), digest_size=_ID).digest()


def _digest(text: str) -> bytes:
    return hashlib.blake2b(text.encode("utf-8", "surrogatepass"), digest_size=12).digest()


def version_of(main: str) -> str:
    """The version of a render: a digest of its whole main, as text."""
    return _digest(main).hex()


class Renders:
    """The renders pages showed lately, to tell each page what changed since its own.

    Shared by the server's threads (a lock guards it); it keeps the last 256
    renders, each as digests packed in bytes (8 bytes a part, 8 a list's
    child) beside the tuple of its part keys, shared by the renders that have
    the same keys: about 60 kB a render of a 1,000-step page, 15 MB for 256
    (`benchmarks/live_updates.py` prints it; a dict of digests by key took
    115 MB).
    """

    def __init__(self, keep: int = _KEEP) -> None:
        """Keep the digests of the last ``keep`` renders."""
        self._keep = keep
        self._lock = threading.Lock()
        self._seen: OrderedDict[str, _Marks | None] = OrderedDict()
        # The key tuples of recent renders, so that renders of one page share theirs.
        self._keys: OrderedDict[tuple[str, ...], tuple[str, ...]] = OrderedDict()

    def _marks(self, cut: _Cut | None) -> _Marks | None:
        """The marks of a cut main, its part keys shared with a recent render's if equal."""
        if cut is None:
            return None
        keys = tuple(sys.intern(key) for key in cut[1])
        with self._lock:
            shared = self._keys.setdefault(keys, keys)
            self._keys.move_to_end(keys)
            while len(self._keys) > _KEY_SETS:
                self._keys.popitem(last=False)
        return _marks(cut, shared)

    def remember(self, main: str) -> str:
        """Note a render a page is about to show; return its version."""
        version = version_of(main)
        with self._lock:
            known = version in self._seen
        if known:
            self._touch(version)
        else:
            self._keep_marks(version, self._marks(_cut(main)))
        return version

    def since(self, main: str, known: str | None) -> dict[str, Any]:
        """What a page showing version ``known`` needs to show ``main``.

        ``{"v": version}`` alone when nothing changed, with ``"parts"`` (key to
        the part's markup) and ``"lists"`` (key to ``{"ops": [...]}`` and the
        opening tag's ``"attrs"`` when they changed) when only parts and lists'
        children changed, else with ``"html"``, the whole main.
        """
        version = version_of(main)
        if known == version:
            self._touch(version)
            return {"v": version}
        cut = _cut(main)
        now = self._marks(cut)
        self._keep_marks(version, now)
        with self._lock:
            before = self._seen.get(known) if known else None
        if (
            cut is None
            or now is None
            or before is None
            or before.outline != now.outline
            or before.lists.keys() != now.lists.keys()
        ):
            return {"v": version, "html": main}
        parts = cut[1]
        lists: dict[str, dict[str, Any]] = {}
        inserted: set[str] = set()  # parts sent inside a list's insertion
        for key, (opening, children) in cut[2].items():
            was, is_now = before.lists[key], now.lists[key]
            change = _list_change(was, is_now, children, parts, inserted)
            if change:
                if was[0] != is_now[0]:
                    change["attrs"] = {
                        name: unescape(value) for name, value in _ATTRIBUTE.findall(opening)
                    }
                lists[key] = change
        old = before.by_key()
        answer: dict[str, Any] = {
            "v": version,
            "parts": {
                key: parts[key]
                for key, mark in now.by_key().items()
                if old.get(key) != mark and key not in inserted
            },
        }
        if lists:
            answer["lists"] = lists
        return answer

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


@dataclass(frozen=True, slots=True)
class _Marks:
    """The digests of a render: its outline's, each part's, each list's.

    ``digests`` packs the parts' digests (`_ID` bytes each) in the order of
    ``keys``; ``lists`` holds each list's opening tag's digest and its
    children's ids (`_child_id`, packed).
    """

    outline: bytes
    keys: tuple[str, ...]
    digests: bytes
    lists: dict[str, tuple[bytes, bytes]]

    def by_key(self) -> dict[str, bytes]:
        """Each part's digest by its key."""
        return {key: self.digests[n * _ID : (n + 1) * _ID] for n, key in enumerate(self.keys)}


def _marks(cut: _Cut, keys: tuple[str, ...]) -> _Marks:
    """The digests of a cut main, its parts' keys being ``keys`` (in their order)."""
    outline, parts, lists = cut
    return _Marks(
        _digest(outline),
        keys,
        b"".join(_digest(part)[:_ID] for part in parts.values()),
        {
            key: (_digest(opening)[:_ID], b"".join(map(_child_id, children)))
            for key, (opening, children) in lists.items()
        },
    )


def _list_change(
    before: tuple[bytes, bytes],
    now: tuple[bytes, bytes],
    children: list[_Child],
    parts: dict[str, str],
    inserted: set[str],
) -> dict[str, Any]:
    """A list's change since ``before``: ``{"ops": [...]}`` if its children changed.

    The operations run over the children the page shows, in order: ``["k", n]``
    keeps ``n``, ``["d", n]`` deletes ``n``, ``["i", markup]`` inserts the
    markup of new children (a part's whole markup: its key goes in ``inserted``).
    Every child kept when only the opening tag changed (its ``"attrs"`` are
    the caller's); empty when nothing changed.
    """
    if before == now:
        return {}
    if before[1] == now[1]:
        return {"ops": [["k", len(children)]]}
    old = [before[1][at : at + _ID] for at in range(0, len(before[1]), _ID)]
    new = [now[1][at : at + _ID] for at in range(0, len(now[1]), _ID)]
    ops: list[list[Any]] = []

    def _inserted(written: str) -> str:
        """The markup of the part whose key is ``written``; it goes with the insertion."""
        key = unescape(written)
        inserted.add(key)
        return parts[key]

    matcher = difflib.SequenceMatcher(None, old, new, autojunk=False)
    for tag, first, last, start, end in matcher.get_opcodes():
        if tag == "equal":
            ops.append(["k", last - first])
            continue
        if last > first:
            ops.append(["d", last - first])
        if end > start:
            markup = []
            for key, element in children[start:end]:
                if key is None:  # an element, the parts inside it (if any) put back
                    markup.append(_MARKER.sub(lambda found: _inserted(found[1]), element))
                else:
                    markup.append(_inserted(key))
            ops.append(["i", "".join(markup)])
    return {"ops": ops}
